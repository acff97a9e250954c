//! Forged replication evidence (docs/design.md §6, whose evidence is trusted), as a new
//! user would try it, against the collector (HTTP ingest and a Kafka source with its
//! evidence topic), serve on PostgreSQL and its alerting to a local webhook receiver.
//! Topics `payments` (the replicator honestly behind: 250 counted upstream, 240
//! downstream, 10 in flight) and `orders` (a real loss of 37 the replicator's honest
//! evidence proves while the window is open). Both auditors and the replicator's
//! evidence report every second.
//!
//! One at a time, each forgery tries to prove `payments` lost:
//! - evidence (`next_offset` 2^62) posted with an ingest token whose `tiers` is
//!   omitted: refused per item by the collector;
//! - the same produced to the audit topic, as any application with the plugin can:
//!   refused by the collector (`evidence_rejects_total`), only the evidence topic
//!   carries evidence;
//! - evidence at 2^62 from the regional auditors' own token: stored, refused by serve
//!   as past the log end the upstream auditor measured;
//! - evidence of "copied everything" emitted an hour ahead: refused by serve, and the
//!   honest evidence sent after it is what `/compare` shows.
//!
//! Then the replicator catches up (250 = 250). Over the whole run the receiver gets
//! exactly one page, the loss of `orders`; `payments` never pages, is never proven
//! lost, and no proof of it is in the ledger. At df0f7fc the first, second and
//! fourth forgeries each paged `payments` as a loss that never resolved.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use audit_lib::{AuditMessage, OffsetSpan, PartitionProgress};
use rdkafka::producer::BaseRecord;
use serde_json::Value;

use crate::e2e;
use crate::integrity::{array, metrics, try_post};
use crate::mirror_http::{
    collect_toml, progress, serve_config, Services, AGGREGATE_TOKEN, EVIDENCE, REGIONAL_TOKEN,
};
use crate::support::{producer, send_queued};

const WINDOW: i64 = 600_000;
const UNBOUND: &str = "ingest-any-7a3f1c9e5b2d0864f1a6";
const FORGED: i64 = 1 << 62;

/// The collector's Kafka source (the audit topic and its evidence topic) and a token
/// bound to no tier, beside [`collect_toml`]'s two.
fn sources_and_unbound(bootstrap: &str, audit: &str, evidence: &str) -> String {
    format!(
        r#"
[[sources]]
name = "audit"
topics = ["{audit}"]
evidence_topics = ["{evidence}"]
group_id = "{group}"
[sources.kafka]
bootstrap_servers = "{bootstrap}"
[[auth.tokens]]
name = "any-tier"
token = "{UNBOUND}"
scopes = ["ingest"]
"#,
        group = testkit::unique("forgery-collector")
    )
}

/// Two partitions of `next_offset` each, read (or copied) up to now.
fn positions(next_offset: i64, lag: i64, now: i64) -> Vec<PartitionProgress> {
    (0..2)
        .map(|partition| PartitionProgress {
            partition,
            next_offset,
            record_time: Some(now - 1_000),
            lag: Some(lag),
            max_record_time: Some(now - 1_000),
            log_append_time: false,
        })
        .collect()
}

/// A progress report of `topic` by `tier`/`dc`: both partitions at `next`, `lag`.
fn report(topic: &str, tier: &str, dc: &str, next: i64, lag: i64, emitted_at: i64) -> AuditMessage {
    progress(
        topic,
        tier,
        dc,
        positions(next, lag, common::now_ms()),
        emitted_at,
    )
}

/// `count` records of `topic` in window `w` counted by `tier`/`dc`, offsets 0 to
/// `last` on both partitions.
fn counted(
    topic: &str,
    tier: &str,
    dc: &str,
    w: i64,
    count: u64,
    first: i64,
    last: i64,
) -> AuditMessage {
    let now = common::now_ms();
    testkit::increment(topic, w, w + WINDOW, count)
        .tier(tier)
        .datacenter(dc)
        .emitted_at(now)
        .offsets(
            (0..2)
                .map(|partition| OffsetSpan {
                    partition,
                    min: first,
                    max: last,
                    max_record_time: Some(now - 2_000),
                })
                .collect(),
        )
        .build()
}

async fn post(addr: SocketAddr, token: &str, messages: &[AuditMessage]) -> Value {
    let (status, json) = try_post(addr, token, array(messages)).await;
    assert_eq!(status, 200, "{json}");
    json
}

