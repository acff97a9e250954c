//! The store's PostgreSQL connection over TLS, `sslmode` as libpq defines it, against
//! private servers with `ssl = on` started by `deploy/dev/postgres` on free ports (the
//! shared dev server is left alone):
//! - one with the test certificate of `common/tests/data` (X.509 v3, SAN localhost and
//!   127.0.0.1): `prefer` and `require` encrypt, `verify-full` verifies;
//! - one with a self-signed X.509 **v1** certificate made by openssl, as Citus makes
//!   for itself when a node has none: rustls cannot use such a certificate even
//!   unverified, so the default `prefer` connects without TLS, and `require` and
//!   `verify-full` fail with an error naming the host, the mode and the cause.

use std::path::{Path, PathBuf};
use std::process::Command;

use store::{Deployment, Store};

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

    /// Starts a server that serves TLS with the certificate and key at these paths.
    async fn with_tls(certificate: &Path, key: &Path) -> Server {
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
        std::fs::copy(certificate, server.data.join("server.crt")).unwrap();
        std::fs::copy(key, server.data.join("server.key")).unwrap();
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
        let admin = sqlx::PgPool::connect(&server.url("?sslmode=disable"))
            .await
            .expect("plaintext connection");
        for sql in ["ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()"] {
            sqlx::raw_sql(sql).execute(&admin).await.unwrap();
        }
        // The reload is asynchronous: wait until the server offers TLS.
        let offered = testkit::wait_until_async(std::time::Duration::from_secs(10), || async {
            let ssl: Result<String, _> = sqlx::query_scalar("SHOW ssl").fetch_one(&admin).await;
            // a new connection per check: SHOW answers from the reloaded configuration
            ssl.is_ok_and(|s| s == "on")
        })
        .await;
        assert!(offered, "the server did not turn TLS on");
        admin.close().await;
        server
    }

    fn url(&self, query: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/kafka_audit{query}",
            self.port
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.script("reset");
    }
}

/// Whether the store's connection is encrypted.
async fn encrypted(store: &Store) -> bool {
    let Store::Postgres(pg) = store else {
        unreachable!()
    };
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(pg.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verifiable_certificate_encrypts_under_prefer_require_and_verify_full() {
    let data = repo().join("common/tests/data");
    let root = data.join("localhost.crt");
    let server = Server::with_tls(&root, &data.join("localhost.key")).await;
    for query in [
        String::new(),
        "?sslmode=prefer".into(),
        "?sslmode=require".into(),
        format!("?sslmode=verify-ca&sslrootcert={}", root.display()),
        format!("?sslmode=verify-full&sslrootcert={}", root.display()),
    ] {
        let url = server.url(&query);
        let store = Store::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        store.ping().await.unwrap();
        assert!(encrypted(&store).await, "{url}: not encrypted");
    }
    // verify-full with another root than the one that signed the server's
    // certificate: refused, and said so.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.crt");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=another-root",
        "-days",
        "2",
        "-keyout",
        dir.path().join("other.key").to_str().unwrap(),
        "-out",
        other.to_str().unwrap(),
    ]);
    let url = server.url(&format!(
        "?sslmode=verify-full&sslrootcert={}",
        other.display()
    ));
    let e = Store::connect(&url).await.unwrap_err().to_string();
    for needle in [
        format!("PostgreSQL at 127.0.0.1:{}", server.port),
        "sslmode=verify-full".into(),
        "not signed by a root of sslrootcert".into(),
    ] {
        assert!(e.contains(&needle), "{url}: {needle:?} not in: {e}");
    }
}

/// A self-signed X.509 v1 certificate and its key, made with openssl as
/// `CREATE EXTENSION citus` makes one (`openssl x509 -req` without extensions).
fn v1_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (key, csr, crt) = (dir.join("v1.key"), dir.join("v1.csr"), dir.join("v1.crt"));
    for args in [
        vec!["genrsa", "-out", key.to_str().unwrap(), "2048"],
        vec![
            "req",
            "-new",
            "-key",
            key.to_str().unwrap(),
            "-subj",
            "/CN=v1-self-signed",
            "-out",
            csr.to_str().unwrap(),
        ],
        vec![
            "x509",
            "-req",
            "-in",
            csr.to_str().unwrap(),
            "-signkey",
            key.to_str().unwrap(),
            "-days",
            "2",
            "-out",
            crt.to_str().unwrap(),
        ],
    ] {
        openssl(&args);
    }
    let text = openssl(&["x509", "-noout", "-text", "-in", crt.to_str().unwrap()]);
    assert!(text.contains("Version: 1 (0x0)"), "not a v1 certificate");
    (crt, key)
}

/// Runs openssl; its standard output.
fn openssl(args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl (test.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_certificate_falls_back_under_prefer_and_fails_clearly_when_tls_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = v1_certificate(dir.path());
    let server = Server::with_tls(&crt, &key).await;
    let host = format!("127.0.0.1:{}", server.port);

    // The default URL (sslmode=prefer, libpq's default): works, without TLS.
    for query in ["", "?sslmode=prefer"] {
        let url = server.url(query);
        let store = Store::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        store.ping().await.unwrap();
        assert!(!encrypted(&store).await, "{url}");
    }

    // TLS required: the documented message (docs/operations.md, "TLS to PostgreSQL").
    for (query, mode) in [
        ("?sslmode=require".to_string(), "require"),
        (
            format!("?sslmode=verify-full&sslrootcert={}", crt.display()),
            "verify-full",
        ),
    ] {
        let url = server.url(&query);
        let e = Store::connect(&url).await.unwrap_err().to_string();
        for needle in [
            format!("PostgreSQL at {host}"),
            format!("sslmode={mode}"),
            "X.509 v1".to_string(),
        ] {
            assert!(e.contains(&needle), "{url}: {needle:?} not in: {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tls_is_plain_under_prefer_and_refused_when_tls_is_required() {
    // The dev server runs with ssl = off (deploy/dev/postgres).
    let db = testkit::fresh_database("store_no_tls").await;
    let separator = if db.url().contains('?') { '&' } else { '?' };
    let store = Store::connect(&format!("{}{separator}sslmode=prefer", db.url()))
        .await
        .unwrap();
    store.ping().await.unwrap();
    assert!(!encrypted(&store).await);

    for mode in ["require", "verify-full"] {
        let url = format!("{}{separator}sslmode={mode}", db.url());
        let e = Store::connect(&url).await.unwrap_err().to_string();
        for needle in [
            format!("sslmode={mode}"),
            "the server does not offer TLS".to_string(),
        ] {
            assert!(e.contains(&needle), "{url}: {needle:?} not in: {e}");
        }
    }
}
