//! The Kafka shell around the auditor: the consumer's client configuration and
//! context, the consume loop, the publisher, topic selection, and the I/O of the
//! auditor's decisions.

pub(crate) mod client;
pub(crate) mod consume;
pub(crate) mod context;
pub(crate) mod fetch;
pub(crate) mod publisher;
pub(crate) mod shell;
pub(crate) mod topics;
