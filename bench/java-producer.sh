#!/usr/bin/env bash
# The Java producer tier's cost against a real broker (default: dev cluster B): a
# KafkaProducer with kafka-audit's interceptor (interceptor.classes + kafka_audit.*)
# against the same producer without it (String serializers, linger.ms=5, batch.size
# 128 KiB on both sides), in one JVM, rounds rotating which side goes first
# (interceptors/java/src/test/java/io/kafkaaudit/interceptor/ProducerBench.java).
#
# Per round and side: MESSAGES JSON messages of each SIZE as fast as send() takes them
# (rate = messages / time to the end of flush), with the CPU per message of each thread
# group (sending, the producer's I/O thread, kafka-audit's reporter, GC, JIT) over that
# interval and the time the sending thread waited for a CPU, the machine's busy share
# and the broker's CPU per message (what bounded the bare producer is printed); then
# RATE msg/s for SECONDS with every send() call timed (p50/p99/p99.9). Printed per
# size: each side's medians, the median throughput and CPU ratios against bare (goal:
# throughput >= 0.95x), the send() p99 added, and the load average before and after.
#
# Usage: bench/java-producer.sh [MESSAGES] [ROUNDS] [RATE] [SECONDS] [SIZE...]
#        bench/java-producer.sh --micro [JMH options]   the per-record path (JMH,
#            RecordPathBench: onSend, onAcknowledgement, counting, vs serialization)
# Environment:
#   KAFKA_AUDIT_BENCH_KAFKA  bootstrap servers (default 127.0.0.1:29092)
#   KAI_BENCH_BASELINE_JAR   another build of the interceptor jar (e.g. of main): a third
#                            side, "baseline", to compare two builds in one run
set -euo pipefail
cd "$(dirname "$0")/.."

mvn -B -q -f interceptors/java/pom.xml package -DskipTests
target=interceptors/java/target
if [[ ${1:-} == --micro ]]; then
  shift
  mvn -B -q -f interceptors/java/pom.xml dependency:build-classpath -Dmdep.includeScope=test \
    -Dmdep.outputFile="$PWD/$target/test-classpath.txt"
  echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
  java -cp "$target/test-classes:$target/classes:$(cat "$target/test-classpath.txt")" \
    org.openjdk.jmh.Main RecordPathBench "$@"
  echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit
fi

BOOTSTRAP="${KAFKA_AUDIT_BENCH_KAFKA:-${KAFKA_AUDIT_TEST_KAFKA_B:-127.0.0.1:29092}}"
MESSAGES="${1:-1000000}"
ROUNDS="${2:-7}"
RATE="${3:-20000}"
SECONDS_="${4:-10}"
shift $(($# < 4 ? $# : 4))
SIZES=("$@")
((${#SIZES[@]})) || SIZES=(100 1000)
BASELINE="${KAI_BENCH_BASELINE_JAR:--}"
port=${BOOTSTRAP##*:}
broker_pid=$(ss -ltnpH "sport = :$port" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1)

cp="$target/kafka-audit-interceptors-0.1.0.jar:$target/test-classes:$(cat "$target/provided-classpath.txt")"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores); broker $BOOTSTRAP (pid ${broker_pid:-not local})"
java -Xms512m -Xmx512m -cp "$cp" io.kafkaaudit.interceptor.ProducerBench "$BOOTSTRAP" "${broker_pid:-0}" "$BASELINE" \
  "$MESSAGES" "$ROUNDS" "$RATE" "$SECONDS_" "${SIZES[@]}"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
