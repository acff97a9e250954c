#!/usr/bin/env bash
# The one test command. On a fresh Debian machine, as root, with nothing running:
#   1. installs what is missing (apt packages; the Kafka jars come from Maven Central
#      through deploy/dev/kafka),
#   2. builds the workspace's tests, and builds and unit-tests the Java interceptors
#      (Maven: interceptors/java; the end-to-end tests run their jar),
#   3. starts Kafka clusters A and B, the replicated cluster R (three nodes, for the
#      failover tests), MirrorMaker 2 copying A to B (deploy/dev/mm2) and PostgreSQL,
#      unless they already answer
#      (a developer's services, kept up between runs, are used and left running),
#   4. runs `cargo test --workspace --no-fail-fast` (or `cargo test ARGS...` when given arguments,
#      e.g. ./test.sh -p testkit) — kafka-audit's tests last, 3 at a time (see below),
#   5. stops the services it started, even when the tests fail or are interrupted,
# and exits with the tests' status. Each phase prints its duration.
#
# With the services up (deploy/dev/kafka start; deploy/dev/postgres start), plain
# `cargo test` works too. Ports: KAFKA_A_PORT, KAFKA_B_PORT, KAFKA_R_PORT, KAFKA_AUDIT_PG_PORT (see
# the scripts in deploy/dev); the tests are pointed at them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 1

export DEBIAN_FRONTEND=noninteractive
export KAFKA_AUDIT_TEST_KAFKA_A=${KAFKA_AUDIT_TEST_KAFKA_A:-127.0.0.1:${KAFKA_A_PORT:-19092}}
export KAFKA_AUDIT_TEST_KAFKA_B=${KAFKA_AUDIT_TEST_KAFKA_B:-127.0.0.1:${KAFKA_B_PORT:-29092}}
r_port=${KAFKA_R_PORT:-18092}
export KAFKA_AUDIT_TEST_KAFKA_R=${KAFKA_AUDIT_TEST_KAFKA_R:-127.0.0.1:$r_port,127.0.0.1:$((r_port + 1)),127.0.0.1:$((r_port + 2))}
export KAFKA_AUDIT_TEST_PG_URL=${KAFKA_AUDIT_TEST_PG_URL:-postgres://postgres@127.0.0.1:${KAFKA_AUDIT_PG_PORT:-55432}/kafka_audit}

timings=()
phase_start=$SECONDS
total_start=$SECONDS
phase() { # name: closes the running phase under that name
  timings+=("$(printf '%-10s %4ds' "$1" $((SECONDS - phase_start)))")
  echo "== $1 done in $((SECONDS - phase_start))s"
  phase_start=$SECONDS
}
print_timings() {
  echo "== timings"
  printf '   %s\n' "${timings[@]}"
  printf '   %-10s %4ds\n' total $((SECONDS - total_start))
}
fail() { echo "test.sh: $*" >&2; exit 1; }

cargo_args=("$@")
given_args=${#cargo_args[@]}
((given_args)) || cargo_args=(--workspace --no-fail-fast)

# --- 1. what is missing ----------------------------------------------------------------
echo "== dependencies"
missing=()
# prometheus: its promtool checks the /metrics exposition (web metrics tests).
# python3-venv: the interceptor plugin's tests run confluent-kafka's wheel from PyPI.
# openssl: the store's TLS tests make a self-signed X.509 v1 certificate with it.
# valgrind: the interceptor plugin's fault matrix runs its C host under it; kcat: a real
# host on Debian's own librdkafka (2.0.2) for the plugin's version check.
for pkg in cmake libssl-dev zlib1g-dev postgresql-15 chromium fonts-liberation prometheus python3-venv openssl valgrind kcat; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v c++ >/dev/null && command -v make >/dev/null || missing+=(build-essential)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
  "${sudo[@]}" apt-get update -q || fail "apt-get update failed"
  "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" || fail "apt-get install ${missing[*]} failed"
else
  echo "apt packages present"
fi
command -v cargo >/dev/null || fail "cargo not found: install Rust (https://rustup.rs)"
deploy/dev/kafka fetch || fail "could not fetch the Kafka broker jars"
deploy/dev/mm2 fetch || fail "could not fetch the MirrorMaker 2 jars"
deploy/dev/python-clients >/dev/null || fail "could not install the Python test clients (confluent-kafka from PyPI)"
phase deps

# --- 2. build ---------------------------------------------------------------------------
# A cold build of the tests takes about 2 GB under target/ (measured: 1.9 GB with
# CARGO_INCREMENTAL=0). Say so up front rather than failing mid-link.
target_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$target_dir"
free_mb=$(df -Pm "$target_dir" | awk 'NR == 2 { print $4 }')
echo "== disk: ${free_mb} MB free for $target_dir"
if [[ -n $free_mb ]] && ((free_mb < 3000)); then
  echo "test.sh: warning: less than 3 GB free for $target_dir; the build may run out of disk" >&2
fi
echo "== build: cargo test ${cargo_args[*]} --no-run"
cargo test "${cargo_args[@]}" --no-run || { phase build; print_timings; fail "the build failed"; }
phase build

# The Java interceptors (interceptors/java): built and unit-tested by Maven (the
# conformance vectors need no service); the jar is what the end-to-end test of
# kafka-audit runs. Test failures are reported with the others, and the jar is built
# regardless, so the Rust tests still run.
echo "== java: mvn verify (interceptors/java)"
java_log=$(mktemp)
mvn -B -f interceptors/java/pom.xml -Dmaven.test.failure.ignore=true verify 2>&1 | tee "$java_log" | grep -E "Tests run:|FAIL|ERROR|BUILD"
java_build=${PIPESTATUS[0]}
# Surefire's last "Tests run: N, Failures: F, Errors: E, Skipped: S" is the module's total.
read -r java_run java_failed java_skipped < <(grep -E '^\[(INFO|WARNING|ERROR)\] Tests run: [0-9]+, Failures' "$java_log" | tail -1 |
  sed -E 's/.*Tests run: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+), Skipped: ([0-9]+).*/\1 \2 \3 \4/' |
  awk '{ print $1, $2 + $3, $4 }')
rm -f "$java_log"
java_run=${java_run:-0} java_failed=${java_failed:-0} java_skipped=${java_skipped:-0}
((java_build == 0)) || { phase java; print_timings; fail "the Java interceptors did not build (mvn exit status $java_build)"; }
phase java

# --- 3. services ------------------------------------------------------------------------
started=()
stop_started() {
  local service
  ((${#started[@]})) || return 0
  echo "== stopping what test.sh started: ${started[*]}"
  for service in "${started[@]}"; do
    case $service in
      kafka-a) deploy/dev/kafka stop a ;;
      kafka-b) deploy/dev/kafka stop b ;;
      kafka-r) deploy/dev/kafka stop r ;;
      postgres) deploy/dev/postgres stop ;;
      mm2) deploy/dev/mm2 stop ;;
    esac
  done
  started=()
  phase stop
}
trap 'stop_started' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== services"
pids=()
for service in kafka-a kafka-b kafka-r postgres; do
  case $service in
    kafka-a) probe=(deploy/dev/kafka status a) start=(deploy/dev/kafka start a) ;;
    kafka-b) probe=(deploy/dev/kafka status b) start=(deploy/dev/kafka start b) ;;
    # The failover tests kill and restart R's nodes through deploy/dev/kafka, so an R
    # already running must have been started from this checkout's state directory.
    kafka-r) probe=(deploy/dev/kafka status r) start=(deploy/dev/kafka start r) ;;
    postgres) probe=(deploy/dev/postgres status) start=(deploy/dev/postgres start) ;;
  esac
  if "${probe[@]}" >/dev/null 2>&1; then
    echo "$service: already up, using it and leaving it running"
    # The database may be missing on a server started elsewhere; start creates it.
    [[ $service == postgres ]] && deploy/dev/postgres start >/dev/null
  else
    started+=("$service")
    "${start[@]}" &
    pids+=($!)
  fi
