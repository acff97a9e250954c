//! The audit message v1 reader on arbitrary bytes (what reaches the collector from an
//! audit topic or over HTTP): it never panics; what it accepts keeps the increment's
//! invariants (the reason counters within `count`; `observation_time_count` outside
//! it) and survives a write and a read unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = audit_lib::AuditMessage::from_json(data) else {
        return;
    };
    if let Some(i) = m.as_increment() {
        let s = &i.stats;
        let parts = u128::from(s.no_time_count)
            + u128::from(s.malformed_count)
            + u128::from(s.out_of_bounds_count);
        assert!(parts <= u128::from(s.count), "reasons exceed count: {s:?}");
        assert!(i.window_end > i.window_start);
    }
    let again = audit_lib::AuditMessage::from_json(m.to_json().as_bytes())
        .expect("a message written by the library reads back");
    assert_eq!(again, m);
});
