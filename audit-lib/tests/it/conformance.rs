//! The conformance vectors for implementations of the algorithm in other languages
//! (the Java interceptors, `interceptors/java/`): audit-lib computes every expected
//! value, and the file `interceptors/conformance/vectors.json` holds them. One truth:
//! the test below fails when the committed file is not what audit-lib computes today,
//! so a change of the algorithm here cannot land without the vectors that the other
//! implementations replay (`./test.sh` runs both sides).
//!
//! Regenerate after a deliberate change:
//! `KAFKA_AUDIT_WRITE_VECTORS=1 cargo test -p audit-lib --test it conformance::`
//!
//! Sections (each a list; bytes are `{"utf8": ...}` when valid UTF-8, else `{"hex": ...}`):
//! - `hashes`: `message_hash(key, value)` over every length class of xxh3_64;
//! - `buckets`: `[latency_ms, bucket index]` at both sides of every bucket boundary
//!   (an implementation that agrees on all of them agrees on every i64, both being
//!   monotone step functions);
//! - `times`: `text_to_ms` (header values and string fields) per unit;
//! - `durations`: humantime durations as the config reads them;
//! - `globs`: topic globs, whether they compile and what they match;
//! - `scans`: the JSON field scanner on hand-written and mutated documents;
//! - `configs`: event-time TOML, compiled (or its error), and which rule each probe
//!   topic gets;
//! - `cases`: messages through an `Aggregator` of one config: per message its
//!   classification, then the drained audit messages as JSON (UUIDs fixed).

use audit_lib::config::CompiledRule;
use audit_lib::histogram::{bucket_index, MAX_BUCKET_INDEX};
use audit_lib::scan::{find_path, RawValue};
use audit_lib::timeparse::{text_to_ms, TimeError};
use audit_lib::{
    message_hash, Aggregator, Classification, EventTimeConfig, Fallback, Identity, Limits,
    Observation, RecordTimestamp, TimeRule, TimeSource, TimestampType, TopicGlob, Unit,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use uuid::Uuid;

const VECTORS: &str = "interceptors/conformance/vectors.json";
/// The Java histogram's bucket table: line i is the largest latency (ms) of bucket i.
/// Computed here because Java's logarithm rounds differently from Rust's at some
/// bucket boundaries (StrictMath.log at 40 of them), and a table has no logarithm.
const BUCKET_TABLE: &str =
    "interceptors/java/src/main/resources/io/kafkaaudit/interceptor/latency-buckets.txt";
const T0: i64 = 1_764_410_400_000; // 2025-11-29T10:00:00Z, a 10-minute boundary
const MIN: i64 = 60_000;

// Deterministic: the vectors must not change from run to run.
use crate::rng::Rng;

fn bytes(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => json!({ "utf8": s }),
        Err(_) => json!({ "hex": b.iter().map(|x| format!("{x:02x}")).collect::<String>() }),
    }
}

fn opt_bytes(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, bytes)
}

fn hashes() -> Value {
    let mut r = Rng(1);
    let mut out = Vec::new();
    let mut lengths: Vec<usize> = (0..=260).collect();
    lengths.extend([
        300, 511, 512, 513, 1000, 1023, 1024, 1025, 1100, 2047, 2048, 2049, 4100, 10_000,
    ]);
    for (n, len) in lengths.into_iter().enumerate() {
        // The key takes a varying share of the hashed bytes (4-byte prefix + key + value).
        let key = match n % 4 {
            0 => None,
            1 => Some(Vec::new()),
            _ => {
                let n = r.below(len as u64 + 1) as usize;
                Some(r.bytes(n))
            }
        };
        let klen = key.as_ref().map_or(0, Vec::len);
        let value = r.bytes(len.saturating_sub(klen));
        out.push(json!({
            "key": opt_bytes(key.as_deref()),
            "value": bytes(&value),
            "hash": format!("{:016x}", message_hash(key.as_deref(), &value)),
        }));
    }
    Value::Array(out)
}

fn buckets() -> Value {
    // Both sides of the largest v of every reachable bucket (bucket_index is monotone,
    // so this is a binary search per index).
    let top = bucket_index(i64::MAX);
    assert!(top <= MAX_BUCKET_INDEX);
    let mut values = std::collections::BTreeSet::from([1i64, i64::MAX]);
    for i in 0..top {
        let v = largest_in_bucket(i);
        values.insert(v);
        values.insert(v + 1);
    }
    Value::Array(
        values
            .into_iter()
            .map(|v| json!([v, bucket_index(v)]))
            .collect(),
    )
}

fn unit_name(u: Unit) -> &'static str {
    match u {
        Unit::Auto => "auto",
        Unit::Seconds => "s",
        Unit::Millis => "ms",
        Unit::Micros => "us",
        Unit::Nanos => "ns",
    }
}

const UNITS: [Unit; 5] = [
    Unit::Auto,
    Unit::Seconds,
    Unit::Millis,
    Unit::Micros,
    Unit::Nanos,
];

fn time_result(r: Result<(i64, audit_lib::TimeUnit), TimeError>) -> Value {
    match r {
        Ok((ms, unit)) => json!({ "ms": ms, "unit": unit.as_str() }),
        Err(TimeError::NotATime) => json!("not_a_time"),
        Err(TimeError::OutOfRange { negative, unit }) => {
            json!({ "out_of_range": { "negative": negative, "unit": unit.as_str() } })
        }
    }
}

