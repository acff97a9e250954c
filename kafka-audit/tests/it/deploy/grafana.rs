//! The Grafana dashboard (deploy/grafana): every SQL query runs against a PostgreSQL
//! database migrated with our migrations and seeded through the store's write API,
//! returns what the seeded pipeline implies and agrees with web's detection engine
//! (completeness, anomalies) and percentiles; its edges are the example topology's; its
//! PromQL uses exposed metrics; its panels have unique ids and the dashboard's data
//! sources.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value as Json;

use super::support::*;

/// `(where, query, format)` of every PostgreSQL query: panel targets (rows' nested
/// panels included) and query variables.
fn sql_queries(d: &Json) -> Vec<(String, String, String)> {
    fn walk(panels: &Json, out: &mut Vec<(String, String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or_default();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(sql) = t["rawSql"].as_str() {
                    assert_eq!(t["datasource"]["uid"], "${pg}", "{title}");
                    let format = t["format"].as_str().unwrap_or("table").to_string();
                    out.push((title.to_string(), sql.to_string(), format));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" && v["datasource"]["uid"] == "${pg}" {
            let name = v["name"].as_str().unwrap();
            out.push((
                format!("variable {name}"),
                v["query"].as_str().unwrap().to_string(),
                "table".to_string(),
            ));
        }
    }
    out
}

fn prom_exprs(d: &Json) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                assert_eq!(t["datasource"]["uid"], "${prom}");
                out.push((p["title"].as_str().unwrap().to_string(), expr.to_string()));
            }
        }
    }
    out
}

/// What Grafana does before sending a query: its macros and the dashboard's variables
/// replaced by values. Anything left with a `$` would reach PostgreSQL as is.
fn render(sql: &str, vars: &BTreeMap<String, String>, from_ms: i64, to_ms: i64) -> String {
    let mut out = sql
        .replace("$__unixEpochFrom()", &(from_ms / 1000).to_string())
        .replace("$__unixEpochTo()", &(to_ms / 1000).to_string());
    // Longest names first, so `$topic_x` is not read as `$topic` + `_x`.
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        out = out
            .replace(&format!("${{{name}}}"), &vars[name])
            .replace(&format!("${name}"), &vars[name]);
    }
    assert!(
        !out.contains('$'),
        "unreplaced macro or variable in:\n{out}"
    );
    out
}

const TOPIC: &str = "orders.created";

const WINDOW_MS: i64 = 600_000;

const TIERS: [(&str, &str, &str); 6] = [
    // (tier, datacenter, host)
    ("producer", "dc1", "orders-api-dc1"),
    ("producer", "dc2", "orders-api-dc2"),
    ("regional", "dc1", "audit-dc1-0"),
    ("regional", "dc2", "audit-dc2-0"),
    ("aggregate", "agg", "audit-agg-0"),
    ("consumer-hdfs", "agg", "hdfs-loader"),
];

const LOSS_WINDOW: i64 = 2;

const DUPLICATION_WINDOW: i64 = 4;

/// The count a tier saw in window `k` of the seeded pipeline: dc2's regional cluster
/// lost 10 messages in window 2; the aggregate cluster received 5 twice in window 4.
fn seeded_count(tier: &str, dc: &str, k: i64) -> u64 {
    let dc1 = 1000;
    let dc2 = 800;
    let regional_dc2 = if k == LOSS_WINDOW { dc2 - 10 } else { dc2 };
    let aggregate = dc1 + regional_dc2 + if k == DUPLICATION_WINDOW { 5 } else { 0 };
    match (tier, dc) {
        ("producer", "dc1") | ("regional", "dc1") => dc1,
        ("producer", "dc2") => dc2,
        ("regional", "dc2") => regional_dc2,
        ("aggregate", _) | ("consumer-hdfs", _) => aggregate,
        _ => unreachable!(),
    }
}

/// Latencies of one tier: mostly fast, a tenth slow, a few under 1 ms. The last tier
/// (one datacenter, so not merged) puts the boundary between fast and slow between
/// the ranks floor(0.95 (n - 1)) and ceil(0.95 n) - 1, which differ where 0.95 n is
/// not whole: the two usual rank rules then read different p95s, so the dashboard
/// must use the API's.
fn seeded_latency(tier_index: usize, count: u64) -> audit_lib::LatencyHistogram {
    let mut h = audit_lib::LatencyHistogram::new();
    let slow = if tier_index == TIERS.len() - 1 {
        count - ((0.95 * count as f64).ceil() as u64 - 1)
    } else {
        count / 10
    };
    h.record_n(0, 3);
    h.record_n(40 * (tier_index as i64 + 1), count - slow - 3);
    h.record_n(9_000 * (tier_index as i64 + 1), slow);
    h
}

