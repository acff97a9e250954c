//! `kafka-audit inspect`: shows how given messages are classified under an event-time
//! configuration (event time found, its source and unit, window; or why not). This is
//! how a user debugs a topic's config; the binary's subcommand is a thin wrapper.
//!
//! Input is JSON lines: each line is one message value (bytes up to the newline; a
//! trailing `\r` is dropped). Messages have no key or headers here, and a record
//! timestamp (CreateTime) only when the options give one; without it, a message with
//! no field time is windowed by observation time (counted apart, not compared).

use std::io::{self, BufRead, Write};

use serde::Serialize;

use crate::config::{CompiledConfig, CompiledRule, ConfigError, EventTimeConfig};
use crate::extract::{classify, Classification, Fallback, MalformedReason, TimeSource};
use crate::observation::{Observation, RecordTimestamp, TimestampType};

/// Options of one inspection run.
#[derive(Clone, Debug)]
pub struct InspectOptions {
    /// Topic name used to pick the rule.
    pub topic: String,
    /// One JSON object per input line instead of text.
    pub json: bool,
    /// Only the counts per classification.
    pub summary: bool,
    /// Observation time (epoch ms) for skew bounds and the fallback window.
    pub observed_at_ms: i64,
    /// A CreateTime given to every message, as a Kafka record would carry.
    pub record_timestamp_ms: Option<i64>,
}

/// Counts per classification.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InspectSummary {
    pub total: u64,
    pub event_time: u64,
    pub out_of_bounds: u64,
    pub no_time: u64,
    pub malformed: u64,
    /// Of all: windowed by observation time (no field time and no usable record
    /// timestamp), so not compared across tiers.
    pub observed: u64,
}

/// What `--json` prints for one line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LineReport {
    pub line: u64,
    /// `event_time`, `out_of_bounds`, `no_time` or `malformed`.
    pub classification: &'static str,
    /// The event time found (also for `out_of_bounds`), else null.
    pub event_time_ms: Option<i64>,
    /// `field`, `header`, `create_time`, `log_append_time`, or null.
    pub source: Option<&'static str>,
    /// The JSON field path when the source is a field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// `s`, `ms`, `us`, `ns` or `rfc3339`, or null.
    pub unit: Option<&'static str>,
    /// What windows the message: `event_time`, `create_time` (the record timestamp,
    /// when no usable field time was found), or `observation` (no tier-invariant time:
    /// counted in `observation_time_count`, not compared across tiers).
    pub windowed_by: &'static str,
    /// Start of the window the message is counted in.
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    /// Why the message is malformed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<MalformedReason>,
}

/// Reads an event-time configuration from TOML: either a bare `EventTimeConfig` or a
/// service configuration file with an `[audit.event_time]` (or `[event_time]`) table.
pub fn load_config(text: &str) -> Result<EventTimeConfig, ConfigError> {
    let value: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
    let section = value
        .get("audit")
        .and_then(|a| a.get("event_time"))
        .or_else(|| value.get("event_time"));
    match section {
        Some(v) => v
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(format!("event_time section: {e}"))),
        None => EventTimeConfig::from_toml(text),
    }
}

/// Classifies one payload and describes it.
pub fn report_line(
    config: &CompiledConfig,
    rule: &CompiledRule,
    line: u64,
    payload: &[u8],
    observed_at_ms: i64,
    record_timestamp_ms: Option<i64>,
) -> LineReport {
    let mut obs = Observation::new("", payload, observed_at_ms);
    obs.record_timestamp = record_timestamp_ms.map(|ms| RecordTimestamp {
        ms,
        kind: TimestampType::CreateTime,
    });
    let c = classify(rule, &obs);
    let window = config.window_size.window_of(c.counted_at(observed_at_ms));
    let (event_time_ms, source, unit, reason) = match c {
        Classification::EventTime {
            event_time_ms,
            source,
            unit,
        }
        | Classification::OutOfBounds {
            event_time_ms,
            source,
            unit,
            ..
        } => (Some(event_time_ms), Some(source), Some(unit.as_str()), None),
        Classification::NoTime(_) => (None, None, None, None),
        Classification::Malformed(r, _) => (None, None, None, Some(r)),
    };
    let field = match source {
        Some(TimeSource::Field(i)) => rule.path_names.get(i as usize).cloned(),
        _ => None,
    };
    LineReport {
        line,
        classification: c.label(),
        event_time_ms,
        source: source.map(TimeSource::as_str),
        field,
        unit,
        windowed_by: c.fallback().map_or("event_time", Fallback::as_str),
        window_start_ms: window.start_ms,
        window_end_ms: window.end_ms,
        reason,
    }
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("{ms} ms (out of calendar range)"))
}

