//! The audited client a plugin instance becomes at `on_new` (`plugin.rs` has the
//! callbacks and librdkafka's rules for them): its in-memory windows, the observation
//! of each acknowledged, consumed or committed message, and the emitter thread that
//! reports them through a separate audit producer.

use std::ffi::{c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use audit_lib::{
    Aggregator, AuditMessage, CompiledConfig, EventTimeConfig, HeaderLookup, Identity, Limits,
    Observation, RecordTimestamp, TimestampType,
};

use crate::counters::{self, COUNTERS};
use crate::emitter::{HostSink, Outbox, SEND_TIMEOUT};
use crate::host::{self, Conf, Host, Message, Rk, TopicPartitionList};
use crate::settings::{Settings, PREFIX};
use crate::uncommitted::{Uncommitted, MAX_UNCOMMITTED};

/// The in-memory windows of one client, and what its consumer tier keeps uncommitted.
struct Counting {
    aggregator: Aggregator,
    uncommitted: Uncommitted,
    /// Since the last report: acknowledged, delivery failures, consumed, committed.
    tally: [u64; 4],
}

/// An audited client.
pub struct Client {
    host: Arc<Host>,
    /// The process that created the client: in any other (a forked child) the plugin
    /// does nothing.
    owner: libc::pid_t,
    pub(crate) producer: bool,
    /// Header names of the event-time rules (looked up only when a rule has one).
    identity: Identity,
    config: CompiledConfig,
    counting: Mutex<Counting>,
    report_interval: Duration,
    stop: (Mutex<bool>, Condvar),
    /// Whether the emitter thread was started, or tried (the fast path of
    /// `ensure_emitter`).
    started: AtomicBool,
    /// What the emitter needs, until it is started; then its thread.
    emitter: Mutex<Emitter>,
}

/// The emitter of a client: started with the client's first count, not at `on_new`,
/// so that a client whose `rd_kafka_new` then fails (or that never counts anything)
/// leaves no thread behind.
enum Emitter {
    Planned(EmitterPlan),
    Running(std::thread::JoinHandle<()>),
    Done,
}

/// The audit producer's properties, the audit topic and the spool (directory, bound).
struct EmitterPlan {
    properties: Vec<(String, String)>,
    topic: String,
    spool: Option<(std::path::PathBuf, u64)>,
}

/// Client properties the audit producer inherits when it writes to the client's own
/// cluster (no `kafka_audit.bootstrap.servers`): where and how to connect.
const INHERITED: &[&str] = &[
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.kerberos.service.name",
    "sasl.kerberos.principal",
    "sasl.kerberos.keytab",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.extensions",
    "ssl.ca.location",
    "ssl.ca.pem",
    "ssl.certificate.location",
    "ssl.certificate.pem",
    "ssl.key.location",
    "ssl.key.pem",
    "ssl.key.password",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
    "client.dns.lookup",
    "broker.address.family",
];

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name: String = String::from_utf8_lossy(&buf[..end])
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    if ok && !name.is_empty() {
        name
    } else {
        "unknown-host".into()
    }
}

