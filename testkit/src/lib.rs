//! Test helpers shared by the integration tests of every crate.
//!
//! The services are the real ones started by `./test.sh` or by hand with
//! `deploy/dev/kafka start` and `deploy/dev/postgres start` (see the README, "Dev
//! services"). Each locator checks, with a bounded TCP connect, that its service is up
//! and panics with the command to run when it is not, so a missing service fails a test
//! at once instead of hanging it.
//!
//! | helper | environment override | default |
//! |---|---|---|
//! | [`kafka_a`] | `KAFKA_AUDIT_TEST_KAFKA_A` | `127.0.0.1:19092` |
//! | [`kafka_b`] | `KAFKA_AUDIT_TEST_KAFKA_B` | `127.0.0.1:29092` |
//! | [`kafka_r`] | `KAFKA_AUDIT_TEST_KAFKA_R` | `127.0.0.1:18092,127.0.0.1:18093,127.0.0.1:18094` |
//! | [`pg_url`] | `KAFKA_AUDIT_TEST_PG_URL` | `postgres://postgres@127.0.0.1:55432/kafka_audit` |
//! | [`citus_url`] | `KAFKA_AUDIT_TEST_CITUS_URL` | none: the tests on Citus are skipped |
//!
//! The dev clusters have automatic topic creation off: create topics with
//! [`create_topic`] (which waits until every partition has a leader).
//!
//! One of each client and message a test needs: [`client_config`] for any Kafka client,
//! [`producer`] for test records, [`committed_offsets`] for what a group committed,
//! [`increment`] for an audit increment.

pub mod alloc;
mod clients;
mod increments;

pub use clients::{
    committed_offsets, committed_per_partition, committed_total, producer, read_log, LogRecord,
};
pub use increments::{increment, IncrementBuilder};

use std::future::Future;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::types::RDKafkaErrorCode;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::{Connection, Executor, PgConnection};

/// Environment variable naming the bootstrap servers of Kafka cluster A (regional).
pub const KAFKA_A_ENV: &str = "KAFKA_AUDIT_TEST_KAFKA_A";
/// Environment variable naming the bootstrap servers of Kafka cluster B (aggregate).
pub const KAFKA_B_ENV: &str = "KAFKA_AUDIT_TEST_KAFKA_B";
/// Environment variable naming the bootstrap servers of the replicated cluster R.
pub const KAFKA_R_ENV: &str = "KAFKA_AUDIT_TEST_KAFKA_R";
/// Environment variable holding the PostgreSQL URL of the test server.
pub const PG_URL_ENV: &str = "KAFKA_AUDIT_TEST_PG_URL";
/// Environment variable holding the URL of a Citus coordinator's database (`deploy/dev/citus url`).
pub const CITUS_URL_ENV: &str = "KAFKA_AUDIT_TEST_CITUS_URL";

const KAFKA_A_DEFAULT: &str = "127.0.0.1:19092";
const KAFKA_B_DEFAULT: &str = "127.0.0.1:29092";
const KAFKA_R_DEFAULT: &str = "127.0.0.1:18092,127.0.0.1:18093,127.0.0.1:18094";
const PG_URL_DEFAULT: &str = "postgres://postgres@127.0.0.1:55432/kafka_audit";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on admin operations against the dev clusters.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Bootstrap servers of Kafka cluster A (the regional cluster); panics if it is not up.
pub fn kafka_a() -> String {
    locate(
        KAFKA_A_ENV,
        KAFKA_A_DEFAULT,
        "Kafka cluster A",
        "deploy/dev/kafka start a",
    )
}

/// Bootstrap servers of Kafka cluster B (the aggregate cluster); panics if it is not up.
pub fn kafka_b() -> String {
    locate(
        KAFKA_B_ENV,
        KAFKA_B_DEFAULT,
        "Kafka cluster B",
        "deploy/dev/kafka start b",
    )
}

/// Bootstrap servers of the replicated cluster R (three KRaft nodes, for failover
/// tests); panics if its first node is not up.
pub fn kafka_r() -> String {
    locate(
        KAFKA_R_ENV,
        KAFKA_R_DEFAULT,
        "Kafka cluster R",
        "deploy/dev/kafka start r",
    )
}

/// URL of the test PostgreSQL server's `kafka_audit` database; panics if it is not up.
/// Tests that write should use their own database: see [`fresh_database`].
pub fn pg_url() -> String {
    let url = std::env::var(PG_URL_ENV).unwrap_or_else(|_| PG_URL_DEFAULT.to_owned());
    let address = pg_address(&url);
    check_reachable(
        "PostgreSQL",
        PG_URL_ENV,
        &address,
        "deploy/dev/postgres start",
    );
    url
}

