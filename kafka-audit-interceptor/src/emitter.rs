//! Sending a client's reports: an audit producer created through the host's own
//! librdkafka (no second Kafka client in the process, and without this plugin on it),
//! publishing to the audit topic with `acks=all` and idempotence, at least once (the
//! collector deduplicates by UUID). What it cannot deliver waits in audit-lib's spool
//! (`kafka_audit.spool.dir`) or, without one, in a bounded memory backlog.
//!
//! Everything here runs on the client's emitter thread, never on the application's or
//! librdkafka's threads, so a slow or unreachable audit topic never slows `produce()`
//! or `poll()`.

use std::collections::VecDeque;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use audit_lib::{AuditMessage, Sink, SinkError, SpoolingSink};

use crate::counters::{self, COUNTERS};
use crate::host::{self, Host, Message, Rk, Rkt};

/// Audit messages kept in memory while they cannot be delivered (without a spool, or
/// with a full one); beyond it the oldest are dropped (`increments_dropped`).
pub const MAX_BACKLOG: usize = 100_000;
/// How long one send of reports may take (also the audit producer's
/// `message.timeout.ms`), the last one at the client's destroy included: long enough
/// for a first connection and the idempotent producer's id on a loaded machine (1 s
/// was not), short enough that an unreachable audit topic holds a closing
/// application only this long.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Audit messages per send.
const CHUNK: usize = 1_000;

/// Delivery reports of the audit producer (its `opaque`), written by its callback on
/// the emitter thread during `poll`/`flush`.
#[derive(Default)]
struct Deliveries {
    ok: AtomicU64,
    failed: AtomicU64,
    /// The last delivery error's code (0: none).
    last_error: AtomicI32,
}

unsafe extern "C" fn delivered(_rk: *mut Rk, msg: *const Message, opaque: *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: opaque is the Deliveries the producer was created with, alive until
        // after rd_kafka_destroy; msg is valid during the callback.
        let d = unsafe { &*opaque.cast::<Deliveries>() };
        // SAFETY: librdkafka's message, valid during the callback.
        let err = unsafe { (*msg).err };
        if err == host::NO_ERROR {
            d.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            d.failed.fetch_add(1, Ordering::Relaxed);
            d.last_error.store(err, Ordering::Relaxed);
        }
    });
}

/// audit-lib's Kafka sink over the host's librdkafka.
pub struct HostSink {
    host: Arc<Host>,
    /// The audit producer's properties (forced ones last).
    properties: Vec<(String, String)>,
    topic: CString,
    timeout: Duration,
    rk: *mut Rk,
    rkt: *mut Rkt,
    deliveries: Box<Deliveries>,
}

// Used only by the emitter thread that owns it.
// SAFETY: the raw handles are used by the emitter thread that owns the sink only.
unsafe impl Send for HostSink {}

impl HostSink {
    pub fn new(
        host: Arc<Host>,
        mut properties: Vec<(String, String)>,
        topic: &str,
        timeout: Duration,
    ) -> HostSink {
        for (k, v) in [
            ("acks", "all".to_string()),
            ("enable.idempotence", "true".to_string()),
            ("message.timeout.ms", timeout.as_millis().max(1).to_string()),
            ("linger.ms", "5".to_string()),
            ("client.id", "kafka-audit-interceptor".to_string()),
        ] {
            properties.retain(|(p, _)| p != k);
            properties.push((k.to_string(), v));
        }
        HostSink {
            host,
            properties,
            topic: CString::new(topic).expect("topic names were checked"),
            timeout,
            rk: std::ptr::null_mut(),
            rkt: std::ptr::null_mut(),
            deliveries: Box::default(),
        }
    }

