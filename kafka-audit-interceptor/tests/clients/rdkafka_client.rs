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
//! kai-rdkafka-client consume BOOTSTRAP TOPIC GROUP EXPECTED TIMEOUT_S [PROP=VALUE...]
//! ```

use std::time::{Duration, Instant};

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
        c.set(k, v);
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
        Some("produce") if a.len() >= 8 => {
            let (topic, count): (&str, i64) = (&a[3], a[4].parse().unwrap());
            let (base, span): (i64, i64) = (a[5].parse().unwrap(), a[6].parse().unwrap());
            let partitions: i64 = a[7].parse().unwrap();
            let p: BaseProducer<Counted> = config(&a[2], &a[8..])
                .create_with_context(Counted::default())
                .unwrap_or_else(|e| fail("create", e));
            for i in 0..count {
                let key = format!("k{i}");
                let value = format!("{{\"id\":{i},\"ts\":{}}}", base + i * span / count);
                let mut record = BaseRecord::to(topic)
                    .key(&key)
                    .payload(&value)
                    .partition((i % partitions) as i32);
                loop {
                    match p.send(record) {
                        Ok(()) => break,
                        Err((_, r)) => {
                            record = r;
                            p.poll(Duration::from_millis(10));
                        }
                    }
                }
                p.poll(Duration::ZERO);
            }
            p.flush(Duration::from_secs(30)).ok();
            let c = p.context();
            let load =
                |x: &std::sync::atomic::AtomicU64| x.load(std::sync::atomic::Ordering::Relaxed);
            println!(
                "{}",
                serde_json::json!({ "delivered": load(&c.delivered), "failed": load(&c.failed) })
            );
        }
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
        _ => {
            eprintln!("usage: see tests/clients/rdkafka_client.rs");
            std::process::exit(2)
        }
    }
}
