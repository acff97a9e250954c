//! The store's integration tests, one test binary with a module per concern.

mod citus;
mod conformance;
mod day_creation;
mod partitions;
mod postgres_tls;
