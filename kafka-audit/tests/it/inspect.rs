//! `kafka-audit inspect` as a process: stdin in, JSON lines out; a config file; a
//! clear error for a bad config.

use std::io::Write;
use std::process::{Command, Stdio};

fn run(args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
        .arg("inspect")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kafka-audit");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// The JSON lines of a run that succeeded (else fails with its stderr).
fn json_lines(out: std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn inspect_prints_one_json_object_per_line_and_honours_the_config() {
    let input = b"{\"ts\":1764410400123}\n{\"meta\":{\"t\":\"2025-11-29T10:00:00Z\"}}\nnot json\n";
    let out = run(&["--json", "--observed-at", "2025-11-29T10:05:00Z"], input);
    let lines = json_lines(out);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["classification"], "event_time");
    assert_eq!(lines[0]["event_time_ms"], 1_764_410_400_123i64);
    assert_eq!(lines[0]["source"], "field");
    assert_eq!(lines[0]["unit"], "ms");
    assert_eq!(lines[0]["window_start_ms"], 1_764_410_400_000i64);
    assert_eq!(lines[1]["classification"], "no_time");
    assert_eq!(lines[2]["classification"], "malformed");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("et.toml");
    std::fs::write(
        &cfg,
        "window_size = \"1m\"\n[[rules]]\ntopic = \"metrics.*\"\nfields = [\"meta.t\"]\n",
    )
    .unwrap();
    let out = run(
        &[
            "--json",
            "--topic",
            "metrics.cpu",
            "--config",
            cfg.to_str().unwrap(),
            "--observed-at",
            "1764410700000",
        ],
        input,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second: serde_json::Value = serde_json::from_str(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .nth(1)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(second["classification"], "event_time");
    assert_eq!(second["unit"], "rfc3339");
    assert_eq!(second["event_time_ms"], 1_764_410_400_000i64);

    let out = run(&["--summary", "--observed-at", "1764410700000"], input);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "total 3\nevent_time 1\nout_of_bounds 0\nno_time 1\nmalformed 1\nobserved 2\n"
    );
    // With a record timestamp, what has no field time is windowed by it (as at every
    // tier), not by observation time.
    let out = run(
        &[
            "--json",
            "--observed-at",
            "1764410700000",
            "--record-timestamp",
            "2025-11-29T09:30:00Z",
        ],
        input,
    );
    let lines = json_lines(out);
    assert_eq!(lines[0]["windowed_by"], "event_time");
    for l in &lines[1..] {
        assert_eq!(l["windowed_by"], "create_time", "{l}");
        assert_eq!(l["window_start_ms"], 1_764_408_600_000i64, "{l}");
    }

    std::fs::write(&cfg, "[default]\nunitz = \"ms\"\n").unwrap();
    let out = run(&["--config", cfg.to_str().unwrap()], input);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unitz") && err.contains("et.toml"), "{err}");
}
