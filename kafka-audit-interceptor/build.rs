//! The plugin's link (it is never unloaded), and the test clients (feature
//! `test-clients`): compiles the C client, and makes both
//! client programs export librdkafka's `rd_kafka_*` functions, which the plugin looks
//! up in the program that loaded it (a static librdkafka is invisible to it otherwise,
//! and the linker drops what the program itself does not call).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The plugin stays mapped once loaded (DF_1_NODELETE): librdkafka closes its library
    // with the last configuration that loaded it, and without this the loader unmapped
    // it there, leaking what its statics hold (audit-lib's bucket tables, ~21 KB) at
    // every load of a process that makes a client per job (valgrind, tests/it/harm.rs).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    #[cfg(feature = "test-clients")]
    {
        for f in ["client.c", "accounting.c", "accounting.h"] {
            println!("cargo:rerun-if-changed=tests/clients/{f}");
        }
        // Objects linked into the client programs only: a link-lib directive would
        // reach the plugin library too, with the client's undefined rd_kafka_* symbols.
        // The accounting goes into both programs (one definition of what the benchmark
        // measures), the C client's code into its own.
        let compile = |file: &str| {
            cc::Build::new()
                .file(format!("tests/clients/{file}"))
                .warnings(true)
                .cargo_metadata(false)
                .compile_intermediates()
        };
        for o in compile("client.c") {
            println!("cargo:rustc-link-arg-bin=kai-c-client={}", o.display());
        }
        for o in compile("accounting.c") {
            for bin in ["kai-c-client", "kai-rdkafka-client"] {
                println!("cargo:rustc-link-arg-bin={bin}={}", o.display());
            }
        }
        println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=rd_kafka_*");
    }
}
