//! web: the REST API, the detection engine, alerting and Prometheus metrics
//! (DESIGN §6, §7). `kafka-audit serve` calls [`run`].

pub mod engine;