fn locate(env: &str, default: &str, what: &str, start: &str) -> String {
    let servers = std::env::var(env).unwrap_or_else(|_| default.to_owned());
    // Bootstrap lists are `host:port,host:port`; one reachable broker is enough to start.
    let first = servers.split(',').next().unwrap_or_default().trim();
    check_reachable(what, env, first, start);
    servers
}

fn check_reachable(what: &str, env: &str, address: &str, start: &str) {
    let hint = format!(
        "{what} is not reachable at {address} (set {env} to point elsewhere). \
         Start it with `{start}` from the repository root, or run `./test.sh`, \
         which starts every service the tests need"
    );
    let addresses: Vec<_> = match address.to_socket_addrs() {
        Ok(addresses) => addresses.collect(),
        Err(e) => panic!("{hint}: cannot resolve {address}: {e}"),
    };
    let mut last_error = None;
    for candidate in &addresses {
        match TcpStream::connect_timeout(candidate, CONNECT_TIMEOUT) {
            Ok(_) => return,
            Err(e) => last_error = Some(e),
        }
    }
    match last_error {
        Some(e) => panic!("{hint}: {e}"),
        None => panic!("{hint}: {address} resolves to no address"),
    }
}

/// `host:port` of a `postgres://user@host:port/db?params` URL.
fn pg_address(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let has_port = host_port
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    if has_port {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    }
}

/// A name no other test (in this or a concurrent process) uses: `prefix-<pid>-<nanos>-<n>`.
/// Valid as a Kafka topic, group or transactional id; see [`fresh_database`] for SQL names.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// Polls `condition` every 20 ms until it holds (true) or `timeout` passes (false).
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Async [`wait_until`]: awaits `condition()` every 20 ms until it holds or `timeout` passes.
pub async fn wait_until_async<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Client configuration with only `bootstrap.servers` set.
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    config
}

/// Creates `topic` with `partitions` partitions (replication factor 1) on the cluster at
/// `bootstrap`, and waits until every partition has a leader, so producing to it right
/// after works. Panics on failure: this is a test helper.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    create_topic_with_config(bootstrap, topic, partitions, &[]).await;
}

/// [`create_topic`] with topic-level settings, e.g. `("max.message.bytes", "100")`.
pub async fn create_topic_with_config(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    config: &[(&str, &str)],
) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap)
        .create()
        .unwrap_or_else(|e| panic!("admin client for {bootstrap}: {e}"));
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (key, value) in config {
        new_topic = new_topic.set(key, value);
    }
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .unwrap_or_else(|e| panic!("create topic {topic} on {bootstrap}: {e}"));
    for result in results {
        if let Err((name, code)) = result {
            if code != RDKafkaErrorCode::TopicAlreadyExists {
                panic!("create topic {name} on {bootstrap}: {code}");
            }
        }
    }
    let ready = wait_until(ADMIN_TIMEOUT, || {
        admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .is_ok_and(|metadata| {
                metadata.topics().iter().any(|t| {
                    t.name() == topic
                        && t.error().is_none()
                        && t.partitions().len() == usize::try_from(partitions).unwrap_or(0)
                        && t.partitions().iter().all(|p| p.leader() >= 0)
                })
            })
    });
    assert!(
        ready,
        "topic {topic} on {bootstrap}: partitions without a leader after {ADMIN_TIMEOUT:?}"
    );
}

/// Creates a topic with a [`unique`] name built from `prefix` and returns the name.
pub async fn create_unique_topic(bootstrap: &str, prefix: &str, partitions: i32) -> String {
    let topic = unique(prefix);
    create_topic(bootstrap, &topic, partitions).await;
    topic
}

/// A PostgreSQL database of its own for one test, dropped (best effort) when this value is.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    admin_url: String,
    /// On a Citus cluster: the drop is propagated to the workers.
    citus: bool,
}

impl TestDatabase {
    /// Connection URL of the database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Name of the database.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime, which cannot block on a future: use a
        // short-lived runtime on a thread of its own. FORCE closes connections that
        // pools of the test may still hold.
        let admin_url = self.admin_url.clone();
        let statement = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        let citus = self.citus;
        let dropper = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if let Ok(mut conn) = admin_connect(&admin_url).await {
                    if citus {
                        let _ = conn.execute(PROPAGATE_DATABASES).await;
                    }
                    let _ = conn.execute(statement.as_str()).await;
                }
            });
        });
        let _ = dropper.join();
    }
}

