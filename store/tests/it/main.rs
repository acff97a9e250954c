//! The store's integration tests, one test binary with a module per concern.

mod citus;
mod conformance;
mod partitions;
mod postgres_tls;
