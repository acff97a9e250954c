# Pieces shared by the web benchmarks (bench/web-anomalies.sh, bench/store-scale.sh);
# source it after `cd` to the repository root. Uses TARGET, OUT, THREADS,
# CONNECTIONS, DURATION from the caller.

# Builds the release server and seeder in their own target dir (so the shared one stays
# unlocked); sets BIN.
build_web_bench() {
    CARGO_TARGET_DIR=$TARGET cargo build --release -p web --features bench-bins \
        --bin web-bench-serve --bin web-bench-seed
    BIN=$TARGET/release
}

# Window starts of a DAYS-day horizon (or WINDOWS windows) ending LAG minutes (default
# 40) before now: sets NOW_MS, FIRST, LAST (epoch ms).
seed_times() {
    local days=$1 lag=${2:-40} windows=${3:-$(( $1 * 144 ))}
    NOW_MS=$(( $(date +%s) * 1000 ))
    LAST=$(( (NOW_MS - lag * 60000) / 600000 * 600000 ))
    FIRST=$(( LAST - (windows - 1) * 600000 ))
}

# Recreates database URL/DB (migrated, empty) and seeds TOPICS topics over
# FIRST..LAST with bench/seed-windows.sql: one day per psql session, SEED_JOBS (default
# 2) sessions at once; sets SEED_SECONDS.
seed_windows() {
    local pg=$1 db=$2 topics=$3 jobs=${SEED_JOBS:-2}
    psql "$pg/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
    "$BIN/web-bench-seed" "$pg/$db" 0
    local start vars day
    start=$(date +%s.%N)
    vars=(-v topics="$topics" -v first="$FIRST" -v last="$LAST" -v now_ms="$NOW_MS")
    psql "$pg/$db" -q -v phase=prepare "${vars[@]}" -f bench/seed-windows.sql >/dev/null
    # Newest day first: the days are unequal (the first and last are partial).
    for (( day = LAST / 86400000 * 86400000; day >= FIRST / 86400000 * 86400000; day -= 86400000 )); do
        echo "$day"
    done | xargs -P "$jobs" -I{} psql "$pg/$db" -q -v phase=day -v day={} "${vars[@]}" \
        -f bench/seed-windows.sql
    psql "$pg/$db" -q -v phase=finish "${vars[@]}" -f bench/seed-windows.sql
    SEED_SECONDS=$(echo "$(date +%s.%N) - $start" | bc)
    echo "seeded in $SEED_SECONDS s ($jobs sessions)"
}

# Starts web-bench-serve with CONFIG (log in $OUT/server.log); sets SERVER and
# SERVER_STARTED. The caller's EXIT trap should call stop_serve. With ADDR, refuses when
# something already answers there (another bench's server would be measured instead).
start_serve() {
    if [ -n "${2:-}" ] && curl -fsS -o /dev/null --max-time 2 "http://$2/healthz" 2>/dev/null; then
        echo "refusing: something already answers on $2 (another bench running? set ADDR)" >&2
        return 1
    fi
    "$BIN/web-bench-serve" "$1" 2>"$OUT/server.log" &
    SERVER=$!
    SERVER_STARTED=$(date +%s.%N)
}

stop_serve() {
    if [ -n "${SERVER:-}" ]; then
        kill "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
        SERVER=
    fi
}

# Waits (at most 30 min) until URL answers 200; prints the seconds since start_serve.
wait_ready() {
    until kill -0 "$SERVER" 2>/dev/null && curl -fsS "$1" >/dev/null 2>&1; do
        kill -0 "$SERVER" 2>/dev/null || { tail -20 "$OUT/server.log" >&2; return 1; }
        sleep 0.2
        if [ "$(echo "$(date +%s.%N) - $SERVER_STARTED > 1800" | bc)" = 1 ]; then
            echo "not ready after 30 min" >&2
            return 1
        fi
    done
    echo "$(date +%s.%N) - $SERVER_STARTED" | bc
}

# wrk on URL, the latency lines prefixed with NAME (whole output in $OUT/wrk-NAME.txt).
wrk_run() {
    local name=$1 url=$2
    curl -fsS "$url" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("  '"$name"': total", d.get("total"), "page", len(d.get("anomalies", d.get("edges", []))), "bytes", len(json.dumps(d)))' 2>/dev/null || true
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$url" | tee "$OUT/wrk-$name.txt" |
        grep -E "Latency|50%|90%|99%|Requests/sec|Non-2xx|Socket errors" | sed "s/^/  $name: /"
}

# Waits (at most LOADED_WAIT seconds, default 30 min) until /readyz (URL) answers 200
# without `loading` (the whole horizon evaluated); prints the seconds since start_serve.
wait_loaded() {
    until curl -fsS "$1" 2>/dev/null | grep -qv '"loading"'; do
        kill -0 "$SERVER" 2>/dev/null || { tail -20 "$OUT/server.log" >&2; return 1; }
        sleep 0.5
        if [ "$(echo "$(date +%s.%N) - $SERVER_STARTED > ${LOADED_WAIT:-1800}" | bc)" = 1 ]; then
            echo "horizon not loaded after ${LOADED_WAIT:-1800} s" >&2
            return 1
        fi
    done
    echo "$(date +%s.%N) - $SERVER_STARTED" | bc
}
