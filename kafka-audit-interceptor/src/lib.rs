//! kafka-audit's librdkafka interceptor plugin: any librdkafka client (Python's
//! confluent-kafka, Go with `-tags dynamic`, .NET, C/C++, Node, rust-rdkafka) audited
//! at its producer or consumer tier by two configuration lines:
//!
//! ```text
//! plugin.library.paths = /path/to/libkafka_audit_interceptor.so
//! kafka_audit.datacenter = dc1
//! ```
//!
//! A producer counts every message the cluster acknowledged (and, apart, those it was
//! told failed); a consumer counts what its group committed. Both count into
//! audit-lib's windows with the auditors' event-time rules, checksum and latency, and
//! report through the host's own librdkafka to the audit topic (`plugin` has the
//! interceptor rules, `host` how the host's librdkafka is found, `settings` the
//! properties, `emitter` the reports, `uncommitted` the consumer's bookkeeping).
#![allow(unsafe_code)] // a C plugin: every entry point is FFI
// Every unsafe block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

mod client;
mod counters;
mod emitter;
mod host;
mod plugin;
pub mod settings;
pub mod uncommitted;

use std::ffi::{c_char, c_void};
use std::sync::Arc;

pub use counters::COUNTERS;

/// Names a file of `kafka_audit.*` properties applied to every client when the plugin
/// is loaded, before the client's own properties (`Plugin::apply_file`).
pub const PROPERTIES_ENV: &str = "KAFKA_AUDIT_INTERCEPTOR_PROPERTIES";

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The wall clock for a message's observation time, from the kernel's coarse clock:
/// a few ns instead of a `clock_gettime` of up to ~100 ns on a loaded VM, for every
/// acknowledged or consumed message; its resolution (one scheduler tick, 1–4 ms) is
/// below what a millisecond latency histogram with 1 % buckets tells apart at the
/// latencies a producer or consumer sees.
pub(crate) fn observed_at_ms() -> i64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) } != 0 {
        return now_ms();
    }
    t.tv_sec * 1000 + t.tv_nsec / 1_000_000
}

/// librdkafka's plugin entry point, called when `plugin.library.paths` names this
/// library: resolves the calling librdkafka and puts a plugin instance on `conf`.
/// An error fails the `plugin.library.paths` property, and so the client's creation.
///
/// # Safety
/// Called by librdkafka with a valid configuration and error buffer.
#[no_mangle]
#[inline(never)]
pub unsafe extern "C" fn conf_init(
    conf: *mut c_void,
    plug_opaquep: *mut *mut c_void,
    errstr: *mut c_char,
    errstr_size: usize,
) -> host::Err {
    let result = std::panic::catch_unwind(|| {
        let caller = host::first_foreign_frame().ok_or(
            "cannot find the librdkafka that called conf_init (no stack frame outside the plugin)",
        )?;
        let host = Arc::new(host::Host::of_caller(caller)?);
        let accepted = std::env::var_os(host::ACCEPT_4142_ENV).is_some_and(|v| v == "1");
        host.check_version(accepted)?;
        let settings = match std::env::var(PROPERTIES_ENV) {
            Ok(path) if !path.is_empty() => plugin::settings_file(&host, &path)?,
            _ => settings::Settings::default(),
        };
        // The last step: after it, conf_init must not fail (librdkafka would unload
        // the library under the interceptors it registered).
        plugin::Plugin::attach(host, conf, settings).map(|_| ())
    });
    let result =
        result.unwrap_or_else(|_| Err("kafka-audit-interceptor panicked in conf_init".into()));
    if !plug_opaquep.is_null() {
        // SAFETY: librdkafka's out-parameter.
        unsafe { *plug_opaquep = std::ptr::null_mut() };
    }
    match result {
        Ok(()) => host::NO_ERROR,
        Err(e) => {
            host::write_errstr(
                errstr,
                errstr_size,
                &format!("kafka-audit-interceptor: {e}"),
            );
            host::ERR_INVALID_ARG
        }
    }
}

/// What the plugin did in this process, as one JSON object (the counters of
/// `counters.rs`). Writes at most `size` bytes including a NUL into `buf` and returns
/// the JSON's length (call again with a larger buffer when it is `>= size`).
///
/// # Safety
/// `buf` is writable for `size` bytes (or NULL with `size` 0).
#[no_mangle]
pub unsafe extern "C" fn kafka_audit_interceptor_stats(buf: *mut c_char, size: usize) -> usize {
    std::panic::catch_unwind(|| {
        let json = COUNTERS.to_json();
        host::write_errstr(buf, size, &json);
        json.len()
    })
    .unwrap_or(0)
}
