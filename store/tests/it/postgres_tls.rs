//! The store's PostgreSQL connection over TLS (`sslmode=verify-full`), against a
//! private server with `ssl = on` started by `deploy/dev/postgres` on a free port (the
//! shared dev server is left alone). The server's certificate is the test certificate
//! of `common/tests/data` (SAN localhost and 127.0.0.1; the address is checked).

use std::path::{Path, PathBuf};
use std::process::Command;

use store::{AuditStore, Store};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private server; stopped and deleted on drop.
struct Server {
    port: u16,
    data: PathBuf,
}

impl Server {
    fn script(&self, arg: &str) -> std::process::Output {
        Command::new(repo().join("deploy/dev/postgres"))
            .arg(arg)
            .env("KAFKA_AUDIT_PG_PORT", self.port.to_string())
            .env("KAFKA_AUDIT_PG_DATA", &self.data)
            .output()
            .expect("run deploy/dev/postgres")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.script("reset");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_with_sslmode_verify_full() {
    let port = free_port();
    let server = Server {
        port,
        data: PathBuf::from(format!("/var/tmp/kafka-audit-dev/postgres-tls-{port}")),
    };
    let out = server.script("start");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The certificate and key in the data directory, owned by the server's user.
    let data = repo().join("common/tests/data");
    for (from, to) in [
        ("localhost.crt", "server.crt"),
        ("localhost.key", "server.key"),
    ] {
        std::fs::copy(data.join(from), server.data.join(to)).unwrap();
    }
    let is_root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    if is_root {
        let chown = Command::new("chown")
            .args(["postgres:", "server.crt", "server.key"])
            .current_dir(&server.data)
            .status()
            .unwrap();
        assert!(chown.success());
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        server.data.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let plain = format!("postgres://postgres@127.0.0.1:{port}/kafka_audit");
    let admin = Store::connect(&plain).await.expect("plaintext connection");
    let Store::Postgres(pg) = &admin else {
        unreachable!()
    };
    for sql in ["ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()"] {
        sqlx::raw_sql(sql).execute(pg.pool()).await.unwrap();
    }
    let root = data.join("localhost.crt");
    let url = format!(
        "postgres://postgres@127.0.0.1:{port}/kafka_audit?sslmode=verify-full&sslrootcert={}",
        root.display()
    );
    // The reload is asynchronous: poll until a TLS connection is accepted.
    let mut last = None;
    let mut store = None;
    for _ in 0..100 {
        match Store::connect(&url).await {
            Ok(s) => {
                store = Some(s);
                break;
            }
            Err(e) => {
                last = Some(e.to_string());
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    let store = store.unwrap_or_else(|| panic!("no TLS connection: {last:?}"));
    store.ping().await.unwrap();
    let Store::Postgres(pg) = &store else {
        unreachable!()
    };
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(pg.pool())
        .await
        .unwrap();
    assert!(ssl, "the connection is not encrypted");
    drop(store);
    drop(admin);
}