fn text_line(r: &LineReport) -> String {
    let window = format!(
        "window [{}, {})",
        rfc3339(r.window_start_ms),
        rfc3339(r.window_end_ms)
    );
    let counted = match r.windowed_by {
        "observation" => "counted at observation time (not compared across tiers) in",
        "create_time" => "counted at its record timestamp (CreateTime) in",
        _ => "counted at its record timestamp (LogAppendTime) in",
    };
    match r.classification {
        "event_time" | "out_of_bounds" => {
            let src = match (&r.field, r.source) {
                (Some(f), _) => format!("field {f}"),
                (None, Some(s)) => s.to_owned(),
                (None, None) => "?".to_owned(),
            };
            let t = r.event_time_ms.unwrap_or_default();
            let bounds = if r.classification == "out_of_bounds" {
                format!(" outside the skew bounds, {counted}")
            } else {
                String::new()
            };
            format!(
                "{}: {} {} ({} ms) from {}, unit {};{} {}",
                r.line,
                r.classification,
                rfc3339(t),
                t,
                src,
                r.unit.unwrap_or("?"),
                bounds,
                window
            )
        }
        "malformed" => format!(
            "{}: malformed ({}), {} {}",
            r.line,
            match r.reason {
                Some(MalformedReason::NotJson) => "payload is not JSON",
                Some(MalformedReason::BadField) => "time field holds no usable time",
                Some(MalformedReason::BadHeader) => "time header holds no usable time",
                None => "?",
            },
            counted,
            window
        ),
        _ => format!(
            "{}: no_time (no configured field or header), {} {}",
            r.line, counted, window
        ),
    }
}