impl Client {
    /// The client `rk` of configuration `conf`, audited with `settings`; its emitter
    /// thread starts with its first count (`ensure_emitter`).
    pub(crate) fn start(
        host: Arc<Host>,
        rk: *mut Rk,
        conf: *const Conf,
        settings: Settings,
    ) -> Result<Arc<Client>, String> {
        let Some(datacenter) = settings.datacenter.clone() else {
            return Err(format!(
                "{PREFIX}datacenter is required (the datacenter this client's counts are reported for); this client is not audited"
            ));
        };
        // SAFETY: rd_kafka_type only reads the handle.
        let producer = unsafe { (host.rd_kafka_type)(rk) } == host::TYPE_PRODUCER;
        let tier = settings
            .tier
            .clone()
            .unwrap_or_else(|| if producer { "producer" } else { "consumer" }.into());
        let config = match &settings.event_time {
            Some((_, c)) => c.clone(),
            None => EventTimeConfig::default()
                .compile()
                .map_err(|e| format!("default event-time config: {e}"))?,
        };
        // SAFETY: getpid cannot fail.
        let owner = unsafe { libc::getpid() };
        let identity = Identity::new(tier, datacenter, format!("{}:{owner}", hostname()));
        let mut properties = Vec::new();
        match &settings.bootstrap_servers {
            Some(b) => properties.push(("bootstrap.servers".to_string(), b.clone())),
            None => {
                // Only what the client's security.protocol uses (librdkafka warns
                // about SASL settings without SASL, and they would be its defaults).
                let protocol = host
                    .conf_get(conf, "security.protocol")
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                for name in INHERITED {
                    let used = if name.starts_with("sasl.") {
                        protocol.contains("sasl")
                    } else if name.starts_with("ssl.") {
                        protocol.contains("ssl")
                    } else {
                        true
                    };
                    if let Some(v) = used.then(|| host.conf_get(conf, name)).flatten() {
                        properties.push((name.to_string(), v));
                    }
                }
            }
        }
        properties.extend(settings.producer.iter().cloned());
        let report_interval = Duration::from_millis(settings.report_interval_ms());
        let plan = EmitterPlan {
            properties,
            topic: settings.audit_topic().to_string(),
            spool: settings
                .spool_dir
                .as_ref()
                .map(|d| (d.clone(), settings.spool_max_bytes())),
        };
        let client = Arc::new(Client {
            host,
            owner,
            producer,
            counting: Mutex::new(Counting {
                aggregator: Aggregator::with_compiled(
                    identity.clone(),
                    config.clone(),
                    Limits::default(),
                ),
                uncommitted: Uncommitted::new(MAX_UNCOMMITTED),
                tally: [0; 4],
            }),
            identity,
            config,
            report_interval,
            stop: (Mutex::new(false), Condvar::new()),
            started: AtomicBool::new(false),
            emitter: Mutex::new(Emitter::Planned(plan)),
        });
        counters::add(&COUNTERS.clients_active, 1);
        Ok(client)
    }

