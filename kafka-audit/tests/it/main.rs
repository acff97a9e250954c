//! The `kafka-audit` binary's integration tests, one test binary with a module per
//! concern (one binary links once; see the workspace's Cargo.toml). Most run the built
//! binary (`CARGO_BIN_EXE_kafka-audit` is set for this crate's integration tests only);
//! `deploy` checks the deploy kit against the code.

// The helpers of the audit-service and collector tests, shared with those crates
// (`support` is audit-service's; `e2e` builds on it).
#[path = "../../../collector/tests/it/support/mod.rs"]
mod collector_support;
mod e2e;
#[path = "../../../audit-service/tests/it/support/mod.rs"]
mod support;
// The git revision in `--version` (used by build.rs, not compiled into the binary).
#[path = "../../src/revision.rs"]
mod revision;

/// The end-to-end tests that ran alone when each file was a test binary of its own
/// (several services and a bounded wait each: under the load of another one, their
/// waits ran out) take this lock first, so that no two of them run at once.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Cluster R's failover scenarios (`replicated/`), one after the other in one test:
/// each kills nodes of the one cluster, so none may overlap another, and as tests of
/// their own, one waiting for the cluster held one of libtest's threads (two on this
/// machine class) idle through another's whole run, the rest of this binary waiting
/// behind them: ~10 minutes of a CI run. Named to sort right after `citus`: libtest
/// starts tests in name order, so this one starts among the first and runs beside the
/// rest. `KAFKA_AUDIT_TEST_R_SCENARIOS=kills,two_down` runs some of them.
#[test]
fn cluster_r_failover_scenarios() {
    replicated::run_scenarios();
}

mod chaos;
mod citus;
mod collect_sigkill;
mod collector_outage;
mod deleted_topic;
mod demo;
mod deploy;
mod early_loss;
mod evidence;
mod evidence_stale;
mod flood;
mod forgery;
mod inspect;
mod integrity;
mod java_interceptors;
mod late_auditor;
mod mirror_http;
mod region_only_topic;
mod replicated;
mod rollup_held;
mod stuck_instance;
mod transactional;
mod untimed;
mod version;
mod wait;
