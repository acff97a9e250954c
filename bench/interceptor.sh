#!/usr/bin/env bash
# The interceptor plugin's cost: the same producer with and without
# `plugin.library.paths` (+ kafka_audit.datacenter), in the same run, against a real
# broker (default: dev cluster B). Producers: the C client on the workspace's static
# librdkafka (kafka-audit-interceptor/tests/clients/client.c) and confluent-kafka's
# wheel from PyPI (tests/clients/client.py). Per round each side sends MESSAGES JSON
# messages of SIZE bytes as fast as produce() takes them; throughput = messages / time
# from the first produce() to the end of flush(). Rounds alternate which side goes
# first. Printed per size and client: median throughput ratio (with / without, goal
# >= 0.95) and its rounds, CPU per message of each side (the process's user + system
# time: librdkafka's threads and the plugin's included), and produce()'s p99 with and
# without (the time a produce() call takes: what the plugin may add to it).
#
# Usage: bench/interceptor.sh [MESSAGES] [ROUNDS] [SIZES] [CLIENTS]
#   defaults: 1000000 5 "100 1024" "c python"; Python sends MESSAGES / 4.
set -euo pipefail
cd "$(dirname "$0")/.."

BOOTSTRAP="${KAFKA_AUDIT_BENCH_KAFKA:-${KAFKA_AUDIT_TEST_KAFKA_B:-127.0.0.1:29092}}"
MESSAGES="${1:-1000000}"
ROUNDS="${2:-5}"
SIZES="${3:-100 1024}"
CLIENTS="${4:-c python}"

cargo build --release -q -p kafka-audit-interceptor
cargo build --release -q -p kafka-audit-interceptor --features test-clients --bins
PLUGIN=$PWD/target/release/libkafka_audit_interceptor.so
C_CLIENT=target/release/kai-c-client
PYTHON=$(deploy/dev/python-clients)
PY_CLIENT=kafka-audit-interceptor/tests/clients/client.py
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run_id=$(date +%s)
audit="kai-bench-audit-$run_id"
"$PYTHON" - "$BOOTSTRAP" "$audit" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
for f in a.create_topics([NewTopic(sys.argv[2], 1, 1)]).values():
    f.result()
PY

echo "== interceptor plugin cost: $MESSAGES messages ($ROUNDS rounds, sizes $SIZES, $BOOTSTRAP); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for client in $CLIENTS; do
  n=$MESSAGES
  [[ $client == python ]] && n=$((MESSAGES / 4))
  for size in $SIZES; do
    topic="kai-bench-$client-$size-$run_id"
    "$PYTHON" - "$BOOTSTRAP" "$topic" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
for f in a.create_topics([NewTopic(sys.argv[2], 3, 1)]).values():
    f.result()
PY
    : >"$out/$client-$size"
    for ((round = 0; round < ROUNDS; round++)); do
      sides=(bare plugin)
      ((round % 2)) && sides=(plugin bare)
      for side in "${sides[@]}"; do
        props=(linger.ms=5 "kai.size=$size")
        [[ $side == plugin ]] && props+=("plugin.library.paths=$PLUGIN" kafka_audit.datacenter=bench \
          "kafka_audit.audit_topic=$audit")
        args=(produce "$BOOTSTRAP" "$topic" "$n" "$(date +%s%3N)" 60000 3 "${props[@]}")
        if [[ $client == c ]]; then line=$("$C_CLIENT" "${args[@]}" | tail -1)
        else line=$("$PYTHON" "$PY_CLIENT" "${args[@]}" | tail -1); fi
        echo "$round $side $line" >>"$out/$client-$size"
      done
    done
    "$PYTHON" - "$out/$client-$size" "$client" "$size" "$n" <<'PY'
import json, statistics, sys
path, client, size, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rounds = {}
for line in open(path):
    r, side, js = line.split(" ", 2)
    d = json.loads(js)
    assert d.get("delivered") == n and d.get("failed") == 0, line
    rounds.setdefault(r, {})[side] = d
ratios = sorted((n / v["plugin"]["seconds"]) / (n / v["bare"]["seconds"]) for v in rounds.values())
med = lambda side, k: statistics.median(v[side][k] for v in rounds.values())
cpu = {s: med(s, "cpu_s") / n * 1e6 for s in ("bare", "plugin")}
rate = {s: n / med(s, "seconds") for s in ("bare", "plugin")}
p99 = {s: med(s, "produce_p99_ns") / 1e3 for s in ("bare", "plugin")}
print(f"{client:6} {size:>5} B: throughput ratio median {statistics.median(ratios):.3f} "
      f"(rounds {', '.join(f'{x:.3f}' for x in ratios)}); "
      f"{rate['bare']:,.0f} vs {rate['plugin']:,.0f} msg/s (medians); "
      f"CPU per message {cpu['bare']:.3f} -> {cpu['plugin']:.3f} us ({cpu['plugin'] / cpu['bare']:.2f}x); "
      f"produce() p99 {p99['bare']:.2f} -> {p99['plugin']:.2f} us (+{p99['plugin'] - p99['bare']:.2f})")
PY
  done
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