    /// Starts the emitter thread unless it runs already, the client was shut down, or
    /// this is a forked child (whose counts are not its own to report). Called with
    /// every count; after the first, one atomic load.
    fn ensure_emitter(self: &Arc<Self>) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let mut emitter = self.emitter.lock().unwrap_or_else(|p| p.into_inner());
        let stopped = *self.stop.0.lock().unwrap_or_else(|p| p.into_inner());
        if stopped || !self.owned() {
            return;
        }
        let Emitter::Planned(plan) = std::mem::replace(&mut *emitter, Emitter::Done) else {
            return;
        };
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("kafka-audit".into())
            .spawn(move || {
                let h = me.host.clone();
                let EmitterPlan {
                    properties,
                    topic,
                    spool,
                } = plan;
                // The slot's lock is held while the emitter runs, and released when it
                // has made its last report (the next client of the process takes it).
                let (spool, _slot_lock) = match spool {
                    Some((dir, max)) => {
                        let (slot, lock) = slot_dir(&dir, &me.identity);
                        (Some((slot, max)), lock)
                    }
                    None => (None, None),
                };
                let outbox = Outbox::new(
                    || HostSink::new(h.clone(), properties.clone(), &topic, SEND_TIMEOUT),
                    spool,
                );
                me.run(outbox)
            });
        match spawned {
            Ok(thread) => *emitter = Emitter::Running(thread),
            // Tried once: a process that cannot start a thread has worse problems, and
            // the counts are then only in the stats (`clients_unaudited`).
            Err(e) => {
                counters::add(&COUNTERS.clients_unaudited, 1);
                counters::report_error(format!(
                    "cannot start the report thread: {e}; this client's counts are not reported"
                ));
            }
        }
        self.started.store(true, Ordering::Release);
    }

    pub(crate) fn owned(&self) -> bool {
        // SAFETY: getpid cannot fail.
        (unsafe { libc::getpid() }) == self.owner
    }

    /// The emitter thread: a report every interval, and the last one when stopped.
    fn run(&self, mut outbox: Outbox) {
        let (lock, cvar) = &self.stop;
        loop {
            let stopped = {
                let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = cvar
                    .wait_timeout_while(guard, self.report_interval, |stop| !*stop)
                    .unwrap_or_else(|p| p.into_inner());
                *guard
            };
            if stopped {
                // The client is gone: what is still uncommitted will be read again by
                // whoever reads the partitions next.
                self.lock().uncommitted.discard_all();
            }
            let report = self.take_report();
            outbox.deliver(report);
            if stopped {
                break;
            }
        }
    }

    /// The group's assignment changed (a SyncGroup or consumer-group heartbeat
    /// response): see `Uncommitted::assignment_changed`.
    pub(crate) fn assignment_changed(&self) {
        self.lock().uncommitted.assignment_changed();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counting> {
        self.counting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Everything counted since the last report, as audit messages. The windows are
    /// swapped out under the lock and drained outside it, so the message callbacks
    /// wait for a pointer swap, not for the report.
    fn take_report(&self) -> Vec<AuditMessage> {
        let fresh = Aggregator::with_compiled(
            self.identity.clone(),
            self.config.clone(),
            Limits::default(),
        );
        let (mut full, tally, discarded) = {
            let mut c = self.lock();
            let full = std::mem::replace(&mut c.aggregator, fresh);
            let discarded = c.uncommitted.take_discarded();
            (full, std::mem::take(&mut c.tally), discarded)
        };
        counters::add(&COUNTERS.acknowledged, tally[0]);
        counters::add(&COUNTERS.delivery_failed, tally[1]);
        counters::add(&COUNTERS.consumed, tally[2]);
        counters::add(&COUNTERS.committed, tally[3]);
        counters::add(&COUNTERS.uncommitted_discarded, discarded.0);
        counters::add(&COUNTERS.uncommitted_overflow, discarded.1);
        full.drain(crate::now_ms())
    }

    /// Stops the emitter after its last report and waits for it.
    pub(crate) fn shutdown(&self) {
        {
            let (lock, cvar) = &self.stop;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cvar.notify_all();
        }
        let emitter = std::mem::replace(
            &mut *self.emitter.lock().unwrap_or_else(|p| p.into_inner()),
            Emitter::Done,
        );
        if let Emitter::Running(t) = emitter {
            if t.join().is_err() {
                counters::report_error(
                    "the report thread panicked; its last report is lost".into(),
                );
            }
        }
        counters::sub(&COUNTERS.clients_active, 1);
    }

    /// The observation of `msg` at `now`, handed to `f`.
    fn observe<T>(&self, msg: &Message, f: impl FnOnce(&Observation<'_>) -> T) -> Option<T> {
        // SAFETY: a message's topic handle and its name live as long as the message.
        let topic = unsafe { CStr::from_ptr((self.host.rd_kafka_topic_name)(msg.rkt)) };
        let topic = topic.to_str().ok()?;
        let mut kind: c_int = 0;
        // SAFETY: reads the message's timestamp.
        let ts = unsafe { (self.host.rd_kafka_message_timestamp)(msg, &mut kind) };
        let kind = match kind {
            host::TIMESTAMP_CREATE_TIME => Some(TimestampType::CreateTime),
            host::TIMESTAMP_LOG_APPEND_TIME => Some(TimestampType::LogAppendTime),
            _ => None,
        };
        let record_timestamp = kind
            .filter(|_| ts >= 0)
            .map(|kind| RecordTimestamp { ms: ts, kind });
        let slice = |p: *mut c_void, len: usize| {
            // SAFETY: librdkafka's pointer and length of the key or payload.
            (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
        };
        let headers = MessageHeaders {
            host: &self.host,
            msg,
        };
        let obs = Observation {
            topic,
            partition: msg.partition,
            offset: msg.offset,
            key: slice(msg.key, msg.key_len),
            value: slice(msg.payload, msg.len),
            headers: &headers,
            record_timestamp,
            observed_at_ms: crate::observed_at_ms(),
        };
        Some(f(&obs))
    }

    pub(crate) fn acknowledged(self: &Arc<Self>, msg: &Message) {
        self.ensure_emitter();
        let ok = msg.err == host::NO_ERROR;
        self.observe(msg, |obs| {
            let mut c = self.lock();
            if ok {
                c.aggregator.record(obs);
                c.tally[0] += 1;
            } else {
                c.aggregator.record_delivery_failure(obs);
                c.tally[1] += 1;
            }
        });
    }

    /// A message refused before librdkafka queued it, of which the plugin was handed
    /// the application's own struct (see `plugin::librdkafka_owns`): counted apart,
    /// nothing of it read.
    pub(crate) fn refused_unattributed(&self) {
        counters::add(&COUNTERS.refused_unattributed, 1);
    }

    pub(crate) fn consumed(self: &Arc<Self>, msg: &Message) {
        if msg.err != host::NO_ERROR {
            return; // an event (end of partition, an error), not a message
        }
        self.ensure_emitter();
        self.observe(msg, |obs| {
            let mut c = self.lock();
            let (index, counted) = c.aggregator.observe(obs);
            c.uncommitted
                .consumed(obs.topic, obs.partition, index, counted);
            c.tally[2] += 1;
        });
    }

    pub(crate) fn committed(self: &Arc<Self>, offsets: &TopicPartitionList) {
        if offsets.elems.is_null() || offsets.cnt <= 0 {
            return;
        }
        self.ensure_emitter();
        // SAFETY: librdkafka's list of `cnt` elements, valid during the callback.
        let elems = unsafe { std::slice::from_raw_parts(offsets.elems, offsets.cnt as usize) };
        let mut c = self.lock();
        let Counting {
            aggregator,
            uncommitted,
            tally,
        } = &mut *c;
        for tp in elems {
            if tp.err != host::NO_ERROR || tp.offset < 0 || tp.topic.is_null() {
                continue;
            }
            // SAFETY: a NUL-terminated topic name.
            let Ok(topic) = unsafe { CStr::from_ptr(tp.topic) }.to_str() else {
                continue;
            };
            tally[3] += uncommitted.committed(topic, tp.partition, tp.offset, |index, counted| {
                aggregator.add_counted(topic, index, counted)
            });
        }
    }
}

/// The spool directory of this client: `<spool.dir>/<tier>-<n>`, the first slot no
/// live client holds (an exclusive lock on its `.lock` file, returned: the slot is the
/// client's while the file is open). A restarted application takes its slots again
/// and replays what its predecessor spooled; so does the next client of a process.
/// Without a free slot: `<tier>-<host:pid>`, unlocked.
fn slot_dir(
    dir: &std::path::Path,
    identity: &Identity,
) -> (std::path::PathBuf, Option<std::fs::File>) {
    use std::os::fd::AsRawFd;
    for n in 0..1024 {
        let slot = dir.join(format!("{}-{n}", identity.tier));
        if std::fs::create_dir_all(&slot).is_err() {
            break;
        }
        let Ok(lock) = std::fs::File::create(slot.join(".lock")) else {
            break;
        };
        // SAFETY: flock on a file we opened.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return (slot, Some(lock));
        }
    }
    (
        dir.join(format!("{}-{}", identity.tier, identity.host)),
        None,
    )
}

/// Header lookup through librdkafka (only called when a rule names a header).
struct MessageHeaders<'a> {
    host: &'a Host,
    msg: &'a Message,
}

impl HeaderLookup for MessageHeaders<'_> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        let name = CString::new(name).ok()?;
        let mut hdrs = std::ptr::null_mut();
        // SAFETY: the headers belong to the message and live as long as it.
        unsafe {
            if (self.host.rd_kafka_message_headers)(self.msg, &mut hdrs) != host::NO_ERROR {
                return None;
            }
            let mut value: *const c_void = std::ptr::null();
            let mut size = 0usize;
            if (self.host.rd_kafka_header_get_last)(hdrs, name.as_ptr(), &mut value, &mut size)
                != host::NO_ERROR
                || value.is_null()
            {
                return None;
            }
            Some(std::slice::from_raw_parts(value.cast::<u8>(), size))
        }
    }
}