fn times() -> Value {
    let texts = [
        // RFC 3339: offsets, separators, fractions, leap seconds, bounds of each field.
        "2025-11-29T10:00:00Z",
        "2025-11-29t10:00:00z",
        "2025-11-29 10:00:00Z",
        "2025-11-29T11:00:00.123+01:00",
        "2025-11-29T04:30:00-05:30",
        "2025-11-29T04:30:00\u{2212}05:30",
        "2025-11-29T10:00:00+00:00",
        "2025-11-29T10:00:00-00:00",
        "2025-11-29T10:00:00+23:59",
        "2025-11-29T10:00:00-23:59",
        "2025-11-29T10:00:00+24:00",
        "2025-11-29T10:00:00+01:60",
        "2025-11-29T10:00:00+0100",
        "2025-11-29T10:00:00+01",
        "2025-11-29T10:00:00+1:00",
        "2025-11-29T10:00:00",
        "2025-11-29T10:00:00ZZ",
        "2025-11-29T10:00:00Z ",
        " \t2025-11-29T10:00:00Z\n",
        "\u{a0}2025-11-29T10:00:00Z\u{3000}",
        "\u{feff}2025-11-29T10:00:00Z",
        "1969-12-31T23:59:59.9995Z",
        "1969-12-31T23:59:59.999999999999Z",
        "1970-01-01T00:00:00.0001Z",
        "2025-11-29T10:00:00.1Z",
        "2025-11-29T10:00:00.12Z",
        "2025-11-29T10:00:00.123456789Z",
        "2025-11-29T10:00:00.1234567891234Z",
        "2025-11-29T10:00:00.Z",
        "2025-11-29T10:00:00,5Z",
        "2016-12-31T23:59:60Z",
        "2016-12-31T23:59:60.5+00:00",
        "2016-12-31T23:58:60Z",
        "2016-12-31T23:59:61Z",
        "2025-11-29T24:00:00Z",
        "2025-11-29T23:60:00Z",
        "2024-02-29T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "2000-02-29T00:00:00Z",
        "2025-04-31T00:00:00Z",
        "2025-13-01T00:00:00Z",
        "2025-00-01T00:00:00Z",
        "2025-01-00T00:00:00Z",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999Z",
        "9999-12-31T23:59:59-23:59",
        "0000-01-01T00:00:00+23:59",
        "10000-01-01T00:00:00Z",
        "2025-11-29",
        "2025-11-29T10:00Z",
        "2025-1-29T10:00:00Z",
        "2025/11/29T10:00:00Z",
        "2025-11-29X10:00:00Z",
        "２０２５-11-29T10:00:00Z",
        // Numbers as text, by unit.
        "1764410400",
        "1764410400123",
        "1764410400123456",
        "1764410400123456789",
        "1764410400.123",
        "1.764410400123e9",
        "1.764410400123E12",
        "17644104001230e-1",
        "-0.5",
        "-1.5",
        "-1500",
        "0",
        "-0",
        "0.0e5",
        "1e-400",
        "1e30",
        "1e999999999999",
        "-9223372036854775808",
        "9223372036854775807",
        "9223372036854775808",
        "99999999999",
        "100000000000",
        "99999999999999",
        "100000000000000",
        "99999999999999999",
        "100000000000000000",
        "123456789012345678901234567890123456789",
        "0.000000000000000000000000000000000000000001",
        "1234567890123456789012345678901234567890e-30",
        " 1764410400 ",
        "+1764410400",
        "01764410400",
        ".5",
        "1.",
        "1e",
        "1e+",
        "0x10",
        "NaN",
        "",
        "   ",
        "yesterday",
        "1764410400 1",
    ];
    let mut out = Vec::new();
    for t in texts {
        for u in UNITS {
            out.push(
                json!({ "text": t, "unit": unit_name(u), "expect": time_result(text_to_ms(t, u)) }),
            );
        }
    }
    Value::Array(out)
}

fn durations() -> Value {
    let texts = [
        "10m",
        "1h",
        "30d",
        "2days",
        "5m 30s",
        "1h30m",
        "1h 30m",
        "1.5h",
        "0.5s",
        "1.h",
        "250ms",
        "250msec",
        "10us",
        "10µs",
        "999999ns",
        "1000000ns",
        "1w",
        "1M",
        "1y",
        "2yrs",
        "3 min",
        "0",
        "0s",
        "",
        " ",
        "10",
        "m",
        "-1s",
        "+1s",
        "1x",
        "1s,",
        "18446744073709551616s",
        "18446744073709551615s",
        "213503982334601y",
        "1.0000000001ms",
        "1.5ns",
        "1 h 2 min",
        "7s",
        "1s1ms",
    ];
    let out: Vec<Value> = texts
        .iter()
        .map(
            |t| match humantime_serde::re::humantime::parse_duration(t) {
                Ok(d) => json!({ "text": t, "secs": d.as_secs(), "nanos": d.subsec_nanos() }),
                Err(_) => json!({ "text": t, "error": true }),
            },
        )
        .collect();
    Value::Array(out)
}

fn globs() -> Value {
    let topics = [
        "orders",
        "orders.eu",
        "orders.eu.v2",
        "orders-v1",
        "orders_v10",
        "payments-v2",
        "Orders",
        "a",
        "ab",
        "abc",
        "logs-7",
        "logs-x",
        "logs--",
        "x",
        "",
        "a,b",
        "a.b",
        "{a}",
        "a*b",
        "a?b",
        "a-b",
        "]",
        "[",
        "a]",
        "-",
    ];
    let patterns = [
        "orders",
        "orders.*",
        "orders.{eu,us}",
        "orders.{eu,{us,asia}}",
        "*",
        "?",
        "a?c",
        "logs-[0-9]",
        "logs-[!0-9]",
        "logs-[^0-9]",
        "logs-[-x]",
        "logs-[x-]",
        "[]]",
        "[!]]",
        "[[:alpha:]]",
        "[[:digit:][:upper:]]*",
        "[[:bogus:]]",
        "a\\*b",
        "a\\?b",
        "a,b",
        "{a,b}",
        "{a,}",
        "{,a}",
        "{}",
        "*.{eu,us}*",
        "**",
        "orders**",
        "**.eu",
        "a**b",
        "{a,**}",
        "{**,a}",
        "ord*rs",
        "[a-c]*",
        "[c-a]",
        "[",
        "[!",
        "{a",
        "a}",
        "a\\",
        "\\",
        "orders.[",
        "*-v[0-9]",
        "*_v1?",
        "[a-]",
        "[!a-c-]",
    ];
    let mut out = Vec::new();
    for p in patterns {
        match TopicGlob::new(p) {
            Err(_) => out.push(json!({ "glob": p, "error": true })),
            Ok(g) => {
                let matches: Vec<&str> = topics.iter().copied().filter(|t| g.is_match(t)).collect();
                out.push(json!({ "glob": p, "topics": topics, "matches": matches }));
            }
        }
    }
    Value::Array(out)
}

