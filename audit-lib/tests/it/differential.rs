//! Differential property tests: the targeted scanner against the full parser (the
//! oracle in `oracle/mod.rs`), and planted event times against ground truth.

use crate::oracle;

use audit_lib::{
    classify, Classification, EventTimeConfig, Observation, TimeSource, TimeUnit, Unit,
};
use proptest::prelude::*;

/// A JSON tree to render.
#[derive(Clone, Debug)]
enum J {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

// Rendering choices (whitespace, escapes) shrink with a seed.
use crate::rng::Rng;

fn ws(r: &mut Rng, out: &mut String) {
    if r.chance(3) {
        for _ in 0..(r.next() % 3) {
            out.push([' ', '\t', '\n', '\r'][(r.next() % 4) as usize]);
        }
    }
}

fn render_str(s: &str, r: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if r.chance(6) => {
                // \u escape (surrogate pairs beyond the BMP), or a short escape.
                if c == '/' && r.chance(2) {
                    out.push_str("\\/");
                } else {
                    let mut buf = [0u16; 2];
                    for u in c.encode_utf16(&mut buf) {
                        out.push_str(&if r.chance(2) {
                            format!("\\u{u:04x}")
                        } else {
                            format!("\\u{u:04X}")
                        });
                    }
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn render(j: &J, r: &mut Rng, out: &mut String) {
    match j {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num(n) => out.push_str(n),
        J::Str(s) => render_str(s, r, out),
        J::Arr(v) => {
            out.push('[');
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(r, out);
                render(x, r, out);
                ws(r, out);
            }
            out.push(']');
        }
        J::Obj(m) => {
            out.push('{');
            ws(r, out);
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    ws(r, out);
                }
                render_str(k, r, out);
                ws(r, out);
                out.push(':');
                ws(r, out);
                render(v, r, out);
                ws(r, out);
            }
            out.push('}');
        }
    }
}

fn number() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop_oneof![Just("0".to_owned()), "[1-9][0-9]{0,20}"],
        prop::option::of("[0-9]{1,8}"),
        prop::option::of(("[eE]", "[+-]?", "[0-9]{1,3}")),
    )
        .prop_map(|(neg, int, frac, exp)| {
            let mut s = String::new();
            if neg {
                s.push('-');
            }
            s.push_str(&int);
            if let Some(f) = frac {
                s.push('.');
                s.push_str(&f);
            }
            if let Some((e, sign, d)) = exp {
                s.push_str(&e);
                s.push_str(&sign);
                s.push_str(&d);
            }
            s
        })
}

/// Keys and strings are drawn to collide with the field names and JSON syntax.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "ts", "timestamp", "a", "meta", "event_time", "t", "tss", "Ts", "ts ", " ts",
            "\"ts\":1", "{\"ts\":2}", "]}", "\\", "t\\u0073", "é", "日本", "😀", "",
        ]).prop_map(str::to_owned),
        1 => any::<String>(),
        1 => "[a-z\"\\\\{}\\[\\]:, ]{0,12}",
        // Long strings full of quotes, backslashes and brackets: they cross the
        // scanner's 64-byte blocks at every offset.
        1 => "[a-z\"\\\\{}\\[\\]:, ]{40,150}",
    ]
}

fn tree() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        number().prop_map(J::Num),
        text().prop_map(J::Str),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(J::Arr),
            prop::collection::vec((text(), inner), 0..6).prop_map(J::Obj),
        ]
    })
}

/// Top-level objects (the common case) plus occasional other documents.
fn document() -> impl Strategy<Value = J> {
    prop_oneof![
        8 => prop::collection::vec((text(), tree()), 0..8).prop_map(J::Obj),
        1 => tree(),
    ]
}

fn paths() -> impl Strategy<Value = Vec<&'static str>> {
    prop::sample::select(vec![
        vec!["ts"],
        vec!["timestamp"],
        vec!["a", "ts"],
        vec!["meta", "event_time"],
        vec!["a", "a", "a"],
        vec!["\"ts\":1"],
        vec![""],
    ])
}