/// Makes PostgreSQL refuse every row of topic `poison` inserted into `table` with
/// `message` and SQLSTATE `errcode` (a trigger): a stand-in for whatever data error
/// the database may raise on one message.
pub async fn refuse_poison(pool: &sqlx::PgPool, table: &str, message: &str, errcode: &str) {
    let sql = format!(
        "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.topic = 'poison' THEN
                 RAISE EXCEPTION '{message}' USING ERRCODE = '{errcode}';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_poison BEFORE INSERT ON {table}
             FOR EACH ROW EXECUTE FUNCTION refuse_poison();"
    );
    sqlx::raw_sql(&sql)
        .execute(pool)
        .await
        .expect("create the refuse_poison trigger");
}

/// Creates an empty database with a unique name on the test server (see [`pg_url`]).
/// Migrations are the caller's business.
pub async fn fresh_database(prefix: &str) -> TestDatabase {
    let admin_url = pg_url();
    // Unquoted SQL identifiers fold to lower case and may not contain '-'.
    let name = unique(prefix).to_ascii_lowercase().replace('-', "_");
    let mut conn = admin_connect(&admin_url)
        .await
        .unwrap_or_else(|e| panic!("connect to {admin_url}: {e}"));
    conn.execute(format!("CREATE DATABASE \"{name}\"").as_str())
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    let _ = conn.close().await;
    let url = with_database(&admin_url, &name);
    TestDatabase {
        name,
        url,
        admin_url,
        citus: false,
    }
}

/// The Citus coordinator's URL from `KAFKA_AUDIT_TEST_CITUS_URL` (a database of the
/// cluster with the extension and the workers registered, as `deploy/dev/citus start`
/// leaves `kafka_audit`), or `None` when it is not set. CI cannot build Citus, so this
/// is the one test condition allowed: callers skip, saying why.
pub fn citus_url() -> Option<String> {
    let url = std::env::var(CITUS_URL_ENV)
        .ok()
        .filter(|u| !u.is_empty())?;
    check_reachable(
        "the Citus coordinator",
        CITUS_URL_ENV,
        &pg_address(&url),
        "deploy/dev/citus start",
    );
    Some(url)
}

const PROPAGATE_DATABASES: &str = "SET citus.enable_create_database_propagation = on";

/// The harness's own connection to a test server. `CREATE EXTENSION citus` gives a
/// server without a certificate a self-signed X.509 v1 one (`ssl = on`), which rustls
/// cannot use even unverified: when the URL's mode fails, the harness (not the store
/// under test, which has its own `sslmode` handling) retries without TLS.
async fn admin_connect(url: &str) -> Result<PgConnection, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    match PgConnection::connect_with(&options).await {
        Ok(conn) => Ok(conn),
        Err(first) => PgConnection::connect_with(&options.ssl_mode(PgSslMode::Disable))
            .await
            .map_err(|_| first),
    }
}

