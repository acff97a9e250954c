//! What the services share (audit, collect, serve, the store): layered configuration loading,
//! Kafka client configuration with passthrough of every librdkafka property,
//! tracing initialisation, the ops HTTP server (`/metrics`, `/healthz`),
//! shutdown on SIGTERM / ctrl-c, the clock (`now_ms`), retry `Backoff` and the API's
//! JSON error shape (`ApiError`).
//!
//! The API is deliberately small and stable; both services build on it.

pub mod api_error;
pub mod auth;
pub mod config;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod labels;
pub mod ops;
pub mod replication;
pub mod server;
pub mod shutdown;
pub mod telemetry;
pub mod time;

pub use api_error::{ApiError, ErrorBody, ErrorDetail};
pub use auth::{Scope, TokenConfig, Tokens};
pub use config::{load_config, ENV_PREFIX};
#[cfg(feature = "kafka")]
pub use kafka::{KafkaConfig, KafkaRole};
pub use ops::{serve_ops, Health, OpsConfig, OpsServer};
pub use server::ServerLimits;
pub use shutdown::{shutdown_on_signals, wait_for_signal};
pub use telemetry::{init_tracing, LogConfig, LogEvery, LogFormat};
pub use time::{now_ms, Backoff};
