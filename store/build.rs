// sqlx::migrate! embeds migrations/ (and, for feature test-support, the old schema's
// copies under tests/fixtures) at compile time; rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    println!("cargo:rerun-if-changed=tests/fixtures/postgres_v1");
}
