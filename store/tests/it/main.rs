//! The store's integration tests, one test binary with a module per concern.

mod conformance;
mod partitions;
mod postgres_tls;
