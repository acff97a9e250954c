#!/usr/bin/env bash
# The interceptor plugin's cost: the same producer with and without
# `plugin.library.paths` (+ kafka_audit.datacenter), in the same run, against a real
# broker (default: dev cluster B). Producers: the C client on the workspace's static
# librdkafka (kafka-audit-interceptor/tests/clients/client.c), a rust-rdkafka
# BaseProducer on the same librdkafka (tests/clients/rdkafka_client.rs, client "rust")
# and confluent-kafka's wheel from PyPI (tests/clients/client.py); both sides use the
# same client settings (linger.ms=5, the defaults otherwise) and the same messages: key
# k<i>, a JSON value of SIZE bytes with its event time in "ts".
#
# Per round every side runs once, in an order that rotates from round to round, in two
# phases (a fresh process each):
#   max    MESSAGES as fast as produce() takes them: the throughput ratio (goal >= 0.95),
#          and what bounded the bare producer (a thread of its own, the machine, or the
#          broker) from each thread's CPU time and run-queue wait;
#   paced  MESSAGES at RATE msg/s, which both sides keep up with: CPU per message at
#          the same offered load, and produce()'s p99 (what the plugin adds to the
#          application's call; no queue-full waits at this rate).
# Printed per client and size: the medians of each side (rate, CPU per message by
# thread: the application's, librdkafka's broker threads and main thread, the plugin's
# own), the ratios against bare round by round, and the load average at start and end.
#
# Usage: bench/interceptor.sh [MESSAGES] [ROUNDS] [SIZES] [CLIENTS]
#   defaults: 1000000 7 "100 1024" "c python"; Python sends MESSAGES / 4.
# Environment:
#   KAFKA_AUDIT_BENCH_KAFKA  bootstrap servers (default: dev cluster B, 127.0.0.1:29092);
#                            a broker of the bench's own keeps others' traffic out
#   KAI_BENCH_RATE           the paced phase's rate for C (Python: RATE / 4); default
#                            100000; 0 skips the phase
#   KAI_BENCH_CPUS           run the producers on these CPUs only (taskset -c LIST, e.g.
#                            "1"): a producer bound by its own core, whatever the broker
#   KAI_BENCH_BASELINE       another build of the plugin (a .so, e.g. of main): a third
#                            side, "base", to compare two builds in one run
#   KAI_BENCH_PHASES         "max paced" (default), or one of them
set -euo pipefail
cd "$(dirname "$0")/.."

BOOTSTRAP="${KAFKA_AUDIT_BENCH_KAFKA:-${KAFKA_AUDIT_TEST_KAFKA_B:-127.0.0.1:29092}}"
MESSAGES="${1:-1000000}"
ROUNDS="${2:-7}"
SIZES="${3:-100 1024}"
CLIENTS="${4:-c python}"
RATE="${KAI_BENCH_RATE:-100000}"
PHASES="${KAI_BENCH_PHASES:-max paced}"
BASELINE="${KAI_BENCH_BASELINE:-}"
pin=()
[[ -n ${KAI_BENCH_CPUS:-} ]] && pin=(taskset -c "$KAI_BENCH_CPUS")

cargo build --release -q -p kafka-audit-interceptor
cargo build --release -q -p kafka-audit-interceptor --features test-clients --bins
# A copy: a rebuild during the run (another shell) must not change the plugin measured.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PLUGIN=$out/libkafka_audit_interceptor.so
cp target/release/libkafka_audit_interceptor.so "$PLUGIN"
C_CLIENT=$out/kai-c-client
cp target/release/kai-c-client "$C_CLIENT"
RUST_CLIENT=$out/kai-rdkafka-client
cp target/release/kai-rdkafka-client "$RUST_CLIENT"
# The C and rust clients link rdkafka-sys's librdkafka 2.12.1, which the plugin refuses
# unless told the application never destroys a configuration after a failed
# rd_kafka_new (neither client does; librdkafka #4142, README "librdkafka versions").
export KAFKA_AUDIT_INTERCEPTOR_ACCEPT_LIBRDKAFKA_4142=1
PYTHON=$(deploy/dev/python-clients)
PY_CLIENT=kafka-audit-interceptor/tests/clients/client.py
sides=(bare plugin)
if [[ -n $BASELINE ]]; then
  cp "$BASELINE" "$out/baseline.so"
  sides+=(base)