/// Creates an empty database with a unique name on the Citus cluster of
/// [`citus_url`], on the coordinator and every worker, with the `citus` extension on
/// each and the workers registered with the coordinator: the state `deploy/dev/citus`
/// leaves its `kafka_audit` database in. `None` (with the reason printed) when
/// `KAFKA_AUDIT_TEST_CITUS_URL` is not set. Dropped on every node with the value.
pub async fn fresh_citus_database(prefix: &str) -> Option<TestDatabase> {
    let Some(admin_url) = citus_url() else {
        eprintln!(
            "skipped on Citus: {CITUS_URL_ENV} is not set (deploy/dev/citus start, then \
             export {CITUS_URL_ENV}=$(deploy/dev/citus url); README, \"Tests on Citus\")"
        );
        return None;
    };
    let fail = |what: &str, e: sqlx::Error| -> ! { panic!("Citus at {admin_url}: {what}: {e}") };
    let mut admin = admin_connect(&admin_url)
        .await
        .unwrap_or_else(|e| fail("connect", e));
    // (host, port, group): group 0 is the coordinator.
    let nodes: Vec<(String, i32, i32)> = sqlx::query_as(
        "SELECT nodename, nodeport, groupid FROM pg_dist_node
         WHERE noderole = 'primary' AND isactive ORDER BY groupid",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap_or_else(|e| fail("list the nodes (is it a Citus coordinator?)", e));
    let name = unique(prefix).to_ascii_lowercase().replace('-', "_");
    // One test database is set up at a time across every test process: node
    // registrations of two databases at once update the same shared catalog rows on a
    // worker ("tuple concurrently updated"). Released with the admin connection.
    admin
        .execute("SELECT pg_advisory_lock(hashtext('kafka-audit fresh_citus_database'))")
        .await
        .unwrap_or_else(|e| fail("wait for the other tests' set-up", e));
    admin
        .execute(PROPAGATE_DATABASES)
        .await
        .unwrap_or_else(|e| fail("propagate CREATE DATABASE", e));
    admin
        .execute(format!("CREATE DATABASE \"{name}\"").as_str())
        .await
        .unwrap_or_else(|e| fail("create the database", e));
    let db = TestDatabase {
        url: with_database(&admin_url, &name),
        name,
        admin_url: admin_url.clone(),
        citus: true,
    };
    let mut coordinator = None;
    for (host, port, group) in &nodes {
        let url = with_host(&db.url, host, *port);
        let mut conn = admin_connect(&url)
            .await
            .unwrap_or_else(|e| fail("connect to a node's new database", e));
        conn.execute("CREATE EXTENSION citus")
            .await
            .unwrap_or_else(|e| fail("create the extension", e));
        if *group == 0 {
            coordinator = Some(conn);
        }
    }
    let mut coordinator = match coordinator {
        Some(c) => c,
        None => admin_connect(&db.url)
            .await
            .unwrap_or_else(|e| fail("connect to the new database", e)),
    };
    for (host, port, group) in &nodes {
        let sql = if *group == 0 {
            "SELECT citus_set_coordinator_host($1, $2)"
        } else {
            "SELECT citus_add_node($1, $2)"
        };
        sqlx::query(sql)
            .bind(host)
            .bind(port)
            .execute(&mut coordinator)
            .await
            .unwrap_or_else(|e| fail("register a node", e));
    }
    let _ = coordinator.close().await;
    let _ = admin.close().await;
    Some(db)
}

/// `url` with its host and port replaced (user, database and parameters kept).
fn with_host(url: &str, host: &str, port: i32) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let user = authority.rsplit_once('@').map(|(user, _)| user);
    match user {
        Some(user) => format!("{scheme}://{user}@{host}:{port}{tail}"),
        None => format!("{scheme}://{host}:{port}{tail}"),
    }
}

/// `url` with its database path replaced by `database` (query parameters kept).
fn with_database(url: &str, database: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let query = tail.find('?').map_or("", |i| &tail[i..]);
    format!("{scheme}://{authority}/{database}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_address_reads_host_and_port() {
        assert_eq!(
            pg_address("postgres://postgres@127.0.0.1:55432/kafka_audit"),
            "127.0.0.1:55432"
        );
        assert_eq!(
            pg_address("postgres://u:p@db.example:6000/x?sslmode=disable"),
            "db.example:6000"
        );
        assert_eq!(pg_address("postgresql://localhost/x"), "localhost:5432");
        assert_eq!(pg_address("postgres://[::1]:7000/x"), "[::1]:7000");
    }

    #[test]
    fn with_database_replaces_the_path_only() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:55432/kafka_audit", "t1"),
            "postgres://postgres@127.0.0.1:55432/t1"
        );
        assert_eq!(
            with_database("postgres://u@h:1/db?sslmode=disable", "t2"),
            "postgres://u@h:1/t2?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u@h:1", "t3"),
            "postgres://u@h:1/t3"
        );
    }

    #[test]
    fn with_host_replaces_host_and_port_only() {
        assert_eq!(
            with_host("postgres://u:p@h:1/db?sslmode=disable", "127.0.0.1", 55441),
            "postgres://u:p@127.0.0.1:55441/db?sslmode=disable"
        );
        assert_eq!(with_host("postgres://h/db", "w", 7), "postgres://w:7/db");
    }

    #[test]
    fn unique_names_differ() {
        let a = unique("t");
        let b = unique("t");
        assert_ne!(a, b);
        assert!(a.starts_with("t-"));
    }

    #[test]
    fn wait_until_reports_timeout_and_success() {
        assert!(!wait_until(Duration::from_millis(50), || false));
        let mut calls = 0;
        assert!(wait_until(Duration::from_secs(1), || {
            calls += 1;
            calls == 3
        }));
    }

    #[test]
    #[should_panic(expected = "deploy/dev/kafka start a")]
    fn unreachable_service_names_the_script_to_run() {
        // Port 1 on loopback: nothing listens there.
        check_reachable(
            "Kafka cluster A",
            KAFKA_A_ENV,
            "127.0.0.1:1",
            "deploy/dev/kafka start a",
        );
    }
}
