//! Smoke tests of the test harness's services (the dev Kafka clusters and PostgreSQL),
//! one test binary with a module per service.

mod smoke_kafka;
mod smoke_postgres;
mod smoke_two_clusters;
