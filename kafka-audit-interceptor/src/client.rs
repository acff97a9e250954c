//! One plugin instance per configuration object (librdkafka's `ic_opaque`), and the
//! audited client it becomes at `on_new`.
//!
//! librdkafka's rules for interceptors, and how they are kept here:
//! - they must not block or call the client's APIs: the message callbacks only
//!   classify the message and add it to in-memory windows under a short lock; reports
//!   are sent by the client's own emitter thread through a separate audit producer;
//! - the message must not be modified: it is only read;
//! - acknowledgements can arrive after `on_destroy` (librdkafka's threads still run):
//!   the last report is sent, and the state freed, in `on_conf_destroy`, which
//!   librdkafka calls after it joined its threads and before it unloads the plugin, so
//!   no thread of this library outlives it;
//! - interceptors are not copied by `rd_kafka_conf_dup`: `on_conf_dup` registers a
//!   fresh instance on the copy (librdkafka then replays the claimed properties into it).
//! - a forked child inherits the parent's memory but none of its threads: every path
//!   that reports or joins checks it runs in the process that created the client, so a
//!   child never reports the parent's counts (nor waits for a thread it has not got).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use audit_lib::{
    Aggregator, AuditMessage, CompiledConfig, EventTimeConfig, HeaderLookup, Identity, Limits,
    Observation, RecordTimestamp, TimestampType,
};

use crate::counters::{self, COUNTERS};
use crate::emitter::{HostSink, Outbox};
use crate::host::{self, Conf, Err, Host, Message, Rk, TopicPartitionList};
use crate::settings::{Claimed, Settings, PREFIX};
use crate::uncommitted::{Uncommitted, MAX_UNCOMMITTED};

/// The name every interceptor is registered under: librdkafka refuses a second one of
/// the same name on one configuration, so a configuration that loads the plugin twice
/// (two paths, or a copy of the library) is audited once.
const IC_NAME: &CStr = c"kafka-audit";

/// Runs a callback body; a panic is caught here (it must not unwind into C) and
/// turned into `default`.
fn guard<T>(default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

/// The plugin on one configuration object.
pub struct Plugin {
    host: Arc<Host>,
    settings: Mutex<Settings>,
    client: OnceLock<Arc<Client>>,
}

impl Plugin {
    /// A plugin instance on `conf` (librdkafka owns it), or `None` when one is there
    /// already (the configuration was copied, or lists the plugin twice).
    /// `settings` are its settings so far (from the properties file).
    pub fn attach(host: Arc<Host>, conf: *mut Conf, settings: Settings) -> Result<bool, String> {
        let plugin = Box::into_raw(Box::new(Plugin {
            host: host.clone(),
            settings: Mutex::new(settings),
            client: OnceLock::new(),
        }));
        let opaque = plugin.cast::<c_void>();
        let name = IC_NAME.as_ptr();
        // SAFETY: conf is librdkafka's; the callbacks match librdkafka's prototypes.
        let err =
            unsafe { (host.rd_kafka_conf_interceptor_add_on_new)(conf, name, on_new, opaque) };
        if err == host::ERR_CONFLICT {
            // SAFETY: nothing refers to it yet.
            drop(unsafe { Box::from_raw(plugin) });
            return Ok(false);
        }
        if err != host::NO_ERROR {
            drop(unsafe { Box::from_raw(plugin) });
            return Err(format!(
                "cannot add the on_new interceptor: {}",
                host.err_str(err)
            ));
        }
        // on_conf_destroy first: from here on librdkafka frees the instance.
        unsafe {
            (host.rd_kafka_conf_interceptor_add_on_conf_destroy)(
                conf,
                name,
                on_conf_destroy,
                opaque,
            );
            (host.rd_kafka_conf_interceptor_add_on_conf_set)(conf, name, on_conf_set, opaque);
            (host.rd_kafka_conf_interceptor_add_on_conf_dup)(conf, name, on_conf_dup, opaque);
        }
        Ok(true)
    }

    fn conf_set(&self, name: &str, value: Option<&str>) -> Result<(), String> {
        let mut settings = self.settings.lock().unwrap_or_else(|p| p.into_inner());
        set(&self.host, &mut settings, name, value)
    }
}

/// Applies `kafka_audit.<name> = value` to `settings`.
fn set(
    host: &Host,
    settings: &mut Settings,
    name: &str,
    value: Option<&str>,
) -> Result<(), String> {
    if let Claimed::Producer(value) = settings.set(name, value)? {
        check_producer_property(host, name, &value)?;
    }
    Ok(())
}

/// The `kafka_audit.*` lines of a properties file (`name=value`, `#` comments) as
/// settings: for bindings that set properties in no fixed order, where a
/// `kafka_audit.*` property would reach librdkafka before `plugin.library.paths`
/// (rust-rdkafka's ClientConfig). Properties the client sets later override them.
/// Read before the plugin is put on the configuration: a failed `conf_init` makes
/// librdkafka unload the library, which then must have registered nothing.
pub fn settings_file(host: &Host, path: &str) -> Result<Settings, String> {
    let mut settings = Settings::default();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read {path}: {e}", crate::PROPERTIES_ENV))?;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line
            .split_once('=')
            .ok_or_else(|| format!("{path}:{}: not name=value: {line:?}", n + 1))?;
        let Some(own) = name.trim().strip_prefix(PREFIX) else {
            return Err(format!(
                "{path}:{}: {:?} is not a {PREFIX}* property",
                n + 1,
                name.trim()
            ));
        };
        set(host, &mut settings, own, Some(value.trim()))
            .map_err(|e| format!("{path}:{}: {e}", n + 1))?;
    }
    Ok(settings)
}

