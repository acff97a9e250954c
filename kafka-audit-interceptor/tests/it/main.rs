//! The plugin in real clients against the dev Kafka clusters: Python's confluent-kafka
//! wheel, a C program and a rust-rdkafka program (`tests/clients/`), each loading the
//! plugin by configuration only.

// The e2e rig of kafka-audit's tests (auditors, collector, serve, webhook receiver) and
// the audit-service test helpers it builds on.
#[path = "../../../kafka-audit/tests/it/e2e/mod.rs"]
mod e2e;
#[path = "../../../audit-service/tests/it/support/mod.rs"]
mod support;

mod clients;
mod harm;
mod lifecycle;
mod pipeline;
