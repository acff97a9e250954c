//! The benchmark's accounting for the rust-rdkafka client: the C client's own
//! (`accounting.c`, linked into this program by build.rs), so both clients measure the
//! same things the same way. See `accounting.h`.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_long, c_void, CStr};
use std::ptr::NonNull;

extern "C" {
    fn kai_account(broker_pid: c_long) -> *mut c_void;
    fn kai_accounting_json(a: *const c_void, b: *const c_void) -> *mut c_char;
    fn kai_accounting_free(a: *mut c_void);
}

/// Each thread's CPU and run-queue wait, the machine's busy and total time, the broker's
/// CPU time, at one moment.
pub struct Snapshot(NonNull<c_void>);

impl Snapshot {
    pub fn take(broker_pid: u32) -> Snapshot {
        // SAFETY: reads /proc and returns a new allocation (or NULL), freed in `drop`.
        let p = unsafe { kai_account(c_long::from(broker_pid)) };
        Snapshot(NonNull::new(p).expect("accounting: out of memory"))
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // SAFETY: allocated by `kai_account`, freed once.
        unsafe { kai_accounting_free(self.0.as_ptr()) }
    }
}

/// The differences from `a` to `b` as members of `out`: "threads" (per thread: name,
/// whether it is the program's own thread, CPU and run-queue wait in ns),
/// "machine_busy" (the fraction of all CPUs' time), "cpus", "broker_cpu_s".
pub fn difference(a: &Snapshot, b: &Snapshot, out: &mut serde_json::Value) {
    // SAFETY: both snapshots are alive; the result is a malloc'ed C string (or NULL),
    // copied, then freed with libc's free.
    let members = unsafe {
        let p = kai_accounting_json(a.0.as_ptr(), b.0.as_ptr());
        assert!(!p.is_null(), "accounting: out of memory");
        let s = CStr::from_ptr(p).to_string_lossy().into_owned();
        libc::free(p.cast());
        s
    };
    let members: serde_json::Value =
        serde_json::from_str(&format!("{{{members}}}")).expect("accounting: JSON members");
    for (k, v) in members.as_object().expect("an object") {
        out[k] = v.clone();
    }
}
