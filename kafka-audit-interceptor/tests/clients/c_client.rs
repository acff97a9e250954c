//! The C test client (`client.c`): this `main` only hands the command line to it. The
//! program links the workspace's librdkafka (rdkafka-sys, static) and exports its
//! `rd_kafka_*` functions for the plugin (build.rs).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CString};

// librdkafka's static library comes with rdkafka-sys, through rdkafka.
use rdkafka as _;

extern "C" {
    fn kai_c_client_main(argc: c_int, argv: *mut *mut c_char) -> c_int;
}

fn main() {
    let args: Vec<CString> = std::env::args()
        .map(|a| CString::new(a).expect("no NUL in arguments"))
        .collect();
    let mut argv: Vec<*mut c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    // SAFETY: argv is a NULL-terminated array of C strings that outlive the call.
    let code = unsafe { kai_c_client_main(args.len() as c_int, argv.as_mut_ptr()) };
    std::process::exit(code);
}