    /// Creates the audit producer on first use (and after a failed creation).
    fn producer(&mut self) -> Result<(), SinkError> {
        if !self.rk.is_null() {
            return Ok(());
        }
        let h = &self.host;
        let mut errstr = [0u8; 512];
        // SAFETY: plain librdkafka calls on a conf this function owns until rd_kafka_new
        // takes it (or it is destroyed here).
        unsafe {
            let conf = (h.rd_kafka_conf_new)();
            for (k, v) in &self.properties {
                let (Ok(k), Ok(v)) = (CString::new(k.as_str()), CString::new(v.as_str())) else {
                    continue;
                };
                if (h.rd_kafka_conf_set)(
                    conf,
                    k.as_ptr(),
                    v.as_ptr(),
                    errstr.as_mut_ptr().cast(),
                    errstr.len(),
                ) != host::CONF_OK
                {
                    (h.rd_kafka_conf_destroy)(conf);
                    return Err(SinkError::Rejected(format!(
                        "audit producer property {}: {}",
                        k.to_string_lossy(),
                        c_text(&errstr)
                    )));
                }
            }
            (h.rd_kafka_conf_set_dr_msg_cb)(conf, delivered);
            (h.rd_kafka_conf_set_opaque)(
                conf,
                (&*self.deliveries as *const Deliveries).cast_mut().cast(),
            );
            let rk = (h.rd_kafka_new)(
                host::TYPE_PRODUCER,
                conf,
                errstr.as_mut_ptr().cast(),
                errstr.len(),
            );
            if rk.is_null() {
                (h.rd_kafka_conf_destroy)(conf);
                return Err(SinkError::Unavailable(format!(
                    "cannot create the audit producer: {}",
                    c_text(&errstr)
                )));
            }
            let rkt = (h.rd_kafka_topic_new)(rk, self.topic.as_ptr(), std::ptr::null_mut());
            if rkt.is_null() {
                (h.rd_kafka_destroy)(rk);
                return Err(SinkError::Unavailable(
                    "cannot create the audit topic handle".into(),
                ));
            }
            self.rk = rk;
            self.rkt = rkt;
        }
        Ok(())
    }
}

