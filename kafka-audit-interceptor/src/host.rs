//! The host's librdkafka: the copy that loaded this plugin, found at `conf_init` from
//! the caller's return address, and the functions of it the plugin uses.
//!
//! The plugin links no librdkafka and leaves no `rd_kafka_*` symbol for the dynamic
//! loader: confluent-kafka's wheel loads its bundled librdkafka `RTLD_LOCAL`, so no
//! such symbol is global, and a plugin linked against `librdkafka.so.1` would load a
//! second copy (or fail where none is installed). Instead the first stack frame outside
//! this library at `conf_init` is inside the librdkafka that called it
//! (`rd_kafka_plugin_new`); `dladdr` names its object, `dlopen(RTLD_NOLOAD)` gives a
//! handle without loading anything, and every function is looked up there and checked
//! to be defined by that very object (so a second librdkafka elsewhere in the process
//! is never mixed in). A librdkafka linked statically into an executable (rust-rdkafka,
//! a static C program) must export its symbols for this (`-Wl,--export-dynamic-symbol=rd_kafka_*`).

use std::ffi::{c_char, c_int, c_void, CStr, CString};

pub type Conf = c_void;
pub type Rk = c_void;
pub type Rkt = c_void;
pub type Headers = c_void;
/// `rd_kafka_resp_err_t`.
pub type Err = c_int;

pub const NO_ERROR: Err = 0;
pub const ERR_CONFLICT: Err = -173;
pub const ERR_QUEUE_FULL: Err = -184;
pub const ERR_INVALID_ARG: Err = -186;
pub const CONF_UNKNOWN: c_int = -2;
pub const CONF_INVALID: c_int = -1;
pub const CONF_OK: c_int = 0;
pub const TYPE_PRODUCER: c_int = 0;
pub const PARTITION_UA: i32 = -1;
pub const MSG_F_COPY: c_int = 0x2;
pub const TIMESTAMP_CREATE_TIME: c_int = 1;
pub const TIMESTAMP_LOG_APPEND_TIME: c_int = 2;
/// `RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC`, `__UNKNOWN_PARTITION` and
/// `TOPIC_AUTHORIZATION_FAILED`: the only errors of librdkafka's partitioner
/// (`rd_kafka_msg_partitioner`, whose topic error `rkt_err` is only ever set to the
/// last), so the only ones with which a message can be refused before it is queued.
pub const ERR_UNKNOWN_TOPIC: Err = -188;
pub const ERR_UNKNOWN_PARTITION: Err = -190;
pub const ERR_TOPIC_AUTHORIZATION_FAILED: Err = 29;
/// `rd_kafka_thread_type_t`.
pub const THREAD_MAIN: c_int = 0;
pub const THREAD_BROKER: c_int = 2;
/// The SyncGroup request: a consumer group member gets its (new) assignment.
pub const API_KEY_SYNC_GROUP: i16 = 14;
/// KIP-848's heartbeat, which carries assignments under `group.protocol=consumer`.
pub const API_KEY_CONSUMER_GROUP_HEARTBEAT: i16 = 68;

/// `rd_kafka_message_t` (stable since librdkafka 0.9).
#[repr(C)]
pub struct Message {
    pub err: Err,
    pub rkt: *mut Rkt,
    pub partition: i32,
    pub payload: *mut c_void,
    pub len: usize,
    pub key: *mut c_void,
    pub key_len: usize,
    pub offset: i64,
    pub private: *mut c_void,
}

/// `rd_kafka_topic_partition_t`.
#[repr(C)]
pub struct TopicPartition {
    pub topic: *mut c_char,
    pub partition: i32,
    pub offset: i64,
    pub metadata: *mut c_void,
    pub metadata_size: usize,
    pub opaque: *mut c_void,
    pub err: Err,
    pub private: *mut c_void,
}

/// `rd_kafka_topic_partition_list_t`.
#[repr(C)]
pub struct TopicPartitionList {
    pub cnt: c_int,
    pub size: c_int,
    pub elems: *mut TopicPartition,
}

pub type OnConfSet = unsafe extern "C" fn(
    *mut Conf,
    *const c_char,
    *const c_char,
    *mut c_char,
    usize,
    *mut c_void,
) -> c_int;
pub type OnConfDup =
    unsafe extern "C" fn(*mut Conf, *const Conf, usize, *const *const c_char, *mut c_void) -> Err;
