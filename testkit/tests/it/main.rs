//! Smoke tests of the test harness's services (the dev Kafka clusters and PostgreSQL),
//! one test binary with a module per service; and the structure of the workspace's
//! sources (`structure`: no import cycle, no overlong file), which needs no service.

mod smoke_kafka;
mod smoke_postgres;
mod smoke_two_clusters;
mod structure;
