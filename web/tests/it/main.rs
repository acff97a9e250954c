//! The web service's integration tests, one test binary with a module per concern
//! (one binary links once; see the workspace's Cargo.toml). `support` comes first:
//! its `on_both_backends!` macro is in scope in the modules declared after it.

#[macro_use]
mod support;

mod alerts;
mod api;
mod caps;
mod coldstart;
mod completeness;
mod conversion;
mod dashboard_browser;
mod edges;
mod evidence;
mod golden;
mod proofs;
