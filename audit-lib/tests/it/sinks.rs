//! Sinks: the spooling wrapper against a memory sink (outage, order, bound, restart,
//! corruption), and with features `http` / `kafka` the real clients.

use std::fs;

use audit_lib::{
    AuditMessage, Identity, MemorySink, Sink, SinkError, SpoolingSink, Window, WindowStats,
};

fn batch(n: usize, tag: i64) -> Vec<AuditMessage> {
    let id = Identity::new("producer", "dc1", "app-1");
    (0..n)
        .map(|i| {
            let stats = WindowStats {
                count: i as u64 + 1,
                ..WindowStats::default()
            };
            AuditMessage::increment(
                &id,
                format!("topic-{i}"),
                Window {
                    start_ms: 0,
                    end_ms: 600_000,
                },
                stats,
                tag,
            )
        })
        .collect()
}

#[test]
fn outage_spools_then_replays_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mem = MemorySink::new();
    let mut sink = SpoolingSink::new(mem.clone(), dir.path(), 1 << 20).unwrap();
    sink.send(&batch(2, 1)).unwrap();
    assert_eq!(sink.stats().pending_batches, 0);

    mem.set_available(false);
    sink.send(&batch(3, 2)).unwrap();
    sink.send(&batch(1, 3)).unwrap();
    assert_eq!(sink.stats().pending_batches, 2);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    assert_eq!(mem.messages().len(), 2);

    mem.set_available(true);
    sink.send(&batch(2, 4)).unwrap();
    let tags: Vec<i64> = mem.messages().iter().map(|m| m.emitted_at).collect();
    assert_eq!(
        tags,
        vec![1, 1, 2, 2, 2, 3, 4, 4],
        "replayed oldest first, before new data"
    );
    let s = sink.stats();
    assert_eq!(
        (
            s.pending_batches,
            s.pending_bytes,
            s.spooled_total,
            s.replayed_total
        ),
        (0, 0, 2, 2)
    );
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    // The UUIDs survive the spool: the collector can deduplicate a resend.
    let sent = batch(1, 9);
    mem.set_available(false);
    sink.send(&sent).unwrap();
    mem.set_available(true);
    assert_eq!(sink.replay().unwrap(), 1);
    assert_eq!(mem.messages().last().unwrap(), &sent[0]);
}

#[test]
fn spool_is_bounded_and_refuses_instead_of_dropping() {
    let dir = tempfile::tempdir().unwrap();
    let mem = MemorySink::new();
    mem.set_available(false);
    let one = serde_json::to_vec(&batch(4, 1)).unwrap().len() as u64;
    let mut sink = SpoolingSink::new(mem.clone(), dir.path(), one + one / 2).unwrap();
    sink.send(&batch(4, 1)).unwrap();
    let err = sink.send(&batch(4, 2)).unwrap_err();
    assert!(matches!(err, SinkError::SpoolFull { .. }), "{err}");
    assert!(err.to_string().contains("full"));
    assert_eq!(sink.stats().pending_batches, 1);
    mem.set_available(true);
    // Space frees up once the spool drains; the refused batch can then be sent.
    sink.send(&batch(4, 2)).unwrap();
    assert_eq!(mem.messages().len(), 8);
}

#[test]
fn spool_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mem = MemorySink::new();
    mem.set_available(false);
    {
        let mut sink = SpoolingSink::new(mem.clone(), dir.path(), 1 << 20).unwrap();
        sink.send(&batch(2, 1)).unwrap();
        sink.send(&batch(2, 2)).unwrap();
    }
    mem.set_available(true);
    let mut sink = SpoolingSink::new(mem.clone(), dir.path(), 1 << 20).unwrap();
    assert_eq!(sink.stats().pending_batches, 2);
    sink.send(&batch(1, 3)).unwrap();
    let tags: Vec<i64> = mem.messages().iter().map(|m| m.emitted_at).collect();
    assert_eq!(tags, vec![1, 1, 2, 2, 3]);
}

#[test]
fn corrupt_spool_files_are_set_aside_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mem = MemorySink::new();
    mem.set_available(false);
    let mut sink = SpoolingSink::new(mem.clone(), dir.path(), 1 << 20).unwrap();
    sink.send(&batch(1, 1)).unwrap();
    sink.send(&batch(1, 2)).unwrap();
    let mut files: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    fs::write(&files[0], b"{not json").unwrap();
    mem.set_available(true);
    let mut sink = SpoolingSink::new(mem.clone(), dir.path(), 1 << 20).unwrap();
    assert_eq!(sink.replay().unwrap(), 1);
    assert_eq!(sink.stats().corrupt_total, 1);
    assert_eq!(mem.messages().len(), 1);
    assert!(dir
        .path()
        .read_dir()
        .unwrap()
        .any(|e| e.unwrap().path().extension().unwrap() == "corrupt"));
}

