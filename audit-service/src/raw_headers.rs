//! A consumed record's headers, read without rdkafka's `Headers::iter`.
//!
//! rdkafka 0.39's `BorrowedHeaders::try_get` converts each header name with
//! `CStr::to_str().unwrap()`, so a record whose header *name* is not UTF-8 panics the
//! consume thread — and any producer can write one (`rd_kafka_header_add` takes raw
//! bytes, and the wire format does not check). This module is the only place the
//! service reads headers, and it hands names over as bytes.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::ptr;

use rdkafka::bindings::{
    rd_kafka_header_get_all, rd_kafka_headers_t, rd_kafka_message_headers, rd_kafka_resp_err_t,
};
use rdkafka::message::BorrowedMessage;

/// Calls `f(name, value)` for each header of `m`, in record order. `name` is the raw
/// name (up to its first NUL byte, as librdkafka stores it); `value` is None for a
/// null value.
pub(crate) fn for_each(m: &BorrowedMessage<'_>, mut f: impl FnMut(&[u8], Option<&[u8]>)) {
    let mut hdrs: *mut rd_kafka_headers_t = ptr::null_mut();
    // SAFETY: `m.ptr()` is the live `rd_kafka_message_t` that `m` borrows from the
    // consumer; the call only writes `hdrs`, which then points to the header list the
    // message owns (parsed on first use, as rdkafka's own `Message::headers` does),
    // valid as long as `m`, which outlives this function.
    let err = unsafe { rd_kafka_message_headers(m.ptr(), &mut hdrs) };
    if err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || hdrs.is_null() {
        // RD_KAFKA_RESP_ERR__NOENT: no headers.
        return;
    }
    for idx in 0.. {
        let mut name: *const std::ffi::c_char = ptr::null();
        let mut value: *const std::ffi::c_void = ptr::null();
        let mut size = 0usize;
        // SAFETY: `hdrs` is valid (above) and only read; an `idx` past the last header
        // returns an error and writes nothing.
        let err = unsafe { rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size) };
        if err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return;
        }
        // SAFETY: librdkafka stores every header name NUL-terminated (it copies the
        // name's bytes and appends a NUL), inside the header list, which lives as long
        // as `m`. No UTF-8 is assumed.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        let value = (!value.is_null()).then(|| {
            // SAFETY: a non-null value points to `size` bytes owned by the header list
            // (same lifetime as `name`).
            unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }
        });
        f(name, value);
    }
}
