//! `/api/v1` handlers. Times are RFC 3339 or epoch milliseconds; ranges and page sizes
//! are bounded by `[serve]`; `/anomalies` and `/topics` read the evaluator's verdict
//! index, the per-topic routes read the store.
//!
//! One file per route or pair of routes; [`params`] holds what they share.
//! `crate::openapi` lists them; nothing here depends on it.

pub mod completeness;
pub mod evaluate;
pub mod health;
pub mod offsets;
pub mod params;
pub mod proofs;
pub mod topics;
pub mod topology;
pub mod windows;
