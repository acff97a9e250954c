//! audit-lib's integration tests, one test binary with a module per concern (one
//! binary links once; see the workspace's Cargo.toml). `tests/alloc_free.rs` stays a
//! binary of its own: its counting global allocator would count the allocations of
//! every other test running in the same process.

mod aggregator;
mod conformance;
mod differential;
mod oracle;
mod rng;
mod schema;
mod sinks;