async fn compare(state: &web::AppState, topic: &str, w: i64) -> Value {
    use tower::ServiceExt;
    let uri = format!("/api/v1/topics/{topic}/compare?from={w}&to={}", w + WINDOW);
    let response = web::app(state.clone())
        .oneshot(
            axum::http::Request::builder()
                .uri(&uri)
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    body["edges"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["datacenter"] == "agg").cloned())
        .unwrap_or(Value::Null)
}

/// What each auditor reports every round: downstream's next offset of `payments`, and
/// the replicator's position there (what it has copied).
struct Round {
    addr: SocketAddr,
    producer: rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    evidence_topic: String,
    payments_down: AtomicI64,
    payments_copied: AtomicI64,
    /// Whether the replicator's evidence of `payments` is sent (paused while a
    /// forgery stands in for it).
    payments_evidence: AtomicBool,
}

impl Round {
    /// One report of every auditor: regional and aggregate over HTTP, the evidence of
    /// `payments` over HTTP (the regional token names it), of `orders` on the evidence
    /// topic (as audit-service publishes it).
    async fn report(&self) {
        let now = common::now_ms();
        let down = self.payments_down.load(Ordering::SeqCst);
        let copied = self.payments_copied.load(Ordering::SeqCst);
        let mut regional = vec![
            report("payments", "regional", "dc1", 125, 0, now),
            report("orders", "regional", "dc1", 50, 0, now),
        ];
        if self.payments_evidence.load(Ordering::SeqCst) {
            let lag = 125i64.saturating_sub(copied).max(0);
            regional.push(report("payments", EVIDENCE, "dc1", copied, lag, now));
        }
        post(self.addr, REGIONAL_TOKEN, &regional).await;
        let orders = report("orders", EVIDENCE, "dc1", 50, 0, now).to_json();
        send_queued(
            &self.producer,
            BaseRecord::<(), _>::to(&self.evidence_topic).payload(&orders),
        );
        // The downstream reads after the evidence it is judged against was sent.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = common::now_ms();
        post(
            self.addr,
            AGGREGATE_TOKEN,
            &[
                report("payments", "aggregate", "agg", down, 0, now),
                report("orders", "aggregate", "agg", 32, 0, now),
            ],
        )
        .await;
    }

    /// Reports every second until `done` holds (checked after each round) or
    /// `ceiling` passes; whether it held.
    async fn until<F: std::future::Future<Output = bool>>(
        &self,
        ceiling: Duration,
        mut done: impl FnMut() -> F,
    ) -> bool {
        let start = Instant::now();
        loop {
            let round = Instant::now();
            self.report().await;
            if done().await {
                return true;
            }
            if start.elapsed() > ceiling {
                return false;
            }
            tokio::time::sleep(Duration::from_secs(1).saturating_sub(round.elapsed())).await;
        }
    }
}

