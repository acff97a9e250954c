//! The JSON Schema in docs/ and the serializer agree: every field written is declared,
//! every required field is written, with the declared JSON type.

use audit_lib::{AuditMessage, Identity, PartitionProgress, Window, WindowStats};
use serde_json::{Map, Value};

const SCHEMA: &str = include_str!("../../../docs/audit-message-v1.schema.json");

fn type_ok(schema: &Value, defs: &Value, v: &Value) -> bool {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => &defs[r.trim_start_matches("#/$defs/")],
        None => schema,
    };
    if let Some(c) = schema.get("const") {
        return c == v;
    }
    match schema.get("type") {
        Some(Value::String(t)) => one_type(t, v),
        Some(Value::Array(ts)) => ts.iter().any(|t| one_type(t.as_str().unwrap(), v)),
        _ => true,
    }
}

fn one_type(t: &str, v: &Value) -> bool {
    match t {
        "integer" => v.is_i64() || v.is_u64(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn check(msg: &AuditMessage, branch: &str) {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let defs = &schema["$defs"];
    let v = serde_json::to_value(msg).unwrap();
    let obj: &Map<String, Value> = v.as_object().unwrap();
    let b = schema["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["title"] == branch)
        .unwrap();
    for req in schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .chain(b["required"].as_array().unwrap())
    {
        assert!(
            obj.contains_key(req.as_str().unwrap()),
            "{branch}: required {req} not written"
        );
    }
    for (k, val) in obj {
        let decl = b["properties"]
            .get(k)
            .or_else(|| schema["properties"].get(k));
        let decl =
            decl.unwrap_or_else(|| panic!("{branch}: field {k} written but not in the schema"));
        assert!(
            type_ok(decl, defs, val),
            "{branch}: field {k} = {val} does not match {decl}"
        );
    }
}

#[test]
fn increments_and_progress_match_the_schema() {
    let id = Identity::new("regional", "dc1", "a-0");
    let mut stats = WindowStats {
        count: 3,
        bytes: 10,
        no_time_count: 1,
        observation_time_count: 2,
        delivery_failed_count: 3,
        ..Default::default()
    };
    stats.latency.record(25);
    stats.track_offset(2, 7, Some(4));
    stats.max_observed_at = Some(5);
    check(
        &AuditMessage::increment(
            &id,
            "t",
            Window {
                start_ms: 0,
                end_ms: 600_000,
            },
            stats,
            5,
        ),
        "increment",
    );
    let p = vec![PartitionProgress {
        partition: 0,
        next_offset: 3,
        record_time: None,
        lag: Some(0),
        max_record_time: Some(4),
        log_append_time: true,
    }];
    check(&AuditMessage::progress(&id, "t", p, 5), "progress");
}