#[cfg(feature = "http")]
mod http {
    //! Against a minimal HTTP/1.1 endpoint on a loopback port that records bodies and
    //! answers with a chosen status (the collector's contract seen from the wire).
    use super::*;
    use audit_lib::sink::HttpSink;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// (request target, body) of each request received.
    type Requests = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

    struct Endpoint {
        base: String,
        bodies: Requests,
        status: Arc<Mutex<u16>>,
        /// The Authorization header of each request ("" when absent).
        authorization: Arc<Mutex<Vec<String>>>,
    }

    fn endpoint() -> Endpoint {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        let bodies: Requests = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(Mutex::new(200u16));
        let authorization = Arc::new(Mutex::new(Vec::new()));
        let (b, s, a) = (bodies.clone(), status.clone(), authorization.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { return };
                let (b, s, a) = (b.clone(), s.clone(), a.clone());
                std::thread::spawn(move || {
                    let mut r = BufReader::new(conn.try_clone().unwrap());
                    let mut w = conn;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                        let mut len = 0usize;
                        let mut auth = String::new();
                        loop {
                            let mut h = String::new();
                            r.read_line(&mut h).unwrap();
                            if h == "\r\n" || h.is_empty() {
                                break;
                            }
                            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                len = v.trim().parse().unwrap();
                            }
                            if h.to_ascii_lowercase().starts_with("authorization:") {
                                auth = h["authorization:".len()..].trim().to_string();
                            }
                        }
                        a.lock().unwrap().push(auth);
                        let mut body = vec![0; len];
                        r.read_exact(&mut body).unwrap();
                        b.lock().unwrap().push((target, body));
                        let code = *s.lock().unwrap();
                        write!(w, "HTTP/1.1 {code} X\r\ncontent-length: 2\r\n\r\nno").unwrap();
                    }
                });
            }
        });
        Endpoint {
            base,
            bodies,
            status,
            authorization,
        }
    }

    #[test]
    fn sends_a_bearer_token_when_given_one() {
        let ep = endpoint();
        let dir = std::env::temp_dir().join(format!("audit-lib-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "t0k3n-from-a-secret-0123456789\n").unwrap();
        let mut plain = HttpSink::new(&ep.base, Duration::from_secs(5)).unwrap();
        plain.send(&batch(1, 1)).unwrap();
        let mut with = HttpSink::new(&ep.base, Duration::from_secs(5))
            .unwrap()
            .with_bearer_token_file(&file)
            .unwrap();
        with.send(&batch(1, 2)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            *ep.authorization.lock().unwrap(),
            vec![
                String::new(),
                "Bearer t0k3n-from-a-secret-0123456789".to_string()
            ]
        );
        // A refused token keeps the batch (retry or spool), it does not drop it.
        *ep.status.lock().unwrap() = 401;
        assert!(matches!(
            with.send(&batch(1, 3)),
            Err(SinkError::Unavailable(_))
        ));
    }

    #[test]
    fn posts_batches_as_a_json_array_to_the_collector_path() {
        let ep = endpoint();
        let mut sink = HttpSink::new(&ep.base, Duration::from_secs(5)).unwrap();
        let b = batch(3, 1);
        sink.send(&b).unwrap();
        sink.send(&batch(1, 2)).unwrap();
        let got = ep.bodies.lock().unwrap().clone();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, "/api/v1/audit");
        let parsed: Vec<AuditMessage> = serde_json::from_slice(&got[0].1).unwrap();
        assert_eq!(parsed, b);
    }

    #[test]
    fn https_without_the_tls_feature_is_refused_up_front() {
        let e = HttpSink::new("https://collector.example", Duration::from_secs(1))
            .err()
            .unwrap();
        assert!(e.to_string().contains("http-tls"), "{e}");
    }

    #[test]
    fn status_codes_map_to_retry_or_reject() {
        let ep = endpoint();
        let mut sink = HttpSink::new(&ep.base, Duration::from_secs(5)).unwrap();
        *ep.status.lock().unwrap() = 503;
        assert!(matches!(
            sink.send(&batch(1, 1)),
            Err(SinkError::Unavailable(_))
        ));
        *ep.status.lock().unwrap() = 400;
        let e = sink.send(&batch(1, 1)).unwrap_err();
        assert!(
            matches!(e, SinkError::Rejected(_)) && e.to_string().contains("400"),
            "{e}"
        );
    }

    #[test]
    fn collector_down_spools_and_replays_when_it_is_back() {
        // A port with nothing listening: bind, note, close.
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", l.local_addr().unwrap())
        };
        let dir = tempfile::tempdir().unwrap();
        let mut sink = SpoolingSink::new(
            HttpSink::new(&dead, Duration::from_secs(2)).unwrap(),
            dir.path(),
            1 << 20,
        )
        .unwrap();
        let lost_if_dropped = batch(2, 1);
        sink.send(&lost_if_dropped).unwrap();
        assert_eq!(sink.stats().pending_batches, 1);
        drop(sink);
        let ep = endpoint();
        let mut sink = SpoolingSink::new(
            HttpSink::new(&ep.base, Duration::from_secs(5)).unwrap(),
            dir.path(),
            1 << 20,
        )
        .unwrap();
        sink.send(&batch(1, 2)).unwrap();
        let got = ep.bodies.lock().unwrap().clone();
        assert_eq!(got.len(), 2);
        let first: Vec<AuditMessage> = serde_json::from_slice(&got[0].1).unwrap();
        assert_eq!(first, lost_if_dropped);
    }
}