fi

# The broker's process, when it runs here: its CPU time per run is reported.
port=${BOOTSTRAP##*:}
broker_pid=$(ss -ltnpH "sport = :$port" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1)

run_id=$(date +%s)
audit="kai-bench-audit-$run_id"
create_topic() {
  "$PYTHON" - "$BOOTSTRAP" "$1" "$2" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": sys.argv[1]})
# Deleted files go at once, not a minute later under the next size's runs.
t = NewTopic(sys.argv[2], int(sys.argv[3]), 1, config={"file.delete.delay.ms": "0"})
for f in a.create_topics([t]).values():
    f.result()
PY
}
delete_topics() {
  "$PYTHON" - "$BOOTSTRAP" "$@" <<'PY' || true
import sys
from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": sys.argv[1]})
for f in a.delete_topics(sys.argv[2:]).values():
    f.result()
# Gone from the metadata (bounded: 60 s), so the next size starts on a settled broker.
import time
for _ in range(600):
    if not set(sys.argv[2:]) & set(a.list_topics(timeout=10).topics):
        break
    time.sleep(0.1)
PY
}
create_topic "$audit" 1

echo "== interceptor plugin cost: $MESSAGES messages per run, $ROUNDS rounds, sizes $SIZES," \
  "clients $CLIENTS, sides ${sides[*]}, paced at $RATE msg/s (C), broker $BOOTSTRAP" \
  "(pid ${broker_pid:-not local}), producers on CPUs ${KAI_BENCH_CPUS:-any} of $(nproc)"
echo "== load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for client in $CLIENTS; do
  n=$MESSAGES
  rate=$RATE
  if [[ $client == python ]]; then
    n=$((MESSAGES / 4))
    rate=$((RATE / 4))
  fi
  for size in $SIZES; do
    topic="kai-bench-$client-$size-$run_id"
    create_topic "$topic" 3
    : >"$out/$client-$size"
    for ((round = 0; round < ROUNDS; round++)); do
      order=("${sides[@]:round % ${#sides[@]}}" "${sides[@]:0:round % ${#sides[@]}}")
      for phase in $PHASES; do
        [[ $phase == paced && $rate == 0 ]] && continue
        for side in "${order[@]}"; do
          props=(linger.ms=5 "kai.size=$size" "kai.broker_pid=${broker_pid:-0}")
          [[ $phase == paced ]] && props+=("kai.rate=$rate")
          case $side in
            plugin) props+=("plugin.library.paths=$PLUGIN") ;;
            base) props+=("plugin.library.paths=$out/baseline.so") ;;
          esac
          audit_props=()
          [[ $side != bare ]] && audit_props=(kafka_audit.datacenter=bench "kafka_audit.audit_topic=$audit")
          args=(produce "$BOOTSTRAP" "$topic" "$n" "$(date +%s%3N)" 60000 3 "${props[@]}")
          case $client in
            c) line=$("${pin[@]}" "$C_CLIENT" "${args[@]}" "${audit_props[@]}" | tail -1) ;;
            rust)
              # rust-rdkafka sets properties in HashMap order: the plugin's own come
              # from a file, as the README's rust-rdkafka section says.
              printf '%s\n' "${audit_props[@]}" >"$out/rust.properties"
              line=$(KAFKA_AUDIT_INTERCEPTOR_PROPERTIES="$out/rust.properties" "${pin[@]}" \
                "$RUST_CLIENT" "${args[@]}" | tail -1) ;;
            *) line=$("${pin[@]}" "$PYTHON" "$PY_CLIENT" "${args[@]}" "${audit_props[@]}" | tail -1) ;;
          esac
          echo "$round $side $phase $line" >>"$out/$client-$size"
        done
      done
    done
    "$PYTHON" bench/interceptor_report.py "$out/$client-$size" "$client" "$size" "$n"
    # Now, not at the end: 9 rounds of 3 sides at 1 KB are ~27 GB on the broker's disk.
    delete_topics "$topic"
  done
done
echo "== load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
delete_topics "$audit"
