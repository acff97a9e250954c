//! The collector's integration tests against real Kafka, PostgreSQL and SQLite, one
//! test binary with a module per concern (one binary links once; see the workspace's
//! Cargo.toml). Two stay binaries of their own, since they would disturb the tests of
//! the same process: `tests/ingest_memory.rs` (a counting global allocator measures
//! the peak heap) and `tests/postgres_restart.rs` (restarts the PostgreSQL server).

mod support;

mod bounds;
mod hostile;
mod http_ingest;
mod ingest_auth;
mod kafka_exactly_once;
mod retention;
