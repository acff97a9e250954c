//! The benchmark's accounting, as the C client keeps it (client.c): each thread's CPU
//! time and time spent runnable but waiting for a CPU (`/proc/self/task/<tid>/schedstat`,
//! ns) with its name; the machine's busy and total time (`/proc/stat`); another
//! process's CPU time (the broker's). Taken when the first message is produced and after
//! the flush, so the differences are the producer's work on exactly those messages.
#![allow(unsafe_code)]

use std::collections::HashMap;

struct Thread {
    tid: u32,
    name: String,
    cpu_ns: i64,
    wait_ns: i64,
}

pub struct Snapshot {
    threads: Vec<Thread>,
    machine_busy: i64,
    machine_total: i64,
    broker_ticks: i64,
}

fn threads() -> Vec<Thread> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let tid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("schedstat")).ok()?;
        let mut f = stat.split_whitespace().map(|x| x.parse::<i64>());
        let (cpu_ns, wait_ns) = (f.next()?.ok()?, f.next()?.ok()?);
        let name = std::fs::read_to_string(e.path().join("comm"))
            .map_or_else(|_| "?".to_string(), |n| n.trim_end().to_string());
        Some(Thread {
            tid,
            name,
            cpu_ns,
            wait_ns,
        })
    })
    .collect()
}

/// Busy (not idle, not waiting for I/O) and total time of all CPUs, in ticks.
fn machine_ticks() -> (i64, i64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<i64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .map(|l| {
            l.split_whitespace()
                .take(8)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if v.len() < 8 {
        return (0, 0);
    }
    let total: i64 = v.iter().sum();
    (total - v[3] - v[4], total)
}

/// utime + stime of process `pid` in ticks (0 when it cannot be read).
fn process_ticks(pid: u32) -> i64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // After the name (which may hold spaces): state is field 3, utime 14, stime 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<i64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

impl Snapshot {
    pub fn take(broker_pid: u32) -> Snapshot {
        let (machine_busy, machine_total) = machine_ticks();
        Snapshot {
            threads: threads(),
            machine_busy,
            machine_total,
            broker_ticks: if broker_pid > 0 {
                process_ticks(broker_pid)
            } else {
                0
            },
        }
    }
}

/// The differences from `a` to `b` as members of `out`: "threads" (per thread: name,
/// whether it is the program's own thread, CPU and run-queue wait in ns),
/// "machine_busy" (the fraction of all CPUs' time), "cpus", "broker_cpu_s".
pub fn difference(a: &Snapshot, b: &Snapshot, out: &mut serde_json::Value) {
    let earlier: HashMap<u32, &Thread> = a.threads.iter().map(|t| (t.tid, t)).collect();
    let me = std::process::id();
    let threads: Vec<serde_json::Value> = b
        .threads
        .iter()
        .map(|t| {
            let (cpu0, wait0) = earlier
                .get(&t.tid)
                .map_or((0, 0), |e| (e.cpu_ns, e.wait_ns));
            serde_json::json!({
                "name": t.name,
                "main": t.tid == me,
                "cpu_ns": t.cpu_ns - cpu0,
                "wait_ns": t.wait_ns - wait0,
            })
        })
        .collect();
    let total = b.machine_total - a.machine_total;
    // SAFETY: sysconf only reads system constants.
    let (ticks, cpus) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
            libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
        )
    };
    out["threads"] = threads.into();
    out["machine_busy"] = if total > 0 {
        (b.machine_busy - a.machine_busy) as f64 / total as f64
    } else {
        0.0
    }
    .into();
    out["cpus"] = cpus.into();
    out["broker_cpu_s"] = ((b.broker_ticks - a.broker_ticks) as f64 / ticks).into();
}
