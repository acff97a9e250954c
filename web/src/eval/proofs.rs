//! The evaluator's ledger of proven losses: what a cycle proved is recorded, so that a
//! restarted serve keeps judging those windows lost; at start the recorded proofs are
//! read back into the index, and those older than the horizon are forgotten.

use store::{AlertLedger, StoreError};

use super::{Evaluator, Proof, VerdictKey};

/// Most proven losses read at a cold start.
const PROOF_LIMIT: u32 = store::MAX_READ_ROWS as u32;

impl Evaluator {
    /// Records the losses proven for the first time in the ledger, so that a restarted
    /// serve keeps judging them lost. A proof that cannot be written stays in this
    /// process's index (warned and counted as an evaluation error).
    pub(super) async fn save_proofs(&self, proofs: &[(VerdictKey, String)], now: i64) {
        for (k, reason) in proofs {
            let proof = store::ProvenLoss {
                window_start_ms: k.window_start,
                topic: k.topic.clone(),
                upstream: k.upstream.clone(),
                downstream: k.downstream.clone(),
                datacenter: k.datacenter.clone(),
                reason: reason.clone(),
                proven_at_ms: now,
            };
            if let Err(e) = self.ledger.save_proven_loss(&proof, now).await {
                self.metrics.evaluation_errors.inc();
                tracing::warn!(error = %e, topic = %k.topic, window_start = k.window_start,
                    "a proven loss was not recorded: a restart would judge its window by the counts alone");
            }
        }
    }

    /// Before the first cycle judges anything: the proofs a previous process recorded,
    /// into the index. Then, whenever the horizon moves on, forgets the older ones.
    pub(super) async fn keep_proofs(&mut self, horizon_start: i64) -> Result<(), StoreError> {
        if !self.proofs_loaded {
            let proofs = self
                .ledger
                .proven_losses(horizon_start, PROOF_LIMIT)
                .await?;
            if proofs.len() >= PROOF_LIMIT as usize {
                tracing::warn!(
                    limit = PROOF_LIMIT,
                    "more proven losses in the horizon than one read holds: the newest are judged by their counts alone"
                );
            }
            let mut index = self.index.write().expect("verdict index lock");
            for p in proofs {
                let key = VerdictKey {
                    window_start: p.window_start_ms,
                    topic: p.topic,
                    upstream: p.upstream,
                    downstream: p.downstream,
                    datacenter: p.datacenter,
                };
                // Withdrawn while this read was under way: not kept.
                if index.withdrawn.contains_key(&key) {
                    continue;
                }
                index.proven.entry(key).or_insert(Proof {
                    reason: p.reason,
                    proven_at: p.proven_at_ms,
                });
            }
            self.proofs_loaded = true;
        }
        if horizon_start > self.proofs_forgotten_before {
            match self.ledger.forget_proven_losses(horizon_start).await {
                Ok(_) => self.proofs_forgotten_before = horizon_start,
                Err(e) => {
                    tracing::warn!(error = %e, "proven losses older than the horizon not forgotten; trying again at the next cycle")
                }
            }
        }
        Ok(())
    }
}