fn scan_result(r: Result<Option<RawValue<'_>>, audit_lib::scan::ScanError>) -> Value {
    match r {
        Err(_) => json!("error"),
        Ok(None) => json!("absent"),
        Ok(Some(RawValue::Null)) => json!("null"),
        Ok(Some(RawValue::Bool(b))) => json!({ "bool": b }),
        Ok(Some(RawValue::Int(v))) => json!({ "int": v }),
        Ok(Some(RawValue::Number(t))) => {
            json!({ "number": std::str::from_utf8(t).expect("numbers are ASCII") })
        }
        Ok(Some(RawValue::String(s))) => json!({ "string": s }),
        Ok(Some(RawValue::Compound)) => json!("compound"),
    }
}

/// Hand-written documents: each rule of the scanner (docs/event-time.md).
fn scan_docs() -> Vec<Vec<u8>> {
    let mut docs: Vec<Vec<u8>> = [
        r#"{"ts":1764410400000}"#,
        r#"{"ts":1764410400000,"a":1}"#,
        r#"{"ts":17644104000000000,"a":1}"#,
        r#"{"ts":1234567890123456,"a":1}"#,
        r#"{"ts": 1764410400000 ,"a":1}"#,
        r#"{"ts":-1764410400000}"#,
        r#"{"ts":-0}"#,
        r#"{"ts":0}"#,
        r#"{"ts":01}"#,
        r#"{"ts":1.}"#,
        r#"{"ts":-}"#,
        r#"{"ts":--1}"#,
        r#"{"ts":1x}"#,
        r#"{"ts":1e3}"#,
        r#"{"ts":1E+3}"#,
        r#"{"ts":-1.5e3}"#,
        r#"{"ts":123456789012345678}"#,
        r#"{"ts":1234567890123456789}"#,
        r#"{"ts":-999999999999999999}"#,
        r#"{"ts":98884001247744240420.0}"#,
        r#"{"ts":1764410400.123}"#,
        r#"{"ts":"2025-11-29T10:00:00Z"}"#,
        r#"{"ts":"2025-11-29T10:00:00Z" }"#,
        r#"{"ts":"x\u0041"}"#,
        r#"{"ts":"\ud83d\ude00"}"#,
        r#"{"ts":"\ud83d"}"#,
        r#"{"ts":"\ude00"}"#,
        r#"{"ts":"\ud83dx"}"#,
        r#"{"ts":"\ud83d\u0041"}"#,
        r#"{"ts":"\q"}"#,
        r#"{"ts":"\u00"}"#,
        r#"{"ts":"a\/b\b\f\n\r\t\"\\"}"#,
        "{\"ts\":\"tab\there\"}",
        r#"{"ts":true}"#,
        r#"{"ts":false}"#,
        r#"{"ts":null,"timestamp":1764410400}"#,
        r#"{"ts":tru}"#,
        r#"{"ts":truex}"#,
        r#"{"ts":nul}"#,
        r#"{"ts":{"a":1}}"#,
        r#"{"ts":[1,2]}"#,
        r#"{"ts":[1,2}"#,
        r#"{"ts":{"a":[}}"#,
        r#"{"a":1}"#,
        r#"{}"#,
        r#"{ }"#,
        r#" { "a" : 1 , "ts" : -1.5e3 } "#,
        r#"{"a":{"ts":1,"b":[{"ts":2},"}",["]"]]},"c":[1,[2,{"x":"ts"}]],"ts":3}"#,
        r#"{"msg":"he said \"ts\":5, \\","ts\\":7,"ts":9}"#,
        r#"{"t\u0073":42}"#,
        r#"{"\u0074s":"x\u0041"}"#,
        r#"{"t\q":1}"#,
        r#"{"ts":1,"ts":2}"#,
        r#"{"timestamp":1,"timestamp":2}"#,
        r#"{"meta":5,"meta":{"event_time":1}}"#,
        r#"{"meta":{"c":1},"meta":{"event_time":1}}"#,
        r#"{"meta":{"event_time":1764410400123}}"#,
        r#"{"meta":{"event_time":"2025-11-29T11:00:00.123+01:00"},"ts":1}"#,
        r#"{"meta":{"x":{"event_time":1}},"ts":1}"#,
        r#"{"meta":[{"event_time":1}]}"#,
        r#"{"meta":"event_time"}"#,
        r#"{"meta":{"event_time":1}"#,
        r#"{"meta":{"event_time":1,}}"#,
        r#"{"meta":{"event_time" 1}}"#,
        r#"{"meta":tru,"ts":1}"#,
        r#"{"a":{"b":{"c":7}}}"#,
        r#"{"a":{"b":{"c":{"d":1}}}}"#,
        r#"{"a":[1,2,{"b":{"c":1}}],"a":{"b":{"c":2}}}"#,
        "",
        "   ",
        "{",
        r#"{"ts""#,
        r#"{"ts":"#,
        r#"{"ts":12"#,
        r#"{"a":"#,
        r#"{"a":[1,2"#,
        "{a:1}",
        "{'ts':1}",
        r#"{"ts" 1}"#,
        r#"{"ts":"a"#,
        "\u{feff}{\"ts\":1}",
        "[1,2]",
        "[1,",
        "17",
        "-",
        r#""ts""#,
        "null",
        "true",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        r#"["\q"]"#,
        r#"["\u12"]"#,
        r#"["\ud800"]"#,
        "[\"\u{1}\"]",
        r#"[1 2]"#,
        r#"[1,]"#,
        r#"{"a":1,}"#,
        r#"[01]"#,
        r#"[1.e3]"#,
        r#"[-]"#,
        r#"[1e]"#,
        r#"[1]x"#,
        r#"[1] "#,
        r#"{"a" 1}"#,
        r#"{1:2}"#,
        r#"{"a":1} x"#,
        r#"{"ts":1} x"#,
        r#"{"x":1} x"#,
        r#"{"x":"\q","ts":1}"#,
        r#"{"x":[1,"]",{"y":"}"}],"ts":2}"#,
        r#"{"x":[1,\"],"ts":2}"#,
        r#"{"x":["a\\"],"ts":3}"#,
        r#"{"x":{"a":[}]},"ts":4}"#,
        r#"{"x":{"a":"}"},"ts":5}"#,
        r#"{"x":{\"},"ts":6}"#,
        r#"{"x":12-3e+,"ts":7}"#,
        r#"{"x":-,"ts":8}"#,
        r#"{"x":nul,"ts":9}"#,
        r#"{"x":nullx,"ts":10}"#,
        "{\"x\":\"\u{1}\",\"ts\":11}",
        r#"{"ts":"1764410400123"}"#,
        r#"{"ts":" 1764410400 "}"#,
        r#"{"ts":""}"#,
        "{\"ts\":\"caf\u{e9}\"}",
        "{\"ts\":\u{3000}1}",
        "{\"ts\":\n\t\r 1}",
        "{\n\"ts\"\n:\n1\n}",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    // Binary and invalid UTF-8 where the scanner reads and where it skips.
    docs.push(b"\x00\x01\xffavro".to_vec());
    docs.push(b"{\"ts\":\"\xff\xfe\"}".to_vec());
    docs.push(b"{\"ts\":\"\xc3\xa9\"}".to_vec());
    docs.push(b"{\"ts\":\"\xed\xa0\x80\"}".to_vec());
    docs.push(b"{\"ts\":\"\xc0\xaf\"}".to_vec());
    docs.push(b"{\"ts\":\"\\u0041\xff\"}".to_vec());
    docs.push(b"{\"x\":\"\xff\",\"ts\":12}".to_vec());
    docs.push(b"{\"t\xffs\":1,\"ts\":13}".to_vec());
    docs.push(b"[\"\xff\"]".to_vec());
    docs.push((0..=255u8).cycle().take(700).collect());
    // Long documents: skipped values across 64-byte blocks, escapes at every offset.
    for pad in [0usize, 1, 31, 62, 63, 64, 65, 127, 200] {
        for tail in [r#"\\"#, r#"\""#, r#"}]"#, r#"\\\""#, "{[", r#"\\\\"#] {
            let filler = "x".repeat(pad);
            docs.push(
                format!(
                    r#"{{"a":{{"s":"{filler}{tail}","n":[1,{{"k":"{tail}{filler}"}},[[]]],"t":{{}}}},"ts":5,"z":[{{"q":"{tail}"}}]}}"#
                )
                .into_bytes(),
            );
        }
    }
    docs
}

/// Mutations of the hand-written documents: truncated, a byte replaced, inserted or
/// removed. Most are malformed somewhere, which is where implementations differ.
fn mutated(docs: &[Vec<u8>], r: &mut Rng, n: usize) -> Vec<Vec<u8>> {
    const ALPHABET: &[u8] = b"{}[]\":,\\ ntfe.-+0159\x00\xff\x7fu";
    (0..n)
        .map(|_| {
            let mut d = docs[r.below(docs.len() as u64) as usize].clone();
            for _ in 0..=r.below(3) {
                let at = if d.is_empty() {
                    0
                } else {
                    r.below(d.len() as u64 + 1) as usize
                };
                let b = ALPHABET[r.below(ALPHABET.len() as u64) as usize];
                match r.below(4) {
                    0 => d.truncate(at),
                    1 if at < d.len() => d[at] = b,
                    2 => d.insert(at, b),
                    _ if at < d.len() => {
                        d.remove(at);
                    }
                    _ => {}
                }
            }
            d
        })
        .collect()
}

const PATHS: [&[&str]; 6] = [
    &["ts"],
    &["timestamp"],
    &["meta", "event_time"],
    &["a", "b", "c"],
    &["x"],
    &["t\\"],
];

fn scans() -> Value {
    let docs = scan_docs();
    let mut r = Rng(2);
    let mut out = Vec::new();
    for d in &docs {
        for p in PATHS {
            out.push(json!({ "doc": bytes(d), "path": p, "expect": scan_result(find_path(d, p)) }));
        }
    }
    for d in mutated(&docs, &mut r, 3000) {
        let p = PATHS[r.below(PATHS.len() as u64) as usize];
        out.push(json!({ "doc": bytes(&d), "path": p, "expect": scan_result(find_path(&d, p)) }));
    }
    Value::Array(out)
}

fn rule_json(r: &CompiledRule) -> Value {
    json!({
        "paths": r.paths,
        "unit": unit_name(r.unit),
        "header": r.header,
        "header_unit": unit_name(r.header_unit),
        "record_timestamp": r.record_timestamp,
        "max_future_ms": r.max_future_ms,
        "max_past_ms": r.max_past_ms,
    })
}

/// The event-time configs of the cases, and configs that must fail.
const CONFIGS: [&str; 24] = [
    "",
    "window_size = \"1m\"\n",
    r#"
window_size = "10s"

[[rules]]
topic = "orders.*"
field = "meta.event_time"
fields = []
unit = "ms"

[[rules]]
topic_regex = '^(orders|payments)-v[0-9]+$'
fields = ["created", "ts"]
unit = "us"
header = "event-time"
header_unit = "ms"
record_timestamp = false
max_future = "5m"
max_past = "2days"

[[rules]]
topic = "bin.{a,b}"   # binary topics: windowed by the record timestamp
fields = []

[default]
fields = ["ts", "timestamp"]
header = "event-time"
max_future = "1h 30m"
max_past = "7d"
"#,
    // Inline tables, dotted keys, literal and escaped strings, comments: TOML the
    // Rust reader accepts.
    r#"# comment
window_size = '5m'
rules = [ { topic = "a*", fields = [ "t\u0073", 'x.y' ], unit = "s" },
          { topic_regex = "b\\d+", field = "q" } ]
default.fields = [
  "ts", # trailing comments in arrays
  "when",
]
default.unit = "ns"
"#,
    "[default]\nmax_future = \"1.5h\"\nmax_past = \"0s\"\nrecord_timestamp = true\n",
    "window_size = \"7s\"\n[default]\nunit = \"µs\"\nheader = \"h\"\nheader_unit = \"s\"\n",
    // Errors.
    "windowsize = \"1m\"\n",
    "[[rules]]\ntopic = \"a\"\nfeild = \"x\"\n",
    "[default]\nunit = \"minutes\"\n",
    "[[rules]]\ntopic_regex = \"(\"\n",
    "[[rules]]\ntopic = \"a\"\ntopic_regex = \"b\"\n",
    "[[rules]]\n",
    "[default]\nfields = [\"a..b\"]\n",
    "[default]\nfields = [\"\"]\n",
    "[[rules]]\ntopic = \"orders.{eu\"\n",
    "window_size = \"0s\"\n",
    "window_size = \"10us\"\n",
    "window_size = 600\n",
    "[default]\nmax_future = \"213503982334601y\"\n",
    "[default]\nmax_past = \"18446744073709551615s\"\n",
    "[default]\nrecord_timestamp = \"yes\"\n",
    "window_size = \"1m\"\nwindow_size = \"2m\"\n",
    "[default\n",
    "[default]\nfields = [\"ts\"\n",
];

const PROBES: [&str; 9] = [
    "orders",
    "orders.eu",
    "orders-v1",
    "payments-v22",
    "payments-v2x",
    "bin.a",
    "bin.c",
    "a1",
    "b12",
];

fn configs() -> Value {
    let mut out = Vec::new();
    for text in CONFIGS {
        let parsed = match EventTimeConfig::from_toml(text) {
            Err(e) => {
                out.push(json!({ "toml": text, "error": e.to_string() }));
                continue;
            }
            Ok(p) => p,
        };
        let cc = match parsed.compile() {
            Err(e) => {
                out.push(json!({ "toml": text, "error": e.to_string() }));
                continue;
            }
            Ok(cc) => cc,
        };
        // Each rule compiled on its own (CompiledConfig keeps its rules private): the
        // rule as the default of a config without rules.
        let rules: Vec<Value> = parsed
            .rules
            .iter()
            .map(|r| {
                let alone = EventTimeConfig {
                    default: TimeRule {
                        fields: r.fields.clone(),
                        field: r.field.clone(),
                        unit: r.unit,
                        header: r.header.clone(),
                        header_unit: r.header_unit,
                        record_timestamp: r.record_timestamp,
                        max_future: r.max_future,
                        max_past: r.max_past,
                    },
                    ..EventTimeConfig::default()
                };
                rule_json(
                    &alone
                        .compile()
                        .expect("compiles alone")
                        .rule_for("x")
                        .clone(),
                )
            })
            .collect();
        // Which rule a topic gets: the first whose pattern matches it, asked of a config
        // holding that rule alone over a default no rule compiles to.
        let probes: Vec<Value> = PROBES
            .iter()
            .map(|t| {
                let index = (0..parsed.rules.len()).find(|&i| {
                    let mut one = parsed.clone();
                    one.rules = vec![parsed.rules[i].clone()];
                    one.default.fields = vec!["\u{0}".to_string()];
                    let c = one.compile().expect("compiles");
                    c.rule_for(t).path_names != ["\u{0}"]
                });
                json!({ "topic": t, "rule": index })
            })
            .collect();
        out.push(json!({
            "toml": text,
            "window_size_ms": cc.window_size.as_millis(),
            "rules": rules,
            "default": rule_json(&cc.rule_for("\u{0}").clone()),
            "probes": probes,
        }));
    }
    Value::Array(out)
}

/// One message of a case.
struct Msg {
    topic: &'static str,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Vec<u8>)>,
    timestamp: Option<RecordTimestamp>,
    observed_at: i64,
}

fn msg(topic: &'static str, value: Option<&[u8]>, ts: Option<i64>, observed_at: i64) -> Msg {
    Msg {
        topic,
        partition: 0,
        offset: 0,
        key: None,
        value: value.map(<[u8]>::to_vec),
        headers: Vec::new(),
        timestamp: ts.map(|ms| RecordTimestamp {
            ms,
            kind: TimestampType::CreateTime,
        }),
        observed_at,
    }
}

fn class_json(c: &Classification, observed_at: i64) -> Value {
    let mut v = json!({
        "label": c.label(),
        "counted_at": c.counted_at(observed_at),
        "windowed_by": match c {
            Classification::EventTime { .. } => "event_time",
            _ => c.fallback().map_or("event_time", Fallback::as_str),
        },
    });
    match c {
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
        } => {
            v["event_time_ms"] = json!(event_time_ms);
            v["source"] = json!(match source {
                TimeSource::Field(i) => format!("field{i}"),
                TimeSource::Header => "header".to_string(),
            });
            v["unit"] = json!(unit.as_str());
        }
        Classification::Malformed(reason, _) => {
            v["reason"] = serde_json::to_value(reason).unwrap();
        }
        Classification::NoTime(_) => {}
    }
    v
}