/// Runs an inspection: reads lines from `input`, writes reports to `out`, returns the
/// counts. I/O errors carry the line number.
pub fn run<R: BufRead, W: Write>(
    config: &CompiledConfig,
    opts: &InspectOptions,
    mut input: R,
    mut out: W,
) -> io::Result<InspectSummary> {
    let rule = config.rule_for(&opts.topic).clone();
    let mut summary = InspectSummary::default();
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        let n = input.read_until(b'\n', &mut buf).map_err(|e| {
            io::Error::new(e.kind(), format!("reading input line {}: {e}", line + 1))
        })?;
        if n == 0 {
            break;
        }
        line += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        let r = report_line(
            config,
            &rule,
            line,
            &buf,
            opts.observed_at_ms,
            opts.record_timestamp_ms,
        );
        summary.total += 1;
        match r.classification {
            "event_time" => summary.event_time += 1,
            "out_of_bounds" => summary.out_of_bounds += 1,
            "no_time" => summary.no_time += 1,
            _ => summary.malformed += 1,
        }
        if r.windowed_by == "observation" {
            summary.observed += 1;
        }
        if !opts.summary {
            if opts.json {
                serde_json::to_writer(&mut out, &r)?;
                out.write_all(b"\n")?;
            } else {
                writeln!(out, "{}", text_line(&r))?;
            }
        }
    }
    if opts.summary {
        if opts.json {
            serde_json::to_writer(&mut out, &summary)?;
            out.write_all(b"\n")?;
        } else {
            writeln!(
                out,
                "total {}\nevent_time {}\nout_of_bounds {}\nno_time {}\nmalformed {}\nobserved {}",
                summary.total,
                summary.event_time,
                summary.out_of_bounds,
                summary.no_time,
                summary.malformed,
                summary.observed
            )?;
        }
    }
    out.flush()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_410_700_000; // 2025-11-29T10:05:00Z

    fn go(
        config: &str,
        topic: &str,
        json: bool,
        summary: bool,
        input: &[u8],
    ) -> (String, InspectSummary) {
        go_at(config, topic, json, summary, input, None)
    }

    fn go_at(
        config: &str,
        topic: &str,
        json: bool,
        summary: bool,
        input: &[u8],
        record_timestamp_ms: Option<i64>,
    ) -> (String, InspectSummary) {
        let cfg = load_config(config).unwrap().compile().unwrap();
        let opts = InspectOptions {
            topic: topic.into(),
            json,
            summary,
            observed_at_ms: NOW,
            record_timestamp_ms,
        };
        let mut out = Vec::new();
        let s = run(&cfg, &opts, input, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), s)
    }

    const INPUT: &[u8] = b"{\"ts\":1764410400123,\"x\":1}\n\
{\"timestamp\":\"2025-11-29T11:01:00+01:00\"}\n\
{\"ts\":1764410400}\r\n\
{\"other\":1}\n\
not json\n\
\n\
{\"ts\":99999999999999}\n\
\xff\xfe\x00\n";

    #[test]
    fn json_lines_with_the_default_config() {
        let (out, s) = go("", "orders", true, false, INPUT);
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 8);
        let l = &lines[0];
        assert_eq!(l["classification"], "event_time");
        assert_eq!(l["event_time_ms"], 1_764_410_400_123i64);
        assert_eq!(l["source"], "field");
        assert_eq!(l["field"], "ts");
        assert_eq!(l["unit"], "ms");
        assert_eq!(l["window_start_ms"], 1_764_410_400_000i64);
        assert_eq!(lines[1]["unit"], "rfc3339");
        assert_eq!(lines[1]["field"], "timestamp");
        assert_eq!(lines[1]["event_time_ms"], 1_764_410_460_000i64);
        assert_eq!(lines[2]["unit"], "s", "CRLF line, seconds by magnitude");
        assert_eq!(lines[0]["windowed_by"], "event_time");
        assert_eq!(lines[3]["classification"], "no_time");
        assert_eq!(lines[3]["windowed_by"], "observation");
        assert_eq!(lines[3]["event_time_ms"], serde_json::Value::Null);
        assert_eq!(
            lines[3]["window_start_ms"], 1_764_410_400_000i64,
            "observation window"
        );
        assert_eq!(lines[4]["classification"], "malformed");
        assert_eq!(lines[4]["reason"], "not_json");
        assert_eq!(
            lines[5]["classification"], "malformed",
            "empty line is an empty payload"
        );
        assert_eq!(lines[6]["classification"], "out_of_bounds");
        assert_eq!(lines[7]["classification"], "malformed");
        assert_eq!(
            s,
            InspectSummary {
                total: 8,
                event_time: 3,
                out_of_bounds: 1,
                no_time: 1,
                malformed: 3,
                observed: 5
            }
        );
    }

    #[test]
    fn a_record_timestamp_windows_what_has_no_field_time() {
        let rt = NOW - 3_600_000; // 09:05, an hour before observation
        let (out, s) = go_at("", "orders", true, false, INPUT, Some(rt));
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["windowed_by"], "event_time");
        for i in [3, 4, 5, 6, 7] {
            assert_eq!(lines[i]["windowed_by"], "create_time", "line {i}");
            assert_eq!(
                lines[i]["window_start_ms"], 1_764_406_800_000i64,
                "line {i}"
            );
        }
        assert_eq!(lines[4]["classification"], "malformed");
        assert_eq!(s.observed, 0);
        let (out, _) = go_at("", "orders", false, false, INPUT, Some(rt));
        assert!(
            out.contains("5: malformed (payload is not JSON), counted at its record timestamp (CreateTime) in window [2025-11-29T09:00:00.000Z"),
            "{out}"
        );
    }

    #[test]
    fn topic_selects_the_rule_from_a_service_config() {
        let cfg = r#"
            [kafka]
            brokers = "ignored by inspect"
            [audit.event_time]
            window_size = "1m"
            [[audit.event_time.rules]]
            topic = "metrics.*"
            fields = ["meta.t"]
            unit = "us"
        "#;
        let input = b"{\"meta\":{\"t\":1764410400123456}}\n";
        let (out, _) = go(cfg, "metrics.cpu", true, false, input);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["event_time_ms"], 1_764_410_400_123i64);
        assert_eq!(v["unit"], "us");
        assert_eq!(v["field"], "meta.t");
        assert_eq!(v["window_start_ms"], 1_764_410_400_000i64);
        let (out, _) = go(cfg, "orders", true, false, input);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["classification"], "no_time");
    }

    #[test]
    fn text_and_summary_outputs() {
        let (out, _) = go("", "orders", false, false, INPUT);
        let first = out.lines().next().unwrap();
        assert!(
            first.starts_with(
                "1: event_time 2025-11-29T10:00:00.123Z (1764410400123 ms) from field ts, unit ms"
            ),
            "{first}"
        );
        assert!(
            first.contains("window [2025-11-29T10:00:00.000Z, 2025-11-29T10:10:00.000Z)"),
            "{first}"
        );
        assert!(out.contains("5: malformed (payload is not JSON)"), "{out}");
        let (out, _) = go("", "orders", false, true, INPUT);
        assert_eq!(
            out,
            "total 8\nevent_time 3\nout_of_bounds 1\nno_time 1\nmalformed 3\nobserved 5\n"
        );
        let (out, _) = go("", "orders", true, true, INPUT);
        assert_eq!(
            out.trim(),
            r#"{"total":8,"event_time":3,"out_of_bounds":1,"no_time":1,"malformed":3,"observed":5}"#
        );
    }

    #[test]
    fn bad_config_is_a_clear_error() {
        let e = load_config("[default]\nunits = \"ms\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("units"), "{e}");
        let e = load_config("[audit.event_time]\nwindow = 5")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("event_time section") && e.contains("window"),
            "{e}"
        );
    }
}
