#!/usr/bin/env bash
# serve's evaluation cycle on Citus against one PostgreSQL on the same machine, in the
# same run: the same history (web-bench-seed, HOURS hours of four topics) seeded into
# a fresh database on the dev PostgreSQL and into one on the Citus cluster of
# deploy/dev/citus (distributed with deploy/citus/distribute.sql); `kafka-audit serve`
# on each in turn, evaluating every 2 s; the mean cycle from its own metric
# (kafka_audit_evaluation_duration_seconds, sum / count) over SECONDS after the
# first full evaluation, and the ratio.
#   KAFKA_AUDIT_CITUS_PG_CONFIG=... bench/citus-serve.sh [HOURS] [SECONDS] [RUNS]
# SERVE_BEFORE=PATH also measures that kafka-audit binary (another build, e.g. from
# before a change) on the Citus database, with `migrate = false`.
set -euo pipefail
cd "$(dirname "$0")/.."
hours=${1:-24}
seconds=${2:-60}
runs=${3:-2}
deploy/dev/postgres start >/dev/null
deploy/dev/citus start >/dev/null
# One build of both (two with different features rebuild each other's crates).
cargo build -q --release -p kafka-audit -p web --features web/bench-bins \
  --bin kafka-audit --bin web-bench-seed
bin=target/release
db=citus_serve_$$
pg_url="postgres://postgres@127.0.0.1:${KAFKA_AUDIT_PG_PORT:-55432}/$db"
citus_url=$(deploy/dev/citus url "$db")
work=$(mktemp -d)
serve_pid=
cleanup() {
  [[ -n $serve_pid ]] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  deploy/dev/postgres psql -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  deploy/dev/citus dropdb "$db" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

deploy/dev/postgres psql -c "CREATE DATABASE $db" >/dev/null
deploy/dev/citus createdb "$db" >/dev/null
"$bin/kafka-audit" migrate --store "$citus_url" >/dev/null
deploy/dev/citus psql -d "$db" -f deploy/citus/distribute.sql >/dev/null
for url in "$pg_url" "$citus_url"; do
  "$bin/web-bench-seed" "$url" "$hours" | tail -1
done
echo "citus: $(deploy/dev/citus psql -tAc 'SELECT citus_version()' | cut -d' ' -f1-2), $(deploy/dev/citus psql -tAc 'SELECT count(*) FROM pg_dist_node WHERE groupid > 0') workers; postgres: $(deploy/dev/postgres psql -tAc 'SHOW server_version')"

metric() { # port name: the value of a metric line
  curl -fsS "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'
}

# One serve of binary `exe` on `url`: the mean cycle (ms) over `seconds` after the
# whole horizon was judged, and how many cycles.
measure() {
  local exe=$1 url=$2 port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  sed -e "s|^listen = .*|listen = \"127.0.0.1:$port\"|" \
      -e "s|^database_url = .*|database_url = \"$url\"|" \
      -e 's|^evaluate_every = .*|evaluate_every = "2s"|' bench/serve-seeded.toml >"$work/serve.toml"
  [[ $exe == "$bin/kafka-audit" ]] || sed -i 's|^\[serve\]|[serve]\nmigrate = false|' "$work/serve.toml"
  "$exe" serve --config "$work/serve.toml" >"$work/serve.log" 2>&1 &
  serve_pid=$!
  local i body
  for ((i = 0; i < 600; i++)); do
    body=$(curl -sS "http://127.0.0.1:$port/readyz" 2>/dev/null || true)
    # ready, and the whole horizon judged (no cold-start load left)
    [[ $body == *'"status":"ready"'* && $body != *'"loading":{'* ]] && break
    sleep 0.1
  done
  ((i < 600)) || { tail "$work/serve.log" >&2; echo "serve did not get ready" >&2; exit 1; }
  local s0 c0 s1 c1
  s0=$(metric "$port" kafka_audit_evaluation_duration_seconds_sum)
  c0=$(metric "$port" kafka_audit_evaluation_duration_seconds_count)
  sleep "$seconds"
  s1=$(metric "$port" kafka_audit_evaluation_duration_seconds_sum)
  c1=$(metric "$port" kafka_audit_evaluation_duration_seconds_count)
  kill "$serve_pid" && wait "$serve_pid" 2>/dev/null || true
  serve_pid=
  awk -v s0="$s0" -v c0="$c0" -v s1="$s1" -v c1="$c1" \
    'BEGIN { if (c1 - c0 < 1) { print "nan 0"; exit } printf "%.1f %d\n", 1000 * (s1 - s0) / (c1 - c0), c1 - c0 }'
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A total
for ((r = 1; r <= runs; r++)); do
  targets=(postgres citus)
  [[ -n ${SERVE_BEFORE:-} ]] && targets+=(citus-before)
  for target in "${targets[@]}"; do
    url=$citus_url exe=$bin/kafka-audit
    [[ $target == postgres ]] && url=$pg_url
    [[ $target == citus-before ]] && exe=$SERVE_BEFORE
    read -r ms cycles < <(measure "$exe" "$url")
    echo "run $r $target: mean cycle ${ms} ms over $cycles cycles"
    total[$target]="${total[$target]:-} $ms"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
pg=$(echo "${total[postgres]}" | median)
ci=$(echo "${total[citus]}" | median)
echo "median cycle: postgres ${pg} ms, citus ${ci} ms, citus / postgres $(awk -v a="$ci" -v b="$pg" 'BEGIN { printf "%.2f", a / b }')"
if [[ -n ${SERVE_BEFORE:-} ]]; then
  before=$(echo "${total[citus-before]}" | median)
  echo "median cycle of $SERVE_BEFORE on citus: ${before} ms, this build / that one $(awk -v a="$ci" -v b="$before" 'BEGIN { printf "%.2f", a / b }')"
fi