pub type OnConfDestroy = unsafe extern "C" fn(*mut c_void) -> Err;
pub type OnNew = unsafe extern "C" fn(*mut Rk, *const Conf, *mut c_void, *mut c_char, usize) -> Err;
pub type OnDestroy = unsafe extern "C" fn(*mut Rk, *mut c_void) -> Err;
/// on_acknowledgement and on_consume.
pub type OnMessage = unsafe extern "C" fn(*mut Rk, *mut Message, *mut c_void) -> Err;
pub type OnCommit =
    unsafe extern "C" fn(*mut Rk, *const TopicPartitionList, Err, *mut c_void) -> Err;
pub type OnResponseReceived = unsafe extern "C" fn(
    *mut Rk,
    c_int,
    *const c_char,
    i32,
    i16,
    i16,
    i32,
    usize,
    i64,
    Err,
    *mut c_void,
) -> Err;
pub type OnThreadStart = unsafe extern "C" fn(*mut Rk, c_int, *const c_char, *mut c_void) -> Err;
pub type DrMsgCb = unsafe extern "C" fn(*mut Rk, *const Message, *mut c_void);

macro_rules! host_functions {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// The librdkafka functions the plugin calls, all from the host's librdkafka.
        #[allow(non_snake_case)]
        pub struct Host {
            handle: *mut c_void,
            $(pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Host {
            /// Looks every function up in `handle`, each checked to be defined by the
            /// object at `base`.
            unsafe fn resolve(handle: *mut c_void, base: *mut c_void, library: String) -> Result<Host, String> {
                $(
                    let $name = {
                        let name = concat!(stringify!($name), "\0");
                        let sym = libc::dlsym(handle, name.as_ptr().cast());
                        if sym.is_null() || object_base(sym) != Some(base) {
                            return Err(format!(
                                "the librdkafka that loaded kafka-audit-interceptor ({library}) does not export {}: \
                                 a librdkafka linked statically into a program must export its symbols \
                                 (link with -Wl,--export-dynamic-symbol=rd_kafka_*)",
                                stringify!($name)
                            ));
                        }
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(sym)
                    };
                )*
                Ok(Host { handle, $($name,)* })
            }
        }
    };
}

host_functions! {
    rd_kafka_conf_interceptor_add_on_new: fn(*mut Conf, *const c_char, OnNew, *mut c_void) -> Err;
    rd_kafka_conf_interceptor_add_on_conf_set: fn(*mut Conf, *const c_char, OnConfSet, *mut c_void) -> Err;
    rd_kafka_conf_interceptor_add_on_conf_dup: fn(*mut Conf, *const c_char, OnConfDup, *mut c_void) -> Err;
    rd_kafka_conf_interceptor_add_on_conf_destroy: fn(*mut Conf, *const c_char, OnConfDestroy, *mut c_void) -> Err;
    rd_kafka_interceptor_add_on_acknowledgement: fn(*mut Rk, *const c_char, OnMessage, *mut c_void) -> Err;
    rd_kafka_interceptor_add_on_consume: fn(*mut Rk, *const c_char, OnMessage, *mut c_void) -> Err;
    rd_kafka_interceptor_add_on_commit: fn(*mut Rk, *const c_char, OnCommit, *mut c_void) -> Err;
    rd_kafka_interceptor_add_on_destroy: fn(*mut Rk, *const c_char, OnDestroy, *mut c_void) -> Err;
    rd_kafka_interceptor_add_on_response_received: fn(*mut Rk, *const c_char, OnResponseReceived, *mut c_void) -> Err;
    rd_kafka_interceptor_add_on_send: fn(*mut Rk, *const c_char, OnMessage, *mut c_void) -> Err;
    rd_kafka_interceptor_add_on_thread_start: fn(*mut Rk, *const c_char, OnThreadStart, *mut c_void) -> Err;
    rd_kafka_version: fn() -> c_int;
    rd_kafka_conf_new: fn() -> *mut Conf;
    rd_kafka_conf_set: fn(*mut Conf, *const c_char, *const c_char, *mut c_char, usize) -> c_int;
    rd_kafka_conf_get: fn(*const Conf, *const c_char, *mut c_char, *mut usize) -> c_int;
    rd_kafka_conf_destroy: fn(*mut Conf);
    rd_kafka_conf_set_dr_msg_cb: fn(*mut Conf, DrMsgCb);
    rd_kafka_conf_set_opaque: fn(*mut Conf, *mut c_void);
    rd_kafka_new: fn(c_int, *mut Conf, *mut c_char, usize) -> *mut Rk;
    rd_kafka_destroy: fn(*mut Rk);
    rd_kafka_type: fn(*const Rk) -> c_int;
    rd_kafka_topic_new: fn(*mut Rk, *const c_char, *mut c_void) -> *mut Rkt;
    rd_kafka_topic_destroy: fn(*mut Rkt);
    rd_kafka_topic_name: fn(*const Rkt) -> *const c_char;
    rd_kafka_produce: fn(*mut Rkt, i32, c_int, *mut c_void, usize, *const c_void, usize, *mut c_void) -> c_int;
    rd_kafka_last_error: fn() -> Err;
    rd_kafka_poll: fn(*mut Rk, c_int) -> c_int;
    rd_kafka_flush: fn(*mut Rk, c_int) -> Err;
    rd_kafka_err2str: fn(Err) -> *const c_char;
    rd_kafka_message_timestamp: fn(*const Message, *mut c_int) -> i64;
    rd_kafka_message_headers: fn(*const Message, *mut *mut Headers) -> Err;
    rd_kafka_header_get_last: fn(*const Headers, *const c_char, *mut *const c_void, *mut usize) -> Err;
}

// SAFETY: the functions are librdkafka's, callable from any thread; the handle is only
// closed on drop.
unsafe impl Send for Host {}
// SAFETY: as Send: nothing of Host changes after it is made.
unsafe impl Sync for Host {}

impl Drop for Host {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and is closed once; RTLD_NOLOAD took a
        // reference, this gives it back.
        unsafe {
            libc::dlclose(self.handle);
        }
    }
}

