//! Where the CPU went: a process's and its threads' CPU time and the machine's busy
//! fraction (from /proc), and a process's peak RSS.

use std::collections::BTreeMap;
use std::process::Command;

/// utime + stime, in seconds, from the text of a /proc/…/stat file.
pub(crate) fn stat_cpu_secs(stat: &str) -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let ticks = *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    });
    // Fields after the command name (which may contain spaces) start at `state`.
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    f.get(11)
        .zip(f.get(12))
        .map_or(0.0, |(u, s)| (u + s) / ticks)
}

/// CPU time (user + system, all threads) of process `pid` so far, in seconds.
pub(crate) fn process_cpu_secs(pid: u32) -> f64 {
    stat_cpu_secs(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// CPU seconds per thread of process `pid`, keyed by (thread name, thread id).
pub(crate) fn thread_cpu_secs(pid: u32) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let name = stat
            .split_once(" (")
            .and_then(|(_, r)| r.rsplit_once(") "))
            .map_or("?", |(n, _)| n)
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .to_string();
        let tid = t.file_name().to_string_lossy().into_owned();
        out.insert((name, tid), stat_cpu_secs(&stat));
    }
    out
}

/// (busy, total) jiffies of the whole machine, from /proc/stat.
pub(crate) fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Where the CPU went over a measured span: the measured process's CPU per message and
/// the machine's busy fraction (the broker runs on the same cores).
pub(crate) struct Span {
    label: &'static str,
    pid: u32,
    cpu0: f64,
    jiffies0: (u64, u64),
    threads0: BTreeMap<(String, String), f64>,
}

impl Span {
    pub(crate) fn start(label: &'static str, pid: u32) -> Span {
        Span {
            label,
            pid,
            cpu0: process_cpu_secs(pid),
            jiffies0: machine_jiffies(),
            threads0: thread_cpu_secs(pid),
        }
    }

    /// (process CPU µs per message, machine busy %)
    pub(crate) fn end(&self, messages: u64) -> (f64, f64) {
        let cpu = process_cpu_secs(self.pid) - self.cpu0;
        // Per thread name: the sum, and the busiest thread when several share the name
        // (the service's consume loop runs on one of tokio's threads).
        let mut by_name: BTreeMap<String, (f64, f64, usize)> = BTreeMap::new();
        for (key, secs) in thread_cpu_secs(self.pid) {
            let d = secs - self.threads0.get(&key).copied().unwrap_or(0.0);
            if d > 0.0 {
                let e = by_name.entry(key.0).or_insert((0.0, 0.0, 0));
                e.0 += d;
                e.1 = e.1.max(d);
                e.2 += 1;
            }
        }
        let per = |secs: f64| secs * 1e6 / messages.max(1) as f64;
        let per_thread: Vec<String> = by_name
            .into_iter()
            .map(|(name, (sum, max, n))| {
                if n > 1 {
                    format!(
                        "{name} {:.3} ({n} threads, busiest {:.3})",
                        per(sum),
                        per(max)
                    )
                } else {
                    format!("{name} {:.3}", per(sum))
                }
            })
            .collect();
        eprintln!(
            "  {}: µs CPU/msg by thread: {}",
            self.label,
            per_thread.join(", ")
        );
        let (b1, t1) = machine_jiffies();
        let busy = (b1 - self.jiffies0.0) as f64 / (t1 - self.jiffies0.1).max(1) as f64;
        (cpu * 1e6 / messages.max(1) as f64, busy * 100.0)
    }
}

pub(crate) fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}
