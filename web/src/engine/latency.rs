//! Latency percentiles read from merged histograms (wire format of
//! docs/audit-message-v1.md: DDSketch-style, gamma = 1.02).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

const GAMMA: f64 = 1.02;

/// A mergeable latency histogram as stored per window and tier.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    pub zero_count: u64,
    pub negative_count: u64,
    pub buckets: BTreeMap<i32, u64>,
    pub max_ms: u64,
}

impl Histogram {
    /// Histogram of the given latencies in ms (tests and seeding).
    pub fn from_values(values: &[i64]) -> Self {
        let mut h = Self::default();
        for &v in values {
            if v < 1 {
                h.zero_count += 1;
                if v < 0 {
                    h.negative_count += 1;
                }
            } else {
                let i = ((v as f64).ln() / GAMMA.ln()).ceil() as i32;
                *h.buckets.entry(i).or_default() += 1;
                h.max_ms = h.max_ms.max(v as u64);
            }
        }
        h
    }

    pub fn count(&self) -> u64 {
        self.buckets
            .values()
            .fold(self.zero_count, |a, c| a.saturating_add(*c))
    }

    /// Exact merge: counts add per bucket, max is the max.
    pub fn merge(&mut self, other: &Histogram) {
        self.zero_count = self.zero_count.saturating_add(other.zero_count);
        self.negative_count = self.negative_count.saturating_add(other.negative_count);
        for (i, c) in &other.buckets {
            let b = self.buckets.entry(*i).or_default();
            *b = b.saturating_add(*c);
        }
        self.max_ms = self.max_ms.max(other.max_ms);
    }

    /// The `q`-quantile in ms: within 1 % of the latency of rank `floor(q * (n - 1))`
    /// (audit-lib's definition; web/tests/histogram.rs checks that both agree), and
    /// never above the largest latency seen. `None` for an empty histogram.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * (n - 1) as f64).floor() as u64).min(n - 1);
        if rank < self.zero_count {
            return Some(0.0);
        }
        let mut seen = self.zero_count;
        for (i, c) in &self.buckets {
            seen = seen.saturating_add(*c);
            if rank < seen {
                let v = 2.0 * GAMMA.powi(*i) / (GAMMA + 1.0);
                // The bucket midpoint may overshoot the largest value seen.
                return Some(v.min(self.max_ms as f64));
            }
        }
        Some(self.max_ms as f64)
    }

    pub fn percentiles(&self) -> Option<Percentiles> {
        Some(Percentiles {
            count: self.count(),
            p50_ms: self.quantile(0.50)?,
            p95_ms: self.quantile(0.95)?,
            p99_ms: self.quantile(0.99)?,
            max_ms: self.max_ms,
        })
    }
}

/// Latency summary of one tier in one window.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: u64,
}