/// The base address of the loaded object that contains `addr`.
fn object_base(addr: *const c_void) -> Option<*mut c_void> {
    // SAFETY: Dl_info is plain data (pointers and integers): all zeroes is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables.
    (unsafe { libc::dladdr(addr, &mut info) } != 0).then_some(info.dli_fbase)
}

impl Host {
    /// The librdkafka whose code contains `caller` (a return address inside it).
    pub fn of_caller(caller: usize) -> Result<Host, String> {
        // A return address points after the call; the call itself is one byte before.
        let addr = caller.saturating_sub(1) as *const c_void;
        // SAFETY: Dl_info is plain data (pointers and integers): all zeroes is valid.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables.
        if unsafe { libc::dladdr(addr, &mut info) } == 0 {
            return Err(format!(
                "cannot tell which librdkafka called conf_init (dladdr found no object at {caller:#x})"
            ));
        }
        let file = if info.dli_fname.is_null() {
            String::new()
        } else {
            // SAFETY: dladdr gives a NUL-terminated name owned by the loader.
            unsafe { CStr::from_ptr(info.dli_fname) }
                .to_string_lossy()
                .into_owned()
        };
        let library = if file.is_empty() {
            "the main program".to_string()
        } else {
            file.clone()
        };
        // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded.
        let mut handle = if file.is_empty() {
            std::ptr::null_mut()
        } else {
            let c = CString::new(file).map_err(|_| "library path with NUL".to_string())?;
            // SAFETY: RTLD_NOLOAD only returns a handle to an object already loaded.
            unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }
        };
        if handle.is_null() {
            // The main program (its name from dladdr is not always one dlopen knows):
            // its handle searches it first.
            // SAFETY: dlopen(NULL) returns the main program's handle.
            handle = unsafe { libc::dlopen(std::ptr::null(), libc::RTLD_NOW) };
        }
        if handle.is_null() {
            return Err(format!("cannot open the librdkafka in {library}"));
        }
        // SAFETY: handle is valid; resolve checks every symbol's object.
        unsafe { Host::resolve(handle, info.dli_fbase, library) }.inspect_err(|_| unsafe {
            libc::dlclose(handle);
        })
    }

    /// librdkafka's text for `err`.
    pub fn err_str(&self, err: Err) -> String {
        // SAFETY: err2str returns a static string for any code.
        let s = unsafe { (self.rd_kafka_err2str)(err) };
        if s.is_null() {
            return format!("error {err}");
        }
        // SAFETY: err2str returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }

    /// A string property of `conf`, `None` when unset or empty.
    pub fn conf_get(&self, conf: *const Conf, name: &str) -> Option<String> {
        let name = CString::new(name).ok()?;
        let mut size = 0usize;
        // SAFETY: a NULL destination asks for the size.
        let res = unsafe {
            (self.rd_kafka_conf_get)(conf, name.as_ptr(), std::ptr::null_mut(), &mut size)
        };
        if res != CONF_OK || size <= 1 {
            return None;
        }
        let mut buf = vec![0u8; size];
        // SAFETY: buf holds `size` bytes.
        let res = unsafe {
            (self.rd_kafka_conf_get)(conf, name.as_ptr(), buf.as_mut_ptr().cast(), &mut size)
        };
        if res != CONF_OK {
            return None;
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        String::from_utf8(buf).ok().filter(|s| !s.is_empty())
    }
}

/// The first librdkafka without issue #4142: before 2.13.0, a failed `rd_kafka_new`
/// frees the interceptor lists of the application's configuration (a struct copy of
/// it), so the application's `rd_kafka_conf_destroy` afterwards, which it must call,
/// runs freed interceptors and frees them again — with any interceptor registered,
/// whatever it does.
pub const VERSION_WITHOUT_4142: c_int = 0x020d_0000;
/// Set to `1`, the plugin loads into a librdkafka older than 2.13.0: for applications
/// that never destroy a configuration after `rd_kafka_new` failed (rust-rdkafka 0.39
/// keeps it), where #4142 cannot happen.
pub const ACCEPT_4142_ENV: &str = "KAFKA_AUDIT_INTERCEPTOR_ACCEPT_LIBRDKAFKA_4142";

/// `rd_kafka_version()`'s `0xMMmmrrxx` as `M.m.r`.
pub fn version_text(v: c_int) -> String {
    format!(
        "{}.{}.{}",
        (v >> 24) & 0xff,
        (v >> 16) & 0xff,
        (v >> 8) & 0xff
    )
}

impl Host {
    /// The host's librdkafka version, and whether the plugin may load into it: from
    /// 2.13.0 on, or an older one that the operator accepted through
    /// [`ACCEPT_4142_ENV`] (read at `conf_init`, before any client exists).
    pub fn check_version(&self, accepted: bool) -> Result<c_int, String> {
        // SAFETY: rd_kafka_version has no arguments and no preconditions.
        let v = unsafe { (self.rd_kafka_version)() };
        if v >= VERSION_WITHOUT_4142 || accepted {
            return Ok(v);
        }
        Err(format!(
            "librdkafka {} is older than 2.13.0, where a failed rd_kafka_new with any interceptor \
             is a double free (librdkafka #4142): upgrade librdkafka, or set {ACCEPT_4142_ENV}=1 \
             if this application never destroys a configuration after rd_kafka_new failed \
             (rust-rdkafka does not)",
            version_text(v)
        ))
    }
}

/// Writes `msg` into librdkafka's error buffer (truncated, NUL-terminated).
pub fn write_errstr(errstr: *mut c_char, size: usize, msg: &str) {
    if errstr.is_null() || size == 0 {
        return;
    }
    let n = msg.len().min(size - 1);
    // SAFETY: librdkafka gave `size` writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), errstr.cast::<u8>(), n);
        *errstr.add(n) = 0;
    }
}

