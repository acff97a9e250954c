//! audit-service's integration tests against the real brokers, one test binary with a
//! module per concern (one binary links once; see the workspace's Cargo.toml).

mod support;

mod backpressure;
mod broker_restart;
mod checks;
mod cluster_outage;
mod exactness;
mod input;
mod progress;
mod rebalance;
mod replication;
mod topics;
mod wal_faults;
