//! The rust-rdkafka test client: a BaseProducer or BaseConsumer with the properties of
//! the command line, the way a rust-rdkafka application loads the plugin (its program
//! exports librdkafka's `rd_kafka_*` functions: build.rs).
//!
//! rust-rdkafka's ClientConfig applies properties in HashMap order, so a `kafka_audit.*`
//! property often reaches librdkafka before `plugin.library.paths` and is refused;
//! the plugin's own settings then come from the file `KAFKA_AUDIT_INTERCEPTOR_PROPERTIES`
//! names (the README's rust-rdkafka section).
//!
//! ```text
//! kai-rdkafka-client produce BOOTSTRAP TOPIC COUNT BASE_MS SPAN_MS PARTITIONS [PROP=VALUE...]
//!   kai.size=S         values of S bytes (a "pad" field fills them up)
//!   kai.rate=R         R messages a second (default: as fast as send() takes them),
//!                      each send() call timed (produce_p50_ns, produce_p99_ns; else 0)
//!   kai.broker_pid=P   also report the CPU time process P spent meanwhile
//! kai-rdkafka-client consume BOOTSTRAP TOPIC GROUP EXPECTED TIMEOUT_S [PROP=VALUE...]
//! kai-rdkafka-client harm BOOTSTRAP failed-new [PROP=VALUE...]
//! ```

use std::time::{Duration, Instant};

#[path = "accounting.rs"]
mod accounting;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

#[derive(Default)]
struct Counted {
    delivered: std::sync::atomic::AtomicU64,
    failed: std::sync::atomic::AtomicU64,
}
impl ClientContext for Counted {}
impl ProducerContext for Counted {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        let c = if r.is_ok() {
            &self.delivered
        } else {
            &self.failed
        };
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn config(bootstrap: &str, props: &[String]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    for p in props {
        let (k, v) = p.split_once('=').expect("PROP=VALUE");
        if !k.starts_with("kai.") {
            c.set(k, v); // kai.*: this program's own options
        }
    }
    c
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    println!("{}", serde_json::json!({ "error": format!("{what}: {e}") }));
    std::process::exit(2)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("produce") if a.len() >= 8 => produce(&a),
        Some("consume") if a.len() >= 7 => {
            let mut props = vec![
                "auto.offset.reset=earliest".to_string(),
                format!("group.id={}", a[4]),
            ];
            props.extend(a[7..].iter().cloned());
            let expected: u64 = a[5].parse().unwrap();
            let until = Instant::now() + Duration::from_secs(a[6].parse().unwrap());
            let c: BaseConsumer = config(&a[2], &props)
                .create()
                .unwrap_or_else(|e| fail("create", e));
            c.subscribe(&[a[3].as_str()])
                .unwrap_or_else(|e| fail("subscribe", e));
            let mut consumed = 0u64;
            while consumed < expected && Instant::now() < until {
                if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
                    let _ = m.offset();
                    consumed += 1;
                }
            }
            c.unsubscribe();
            drop(c);
            println!("{}", serde_json::json!({ "consumed": consumed }));
        }
        // As client.c's `harm failed-new`: rust-rdkafka keeps the configuration of a
        // client whose creation failed (it never destroys it), so the plugin's
        // instance on it is never closed.
        Some("harm") if a.len() >= 4 && a[3] == "failed-new" => {
            let threads = || std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count());
            let before = threads();
            let created: Result<BaseProducer, _> = config(&a[2], &a[4..]).create();
            println!(
                "{}",
                serde_json::json!({
                    "created": created.is_ok(),
                    "error": created.err().map(|e| e.to_string()),
                    "threads_before": before,
                    "threads_after": threads(),
                })
            );
        }
        _ => {
            eprintln!("usage: see tests/clients/rdkafka_client.rs");
            std::process::exit(2)
        }
    }
}

fn option<'a>(props: &'a [String], name: &str) -> Option<&'a str> {
    props
        .iter()
        .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
}

/// Message i as the C client writes it, into `out` (reused: the producer's own work,
/// not the formatting, is what the benchmark compares): JSON with its id and event
/// time, padded to `size` bytes by a "pad" field cut from `zeros`.
fn write_value(out: &mut String, i: i64, ts: i64, size: usize, zeros: &str) {
    use std::fmt::Write;
    out.clear();
    write!(out, "{{\"id\":{i},\"ts\":{ts}}}").expect("a String takes it");
    if size > out.len() + 10 && size <= zeros.len() {
        let pad = size - out.len() - 9; // ,"pad":""
        out.pop();
        out.push_str(",\"pad\":\"");
        out.push_str(&zeros[..pad]);
        out.push_str("\"}");
    }
}

/// The same output as the C client's produce (client.c), for bench/interceptor.sh.
fn produce(a: &[String]) {
    use std::fmt::Write;
    let (topic, count): (&str, i64) = (&a[3], a[4].parse().unwrap());
    let (base, span): (i64, i64) = (a[5].parse().unwrap(), a[6].parse().unwrap());
    let partitions: i64 = a[7].parse().unwrap();
    let props = &a[8..];
    let size: usize = option(props, "kai.size").map_or(0, |s| s.parse().unwrap());
    let rate: f64 = option(props, "kai.rate").map_or(0.0, |s| s.parse().unwrap());
    let broker_pid: u32 = option(props, "kai.broker_pid").map_or(0, |s| s.parse().unwrap());
    let p: BaseProducer<Counted> = config(&a[2], props)
        .create_with_context(Counted::default())
        .unwrap_or_else(|e| fail("create", e));
    // send() calls are timed when paced only, as in the C client.
    let mut call_ns: Vec<u64> = Vec::with_capacity(if rate > 0.0 { count as usize } else { 0 });
    let (mut key, mut value, zeros) = (String::new(), String::new(), "0".repeat(4095));
    let before = accounting::Snapshot::take(broker_pid);
    let started = Instant::now();
    for i in 0..count {
        if rate > 0.0 && i % 64 == 0 {
            let due = started + Duration::from_secs_f64(i as f64 / rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        key.clear();
        write!(key, "k{i}").expect("a String takes it");
        write_value(&mut value, i, base + i * span / count, size, &zeros);
        let mut record = BaseRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition((i % partitions) as i32);
        let t0 = (rate > 0.0).then(Instant::now);
        loop {
            match p.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    p.poll(Duration::from_millis(10));
                }
            }
        }
        if let Some(t0) = t0 {
            call_ns.push(t0.elapsed().as_nanos() as u64);
        }
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(30)).ok();
    let seconds = started.elapsed().as_secs_f64();
    let after = accounting::Snapshot::take(broker_pid);
    call_ns.sort_unstable();
    let at = |q: usize| call_ns.get(call_ns.len() * q / 100).copied().unwrap_or(0);
    let c = p.context();
    let load = |x: &std::sync::atomic::AtomicU64| x.load(std::sync::atomic::Ordering::Relaxed);
    let mut out = serde_json::json!({
        "delivered": load(&c.delivered),
        "failed": load(&c.failed),
        "seconds": seconds,
        "produce_calls": call_ns.len(),
        "produce_p50_ns": at(50),
        "produce_p99_ns": at(99),
    });
    drop(p);
    accounting::difference(&before, &after, &mut out);
    println!("{out}");
}