/// Six settled windows starting three hours ago, every tier of the example topology,
/// progress of the auditors, one rejected message. Returns the first window's start.
async fn seed(store: &store::Store, now: i64) -> i64 {
    use store::{AuditBody, Batch, Increment, Ingest, Message, OffsetSpan, WindowStats};
    let first = (now - 3 * 3_600_000) / WINDOW_MS * WINDOW_MS;
    let mut messages = Vec::new();
    for k in 0..6 {
        let start = first + k * WINDOW_MS;
        for (t, (tier, dc, host)) in TIERS.iter().enumerate() {
            let count = seeded_count(tier, dc, k);
            let h = seeded_latency(t, count);
            messages.push(Message {
                version: audit_lib::AUDIT_MESSAGE_VERSION,
                uuid: uuid::Uuid::new_v4(),
                topic: TOPIC.into(),
                tier: tier.to_string(),
                datacenter: dc.to_string(),
                host: host.to_string(),
                emitted_at: start + WINDOW_MS + 60_000,
                body: AuditBody::Increment(Increment {
                    window_start: start,
                    window_end: start + WINDOW_MS,
                    stats: WindowStats {
                        count,
                        bytes: count * 120,
                        no_time_count: 2,
                        malformed_count: 1,
                        out_of_bounds_count: 0,
                        observation_time_count: 0,
                        delivery_failed_count: 0,
                        checksum: audit_lib::Checksum(count.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                        latency: h,
                        offsets: vec![OffsetSpan {
                            partition: 0,
                            min: k * 1000,
                            max: k * 1000 + count as i64 - 1,
                            max_record_time: None,
                        }],
                        max_observed_at: None,
                    },
                }),
            });
        }
    }
    for (tier, dc, host) in &TIERS[2..5] {
        messages.push(Message {
            version: audit_lib::AUDIT_MESSAGE_VERSION,
            uuid: uuid::Uuid::new_v4(),
            topic: TOPIC.into(),
            tier: tier.to_string(),
            datacenter: dc.to_string(),
            host: host.to_string(),
            emitted_at: now - 5_000,
            body: AuditBody::Progress(
                (0..2)
                    .map(|p| store::PartitionProgress {
                        partition: p,
                        next_offset: 6_000,
                        record_time: Some(now - 6_000),
                        lag: Some(5 + i64::from(p)),
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
    }
    let batch = Batch {
        messages,
        rejects: vec![store::Reject {
            source: "http[0]".into(),
            reason: "missing field `uuid`".into(),
            payload: "{}".into(),
        }],
        received_at_ms: now,
    };
    let outcome = store.write_batch(&batch).await.unwrap();
    assert_eq!(outcome.accepted(), batch.messages.len());
    first
}

#[tokio::test]
async fn grafana_queries_run_against_the_migrated_schema_and_show_the_seeded_pipeline() {
    use sqlx::{Column, Row};
    let db = testkit::fresh_database("grafana").await;
    let store = store::Store::connect(db.url()).await.unwrap();
    {
        use store::Deployment;
        store.migrate().await.unwrap();
    }
    let now = now_ms();
    let first = seed(&store, now).await;
    let store::Store::Postgres(pg) = &store else {
        unreachable!("a postgres:// URL")
    };
    let pool = pg.pool();

    let d = dashboard();
    let mut vars = BTreeMap::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap().to_string();
        match v["type"].as_str().unwrap() {
            "constant" | "custom" => {
                vars.insert(name, v["query"].as_str().unwrap().to_string());
            }
            "query" => {
                vars.insert(name, TOPIC.to_string());
            }
            // Data source pickers appear only in `datasource.uid`, never in SQL.
            _ => {}
        }
    }
    let (from, to) = (now - 6 * 3_600_000, now + 60_000);
    let queries = sql_queries(&d);
    assert!(queries.len() >= 8, "{} SQL queries", queries.len());
    let mut by_title = BTreeMap::new();
    for (title, sql, format) in &queries {
        let sql = render(sql, &vars, from, to);
        let rows = sqlx::query(&sql)
            .fetch_all(pool)
            .await
            .unwrap_or_else(|e| panic!("{title}: {e}\n{sql}"));
        assert!(!rows.is_empty(), "{title}: no rows\n{sql}");
        if format == "time_series" {
            let columns: Vec<&str> = rows[0].columns().iter().map(|c| c.name()).collect();
            assert_eq!(
                columns[0], "time",
                "{title}: a time series needs `time` first"
            );
        }
        by_title.insert(title.clone(), sql);
    }

    // Series of a time-series query: (metric, window index) -> value.
    let series = |title: &str| {
        let sql = format!(
            "SELECT metric, value, (extract(epoch FROM \"time\") * 1000)::int8 AS t FROM (\n{}\n) q",
            by_title[title]
        );
        async move {
            let rows = sqlx::query(&sql).fetch_all(pool).await.unwrap();
            rows.iter()
                .map(|r| {
                    let t: i64 = r.get("t");
                    let metric: String = r.get("metric");
                    ((metric, (t - first) / WINDOW_MS), r.get::<f64, _>("value"))
                })
                .collect::<BTreeMap<(String, i64), f64>>()
        }
    };

    let quality = series("Messages without event time, malformed, out of bounds").await;
    assert_eq!(
        quality[&("producer no_time".into(), 0)],
        4.0,
        "2 per datacenter"
    );
    assert_eq!(quality[&("regional malformed".into(), 5)], 2.0);
    assert_eq!(quality[&("aggregate out_of_bounds".into(), 3)], 0.0);

    let rejects = sqlx::query(&by_title["Rejected audit messages"])
        .fetch_all(pool)
        .await
        .unwrap();
    let rejected: f64 = rejects.iter().map(|r| r.get::<f64, _>("rejected")).sum();
    assert_eq!(rejected, 1.0);

    let counts = series("Messages per tier").await;
    assert_eq!(counts[&("regional".into(), LOSS_WINDOW)], 1790.0);
    assert_eq!(counts[&("producer".into(), LOSS_WINDOW)], 1800.0);
    assert_eq!(counts[&("aggregate".into(), DUPLICATION_WINDOW)], 1805.0);

    let completeness = series("Completeness per edge").await;
    assert_eq!(
        completeness[&("producer -> regional (dc2)".into(), LOSS_WINDOW)],
        790.0 / 800.0
    );
    assert_eq!(
        completeness[&("regional -> aggregate (agg)".into(), DUPLICATION_WINDOW)],
        1805.0 / 1800.0
    );
    assert_eq!(
        completeness[&("aggregate -> consumer-hdfs (agg)".into(), 0)],
        1.0
    );
    assert_eq!(
        completeness.len(),
        4 * 6,
        "4 downstream (edge, datacenter) x 6 windows"
    );

    let rows = sqlx::query(&by_title["Settled windows with a difference"])
        .fetch_all(pool)
        .await
        .unwrap();
    let found: BTreeSet<(String, String, i64, i64, String)> = rows
        .iter()
        .map(|r| {
            (
                r.get("edge"),
                r.get("datacenter"),
                r.get("expected"),
                r.get("observed"),
                r.get("kind"),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, i64, i64, String)> = [
        ("producer -> regional", "dc2", 800, 790, "loss"),
        ("regional -> aggregate", "agg", 1800, 1805, "duplication"),
    ]
    .into_iter()
    .map(|(e, d, x, o, k)| (e.into(), d.into(), x, o, k.into()))
    .collect();
    assert_eq!(found, expected);

    // The dashboard's edge arithmetic is the engine's: web's detection engine, given
    // what the store gives the evaluator and the example topology (thresholds at zero,
    // as the SQL has none), finds the same completeness for every settled window of
    // every edge and the same anomalies.
    let mut serve = web::Config::load(Some(&config_dir().join("serve.toml"))).unwrap();
    serve.topology.thresholds = Default::default();
    let window = audit_lib::WindowSize::from_millis(WINDOW_MS).unwrap();
    let topology = web::engine::Topology::learned(serve.topology, window).unwrap();
    let (rows, progress) = {
        use store::VerdictReads;
        let range = store::TimeRange::new(first, first + 6 * WINDOW_MS);
        let rows = store.topic_windows(TOPIC, range).await.unwrap();
        (rows, store.progress(Some(TOPIC)).await.unwrap())
    };
    let windows: Vec<i64> = (0..6).map(|k| first + k * WINDOW_MS).collect();
    let mut judged = 0;
    let mut engine_anomalies = BTreeSet::new();
    for ew in topology.evaluate_topic(TOPIC, &windows, &rows, &progress, now) {
        assert_eq!(ew.lifecycle, web::engine::Lifecycle::Final, "{ew:?}");
        let key = (
            format!("{} -> {} ({})", ew.upstream, ew.downstream, ew.datacenter),
            (ew.window_start - first) / WINDOW_MS,
        );
        assert_eq!(Some(completeness[&key]), ew.completeness, "{key:?}");
        judged += 1;
        if ew.verdict.is_anomaly() {
            engine_anomalies.insert((
                format!("{} -> {}", ew.upstream, ew.downstream),
                ew.datacenter.clone(),
                ew.expected as i64,
                ew.observed as i64,
                ew.verdict.as_str().to_string(),
            ));
        }
    }
    assert_eq!(
        judged,
        completeness.len(),
        "every window of every edge is final"
    );
    assert_eq!(engine_anomalies, expected, "the engine's anomalies");

    // The SQL percentiles are the API's: web's engine merges the histograms of a
    // tier's datacenters and reads p50 / p95 / p99 from them.
    let latency = series("Latency per tier").await;
    let mut merged: BTreeMap<(String, i64), audit_lib::LatencyHistogram> = BTreeMap::new();
    for r in &rows {
        merged
            .entry((r.tier.clone(), (r.window_start_ms - first) / WINDOW_MS))
            .or_default()
            .merge(&r.latency);
    }
    assert_eq!(merged.len(), 4 * 6, "4 tiers x 6 windows");
    for ((tier, k), h) in &merged {
        let p = web::engine::percentiles(h).unwrap();
        for (want, name) in [(p.p50_ms, "p50"), (p.p95_ms, "p95"), (p.p99_ms, "p99")] {
            let got = latency[&(format!("{tier} {name}"), *k)];
            assert!(
                (got - want).abs() <= want * 1e-9,
                "{tier} {name} window {k}: SQL {got}, API {want}"
            );
        }
    }

    let rows = sqlx::query(&by_title["Emitters"])
        .fetch_all(pool)
        .await
        .unwrap();
    let lag: BTreeMap<String, Option<i64>> = rows
        .iter()
        .map(|r| (r.get("host"), r.get("max_lag")))
        .collect();
    assert_eq!(lag["audit-dc1-0"], Some(6));
    assert_eq!(lag["orders-api-dc1"], None, "producers report no progress");
}

#[test]
fn grafana_edges_mirror_the_example_topology() {
    let d = dashboard();
    let serve = web::Config::load(Some(&config_dir().join("serve.toml"))).unwrap();
    let window = audit_lib::WindowSize::from_millis(WINDOW_MS).unwrap();
    let topo = web::engine::Topology::learned(serve.topology, window).unwrap();
    let row = regex::Regex::new(r"\('([^']+)', '([^']+)', '([^']+)', '([^']+)'\)").unwrap();
    let mut checked = 0;
    for (title, sql, _) in sql_queries(&d) {
        if !sql.contains("edge(upstream, upstream_dc, downstream, downstream_dc)") {
            continue;
        }
        let mut covered = BTreeSet::new();
        for r in row.captures_iter(&sql) {
            let (up, up_dc, down, down_dc) = (&r[1], &r[2], &r[3], &r[4]);
            let edge = topo
                .edges
                .iter()
                .find(|e| e.upstream == up && e.downstream == down)
                .unwrap_or_else(|| panic!("{title}: edge {up} -> {down} not in serve.toml"));
            assert!(
                edge.upstream_datacenters(down_dc)
                    .iter()
                    .any(|d| d == up_dc),
                "{title}: {up}/{up_dc} -> {down}/{down_dc} contradicts the datacenter mapping"
            );
            covered.insert((up.to_string(), down.to_string()));
        }
        let all: BTreeSet<(String, String)> = topo
            .edges
            .iter()
            .map(|e| (e.upstream.clone(), e.downstream.clone()))
            .collect();
        assert_eq!(covered, all, "{title}: edges of serve.toml missing");
        checked += 1;
    }
    assert_eq!(checked, 2, "completeness and differences panels");
}

#[test]
fn grafana_prometheus_panels_use_exposed_metrics() {
    let exposed = exposed_sample_names();
    let exprs = prom_exprs(&dashboard());
    assert!(exprs.len() >= 5);
    for (title, expr) in exprs {
        assert!(
            !check_promql(&expr, &exposed, &title).is_empty(),
            "{title}: {expr}"
        );
    }
}

#[test]
fn grafana_panels_have_unique_ids_and_use_the_dashboard_data_sources() {
    let d = dashboard();
    let variables: BTreeSet<String> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "datasource")
        .map(|v| format!("${{{}}}", v["name"].as_str().unwrap()))
        .collect();
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        let id = p["id"].as_u64().unwrap();
        assert!(ids.insert(id), "panel id {id} twice");
        if p["type"] == "row" {
            continue;
        }
        let uid = p["datasource"]["uid"].as_str().unwrap();
        assert!(variables.contains(uid), "panel {id}: data source {uid}");
        for t in p["targets"].as_array().unwrap() {
            assert_eq!(t["datasource"], p["datasource"], "panel {id}");
        }
    }
}