fn c_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl Sink for HostSink {
    fn send(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError> {
        self.producer()?;
        let h = self.host.clone();
        let ok0 = self.deliveries.ok.load(Ordering::Relaxed);
        let failed0 = self.deliveries.failed.load(Ordering::Relaxed);
        let deadline = Instant::now() + self.timeout;
        for m in batch {
            let payload = m.to_json();
            loop {
                // SAFETY: rkt is this producer's; COPY makes librdkafka own a copy.
                let r = unsafe {
                    (h.rd_kafka_produce)(
                        self.rkt,
                        host::PARTITION_UA,
                        host::MSG_F_COPY,
                        payload.as_ptr() as *mut c_void,
                        payload.len(),
                        m.topic.as_ptr().cast(),
                        m.topic.len(),
                        std::ptr::null_mut(),
                    )
                };
                if r == 0 {
                    break;
                }
                // SAFETY: reads this thread's last librdkafka error.
                let err = unsafe { (h.rd_kafka_last_error)() };
                // RD_KAFKA_RESP_ERR__QUEUE_FULL: back-pressure, serve deliveries.
                if err == host::ERR_QUEUE_FULL && Instant::now() < deadline {
                    // SAFETY: the audit producer this sink created and has not destroyed.
                    unsafe { (h.rd_kafka_poll)(self.rk, 10) };
                    continue;
                }
                return Err(SinkError::Unavailable(format!(
                    "cannot queue an audit message: {}",
                    h.err_str(err)
                )));
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // SAFETY: rk is this producer's.
        unsafe { (h.rd_kafka_flush)(self.rk, left.as_millis().min(i32::MAX as u128) as i32) };
        let ok = self.deliveries.ok.load(Ordering::Relaxed) - ok0;
        let failed = self.deliveries.failed.load(Ordering::Relaxed) - failed0;
        if failed > 0 || ok < batch.len() as u64 {
            let why = match self.deliveries.last_error.swap(0, Ordering::Relaxed) {
                host::NO_ERROR => "delivery not confirmed in time".to_string(),
                code => h.err_str(code),
            };
            return Err(SinkError::Unavailable(format!(
                "{failed} of {} audit messages to {} failed, {ok} confirmed: {why}",
                batch.len(),
                self.topic.to_string_lossy()
            )));
        }
        Ok(())
    }
}

impl Drop for HostSink {
    fn drop(&mut self) {
        if self.rk.is_null() {
            return;
        }
        // SAFETY: both handles are this producer's and destroyed once; undelivered
        // messages were already given up by `send` (they are in the backlog or spool).
        unsafe {
            (self.host.rd_kafka_topic_destroy)(self.rkt);
            (self.host.rd_kafka_destroy)(self.rk);
        }
    }
}

/// Where reports go: the sink (spooling or not) and what waits in memory.
pub struct Outbox {
    sink: Target,
    backlog: VecDeque<AuditMessage>,
}

enum Target {
    Direct(HostSink),
    Spooled(SpoolingSink<HostSink>, audit_lib::SpoolStats),
}

impl Outbox {
    /// An outbox over the sink `make` builds, spooling to `spool` (dir, bound) when
    /// given and usable.
    pub fn new(make: impl Fn() -> HostSink, spool: Option<(std::path::PathBuf, u64)>) -> Outbox {
        let sink = match spool {
            None => Target::Direct(make()),
            Some((dir, max)) => match SpoolingSink::new(make(), &dir, max) {
                Ok(s) => {
                    let stats = s.stats();
                    Target::Spooled(s, stats)
                }
                Err(e) => {
                    counters::report_error(format!(
                        "spool {} unusable, reports wait in memory instead: {e}",
                        dir.display()
                    ));
                    Target::Direct(make())
                }
            },
        };
        Outbox {
            sink,
            backlog: VecDeque::new(),
        }
    }

    /// Sends `batch` after what waits, oldest first, until the sink fails.
    pub fn deliver(&mut self, batch: Vec<AuditMessage>) {
        counters::add(&COUNTERS.backlog, batch.len() as u64);
        self.backlog.extend(batch);
        if self.backlog.len() > MAX_BACKLOG {
            let n = self.backlog.len() - MAX_BACKLOG;
            self.backlog.drain(..n);
            counters::add(&COUNTERS.increments_dropped, n as u64);
            counters::sub(&COUNTERS.backlog, n as u64);
        }
        while !self.backlog.is_empty() {
            let n = self.backlog.len().min(CHUNK);
            let chunk: Vec<AuditMessage> = self.backlog.range(..n).cloned().collect();
            let result = match &mut self.sink {
                Target::Direct(s) => s.send(&chunk),
                Target::Spooled(s, _) => s.send(&chunk),
            };
            self.spool_counters();
            match result {
                Ok(()) => {
                    self.backlog.drain(..n);
                    counters::sub(&COUNTERS.backlog, n as u64);
                    counters::add(&COUNTERS.increments_sent, n as u64);
                }
                Err(e) if e.is_retriable() || matches!(e, SinkError::SpoolFull { .. }) => {
                    counters::add(&COUNTERS.send_failures, 1);
                    counters::report_error(format!(
                        "audit messages wait ({} in memory): {e}",
                        self.backlog.len()
                    ));
                    return;
                }
                Err(e) => {
                    // Refused for good (too large, not authorised, spool I/O): dropping
                    // it is the only way the next reports get through.
                    self.backlog.drain(..n);
                    counters::sub(&COUNTERS.backlog, n as u64);
                    counters::add(&COUNTERS.increments_dropped, n as u64);
                    counters::report_error(format!("{n} audit messages dropped: {e}"));
                }
            }
        }
    }

    fn spool_counters(&mut self) {
        if let Target::Spooled(s, last) = &mut self.sink {
            let now = s.stats();
            counters::add(&COUNTERS.spooled, now.spooled_total - last.spooled_total);
            counters::add(&COUNTERS.replayed, now.replayed_total - last.replayed_total);
            *last = now;
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        if !self.backlog.is_empty() {
            let n = self.backlog.len() as u64;
            counters::sub(&COUNTERS.backlog, n);
            counters::add(&COUNTERS.increments_dropped, n);
            counters::report_error(format!(
                "{n} audit messages could not be delivered before the client closed: their counts are lost"
            ));
        }
    }
}
