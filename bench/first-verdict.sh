#!/usr/bin/env bash
# Time to first verdict for live traffic (the evidence rule, docs/web.md, Verdicts,
# rule 4, must not make it worse than the clock rule by more than one report interval).
#
# Runs `kafka-audit demo` (the whole pipeline in one process: producer tier, regional
# auditor, replicator, aggregate auditor, collector on SQLite, serve) with short
# windows, polls /api/v1/topics/{topic}/compare every 200 ms, and records for every
# window and edge when it is first `final`. Prints, over the windows that end after a
# warm-up, per edge: how long after `window end + grace` the first final verdict came
# (median, p90, max, in ms) and how many windows. Run it with two binaries (e.g. one
# built at the base commit, one at HEAD) to compare; the demo's replicator holds
# `orders` back 4 s, so that edge shows the replicator's lag too.
#
# Usage: bench/first-verdict.sh [BIN] [SECONDS]
#   BIN      the kafka-audit binary (default: target/debug/kafka-audit)
#   SECONDS  how long to run the demo (default 240)
# Env: WINDOW (10s), GRACE (5s), RATE (300), PORT (a free one).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${1:-$repo/target/debug/kafka-audit}
seconds=${2:-240}
exec python3 - "$bin" "$seconds" "${WINDOW:-10s}" "${GRACE:-5s}" "${RATE:-300}" "${PORT:-0}" <<'EOF'
import json, os, signal, socket, statistics, subprocess, sys, tempfile, time, urllib.request

bin, seconds, window, grace, rate, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
def ms(d):
    return int(float(d[:-1]) * 1000) if d.endswith("s") and not d.endswith("ms") else int(d[:-2])
window_ms, grace_ms = ms(window), ms(grace)
if port == 0:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
work = tempfile.mkdtemp(prefix="first-verdict-")
demo = subprocess.Popen(
    [bin, "demo", "--listen", f"127.0.0.1:{port}", "--dir", os.path.join(work, "demo"),
     "--window", window, "--grace", grace, "--rate", rate, "--late", "0",
     "--duration", f"{seconds + 30}s"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
base = f"http://127.0.0.1:{port}/api/v1"
started = int(time.time() * 1000)
# Windows ending within the first 30 s are warm-up (auditors joining their groups).
warm = started + 30_000
first_final = {}  # (topic, edge, window_start) -> epoch ms first seen final
try:
    deadline = time.time() + seconds
    while time.time() < deadline:
        time.sleep(0.2)
        if demo.poll() is not None:
            sys.exit(f"the demo exited early ({demo.returncode})")
        now = int(time.time() * 1000)
        for topic in ("payments", "clicks", "orders"):
            url = f"{base}/topics/{topic}/compare?from={started - window_ms}&to={now + window_ms}"
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    edges = json.load(r)["edges"]
            except Exception:
                continue
            for e in edges:
                key = (topic, f'{e["upstream"]}->{e["downstream"]}', e["window_start"])
                if e["lifecycle"] == "final" and e["expected"] > 0 and key not in first_final:
                    first_final[key] = now
finally:
    os.killpg(demo.pid, signal.SIGINT)
    try:
        demo.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGKILL)
by_edge = {}
for (topic, edge, w), t in first_final.items():
    end = w + window_ms
    if end < warm or end + grace_ms + 20_000 > started + seconds * 1000:
        continue
    by_edge.setdefault(edge, []).append(t - (end + grace_ms))
print(f"binary {bin}; window {window}, grace {grace}, rate {rate}/s, {seconds} s")
for edge, d in sorted(by_edge.items()):
    d.sort()
    p90 = d[min(len(d) - 1, int(0.9 * len(d)))]
    print(f"{edge:24} windows {len(d):3}  after end + grace: median {statistics.median(d):6.0f} ms  p90 {p90:6.0f} ms  max {d[-1]:6.0f} ms")
EOF