/// A `kafka_audit.<name>` that is not the plugin's own must be a property librdkafka
/// knows: tried on a scratch configuration now, so a typo fails the client's creation.
fn check_producer_property(host: &Host, name: &str, value: &str) -> Result<(), String> {
    let h = host;
    let (Ok(k), Ok(v)) = (CString::new(name), CString::new(value)) else {
        return Err(format!("{PREFIX}{name}: NUL in name or value"));
    };
    let mut errstr = [0u8; 512];
    // SAFETY: a conf of our own, destroyed here.
    let res = unsafe {
        let conf = (h.rd_kafka_conf_new)();
        let res = (h.rd_kafka_conf_set)(
            conf,
            k.as_ptr(),
            v.as_ptr(),
            errstr.as_mut_ptr().cast(),
            errstr.len(),
        );
        (h.rd_kafka_conf_destroy)(conf);
        res
    };
    if res == host::CONF_OK {
        return Ok(());
    }
    let end = errstr.iter().position(|&b| b == 0).unwrap_or(0);
    Err(format!(
        "{PREFIX}{name}: not a kafka_audit setting, and as a property of the audit producer: {}",
        String::from_utf8_lossy(&errstr[..end])
    ))
}

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
    producer: bool,
    /// Header names of the event-time rules (looked up only when a rule has one).
    identity: Identity,
    config: CompiledConfig,
    counting: Mutex<Counting>,
    report_interval: Duration,
    stop: (Mutex<bool>, Condvar),
    emitter: Mutex<Option<std::thread::JoinHandle<()>>>,
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
    /// The client `rk` of configuration `conf`, audited with `settings`; it starts its
    /// emitter thread.
    fn start(
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
        let client = Arc::new(Client {
            host: host.clone(),
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
            emitter: Mutex::new(None),
        });
        let timeout = crate::emitter::SEND_TIMEOUT;
        let topic = settings.audit_topic().to_string();
        let spool = settings
            .spool_dir
            .as_ref()
            .map(|d| (d.clone(), settings.spool_max_bytes()));
        let me = client.clone();
        let thread = std::thread::Builder::new()
            .name("kafka-audit".into())
            .spawn(move || {
                let h = me.host.clone();
                let outbox = Outbox::new(
                    || HostSink::new(h.clone(), properties.clone(), &topic, timeout),
                    spool
                        .clone()
                        .map(|(dir, max)| (slot_dir(&dir, &me.identity), max)),
                );
                me.run(outbox)
            })
            .map_err(|e| format!("cannot start the report thread: {e}"))?;
        *client.emitter.lock().unwrap_or_else(|p| p.into_inner()) = Some(thread);
        counters::add(&COUNTERS.clients_active, 1);
        Ok(client)
    }

    fn owned(&self) -> bool {
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
    fn shutdown(&self) {
        {
            let (lock, cvar) = &self.stop;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cvar.notify_all();
        }
        let thread = self
            .emitter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(t) = thread {
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

    fn acknowledged(&self, msg: &Message) {
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

    fn consumed(&self, msg: &Message) {
        if msg.err != host::NO_ERROR {
            return; // an event (end of partition, an error), not a message
        }
        self.observe(msg, |obs| {
            let mut c = self.lock();
            let (index, counted) = c.aggregator.observe(obs);
            c.uncommitted
                .consumed(obs.topic, obs.partition, index, counted);
            c.tally[2] += 1;
        });
    }

    fn committed(&self, offsets: &TopicPartitionList) {
        if offsets.elems.is_null() || offsets.cnt <= 0 {
            return;
        }
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
/// live client holds (an exclusive lock on its `.lock` file). A restarted application
/// takes its slots again and replays what its predecessor spooled.
fn slot_dir(dir: &std::path::Path, identity: &Identity) -> std::path::PathBuf {
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
            // Held for the life of the process (a forked child shares it).
            std::mem::forget(lock);
            return slot;
        }
    }
    dir.join(format!("{}-{}", identity.tier, identity.host))
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

/// # Safety
/// `opaque` is a live `Plugin` (librdkafka passes back what it was registered with).
unsafe fn plugin<'a>(opaque: *mut c_void) -> &'a Plugin {
    unsafe { &*opaque.cast::<Plugin>() }
}

unsafe extern "C" fn on_conf_set(
    _conf: *mut Conf,
    name: *const c_char,
    value: *const c_char,
    errstr: *mut c_char,
    errstr_size: usize,
    opaque: *mut c_void,
) -> c_int {
    guard(host::CONF_UNKNOWN, || {
        // SAFETY: librdkafka's NUL-terminated property name and value.
        let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
            return host::CONF_UNKNOWN;
        };
        let Some(own) = name.strip_prefix(PREFIX) else {
            return host::CONF_UNKNOWN; // librdkafka's own, or another plugin's
        };
        let value = (!value.is_null())
            .then(|| unsafe { CStr::from_ptr(value) }.to_str().ok())
            .flatten();
        match unsafe { plugin(opaque) }.conf_set(own, value) {
            Ok(()) => host::CONF_OK,
            Err(e) => {
                host::write_errstr(errstr, errstr_size, &e);
                host::CONF_INVALID
            }
        }
    })
}

unsafe extern "C" fn on_conf_dup(
    new_conf: *mut Conf,
    _old_conf: *const Conf,
    _filter_cnt: usize,
    _filter: *const *const c_char,
    opaque: *mut c_void,
) -> Err {
    guard(host::NO_ERROR, || {
        let host = unsafe { plugin(opaque) }.host.clone();
        // librdkafka replays the claimed properties into the copy's instance.
        if let Err(e) = Plugin::attach(host, new_conf, Settings::default()) {
            counters::report_error(format!("copied configuration not audited: {e}"));
        }
        host::NO_ERROR
    })
}

unsafe extern "C" fn on_conf_destroy(opaque: *mut c_void) -> Err {
    guard(host::NO_ERROR, || {
        // SAFETY: librdkafka calls this once per registration, last.
        let plugin = unsafe { Box::from_raw(opaque.cast::<Plugin>()) };
        match plugin.client.get() {
            Some(c) if !c.owned() => {
                // A forked child: the parent's counts and threads are not its own.
                std::mem::forget(plugin);
            }
            Some(c) => c.shutdown(),
            None => {}
        }
        host::NO_ERROR
    })
}

unsafe extern "C" fn on_new(
    rk: *mut Rk,
    conf: *const Conf,
    opaque: *mut c_void,
    errstr: *mut c_char,
    errstr_size: usize,
) -> Err {
    guard(host::NO_ERROR, || {
        let p = unsafe { plugin(opaque) };
        let settings = p.settings.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let client = match Client::start(p.host.clone(), rk, conf, settings) {
            Ok(c) => c,
            Err(e) => {
                // librdkafka only logs an on_new error (rd_kafka_new goes on), so say it
                // where the application's operator looks as well.
                counters::add(&COUNTERS.clients_unaudited, 1);
                counters::report_error(e.clone());
                eprintln!("kafka-audit-interceptor: {e}");
                host::write_errstr(errstr, errstr_size, &e);
                return host::ERR_INVALID_ARG;
            }
        };
        let producer = client.producer;
        if p.client.set(client).is_err() {
            return host::NO_ERROR; // a configuration makes one client
        }
        let h = &p.host;
        let name = IC_NAME.as_ptr();
        // SAFETY: rk is the new client; the callbacks match librdkafka's prototypes.
        unsafe {
            (h.rd_kafka_interceptor_add_on_destroy)(rk, name, on_destroy, opaque);
            if producer {
                (h.rd_kafka_interceptor_add_on_acknowledgement)(
                    rk,
                    name,
                    on_acknowledgement,
                    opaque,
                );
            } else {
                (h.rd_kafka_interceptor_add_on_consume)(rk, name, on_consume, opaque);
                (h.rd_kafka_interceptor_add_on_commit)(rk, name, on_commit, opaque);
                (h.rd_kafka_interceptor_add_on_response_received)(
                    rk,
                    name,
                    on_response_received,
                    opaque,
                );
            }
        }
        host::NO_ERROR
    })
}

unsafe extern "C" fn on_destroy(_rk: *mut Rk, _opaque: *mut c_void) -> Err {
    // Acknowledgements may still come: the last report is sent in on_conf_destroy.
    host::NO_ERROR
}

unsafe extern "C" fn on_acknowledgement(
    _rk: *mut Rk,
    msg: *mut Message,
    opaque: *mut c_void,
) -> Err {
    guard(host::NO_ERROR, || {
        if let Some(c) = unsafe { plugin(opaque) }.client.get() {
            c.acknowledged(unsafe { &*msg });
        }
        host::NO_ERROR
    })
}

unsafe extern "C" fn on_consume(_rk: *mut Rk, msg: *mut Message, opaque: *mut c_void) -> Err {
    guard(host::NO_ERROR, || {
        if let Some(c) = unsafe { plugin(opaque) }.client.get() {
            c.consumed(unsafe { &*msg });
        }
        host::NO_ERROR
    })
}

unsafe extern "C" fn on_commit(
    _rk: *mut Rk,
    offsets: *const TopicPartitionList,
    err: Err,
    opaque: *mut c_void,
) -> Err {
    guard(host::NO_ERROR, || {
        if err != host::NO_ERROR || offsets.is_null() {
            return host::NO_ERROR;
        }
        if let Some(c) = unsafe { plugin(opaque) }.client.get() {
            c.committed(unsafe { &*offsets });
        }
        host::NO_ERROR
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn on_response_received(
    _rk: *mut Rk,
    _sockfd: c_int,
    _brokername: *const c_char,
    _brokerid: i32,
    api_key: i16,
    _api_version: i16,
    _corr_id: i32,
    _size: usize,
    _rtt: i64,
    err: Err,
    opaque: *mut c_void,
) -> Err {
    if err != host::NO_ERROR
        || (api_key != host::API_KEY_SYNC_GROUP
            && api_key != host::API_KEY_CONSUMER_GROUP_HEARTBEAT)
    {
        return host::NO_ERROR;
    }
    guard(host::NO_ERROR, || {
        if let Some(c) = unsafe { plugin(opaque) }.client.get() {
            c.lock().uncommitted.assignment_changed();
        }
        host::NO_ERROR
    })
}