#[cfg(feature = "kafka")]
mod kafka {
    //! Against librdkafka's mock cluster (allowed for sink tests: no transactions needed).
    use super::*;
    use audit_lib::sink::KafkaSink;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::mocking::MockCluster;
    use rdkafka::{ClientConfig, Message};
    use std::time::{Duration, Instant};

    fn consume(brokers: &str, topic: &str, want: usize) -> Vec<(String, AuditMessage)> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", "sink-test")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        c.subscribe(&[topic]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut out: Vec<(String, AuditMessage)> = Vec::new();
        let mut distinct = std::collections::HashSet::new();
        // Duplicates (at-least-once) do not count towards `want` distinct messages.
        while distinct.len() < want && Instant::now() < deadline {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
                let key = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
                let msg = AuditMessage::from_json(m.payload().unwrap()).unwrap();
                distinct.insert(msg.uuid);
                out.push((key, msg));
            }
        }
        out
    }

    #[test]
    fn publishes_keyed_by_audited_topic_and_spools_while_the_broker_is_down() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("audit", 1, 1).unwrap();
        let brokers = mock.bootstrap_servers();
        let dir = tempfile::tempdir().unwrap();
        let kafka = KafkaSink::with_brokers(&brokers, "audit", Duration::from_secs(3)).unwrap();
        let mut sink = SpoolingSink::new(kafka, dir.path(), 1 << 20).unwrap();

        let first = batch(2, 1);
        sink.send(&first).unwrap();
        assert_eq!(sink.stats().pending_batches, 0);

        mock.broker_down(1).unwrap();
        let during = batch(3, 2);
        sink.send(&during).unwrap();
        assert_eq!(
            sink.stats().pending_batches,
            1,
            "undeliverable batch must be spooled"
        );

        mock.broker_up(1).unwrap();
        // The producer needs a moment to reconnect (and, being idempotent, to recover
        // from the timed-out batch): replay as a producer would, with a bounded wait.
        let deadline = Instant::now() + Duration::from_secs(60);
        while sink.stats().pending_batches > 0 && Instant::now() < deadline {
            let _ = sink.replay();
        }
        assert_eq!(
            sink.stats().pending_batches,
            0,
            "spool replayed once the broker is back"
        );
        assert_eq!(sink.stats().replayed_total, 1);
        let after = batch(1, 3);
        sink.send(&after).unwrap();
        assert_eq!(sink.stats().pending_batches, 0);

        let got = consume(&brokers, "audit", 6);
        let mut uuids: Vec<_> = got.iter().map(|(_, m)| m.uuid).collect();
        uuids.sort();
        uuids.dedup();
        // At-least-once: a timed-out batch may have landed too; every message is there.
        let mut want: Vec<_> = first
            .iter()
            .chain(&during)
            .chain(&after)
            .map(|m| m.uuid)
            .collect();
        want.sort();
        assert_eq!(uuids, want);
        assert!(
            got.iter().all(|(k, m)| k == &m.topic),
            "key is the audited topic"
        );
    }
}