/// The return address of the first stack frame outside this library: at `conf_init`,
/// inside the librdkafka that called it. Unwinding only needs this library's own
/// unwind tables (the walk stops at the first foreign frame).
pub fn first_foreign_frame() -> Option<usize> {
    #[repr(C)]
    struct Walk {
        own_base: *mut c_void,
        found: usize,
    }
    extern "C" {
        fn _Unwind_Backtrace(
            trace: extern "C" fn(*mut c_void, *mut c_void) -> c_int,
            arg: *mut c_void,
        ) -> c_int;
        fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
    }
    extern "C" fn step(ctx: *mut c_void, arg: *mut c_void) -> c_int {
        // SAFETY: arg is the Walk below; ctx is the unwinder's.
        let walk = unsafe { &mut *arg.cast::<Walk>() };
        // SAFETY: called by the unwinder with its context.
        let ip = unsafe { _Unwind_GetIP(ctx) };
        if ip == 0 {
            return 0;
        }
        match object_base(ip.saturating_sub(1) as *const c_void) {
            Some(base) if base == walk.own_base => 0, // _URC_NO_REASON: keep walking
            _ => {
                walk.found = ip;
                5 // _URC_END_OF_STACK: stop
            }
        }
    }
    let mut walk = Walk {
        own_base: object_base(first_foreign_frame as *const c_void)?,
        found: 0,
    };
    // SAFETY: the callback only reads the context and writes `walk`.
    unsafe { _Unwind_Backtrace(step, (&mut walk as *mut Walk).cast()) };
    (walk.found != 0).then_some(walk.found)
}

