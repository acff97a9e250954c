//! PostgreSQL store (production), by job: connecting and the shared parts of the
//! contract (connect.rs), the write path of window rows (ingest.rs), staging and the
//! roll-up (staging.rs), how message rows are read by key (routing.rs), reads
//! (reads.rs), day partitions (partitions.rs) and retention (retention.rs). Each file
//! imports only those before it in this list, and this one none of them but the store.

mod connect;
mod ingest;
mod partitions;
mod reads;
mod retention;
mod routing;
mod staging;

pub use connect::PgStore;
