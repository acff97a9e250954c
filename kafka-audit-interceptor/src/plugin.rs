//! One plugin instance per configuration object (librdkafka's `ic_opaque`), and the
//! interceptor callbacks librdkafka calls on it; the audited client the instance becomes
//! at `on_new` is `client.rs`.
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

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use crate::client::Client;
use crate::counters::{self, COUNTERS};
use crate::host::{self, Conf, Err, Host, Message, Rk, TopicPartitionList};
use crate::settings::{Claimed, Settings, PREFIX};

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
            // SAFETY: the registration failed: nothing refers to the instance.
            drop(unsafe { Box::from_raw(plugin) });
            return Err(format!(
                "cannot add the on_new interceptor: {}",
                host.err_str(err)
            ));
        }
        // on_conf_destroy first: from here on librdkafka frees the instance.
        // SAFETY: conf is librdkafka's; the callbacks match librdkafka's prototypes.
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

/// # Safety
/// `opaque` is a live `Plugin` (librdkafka passes back what it was registered with).
unsafe fn plugin<'a>(opaque: *mut c_void) -> &'a Plugin {
    // SAFETY: the caller's promise (above).
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
            // SAFETY: librdkafka's NUL-terminated value, not NULL (checked).
            .then(|| unsafe { CStr::from_ptr(value) }.to_str().ok())
            .flatten();
        // SAFETY: opaque is the Plugin this callback was registered with.
        match unsafe { plugin(opaque) }.conf_set(own, value) {
            Ok(()) => host::CONF_OK,
            // SAFETY: opaque is the Plugin this callback was registered with (live until on_conf_destroy).
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
        // SAFETY: opaque is the Plugin this callback was registered with.
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
        // SAFETY: opaque is the Plugin this callback was registered with.
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
            (h.rd_kafka_interceptor_add_on_thread_start)(rk, name, on_thread_start, opaque);
            if producer {
                (h.rd_kafka_interceptor_add_on_send)(rk, name, on_send, opaque);
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

thread_local! {
    /// Set on librdkafka's main and broker threads (`on_thread_start`), which only ever
    /// acknowledge librdkafka's own messages. Not on its background thread, where the
    /// application's event callback runs and may produce.
    static LIBRDKAFKA_THREAD: Cell<bool> = const { Cell::new(false) };
    /// The message this thread last handed to `on_send`: one librdkafka just created
    /// (an `rd_kafka_msg_t`).
    static LAST_SENT: Cell<usize> = const { Cell::new(0) };
}

unsafe extern "C" fn on_thread_start(
    _rk: *mut Rk,
    kind: c_int,
    _name: *const c_char,
    _opaque: *mut c_void,
) -> Err {
    if kind == host::THREAD_MAIN || kind == host::THREAD_BROKER {
        let _ = LIBRDKAFKA_THREAD.try_with(|t| t.set(true));
    }
    host::NO_ERROR
}

/// Only remembers the message (see `librdkafka_owns`): a store, no lock, no call.
unsafe extern "C" fn on_send(_rk: *mut Rk, msg: *mut Message, _opaque: *mut c_void) -> Err {
    let _ = LAST_SENT.try_with(|m| m.set(msg as usize));
    host::NO_ERROR
}

/// Whether `msg`, acknowledged with `err`, is librdkafka's own message (an
/// `rd_kafka_msg_t`: its topic handle, timestamp and headers may be read through
/// librdkafka, and it is followed by librdkafka's fields) — or an element of the
/// application's array, which `rd_kafka_produce_batch` hands to `on_acknowledgement`
/// when its partitioner refuses a message (rdkafka_msg.c, "Unroll on_send by on_ack"):
/// a bare public struct whose `rkt` librdkafka never set (NULL in a `calloc`ed array,
/// garbage in a `malloc`ed one), of which nothing but the struct itself may be read.
///
/// - Without error: acknowledged from a partition's queue
///   (`rd_kafka_interceptors_on_acknowledgement_queue`), so librdkafka's.
/// - With an error other than the partitioner's (`__UNKNOWN_TOPIC`,
///   `__UNKNOWN_PARTITION`, `TOPIC_AUTHORIZATION_FAILED`): the message was queued, so
///   librdkafka's.
/// - With a partitioner error on librdkafka's main or broker thread: a queued message
///   failed when the metadata came (the unassigned queue), librdkafka's.
/// - With a partitioner error on any other thread, inside a produce call: `produce()`,
///   `producev()` and `produceva()` acknowledge the message they just handed to
///   `on_send` on this thread; `produce_batch` acknowledges the application's element
///   instead, never that message.
fn librdkafka_owns(msg: *const Message, err: Err) -> bool {
    if !matches!(
        err,
        host::ERR_UNKNOWN_TOPIC
            | host::ERR_UNKNOWN_PARTITION
            | host::ERR_TOPIC_AUTHORIZATION_FAILED
    ) {
        return true;
    }
    LIBRDKAFKA_THREAD.try_with(Cell::get).unwrap_or(false)
        || LAST_SENT
            .try_with(Cell::get)
            .is_ok_and(|m| m == msg as usize)
}

unsafe extern "C" fn on_acknowledgement(
    _rk: *mut Rk,
    msg: *mut Message,
    opaque: *mut c_void,
) -> Err {
    guard(host::NO_ERROR, || {
        // SAFETY: opaque is the Plugin this callback was registered with.
        let Some(c) = unsafe { plugin(opaque) }.client.get() else {
            return host::NO_ERROR;
        };
        // SAFETY: whatever librdkafka passes is at least a public rd_kafka_message_t.
        let err = unsafe { (*msg).err };
        if !librdkafka_owns(msg, err) {
            c.refused_unattributed();
        } else {
            if err == host::NO_ERROR {
                // SAFETY: a message acknowledged from a queue (see above).
                unsafe { prefetch_next_acknowledged(msg) };
            }
            // SAFETY: librdkafka's own message (librdkafka_owns), valid during the callback.
            c.acknowledged(unsafe { &*msg });
        }
        host::NO_ERROR
    })
}

/// Asks the CPU for the message librdkafka will acknowledge next, while this one is
/// counted. librdkafka acknowledges a batch by walking its queue
/// (`rd_kafka_interceptors_on_acknowledgement_queue`), whose link follows the public
/// `rd_kafka_message_t` in its message (`rd_kafka_msg_t`, rdkafka_msg.h: "MUST be first
/// field", then `rkm_link`; the same from 1.x to 2.12), and each message was last read
/// milliseconds ago when its request was built: the first read of it was most of the
/// plugin's time on the broker thread (`perf`: 79 % of `acknowledged`'s samples on its
/// first load); the prefetch takes that wait off the broker thread (measured in
/// docs/benchmarks.md, the prefetch of the next acknowledged message). Nothing is
/// dereferenced but this message's own memory: a producer's message is an
/// `rd_kafka_msg_t`, larger than the public part and its link, and a prefetch of
/// whatever address it holds (null at the end of a batch) cannot fault.
///
/// # Safety
/// `msg` is a message acknowledged without error, so from librdkafka's queue: an
/// `rd_kafka_msg_t` whose link was set when it was queued (a message refused before it
/// was queued has an uninitialised link, and produce_batch's is not librdkafka's).
#[inline(always)]
unsafe fn prefetch_next_acknowledged(msg: *const Message) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: within this message's allocation (see above).
        let next = unsafe {
            msg.cast::<u8>()
                .add(std::mem::size_of::<Message>())
                .cast::<*const i8>()
                .read()
        };
        // The message's header and what follows it: the payload and key librdkafka
        // copied in behind it (RD_KAFKA_MSG_F_COPY), guessed as long as this one's.
        // SAFETY: the message librdkafka passed, valid during the callback.
        let m = unsafe { &*msg };
        let bytes = HEADER_GUESS.saturating_add(m.len).saturating_add(m.key_len);
        let lines = bytes.div_ceil(64).min(MAX_PREFETCH_LINES);
        for line in 0..lines {
            // SAFETY: a prefetch is a hint: no fault, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line * 64)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = msg;
}

/// Bytes of `rd_kafka_msg_t` before its copied payload (176 in 2.12: `sizeof`), with
/// slack for the payload's start within its cache line.
#[cfg(target_arch = "x86_64")]
const HEADER_GUESS: usize = 192;
/// At most this many cache lines of the next message are asked for.
#[cfg(target_arch = "x86_64")]
const MAX_PREFETCH_LINES: usize = 24;

unsafe extern "C" fn on_consume(_rk: *mut Rk, msg: *mut Message, opaque: *mut c_void) -> Err {
    guard(host::NO_ERROR, || {
        // SAFETY: opaque is the Plugin this callback was registered with.
        if let Some(c) = unsafe { plugin(opaque) }.client.get() {
            // SAFETY: a consumed message, valid during the callback.
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
        // SAFETY: opaque is the Plugin this callback was registered with.
        if let Some(c) = unsafe { plugin(opaque) }.client.get() {
            // SAFETY: librdkafka's list (not NULL: checked), valid during the callback.
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
        // SAFETY: opaque is the Plugin this callback was registered with.
        if let Some(c) = unsafe { plugin(opaque) }.client.get() {
            c.assignment_changed();
        }
        host::NO_ERROR
    })
}
