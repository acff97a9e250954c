#!/usr/bin/env bash
# The Java producer tier's cost against a real broker (default: dev cluster B): a
# KafkaProducer with kafka-audit's interceptor (interceptor.classes + kafka_audit.*)
# against the same producer without it, in one JVM, rounds alternating which side goes
# first (interceptors/java/src/test/java/io/kafkaaudit/interceptor/ProducerBench.java).
#
# Per round and side: MESSAGES JSON messages of each SIZE as fast as send() takes them
# (rate = messages / time to the end of flush), with the process CPU per message; then
# RATE msg/s for SECONDS with every send() call timed (p50/p99/p99.9), and the CPU per
# message of each busy thread (sending, I/O, kafka-audit's counting). Target: the
# audited producer's throughput >= 0.95x the bare one's; the p99 of send() it adds is
# stated. The machine is shared: the load average is printed before and after; rerun
# when it is high.
#
# Usage: bench/java-producer.sh [MESSAGES] [ROUNDS] [RATE] [SECONDS] [SIZE...]
set -euo pipefail
cd "$(dirname "$0")/.."

BOOTSTRAP="${KAFKA_AUDIT_BENCH_KAFKA:-${KAFKA_AUDIT_TEST_KAFKA_B:-127.0.0.1:29092}}"
MESSAGES="${1:-1000000}"
ROUNDS="${2:-5}"
RATE="${3:-20000}"
SECONDS_="${4:-10}"
shift $(($# < 4 ? $# : 4))
SIZES=("$@")
((${#SIZES[@]})) || SIZES=(100 1000)

mvn -B -q -f interceptors/java/pom.xml package -DskipTests
target=interceptors/java/target
cp="$target/kafka-audit-interceptors-0.1.0.jar:$target/test-classes:$(cat "$target/provided-classpath.txt")"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
java -Xms512m -Xmx512m -cp "$cp" io.kafkaaudit.interceptor.ProducerBench "$BOOTSTRAP" "$MESSAGES" "$ROUNDS" "$RATE" "$SECONDS_" "${SIZES[@]}"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
