//! Running the test clients (`tests/clients/`): each is a separate process, as an
//! application is, with the plugin added by its configuration.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A librdkafka client of the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// confluent-kafka's wheel from PyPI.
    Python,
    /// `client.c` on the workspace's librdkafka.
    C,
    /// rust-rdkafka.
    Rust,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Python, Kind::C, Kind::Rust];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Python => "python",
            Kind::C => "c",
            Kind::Rust => "rust",
        }
    }
}

/// The plugin as cargo built it for these tests: `target/<profile>/deps/libkafka_audit_interceptor.so`,
/// beside this test binary (the copy in `target/<profile>/` is only refreshed by a
/// `cargo build` of the crate itself, so it may be stale).
pub fn plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let so = exe.with_file_name("libkafka_audit_interceptor.so");
    assert!(so.exists(), "{} not built", so.display());
    so
}

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv's python with confluent-kafka (`deploy/dev/python-clients`, which test.sh
/// runs too; `KAFKA_AUDIT_TEST_PYTHON` names another interpreter).
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            if let Ok(p) = std::env::var("KAFKA_AUDIT_TEST_PYTHON") {
                return p.into();
            }
            let out = Command::new(workspace().join("deploy/dev/python-clients"))
                .stderr(Stdio::inherit())
                .output()
                .expect("run deploy/dev/python-clients");
            assert!(out.status.success(), "deploy/dev/python-clients failed");
            PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
        })
        .clone()
}

/// The command line of client `kind`.
fn command(kind: Kind) -> Command {
    match kind {
        Kind::Python => {
            let mut c = Command::new(python());
            c.arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/client.py"));
            c
        }
        Kind::C => Command::new(env!("CARGO_BIN_EXE_kai-c-client")),
        Kind::Rust => Command::new(env!("CARGO_BIN_EXE_kai-rdkafka-client")),
    }
}

/// How a client loads the plugin: its properties, and (rust-rdkafka) the properties
/// file the plugin reads, since rust-rdkafka applies properties in no fixed order.
pub struct PluginConfig {
    pub props: Vec<String>,
    env: Vec<(String, String)>,
    _file: Option<tempfile::NamedTempFile>,
}

impl PluginConfig {
    /// `plugin.library.paths` and the `kafka_audit.*` settings `settings` (names
    /// without the prefix) for client `kind`.
    pub fn new(kind: Kind, settings: &[(&str, &str)]) -> PluginConfig {
        Self::with_library(kind, &plugin(), settings)
    }

    pub fn with_library(
        kind: Kind,
        library: &std::path::Path,
        settings: &[(&str, &str)],
    ) -> PluginConfig {
        let mut props = vec![format!("plugin.library.paths={}", library.display())];
        // The C and rust-rdkafka clients link rdkafka-sys's librdkafka 2.12.1, which
        // the plugin refuses unless told the application never destroys a
        // configuration after a failed rd_kafka_new (neither does: #4142).
        let mut env = Vec::new();
        if kind != Kind::Python {
            env.push((ACCEPT_4142.to_string(), "1".to_string()));
        }
        let lines: Vec<String> = settings
            .iter()
            .map(|(k, v)| format!("kafka_audit.{k}={v}"))
            .collect();
        if kind != Kind::Rust {
            props.extend(lines);
            return PluginConfig {
                props,
                env,
                _file: None,
            };
        }
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            f,
            "# kafka-audit-interceptor settings\n{}",
            lines.join("\n")
        )
        .unwrap();
        env.push((
            "KAFKA_AUDIT_INTERCEPTOR_PROPERTIES".into(),
            f.path().display().to_string(),
        ));
        PluginConfig {
            props,
            env,
            _file: Some(f),
        }
    }

    /// The same, as a host that has not accepted a librdkafka older than 2.13.0.
    pub fn without_accepting_4142(mut self) -> PluginConfig {
        self.env.retain(|(k, _)| k != ACCEPT_4142);
        self
    }

    /// With `props` added (librdkafka's own, e.g. the mock cluster's).
    pub fn with(mut self, props: &[&str]) -> PluginConfig {
        self.props.extend(props.iter().map(|p| p.to_string()));
        self
    }
}

/// The plugin's `ACCEPT_4142_ENV`.
pub const ACCEPT_4142: &str = "KAFKA_AUDIT_INTERCEPTOR_ACCEPT_LIBRDKAFKA_4142";

/// What a client run printed (its last stdout line, JSON) and its stderr.
pub struct Output {
    pub json: Value,
    pub stderr: String,
    pub ok: bool,
}

/// Runs client `kind` with `args` then the plugin's properties, bounded by `limit`.
pub fn run(kind: Kind, args: &[String], plugin: &PluginConfig, limit: Duration) -> Output {
    run_under(&[], kind, args, plugin, limit)
}

/// As `run`, the client started by the program `wrapper` (e.g. valgrind and its
/// options) when not empty.
pub fn run_under(
    wrapper: &[&str],
    kind: Kind,
    args: &[String],
    plugin: &PluginConfig,
    limit: Duration,
) -> Output {
    let mut cmd = command(kind);
    if let Some((program, options)) = wrapper.split_first() {
        let client = cmd.get_program().to_owned();
        let client_args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
        cmd = Command::new(program);
        cmd.args(options).arg(client).args(client_args);
    }
    cmd.args(args)
        .args(&plugin.props)
        .envs(plugin.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("start {kind:?} client: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for client") {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut out).ok();
    child.stderr.take().unwrap().read_to_string(&mut err).ok();
    let json = out
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    Output {
        ok: status.is_some_and(|s| s.success()),
        json,
        stderr: err,
    }
}

/// The messages every client produces: message `i` of `count` has key `k<i>`, JSON value
/// with its id and event time `base + i * span / count`, partition `i % partitions`.
pub fn message(i: i64, count: i64, base: i64, span: i64) -> (String, String, i64) {
    let ts = base + i * span / count;
    (format!("k{i}"), format!("{{\"id\":{i},\"ts\":{ts}}}"), ts)
}

/// `produce` arguments.
pub fn produce_args(
    bootstrap: &str,
    topic: &str,
    count: i64,
    base: i64,
    span: i64,
    partitions: i32,
) -> Vec<String> {
    [
        "produce",
        bootstrap,
        topic,
        &count.to_string(),
        &base.to_string(),
        &span.to_string(),
        &partitions.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// `consume` arguments.
pub fn consume_args(
    bootstrap: &str,
    topic: &str,
    group: &str,
    expected: u64,
    timeout_s: u64,
) -> Vec<String> {
    [
        "consume",
        bootstrap,
        topic,
        group,
        &expected.to_string(),
        &timeout_s.to_string(),
    ]
    .map(String::from)
    .to_vec()
}