fn case(name: &str, config: &str, identity: Identity, msgs: Vec<Msg>, drain_at: i64) -> Value {
    let cfg = EventTimeConfig::from_toml(config).expect("case config");
    let mut agg = Aggregator::new(identity.clone(), cfg, Limits::default()).expect("compiles");
    let mut messages = Vec::new();
    for m in &msgs {
        let obs = Observation {
            topic: m.topic,
            partition: m.partition,
            offset: m.offset,
            key: m.key.as_deref(),
            value: m.value.as_deref(),
            headers: &m.headers,
            record_timestamp: m.timestamp,
            observed_at_ms: m.observed_at,
        };
        let class = agg.record(&obs);
        messages.push(json!({
            "topic": m.topic,
            "partition": m.partition,
            "offset": m.offset,
            "key": opt_bytes(m.key.as_deref()),
            "value": opt_bytes(m.value.as_deref()),
            "headers": m.headers.iter().map(|(k, v)| json!([k, bytes(v)])).collect::<Vec<_>>(),
            "timestamp": m.timestamp.map(|t| json!({
                "ms": t.ms,
                "type": match t.kind {
                    TimestampType::CreateTime => "create_time",
                    TimestampType::LogAppendTime => "log_append_time",
                },
            })),
            "observed_at": m.observed_at,
            "expect": class_json(&class, m.observed_at),
        }));
    }
    let mut drained = agg.drain(drain_at);
    let uuids: Vec<Uuid> = (0..drained.len())
        .map(|i| Uuid::from_u128(0x0c0f_0000_0000_4000_8000_0000_0000_0000 | i as u128))
        .collect();
    for (m, u) in drained.iter_mut().zip(&uuids) {
        m.uuid = *u;
    }
    json!({
        "name": name,
        "config": config,
        "identity": { "tier": identity.tier, "datacenter": identity.datacenter, "host": identity.host },
        "messages": messages,
        "drain_at": drain_at,
        "uuids": uuids.iter().map(Uuid::to_string).collect::<Vec<_>>(),
        "increments": drained.iter().map(|m| m.to_json()).collect::<Vec<_>>(),
    })
}