fn counter(metrics: &str, prefix: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_evidence_never_proves_a_loss_and_the_real_one_pages_postgres() {
    let bootstrap = testkit::kafka_a();
    let audit = testkit::unique("forgery-audit");
    let evidence_topic = e2e::evidence_topic(&audit);
    for t in [&audit, &evidence_topic] {
        testkit::create_topic(&bootstrap, t, 1).await;
    }
    let db = testkit::fresh_database("forgery").await;
    let collect = collect_toml(
        db.url(),
        &sources_and_unbound(&bootstrap, &audit, &evidence_topic),
    );
    let services = Services::start(db.url(), &collect, |hook| {
        serve_config(db.url(), "20m", "60s", hook)
    })
    .await;
    let (addr, pages, state) = (
        services.addr,
        services.pages.clone(),
        services.state.clone(),
    );
    let serve_metrics = || state.metrics.encode();

    // The window: payments 250 counted upstream (offsets 0–124 on both partitions),
    // 240 downstream; orders 100 upstream (0–49), 63 downstream, all copied.
    let w = common::now_ms().div_euclid(WINDOW) * WINDOW;
    post(
        addr,
        REGIONAL_TOKEN,
        &[
            counted("payments", "regional", "dc1", w, 250, 0, 124),
            counted("orders", "regional", "dc1", w, 100, 0, 49),
        ],
    )
    .await;
    post(
        addr,
        AGGREGATE_TOKEN,
        &[
            counted("payments", "aggregate", "agg", w, 240, 0, 119),
            counted("orders", "aggregate", "agg", w, 63, 0, 31),
        ],
    )
    .await;
    let round = Round {
        addr,
        producer: producer(&bootstrap),
        evidence_topic: evidence_topic.clone(),
        payments_down: AtomicI64::new(120),
        payments_copied: AtomicI64::new(120),
        payments_evidence: AtomicBool::new(true),
    };
    let in_flight = round
        .until(Duration::from_secs(90), || async {
            compare(&state, "payments", w).await["so_far"] == "in_flight"
                && !pages.of("orders").is_empty()
        })
        .await;
    assert!(
        in_flight,
        "payments {} / orders pages {:?}",
        compare(&state, "payments", w).await,
        pages.all()
    );

    // 1. Evidence from a token bound to no tier: refused per item.
    let forged = report("payments", EVIDENCE, "dc1", FORGED, 0, common::now_ms());
    let json = post(addr, UNBOUND, std::slice::from_ref(&forged)).await;
    assert_eq!(
        (&json["accepted"], &json["results"][0]["status"]),
        (&Value::from(0), &Value::from("forbidden")),
        "{json}"
    );
    // 2. The same on the audit topic: only the evidence topic carries evidence.
    let payload = forged.to_json();
    send_queued(
        &round.producer,
        BaseRecord::<(), _>::to(&audit).payload(&payload),
    );
    let key = "kafka_audit_collector_evidence_rejects_total";
    let refused = round
        .until(Duration::from_secs(60), || async {
            counter(&metrics(addr).await, key) >= 2
        })
        .await;
    assert!(refused, "{}", metrics(addr).await);
    // 3. Evidence at 2^62 from the regional auditors' own token: refused by serve.
    round.payments_copied.store(FORGED, Ordering::SeqCst);
    let key = "kafka_audit_replication_evidence_refused_total{reason=\"past_log_end\"}";
    let refused = round
        .until(Duration::from_secs(60), || async {
            counter(&serve_metrics(), key) >= 1
        })
        .await;
    round.payments_copied.store(120, Ordering::SeqCst);
    assert!(refused, "{}", serve_metrics());
    // 4. "Copied everything", emitted an hour ahead (the honest evidence paused until
    // serve has judged it), then the honest evidence again.
    round.payments_evidence.store(false, Ordering::SeqCst);
    let ahead = common::now_ms() + 59 * 60_000 + 50_000;
    post(
        addr,
        REGIONAL_TOKEN,
        &[report("payments", EVIDENCE, "dc1", 125, 0, ahead)],
    )
    .await;
    let key = "kafka_audit_replication_evidence_refused_total{reason=\"emitted_in_future\"}";
    let refused = round
        .until(Duration::from_secs(60), || async {
            counter(&serve_metrics(), key) >= 1
        })
        .await;
    round.payments_evidence.store(true, Ordering::SeqCst);
    assert!(refused, "{}", serve_metrics());
    let honest = round
        .until(Duration::from_secs(60), || async {
            let c = compare(&state, "payments", w).await;
            c["so_far"] == "in_flight"
                && c["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("up to offset 120"))
        })
        .await;
    assert!(honest, "{}", compare(&state, "payments", w).await);

    // The replicator catches up: 250 = 250.
    post(
        addr,
        AGGREGATE_TOKEN,
        &[counted("payments", "aggregate", "agg", w, 10, 120, 124)],
    )
    .await;
    round.payments_down.store(125, Ordering::SeqCst);
    round.payments_copied.store(125, Ordering::SeqCst);
    let caught_up = round
        .until(Duration::from_secs(60), || async {
            let c = compare(&state, "payments", w).await;
            c["observed"] == 250 && c["verdict"] != "loss"
        })
        .await;
    let payments = compare(&state, "payments", w).await;
    let orders = compare(&state, "orders", w).await;
    let proven: Vec<String> = state
        .index
        .read()
        .unwrap()
        .proven
        .keys()
        .map(|k| k.topic.clone())
        .collect();
    let all = pages.all();
    services.stop().await;

    assert!(caught_up, "{payments}");
    assert_ne!(payments["so_far"], "loss", "{payments}");
    assert_eq!(orders["verdict"], "loss", "{orders}");
    assert_eq!(proven, ["orders"]);
    assert_eq!(pages.of("payments"), [], "{all:#?}");
    assert_eq!(
        pages.of("orders"),
        [("trigger".to_string(), "loss".to_string(), Some(w))],
        "{all:#?}"
    );
    assert_eq!(all.len(), 1, "{all:#?}");
}