#[derive(Clone, Debug)]
enum Mutation {
    None,
    Truncate(usize),
    Flip(usize, u8),
    Insert(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        6 => Just(Mutation::None),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        1 => (any::<usize>(), prop::sample::select(b"{}[]\",:\\ 0-e.tn".to_vec())).prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

fn apply(doc: &mut Vec<u8>, m: &Mutation) {
    if doc.is_empty() {
        return;
    }
    match *m {
        Mutation::None => {}
        Mutation::Truncate(i) => doc.truncate(i % doc.len()),
        Mutation::Flip(i, b) => {
            let n = doc.len();
            doc[i % n] = b;
        }
        Mutation::Insert(i, b) => {
            let n = doc.len();
            doc.insert(i % n, b);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn scanner_agrees_with_oracle(doc in document(), seed in 1u64.., path in paths(), m in mutation()) {
        let mut s = String::new();
        render(&doc, &mut Rng(seed), &mut s);
        let mut bytes = s.into_bytes();
        apply(&mut bytes, &m);
        if let Err(e) = oracle::check(&bytes, &path) {
            return Err(TestCaseError::fail(e));
        }
    }

    #[test]
    fn truncation_never_changes_the_answer(doc in document(), seed in 1u64.., path in paths()) {
        let mut s = String::new();
        render(&doc, &mut Rng(seed), &mut s);
        if let Err(e) = oracle::check_prefixes(s.as_bytes(), &path) {
            return Err(TestCaseError::fail(e));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_agree_when_valid(bytes in prop::collection::vec(any::<u8>(), 0..64), path in paths()) {
        if let Err(e) = oracle::check(&bytes, &path) {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// How a planted event time is written.
#[derive(Clone, Debug)]
enum Planted {
    Number {
        unit: Unit,
        text: String,
        want_unit: TimeUnit,
    },
    Rfc3339 {
        text: String,
    },
}

/// Renders ms `t` exactly in a unit: seconds and µs/ns as exact decimals,
/// sometimes in exponent form.
fn planted(t: i64, which: u8, offset_min: i32, expo: bool) -> Planted {
    let sign = if t < 0 { "-" } else { "" };
    let a = t.unsigned_abs();
    // Negative values with a fraction floor: write the exact ms so no rounding occurs.
    match which % 5 {
        0 => Planted::Number {
            unit: Unit::Seconds,
            text: if expo {
                format!("{sign}{}{:03}e-3", a / 1000, a % 1000)
            } else {
                format!("{sign}{}.{:03}", a / 1000, a % 1000)
            },
            want_unit: TimeUnit::Seconds,
        },
        1 => Planted::Number {
            unit: Unit::Millis,
            text: if expo && a != 0 {
                format!(
                    "{sign}{}.{}e{}",
                    &a.to_string()[..1],
                    &a.to_string()[1..],
                    a.to_string().len() - 1
                )
                .replace(".e", "e")
            } else {
                t.to_string()
            },
            want_unit: TimeUnit::Millis,
        },
        2 => Planted::Number {
            unit: Unit::Micros,
            text: format!("{sign}{a}000"),
            want_unit: TimeUnit::Micros,
        },
        3 => Planted::Number {
            unit: Unit::Nanos,
            text: if expo {
                format!("{t}E+6")
            } else {
                format!("{sign}{a}000000")
            },
            want_unit: TimeUnit::Nanos,
        },
        _ => {
            let off = chrono::FixedOffset::east_opt(offset_min * 60).unwrap();
            let dt = chrono::DateTime::from_timestamp_millis(t)
                .unwrap()
                .with_timezone(&off);
            Planted::Rfc3339 {
                text: dt.to_rfc3339_opts(chrono::SecondsFormat::Millis, offset_min == 0),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Ground truth: a time written in any unit or as RFC 3339 with any offset, placed
    /// after noise (nested values, the name inside strings, escaped keys), with later
    /// duplicates, comes back as exactly the ms it was made from.
    #[test]
    fn planted_times_are_extracted_exactly(
        t in -2_000_000_000_000i64..4_000_000_000_000,
        which in 0u8..5,
        offset_min in -14 * 60..14 * 60i32,
        expo: bool,
        before in prop::collection::vec((text(), tree()), 0..5),
        after in prop::collection::vec((text(), tree()), 0..3),
        escape_key: bool,
        seed in 1u64..,
        nested: bool,
    ) {
        let p = planted(t, which, offset_min, expo);
        let (rule_unit, value, want_unit) = match &p {
            Planted::Number { unit, text, want_unit } => (*unit, J::Num(text.clone()), *want_unit),
            Planted::Rfc3339 { text } => (Unit::Auto, J::Str(text.clone()), TimeUnit::Rfc3339),
        };
        // Noise must not contain the planted key at the requested level.
        let key_path: Vec<&str> = if nested { vec!["meta", "ts"] } else { vec!["ts"] };
        let clean = |v: Vec<(String, J)>| -> Vec<(String, J)> {
            v.into_iter().filter(|(k, _)| k != key_path[0]).collect()
        };
        let mut members = clean(before);
        let field = if nested {
            (String::from("meta"), J::Obj(vec![("x".into(), J::Arr(vec![J::Str("\"ts\":0".into())])), ("ts".into(), value)]))
        } else {
            ("ts".into(), value)
        };
        members.push(field);
        // A later duplicate with another value must not win.
        members.push((key_path[0].into(), J::Num("1".into())));
        members.extend(clean(after));
        let mut s = String::new();
        render(&J::Obj(members), &mut Rng(seed), &mut s);
        if escape_key {
            // Spell the first key of the path with a \u escape: the same key.
            let k = key_path[0];
            let esc = format!("\"{}\\u{:04x}\"", &k[..k.len() - 1], k.as_bytes()[k.len() - 1]);
            s = s.replacen(&format!("\"{k}\""), &esc, 1);
        }
        let mut cfg = EventTimeConfig::default();
        cfg.default.fields = vec![key_path.join(".")];
        cfg.default.unit = rule_unit;
        cfg.default.max_future = None;
        cfg.default.max_past = None;
        let compiled = cfg.compile().unwrap();
        let rule = compiled.rule_for("t");
        let c = classify(rule, &Observation::new("t", s.as_bytes(), 0));
        prop_assert_eq!(c, Classification::EventTime { event_time_ms: t, source: TimeSource::Field(0), unit: want_unit }, "doc {}", s);
    }
}

#[test]
fn differential_on_hand_picked_edge_cases() {
    let docs: &[&[u8]] = &[
        br#"{"t\u0073":1,"ts":2}"#,
        br#"{"ts":1,"t\u0073":2}"#,
        br#"{"\u0074\u0073":"2025-11-29T10:00:00+01:00"}"#,
        br#"{"a":{"ts":{"ts":1}},"ts":[{"ts":2}]}"#,
        br#"{"s":"\\\"ts\\\":1","ts":3}"#,
        br#"{"s":"\"","ts":4}"#,
        b"{\"ts\"\n:\t5\r}",
        br#"{"ts":-0.0e-0}"#,
        br#"{"ts":1E+2}"#,
        br#"{"ts":1e}"#,
        br#"{"ts":"\ud83d\ude00"}"#,
        br#"{"ts":"\ud800"}"#,
        br#"{"ts":"a	b"}"#,
        b"{\"ts\":\"\xff\"}",
        b"{\"\xff\":1,\"ts\":2}",
        b"",
        b"\x00",
        b"null",
        br#"{"ts":1}garbage"#,
        br#"{"ts":1} "#,
    ];
    for d in docs {
        for p in [&["ts"][..], &["a", "ts"][..]] {
            oracle::check(d, p).unwrap();
            oracle::check_prefixes(d, p).unwrap();
        }
    }
}
