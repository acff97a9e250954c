//! `kafka-audit demo` end to end: the real binary, embedded clusters, real auditors,
//! collector and web service. The replicator records what it injected per topic and
//! window; every settled window's verdict and difference must match that record
//! exactly, and ctrl-c must stop the whole demo cleanly.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

const WINDOW_S: i64 = 10;

#[derive(Deserialize, Debug, Clone)]
struct Injected {
    topic: String,
    window_start: i64,
    dropped: u64,
    duplicated: u64,
    forwarded: u64,
    delayed: u64,
}

/// Kills the demo if the test fails before stopping it.
struct Demo(Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn read_injections(path: &Path) -> BTreeMap<(String, i64), Injected> {
    let Ok(bytes) = std::fs::read(path) else {
        return BTreeMap::new();
    };
    let list: Vec<Injected> = serde_json::from_slice(&bytes).expect("injections file is JSON");
    list.into_iter()
        .map(|i| ((i.topic.clone(), i.window_start), i))
        .collect()
}

async fn compare(
    client: &reqwest::Client,
    base: &str,
    topic: &str,
    from: i64,
    to: i64,
) -> Vec<Value> {
    let url = format!("{base}/api/v1/topics/{topic}/compare?from={from}&to={to}");
    let resp = client.get(&url).send().await.expect("compare request");
    assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
    let body: Value = resp.json().await.expect("compare JSON");
    body["edges"].as_array().expect("edges array").clone()
}

/// Final windows of one edge that carried traffic, by window start.
fn final_windows<'a>(
    edges: &'a [Value],
    upstream: &str,
    downstream: &str,
) -> BTreeMap<i64, &'a Value> {
    edges
        .iter()
        .filter(|e| e["upstream"] == upstream && e["downstream"] == downstream)
        .filter(|e| e["lifecycle"] == "final")
        .filter(|e| {
            e["expected"].as_u64().unwrap_or(0) > 0 || e["observed"].as_u64().unwrap_or(0) > 0
        })
        .map(|e| (e["window_start"].as_i64().expect("window_start"), e))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_detects_injected_loss_and_duplication_in_the_right_windows() {
    let _alone = crate::ALONE.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let injections = dir.path().join("injections.json");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
        .args(["demo", "--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--window",
            &format!("{WINDOW_S}s"),
            "--grace",
            "8s",
            "--rate",
            "300",
        ])
        .args(["--loss", "0.05", "--duplication", "0.03", "--delay", "3s"])
        .arg("--dir")
        .arg(dir.path().join("demo"))
        .arg("--injections")
        .arg(&injections)
        // A bound in case the test process dies without killing it.
        .args(["--duration", "300s"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawning kafka-audit demo");
    let mut demo = Demo(child);
    let client = reqwest::Client::new();
    let from = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64)
        / 1000
        * 1000
        - 60_000;

    // Wait (bounded) until a lossy payments window and a duplicated clicks window have
    // settled: the detection needs window end + grace, and the auditors' progress.
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut first_verdict = None;
    let (payments, clicks, orders) = loop {
        assert!(
            demo.0.try_wait().expect("demo status").is_none(),
            "the demo exited early"
        );
        assert!(
            Instant::now() < deadline,
            "no settled lossy and duplicated windows within 180 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let to = from + 600_000;
        // Ready: serve has learned the window size from the first stored window (the
        // demo's serve.toml leaves [topology] window to the auditors) and evaluated.
        let Ok(resp) = client.get(format!("{base}/readyz")).send().await else {
            continue;
        };
        if !resp.status().is_success() {
            continue;
        }
        let injected = read_injections(&injections);
        let p = compare(&client, &base, "payments", from, to).await;
        let c = compare(&client, &base, "clicks", from, to).await;
        let o = compare(&client, &base, "orders", from, to).await;
        if first_verdict.is_none()
            && p.iter()
                .chain(&c)
                .any(|e| e["lifecycle"] == "final" && e["expected"].as_u64() > Some(0))
        {
            first_verdict = Some(started.elapsed());
        }
        let lossy_final = final_windows(&p, "regional", "aggregate").keys().any(|w| {
            injected
                .get(&("payments".to_string(), *w))
                .is_some_and(|i| i.dropped > 0)
        });
        let dup_final = final_windows(&c, "regional", "aggregate").keys().any(|w| {
            injected
                .get(&("clicks".to_string(), *w))
                .is_some_and(|i| i.duplicated > 0)
        });
        if lossy_final && dup_final {
            break (p, c, o);
        }
    };
    eprintln!(
        "first final verdict after {:?}; lossy and duplicated windows settled after {:?}",
        first_verdict.unwrap_or_default(),
        started.elapsed()
    );
    let injected = read_injections(&injections);

    // Every settled window with traffic: the verdict and the difference between the
    // regional and aggregate tiers are exactly what the replicator did.
    let mut checked = BTreeMap::<&str, (u32, u32)>::new();
    for (topic, edges) in [
        ("payments", &payments),
        ("clicks", &clicks),
        ("orders", &orders),
    ] {
        for (start, e) in final_windows(edges, "regional", "aggregate") {
            let inj = injected
                .get(&(topic.to_string(), start))
                .unwrap_or_else(|| {
                    panic!("{topic} window {start} has traffic but no injection record: {e}")
                });
            let difference = e["difference"].as_i64().expect("difference");
            let verdict = e["verdict"].as_str().expect("verdict");
            assert_eq!(
                difference,
                inj.duplicated as i64 - inj.dropped as i64,
                "{topic} window {start}: difference vs injected {inj:?}: {e}"
            );
            assert_eq!(
                e["expected"].as_u64(),
                Some(inj.forwarded + inj.dropped + inj.duplicated + inj.delayed),
                "{topic} window {start}: regional count vs what the replicator read: {e}"
            );
            let want = if inj.dropped > 0 {
                "loss"
            } else if inj.duplicated > 0 {
                "duplication"
            } else {
                "ok"
            };
            assert_eq!(verdict, want, "{topic} window {start}: {e}");
            let c = checked.entry(topic).or_default();
            if want == "ok" {
                c.0 += 1;
            } else {
                c.1 += 1;
            }
            if topic == "orders" {
                // Held back 3 s by the replicator: the aggregate tier sees it.
                let p50 = e["downstream_latency"]["p50_ms"].as_f64().unwrap_or(0.0);
                assert!(
                    p50 >= 2_900.0,
                    "orders window {start}: aggregate p50 {p50} ms, expected ≥ 3 s: {e}"
                );
            }
        }
        // The producer → regional hop is faultless.
        for (start, e) in final_windows(edges, "producer", "regional") {
            assert_eq!(
                e["verdict"], "ok",
                "{topic} window {start} producer → regional: {e}"
            );
            assert_eq!(
                e["difference"], 0,
                "{topic} window {start} producer → regional: {e}"
            );
        }
    }
    eprintln!("checked windows (clean, faulty): {checked:?}");
    assert!(
        checked.get("payments").is_some_and(|c| c.1 >= 1),
        "no lossy payments window checked"
    );
    assert!(
        checked.get("clicks").is_some_and(|c| c.1 >= 1),
        "no duplicated clicks window checked"
    );
    assert!(
        checked.values().map(|c| c.0).sum::<u32>() >= 2,
        "too few clean windows checked: {checked:?}"
    );

    // The anomalies endpoint (fed by the periodic evaluation) lists them too.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp: Value = client
            .get(format!(
                "{base}/api/v1/anomalies?from={from}&to={}",
                from + 600_000
            ))
            .send()
            .await
            .expect("anomalies request")
            .json()
            .await
            .expect("anomalies JSON");
        let kinds: Vec<(String, String)> = resp["anomalies"]
            .as_array()
            .expect("anomalies array")
            .iter()
            .map(|a| {
                (
                    a["topic"].as_str().unwrap_or("").to_string(),
                    a["verdict"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let has = |t: &str, v: &str| kinds.iter().any(|(a, b)| a == t && b == v);
        if has("payments", "loss") && has("clicks", "duplication") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "anomalies lack payments loss or clicks duplication: {kinds:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // ctrl-c stops everything cleanly.
    let pid = demo.0.id().to_string();
    let status = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(s) = demo.0.try_wait().expect("demo status") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not stop within 30 s of SIGINT"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "the demo exited with {exit} after SIGINT");
}
