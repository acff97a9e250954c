//! The oracle for the field scanner: serde_json's parser, with the duplicate-key rule
//! of audit-lib (first occurrence at the requested level). serde_json's own `Value`
//! keeps the *last* duplicate, so objects are collected as ordered member lists here.
//! Shared by the differential property tests and the cargo-fuzz target.
#![allow(dead_code)]

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

#[derive(Debug, Clone, PartialEq)]
pub enum OValue {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<OValue>),
    Object(Vec<(String, OValue)>),
}

impl<'de> Deserialize<'de> for OValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<OValue, E> {
                Ok(OValue::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<OValue, E> {
                Ok(OValue::Bool(b))
            }
            fn visit_u64<E>(self, n: u64) -> Result<OValue, E> {
                Ok(OValue::Number(n.into()))
            }
            fn visit_i64<E>(self, n: i64) -> Result<OValue, E> {
                Ok(OValue::Number(n.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<OValue, E> {
                serde_json::Number::from_f64(n)
                    .map(OValue::Number)
                    .ok_or_else(|| E::custom("non-finite number"))
            }
            fn visit_str<E>(self, s: &str) -> Result<OValue, E> {
                Ok(OValue::String(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<OValue, E> {
                Ok(OValue::String(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<OValue, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(OValue::Array(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<OValue, A::Error> {
                let mut v = Vec::new();
                while let Some((k, x)) = a.next_entry::<String, OValue>()? {
                    v.push((k, x));
                }
                Ok(OValue::Object(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses a whole document (trailing whitespace only), as serde_json does.
pub fn parse(doc: &[u8]) -> Option<OValue> {
    serde_json::from_slice(doc).ok()
}

/// First occurrence at each level; `None` when absent or a parent is not an object.
pub fn lookup<'a>(v: &'a OValue, path: &[&str]) -> Option<&'a OValue> {
    let mut cur = v;
    for seg in path {
        match cur {
            OValue::Object(members) => {
                cur = &members.iter().find(|(k, _)| k == seg)?.1;
            }
            _ => return None,
        }
    }
    Some(cur)
}

/// Does the scanner's answer equal the oracle's value?
pub fn same(scanned: &audit_lib::scan::RawValue<'_>, oracle: &OValue) -> bool {
    use audit_lib::scan::RawValue;
    match (scanned, oracle) {
        (RawValue::Null, OValue::Null) => true,
        (RawValue::Bool(a), OValue::Bool(b)) => a == b,
        // "-0" is a plain integer 0 for the scanner; serde_json may read it as -0.0.
        (RawValue::Int(v), OValue::Number(n)) => {
            n.as_i64() == Some(*v) || (*v == 0 && n.as_f64() == Some(0.0))
        }
        (RawValue::Number(text), OValue::Number(n)) => {
            // The same tokenizer reads the scanner's text: any difference is in which
            // value was found, not in float parsing.
            matches!(serde_json::from_slice::<serde_json::Value>(text),
                     Ok(serde_json::Value::Number(m)) if &m == n)
        }
        (RawValue::String(a), OValue::String(b)) => a == b,
        (RawValue::Compound, OValue::Array(_) | OValue::Object(_)) => true,
        _ => false,
    }
}

/// The differential check on one input: if the oracle accepts the document, the
/// scanner must return exactly its value; otherwise the scanner may return anything
/// but must not panic. Returns a description of the disagreement.
pub fn check(doc: &[u8], path: &[&str]) -> Result<(), String> {
    let scanned = audit_lib::scan::find_path(doc, path);
    let Some(tree) = parse(doc) else {
        return Ok(());
    };
    let want = lookup(&tree, path);
    match (&scanned, want) {
        (Ok(None), None) => Ok(()),
        (Ok(Some(s)), Some(o)) if same(s, o) => Ok(()),
        _ => Err(format!(
            "path {path:?} doc {:?}: scanner {scanned:?}, oracle {want:?}",
            String::from_utf8_lossy(doc)
        )),
    }
}

/// Truncation never changes the answer: on every strict prefix of a valid document
/// the scanner either fails or returns what it returns for the whole document.
/// (A prefix of an invalid document can itself be valid, e.g. `1` of `1:`; the
/// general check covers those.)
pub fn check_prefixes(doc: &[u8], path: &[&str]) -> Result<(), String> {
    if parse(doc).is_none() {
        return Ok(());
    }
    let full = audit_lib::scan::find_path(doc, path);
    for k in 0..doc.len() {
        let p = audit_lib::scan::find_path(&doc[..k], path);
        if p.is_ok() && p != full {
            return Err(format!(
                "prefix {k} of {:?}: {p:?} but whole document gives {full:?}",
                String::from_utf8_lossy(doc)
            ));
        }
    }
    Ok(())
}
