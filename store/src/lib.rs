//! The audit store: writes for the collector, reads for the web service.
//!
//! One contract, [`AuditStore`], in parts by client ([`Deployment`], [`Ingest`],
//! [`VerdictReads`], [`Inventory`], [`AlertLedger`], [`Upkeep`]; contract.rs), two
//! implementations: [`PgStore`] (PostgreSQL, production) and [`SqliteStore`] (embedded
//! default: a file path, nothing to install). [`Store`] picks one from a URL and
//! dispatches, so callers need no generics.
//!
//! Exactly-once: [`Ingest::write_batch`] records every message's UUID and adds
//! only first-seen increments, in one transaction. A batch that fails changed nothing
//! and can be retried as a whole.
//!
//! The collector uses [`Ingest::stage_batch`] instead: on PostgreSQL it stores
//! each first-seen message whole (one binary COPY) and queues its increment; the
//! collector's roll-up task ([`Ingest::rollup`]) adds queued increments to their
//! window rows a moment later (normally well under a second behind). Readers of
//! window rows therefore see increments after the roll-up; progress, emitters and
//! rejects are written at staging time.
//!
//! Schema (migrations/postgres, migrations/sqlite): `audit_window` (one row per
//! topic, tier, datacenter, window; times in epoch ms; checksum is the u64 as bigint),
//! `audit_window_bucket` (window_id, bucket, count: merge with `sum(count) GROUP BY
//! bucket`), `audit_window_offset`, `audit_progress`, `audit_emitter`,
//! `audit_reject`, `audit_message` (every accepted UUID, the deduplication record),
//! `audit_pending` (PostgreSQL: increments staged, not yet rolled up), `audit_topic`
//! (PostgreSQL: the topics with windows),
//! `web_alert_open` (alerts web's channels delivered and have not resolved),
//! `web_proven_loss` (losses web proved before their window was final). No other
//! crate runs SQL on these tables: the pools are private to this crate.
//!
//! On PostgreSQL the tables that grow with traffic (`audit_window`, its buckets and
//! offsets, `audit_message`) are partitioned by day on a time from the message itself,
//! carry `topic` in every key (distributable with Citus), and retention drops whole
//! days ([`Upkeep::prepare_partitions`], [`Upkeep::retention`];
//! docs/operations.md).

mod aggregate;
mod connection;
mod contract;
mod db_rows;
mod dispatch;
mod domain;
mod error;
#[cfg(feature = "test-support")]
pub mod old_schema;
mod pg;
pub mod pgcopy;
mod shared;
mod sql;
mod sqlite;
mod validate;

pub use connection::{redact_url, StoreOptions};
pub use contract::*;
pub use dispatch::Store;
pub use domain::*;
pub use error::{Result, StoreError};
pub use pg::PgStore;
pub use sqlite::SqliteStore;
pub use validate::*;
