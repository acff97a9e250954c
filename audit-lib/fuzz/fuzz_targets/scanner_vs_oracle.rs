//! Differential fuzzing of the targeted JSON scanner against the full parser.
//!
//! Input: one selector byte (which field path to look up), then the document. The
//! oracle (serde_json with audit-lib's first-duplicate rule) is shared with the
//! property tests. Also checks the compact-integer shortcut against the scanner, and
//! runs the whole classification on the bytes: it must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/it/oracle/mod.rs"]
mod oracle;

const PATHS: &[&[&str]] = &[
    &["ts"],
    &["timestamp"],
    &["a", "ts"],
    &["meta", "event_time"],
    &["a", "a", "a"],
    &[""],
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, doc)) = data.split_first() else {
        return;
    };
    let path = PATHS[sel as usize % PATHS.len()];
    if let Err(e) = oracle::check(doc, path) {
        panic!("scanner disagrees with oracle: {e}");
    }
    if doc.len() <= 512 {
        if let Err(e) = oracle::check_prefixes(doc, path) {
            panic!("truncation changed the answer: {e}");
        }
    }
    // The compact-integer shortcut answers only where the general scanner agrees.
    if let Some(prefix) = audit_lib::scan::CompactPrefix::new(path[0]) {
        if let Some(v) = prefix.int(doc) {
            assert_eq!(
                audit_lib::scan::find_path(doc, &path[..1]),
                Ok(Some(audit_lib::scan::RawValue::Int(v))),
                "compact shortcut disagrees"
            );
        }
    }
    let config = audit_lib::EventTimeConfig::default().compile().unwrap();
    let rule = config.rule_for("t");
    let _ = audit_lib::classify(rule, &audit_lib::Observation::new("t", doc, 0));
    // With a record timestamp (from the input's first bytes): a message without a
    // payload time is windowed by it exactly when the classification says so, and a
    // message windowed by observation time is never compared (docs/design.md §5, bad
    // input is counted, not dropped).
    let mut ts = [0u8; 8];
    let n = doc.len().min(8);
    ts[..n].copy_from_slice(&doc[..n]);
    let ms = i64::from_le_bytes(ts) >> 20;
    let mut obs = audit_lib::Observation::new("t", doc, 1_764_410_400_000);
    obs.record_timestamp = Some(audit_lib::RecordTimestamp {
        ms,
        kind: audit_lib::TimestampType::CreateTime,
    });
    let c = audit_lib::classify(rule, &obs);
    match c.fallback() {
        Some(audit_lib::Fallback::Record(r)) => {
            assert_eq!(r.ms, ms);
            assert_eq!(c.counted_at(obs.observed_at_ms), ms);
            assert!(c.is_tier_invariant());
        }
        Some(audit_lib::Fallback::Observed) => {
            assert_eq!(c.counted_at(obs.observed_at_ms), obs.observed_at_ms);
            assert!(!c.is_tier_invariant());
        }
        None => assert!(c.is_tier_invariant()),
    }
    if let Ok(text) = std::str::from_utf8(doc) {
        let _ = audit_lib::timeparse::text_to_ms(text, audit_lib::Unit::Auto);
    }
});
