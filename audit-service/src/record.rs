//! A consumed record read straight from librdkafka's `rd_kafka_message_t`, whether it
//! came through rust-rdkafka's `poll` (a `BorrowedMessage`) or in a batch from the
//! consume loop's fetch queue (`kafka::fetch`), which has no rust-rdkafka type.
//!
//! Headers are read without rdkafka's `Headers::iter`: rdkafka 0.39's
//! `BorrowedHeaders::try_get` converts each header name with `CStr::to_str().unwrap()`,
//! so a record whose header *name* is not UTF-8 panics the consume thread — and any
//! producer can write one (`rd_kafka_header_add` takes raw bytes, and the wire format
//! does not check). This module is the only place the service reads headers, and it
//! hands names over as bytes. Likewise the topic name is never unwrapped as UTF-8.
#![allow(unsafe_code)]

use std::borrow::Cow;
use std::ffi::CStr;
use std::ptr;

use rdkafka::bindings::{
    rd_kafka_header_get_all, rd_kafka_headers_t, rd_kafka_message_headers, rd_kafka_message_t,
    rd_kafka_message_timestamp, rd_kafka_resp_err_t, rd_kafka_timestamp_type_t,
    rd_kafka_topic_name,
};
use rdkafka::message::{BorrowedMessage, Timestamp};

/// A view of one consumed message, valid as long as librdkafka keeps it (`'a`).
#[derive(Clone, Copy)]
pub struct Record<'a> {
    m: &'a rd_kafka_message_t,
}

impl<'a> Record<'a> {
    /// The message rust-rdkafka's `poll` returned.
    pub fn of(m: &'a BorrowedMessage<'_>) -> Record<'a> {
        // SAFETY: `m.ptr()` is the live `rd_kafka_message_t` that `m` owns until it is
        // dropped, which the borrow `'a` outlives; it is only read through this view.
        Record {
            m: unsafe { &*m.ptr() },
        }
    }

    /// # Safety
    /// `p` is a non-null message returned by librdkafka and not destroyed before `'a`
    /// ends.
    pub unsafe fn from_ptr(p: *const rd_kafka_message_t) -> Record<'a> {
        // SAFETY: the caller's promise.
        Record { m: unsafe { &*p } }
    }

    /// The consumer error this message carries instead of a record, if any (then its
    /// payload is the error's text, not a record's value).
    pub fn error(&self) -> Option<rd_kafka_resp_err_t> {
        (self.m.err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR).then_some(self.m.err)
    }

    /// The topic handle's address: the same for every message of one topic, so a
    /// change of topic is seen without reading the name.
    pub fn topic_ptr(&self) -> usize {
        self.m.rkt as usize
    }

    /// The topic's name (bytes that are not UTF-8 replaced, never a panic).
    pub fn topic(&self) -> Cow<'a, str> {
        if self.m.rkt.is_null() {
            return Cow::Borrowed("");
        }
        // SAFETY: a consumed message's topic handle lives at least as long as the
        // message, and its name is NUL-terminated.
        let name = unsafe { CStr::from_ptr(rd_kafka_topic_name(self.m.rkt)) };
        String::from_utf8_lossy(name.to_bytes())
    }

    pub fn partition(&self) -> i32 {
        self.m.partition
    }

    pub fn offset(&self) -> i64 {
        self.m.offset
    }

    pub fn key(&self) -> Option<&'a [u8]> {
        // SAFETY: a non-null key points to `key_len` bytes owned by the message.
        (!self.m.key.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(self.m.key.cast::<u8>(), self.m.key_len) })
    }

    pub fn payload(&self) -> Option<&'a [u8]> {
        // SAFETY: a non-null payload points to `len` bytes owned by the message.
        (!self.m.payload.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(self.m.payload.cast::<u8>(), self.m.len) })
    }

    /// The record's timestamp, as rust-rdkafka's `Message::timestamp` reads it.
    pub fn timestamp(&self) -> Timestamp {
        let mut kind = rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: reads the live message and writes `kind` only.
        let ms = unsafe { rd_kafka_message_timestamp(self.m, &mut kind) };
        match kind {
            _ if ms == -1 => Timestamp::NotAvailable,
            rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => Timestamp::CreateTime(ms),
            rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => {
                Timestamp::LogAppendTime(ms)
            }
            _ => Timestamp::NotAvailable,
        }
    }

    /// Calls `f(name, value)` for each header, in record order. `name` is the raw
    /// name (up to its first NUL byte, as librdkafka stores it); `value` is None for a
    /// null value.
    pub fn for_each_header(&self, mut f: impl FnMut(&[u8], Option<&[u8]>)) {
        let mut hdrs: *mut rd_kafka_headers_t = ptr::null_mut();
        // SAFETY: `self.m` is a live message; the call only writes `hdrs`, which then
        // points to the header list the message owns (parsed on first use, as
        // rdkafka's own `Message::headers` does), valid as long as the message.
        // librdkafka takes the message as mutable only to cache the parsed list.
        let err = unsafe { rd_kafka_message_headers(ptr::from_ref(self.m).cast_mut(), &mut hdrs) };
        if err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || hdrs.is_null() {
            // RD_KAFKA_RESP_ERR__NOENT: no headers.
            return;
        }
        for idx in 0.. {
            let mut name: *const std::ffi::c_char = ptr::null();
            let mut value: *const std::ffi::c_void = ptr::null();
            let mut size = 0usize;
            // SAFETY: `hdrs` is valid (above) and only read; an `idx` past the last
            // header returns an error and writes nothing.
            let err =
                unsafe { rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size) };
            if err != rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
                return;
            }
            // SAFETY: librdkafka stores every header name NUL-terminated (it copies
            // the name's bytes and appends a NUL), inside the header list, which lives
            // as long as the message. No UTF-8 is assumed.
            let name = unsafe { CStr::from_ptr(name) }.to_bytes();
            let value = (!value.is_null()).then(|| {
                // SAFETY: a non-null value points to `size` bytes owned by the header
                // list (same lifetime as `name`).
                unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }
            });
            f(name, value);
        }
    }
}