fn producer() -> Identity {
    Identity::new("producer", "dc1", "host-1/4242/producer-1")
}

/// The default rule on every kind of message: fields, units by magnitude, RFC 3339
/// with offsets, out of bounds, malformed, no time, tombstones, keys, partitions,
/// record timestamps of both types and outside the bounds, latency at bucket bounds.
fn default_rule_case() -> Value {
    let at = T0 + 5 * MIN; // observed 5 minutes into the window
    let now = Some(T0 + 4 * MIN);
    let mut msgs = vec![
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}}}"#, T0 + MIN).as_bytes()),
            now,
            at,
        ),
        msg(
            "orders",
            Some(format!(r#"{{"timestamp":{}}}"#, T0 / 1000).as_bytes()),
            now,
            at,
        ),
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}123}}"#, T0).as_bytes()),
            now,
            at,
        ),
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}123456}}"#, T0).as_bytes()),
            now,
            at,
        ),
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}.123}}"#, T0 / 1000).as_bytes()),
            now,
            at,
        ),
        msg(
            "orders",
            Some(br#"{"ts":"2025-11-29T11:00:00.123+01:00"}"#),
            now,
            at,
        ),
        msg(
            "orders",
            Some(br#"{"ts":"2025-11-29T04:29:00-05:30"}"#),
            now,
            at,
        ),
        msg(
            "orders",
            Some(br#"{"ts":"2025-11-29T09:59:59.999Z"}"#),
            now,
            at,
        ),
        msg(
            "orders",
            Some(br#"{"ts":null,"timestamp":"1764410460"}"#),
            now,
            at,
        ),
        msg("orders", Some(br#"{"ts":1.7644104e12}"#), now, at),
        // Out of bounds against the record timestamp (1 h future, 30 d past).
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}}}"#, T0 + 4 * MIN + 3_600_001).as_bytes()),
            now,
            at,
        ),
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}}}"#, T0 + 4 * MIN + 3_600_000).as_bytes()),
            now,
            at,
        ),
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}}}"#, T0 + 4 * MIN - 30 * 86_400_000 - 1).as_bytes()),
            now,
            at,
        ),
        msg("orders", Some(br#"{"ts":1e40}"#), now, at),
        msg("orders", Some(br#"{"ts":-1e40}"#), None, at),
        // Malformed and untimed.
        msg("orders", Some(br#"{"ts":true}"#), now, at),
        msg("orders", Some(br#"{"ts":"soon"}"#), now, at),
        msg("orders", Some(br#"{"ts":{"a":1}}"#), None, at),
        msg("orders", Some(b"\x00\x01\xffavro"), now, at),
        msg("orders", Some(b""), now, at),
        msg("orders", Some(br#"{"ts":"#), None, at),
        msg("orders", Some(br#"{"other":1}"#), now, at),
        msg("orders", Some(br#"[1,2]"#), now, at),
        msg("orders", None, now, at),
        msg("orders", None, None, at),
        // Record timestamps outside the bounds of observation: observation time.
        msg("orders", Some(br#"{"other":1}"#), Some(at + 3_600_001), at),
        msg(
            "orders",
            Some(br#"{"other":1}"#),
            Some(at - 30 * 86_400_000 - 1),
            at,
        ),
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}}}"#, T0).as_bytes()),
            Some(at + 3_600_001),
            at,
        ),
        // A later window and an earlier one.
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}}}"#, T0 + 10 * MIN).as_bytes()),
            now,
            at,
        ),
        msg(
            "orders",
            Some(format!(r#"{{"ts":{}}}"#, T0 - 1).as_bytes()),
            now,
            at,
        ),
        // Another topic, sorted before.
        msg(
            "clicks",
            Some(format!(r#"{{"ts":{}}}"#, T0 + 2 * MIN).as_bytes()),
            now,
            at,
        ),
    ];
    // LogAppendTime record timestamps.
    let mut lat = msg("orders", Some(br#"{"x":1}"#), None, at);
    lat.timestamp = Some(RecordTimestamp {
        ms: T0 + 3 * MIN,
        kind: TimestampType::LogAppendTime,
    });
    msgs.push(lat);
    // Latencies at both sides of bucket boundaries, and negative and zero ones.
    for (i, lat) in [
        0i64, -5, 1, 2, 3, 10, 1000, 1022, 1023, 35_000, 60_000, 299_999,
    ]
    .iter()
    .enumerate()
    {
        msgs.push(msg(
            "clicks",
            Some(format!(r#"{{"ts":{},"i":{i}}}"#, at - lat).as_bytes()),
            now,
            at,
        ));
    }
    for b in [36u32, 117, 349, 500, 700] {
        let v = largest_in_bucket(b);
        for d in [0, 1] {
            msgs.push(msg(
                "clicks",
                Some(format!(r#"{{"ts":{}}}"#, at - v - d).as_bytes()),
                now,
                at,
            ));
        }
    }
    // Keys, partitions and offsets (spans per partition, unordered offsets).
    for (n, m) in msgs.iter_mut().enumerate() {
        m.partition = (n % 3) as i32;
        m.offset = 1000 + (n as i64 * 7919) % 101;
        m.key = match n % 4 {
            0 => None,
            1 => Some(Vec::new()),
            2 => Some(format!("k{n}").into_bytes()),
            _ => Some(vec![0xff, n as u8, 0]),
        };
    }
    case("default-rule", CONFIGS[0], producer(), msgs, at + 1234)
}

fn largest_in_bucket(i: u32) -> i64 {
    let (mut lo, mut hi) = (1i64, i64::MAX);
    while lo < hi {
        let mid = lo + (hi - lo + 1) / 2;
        if bucket_index(mid) <= i {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// Rules by glob and regex, nested paths, explicit units, headers (first of repeats,
/// not UTF-8, RFC 3339, numbers), `record_timestamp = false`, tighter bounds.
fn rules_case() -> Value {
    let at = T0 + 25_000;
    let ts = Some(T0 + 20_000);
    let header = |m: &mut Msg, h: &[(&str, &[u8])]| {
        m.headers = h.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect();
    };
    let mut msgs = vec![
        msg(
            "orders.eu",
            Some(format!(r#"{{"meta":{{"event_time":{}}}}}"#, T0 + 1000).as_bytes()),
            ts,
            at,
        ),
        msg(
            "orders.eu",
            Some(format!(r#"{{"meta":{{"event_time":"{}"}}}}"#, T0 + 11_000).as_bytes()),
            ts,
            at,
        ),
        msg(
            "orders.eu",
            Some(br#"{"meta":{"event_time":"2025-11-29T10:00:05+00:00"}}"#),
            ts,
            at,
        ),
        msg(
            "orders.eu",
            Some(br#"{"meta":5,"meta":{"event_time":1}}"#),
            ts,
            at,
        ),
        msg("orders.eu", Some(br#"{"ts":1764410400000}"#), ts, at),
        msg(
            "orders-v1",
            Some(format!(r#"{{"created":{}000}}"#, T0 + 2000).as_bytes()),
            ts,
            at,
        ),
        msg(
            "orders-v1",
            Some(format!(r#"{{"ts":{}000}}"#, T0 + 12_000).as_bytes()),
            ts,
            at,
        ),
        msg(
            "orders-v1",
            Some(format!(r#"{{"created":{}000}}"#, T0 + 20_000 + 300_001).as_bytes()),
            ts,
            at,
        ),
        msg("payments-v22", Some(br#"{"x":1}"#), ts, at),
        msg("payments-v22", Some(br#"{"x":1}"#), ts, at),
        msg("payments-v22", Some(br#"{"x":1}"#), ts, at),
        msg("payments-v22", Some(b"\xff"), ts, at),
        msg("payments-v22", Some(b"\xff"), ts, at),
        msg("payments-v22", None, ts, at),
        msg("payments-v22", Some(br#"{"x":1}"#), None, at),
        msg("bin.a", Some(b"\x00\x01\x02"), ts, at),
        msg("bin.a", Some(b"{\"ts\":1}"), None, at),
        msg("other", Some(br#"{"when":1}"#), ts, at),
        msg("other", Some(br#"{"x":1}"#), ts, at),
        msg("other", Some(br#"{"x":1}"#), ts, at),
        msg("other", Some(b"binary\x00"), ts, at),
    ];
    header(
        &mut msgs[8],
        &[
            ("event-time", format!("{}", T0 + 3000).as_bytes()),
            ("event-time", b"1"),
        ],
    );
    header(
        &mut msgs[9],
        &[("other", b"1"), ("event-time", b"2025-11-29T10:00:04Z")],
    );
    header(&mut msgs[10], &[("event-time", b"\xff\xfe")]);
    header(
        &mut msgs[11],
        &[("event-time", format!("{}", T0 + 4000).as_bytes())],
    );
    header(&mut msgs[12], &[("event-time", b"soon")]);
    header(
        &mut msgs[13],
        &[("event-time", format!(" {} ", T0 + 5000).as_bytes())],
    );
    header(
        &mut msgs[14],
        &[("event-time", format!("{}", T0 + 6000).as_bytes())],
    );
    header(
        &mut msgs[18],
        &[("event-time", format!("{}", (T0 + 7000) / 1000).as_bytes())],
    );
    header(&mut msgs[19], &[("event-time", b"")]);
    header(
        &mut msgs[20],
        &[("event-time", format!("{}", T0 + 8000).as_bytes())],
    );
    for (n, m) in msgs.iter_mut().enumerate() {
        m.partition = (n % 2) as i32;
        m.offset = n as i64;
        m.key = Some(format!("key-{n}").into_bytes());
    }
    case(
        "rules",
        CONFIGS[2],
        Identity::new("consumer", "dc2", "w\u{f6}rker \"1\"\t/7"),
        msgs,
        at + 1,
    )
}

/// Negative event times (before 1970) and a window size that does not divide a minute.
fn negative_times_case() -> Value {
    let config = "window_size = \"7s\"\n[default]\nmax_past = \"3650d\"\n";
    let at = 1_000;
    let msgs = [-1i64, -7_000, -7_001, 0, 6_999, 7_000, -86_400_000]
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut m = msg(
                "t",
                Some(format!(r#"{{"ts":"{}"}}"#, t).as_bytes()),
                Some(at),
                at,
            );
            m.offset = i as i64;
            m
        })
        .chain(std::iter::once(msg(
            "t",
            Some(br#"{"ts":"1969-12-31T23:59:59.9995Z"}"#),
            Some(at),
            at,
        )))
        .chain(std::iter::once(msg(
            "t",
            Some(br#"{"ts":-0.5}"#),
            Some(at),
            at,
        )))
        .collect();
    case("negative-times", config, producer(), msgs, 2_000)
}

/// Every mutated document of the scanner's corpus as a message, with record
/// timestamps and observation times around it: the scanner, the time parser and the
/// aggregator together on input nobody wrote by hand.
fn fuzz_case() -> Value {
    let docs = scan_docs();
    let mut r = Rng(3);
    let mut corpus = mutated(&docs, &mut r, 600);
    corpus.extend(docs);
    let at = T0 + 7 * MIN;
    let msgs = corpus
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let ts = match r.below(4) {
                0 => None,
                1 => Some(at - r.below(3_600_000) as i64),
                2 => Some(at + r.below(7_200_000) as i64 - 3_600_000),
                _ => Some(T0 + r.below(20 * MIN as u64) as i64),
            };
            let mut m = msg(
                ["a", "b", "c"][i % 3],
                Some(&d),
                ts,
                at + r.below(5000) as i64,
            );
            m.partition = (r.below(4)) as i32;
            m.offset = r.below(1_000_000) as i64;
            let n = r.below(20) as usize;
            m.key = if r.below(2) == 0 {
                None
            } else {
                Some(r.bytes(n))
            };
            m
        })
        .collect();
    case(
        "fuzz",
        "window_size = \"1m\"\n[default]\nfields = [\"ts\", \"meta.event_time\", \"timestamp\"]\n",
        producer(),
        msgs,
        at + 10_000,
    )
}

fn vectors() -> String {
    let v = json!({
        "about": "Generated by audit-lib (audit-lib/tests/it/conformance.rs); do not edit. \
                  Regenerate: KAFKA_AUDIT_WRITE_VECTORS=1 cargo test -p audit-lib --test it conformance::",
        "hashes": hashes(),
        "buckets": buckets(),
        "times": times(),
        "durations": durations(),
        "globs": globs(),
        "scans": scans(),
        "configs": configs(),
        "cases": [default_rule_case(), rules_case(), negative_times_case(), fuzz_case()],
    });
    let mut out = String::new();
    write_lines(&v, &mut out);
    out.push('\n');
    out
}

/// JSON with one vector per line: small diffs when a value changes, and a file a
/// reader can grep. Cases are objects whose lists (messages, increments) go one
/// entry per line too.
fn write_lines(v: &Value, out: &mut String) {
    let compact = |v: &Value| serde_json::to_string(v).expect("vectors serialise");
    match v {
        Value::Object(o) => {
            out.push_str("{\n");
            for (i, (k, x)) in o.iter().enumerate() {
                out.push_str(&compact(&json!(k)));
                out.push_str(": ");
                match x {
                    Value::Array(items) => {
                        out.push_str("[\n");
                        for (j, item) in items.iter().enumerate() {
                            if item.get("messages").is_some() {
                                write_lines(item, out);
                            } else {
                                out.push_str(&compact(item));
                            }
                            out.push_str(if j + 1 < items.len() { ",\n" } else { "\n" });
                        }
                        out.push(']');
                    }
                    x => out.push_str(&compact(x)),
                }
                out.push_str(if i + 1 < o.len() { ",\n" } else { "\n" });
            }
            out.push('}');
        }
        v => out.push_str(&compact(v)),
    }
}

fn bucket_table() -> String {
    let mut out = String::from(
        "# Generated by audit-lib (audit-lib/tests/it/conformance.rs) with the conformance vectors; do not edit.\n\
         # Line i (after these comments): the largest latency in ms of latency bucket i; larger ones are in the next.\n",
    );
    for i in 0..bucket_index(i64::MAX) {
        out.push_str(&format!("{}\n", largest_in_bucket(i)));
    }
    out
}

#[test]
fn conformance_vectors_are_what_audit_lib_computes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let files = [(VECTORS, vectors()), (BUCKET_TABLE, bucket_table())];
    if std::env::var_os("KAFKA_AUDIT_WRITE_VECTORS").is_some() {
        for (file, now) in &files {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, now).unwrap();
        }
        return;
    }
    for (file, now) in &files {
        let committed = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        assert!(
            committed == *now,
            "{file} is stale: audit-lib now computes other values (the algorithm or its \
             format changed). If that is deliberate, regenerate it with \
             `KAFKA_AUDIT_WRITE_VECTORS=1 cargo test -p audit-lib --test it conformance::` \
             and make the other implementations (interceptors/java) pass it."
        );
    }
}