done
all_up=1
for pid in "${pids[@]}"; do wait "$pid" || all_up=0; done
((all_up)) || fail "a service did not start (see above)"
# MirrorMaker 2 copies A to B (topics mm2e2e.*) for the loss-evidence tests: once both
# answer. Stopped before them (the list is stopped in order).
if deploy/dev/mm2 status >/dev/null 2>&1; then
  echo "mm2: already up, using it and leaving it running"
else
  started=(mm2 "${started[@]}")
  deploy/dev/mm2 start || fail "MirrorMaker 2 did not start (see above)"
fi
phase services

# --- 4. tests ---------------------------------------------------------------------------
log=$(mktemp)
status=0
run_tests() { # cargo test ARGS, its output into $log too; the first failure's status
  echo "== tests: cargo test $*"
  cargo test "$@" 2>&1 | tee -a "$log"
  local s=${PIPESTATUS[0]}
  ((status)) || status=$s
}
if ((given_args)); then
  run_tests "${cargo_args[@]}"
else
  # kafka-audit's end-to-end binary is last and apart: its tests mostly wait (windows,
  # grace, outages, MirrorMaker 2 stopped for 5 minutes) and hold locks that keep the
  # heavy ones one at a time, so with libtest's default of one thread per core (2) one
  # test waiting on a lock left a single thread working; 3 lets a waiting one not stop
  # the rest.
  run_tests --workspace --exclude kafka-audit --no-fail-fast
  run_tests -p kafka-audit --no-fail-fast -- --test-threads 3
fi
phase tests
awk '/^test result:/ {
       for (i = 1; i <= NF; i++) {
         if ($(i + 1) ~ /^passed/) p += $i; if ($(i + 1) ~ /^failed/) f += $i
         if ($(i + 1) ~ /^ignored/) g += $i
       }
       n++
     }
     END {
       printf "== %d test binaries, and the Java interceptors: %d run, %d failed\n", n, jr, jf
       p += jr - jf - js; f += jf; g += js
       # The plain closing line CI readers look for: "summary: N passed, N failed, N skipped".
       printf "summary: %d passed, %d failed, %d skipped\n", p, f, g
     }' jr="$java_run" jf="$java_failed" js="$java_skipped" "$log"
grep -E '^test .* FAILED$' "$log" || true
rm -f "$log"

# --- 5. stop ----------------------------------------------------------------------------
stop_started
trap - EXIT
print_timings
if ((status == 0 && java_failed > 0)); then
  echo "test.sh: $java_failed Java interceptor test(s) failed (interceptors/java/target/surefire-reports)" >&2
  status=1
fi
if ((status == 0)); then echo "== PASS"; else echo "== FAIL (exit status $status)"; fi
exit "$status"