/// The declarations above against librdkafka's own header, as rdkafka-sys's bindgen
/// read it (the workspace's 2.12.1): every struct field's offset and every constant.
/// The function prototypes are not checked here (their pointer types are `c_void`).
#[cfg(test)]
mod abi {
    use std::mem::{offset_of, size_of};

    use rdkafka::bindings as rd;

    use super::*;

    macro_rules! same_layout {
        ($ours:ty, $theirs:ty, $($field:ident = $their_field:ident),*) => {
            assert_eq!(size_of::<$ours>(), size_of::<$theirs>(), stringify!($ours));
            $(assert_eq!(
                offset_of!($ours, $field),
                offset_of!($theirs, $their_field),
                concat!(stringify!($ours), ".", stringify!($field))
            );)*
        };
    }

    #[test]
    fn the_structs_are_librdkafkas() {
        same_layout!(
            Message,
            rd::rd_kafka_message_t,
            err = err,
            rkt = rkt,
            partition = partition,
            payload = payload,
            len = len,
            key = key,
            key_len = key_len,
            offset = offset,
            private = _private
        );
        same_layout!(
            TopicPartition,
            rd::rd_kafka_topic_partition_t,
            topic = topic,
            partition = partition,
            offset = offset,
            metadata = metadata,
            metadata_size = metadata_size,
            opaque = opaque,
            err = err,
            private = _private
        );
        same_layout!(
            TopicPartitionList,
            rd::rd_kafka_topic_partition_list_t,
            cnt = cnt,
            size = size,
            elems = elems
        );
    }

    #[test]
    fn the_constants_are_librdkafkas() {
        use rd::rd_kafka_resp_err_t as E;
        for (ours, theirs) in [
            (NO_ERROR, E::RD_KAFKA_RESP_ERR_NO_ERROR),
            (ERR_CONFLICT, E::RD_KAFKA_RESP_ERR__CONFLICT),
            (ERR_QUEUE_FULL, E::RD_KAFKA_RESP_ERR__QUEUE_FULL),
            (ERR_INVALID_ARG, E::RD_KAFKA_RESP_ERR__INVALID_ARG),
            (ERR_UNKNOWN_TOPIC, E::RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC),
            (
                ERR_UNKNOWN_PARTITION,
                E::RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION,
            ),
            (
                ERR_TOPIC_AUTHORIZATION_FAILED,
                E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
            ),
        ] {
            assert_eq!(ours, theirs as Err, "{theirs:?}");
        }
        use rd::rd_kafka_conf_res_t as C;
        assert_eq!(CONF_UNKNOWN, C::RD_KAFKA_CONF_UNKNOWN as c_int);
        assert_eq!(CONF_INVALID, C::RD_KAFKA_CONF_INVALID as c_int);
        assert_eq!(CONF_OK, C::RD_KAFKA_CONF_OK as c_int);
        assert_eq!(
            TYPE_PRODUCER,
            rd::rd_kafka_type_t::RD_KAFKA_PRODUCER as c_int
        );
        assert_eq!(MSG_F_COPY, rd::RD_KAFKA_MSG_F_COPY as c_int);
        use rd::rd_kafka_timestamp_type_t as T;
        assert_eq!(
            TIMESTAMP_CREATE_TIME,
            T::RD_KAFKA_TIMESTAMP_CREATE_TIME as c_int
        );
        assert_eq!(
            TIMESTAMP_LOG_APPEND_TIME,
            T::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME as c_int
        );
        use rd::rd_kafka_thread_type_t as Th;
        assert_eq!(THREAD_MAIN, Th::RD_KAFKA_THREAD_MAIN as c_int);
        assert_eq!(THREAD_BROKER, Th::RD_KAFKA_THREAD_BROKER as c_int);
        // rdkafka-sys's own librdkafka, which the workspace's test clients link: the
        // version check's floor is above it (README, "librdkafka versions").
        // SAFETY: no arguments, no preconditions.
        let linked = unsafe { rd::rd_kafka_version() };
        assert!(linked < VERSION_WITHOUT_4142, "{}", version_text(linked));
        assert_eq!(version_text(0x020d_00ff), "2.13.0");
    }
}
