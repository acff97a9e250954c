//! The test clients (feature `test-clients`): compiles the C client, and makes both
//! client programs export librdkafka's `rd_kafka_*` functions, which the plugin looks
//! up in the program that loaded it (a static librdkafka is invisible to it otherwise,
//! and the linker drops what the program itself does not call).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "test-clients")]
    {
        println!("cargo:rerun-if-changed=tests/clients/client.c");
        // Objects linked into the C client's program only: a link-lib directive would
        // reach the plugin library too, with the client's undefined rd_kafka_* symbols.
        let objects = cc::Build::new()
            .file("tests/clients/client.c")
            .warnings(true)
            .cargo_metadata(false)
            .compile_intermediates();
        for o in objects {
            println!("cargo:rustc-link-arg-bin=kai-c-client={}", o.display());
        }
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=rd_kafka_*");
    }
}
