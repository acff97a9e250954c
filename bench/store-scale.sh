#!/usr/bin/env bash
# The store at 10x bench/web-anomalies.sh: TOPICS topics x 3 tiers x 2 datacenters x 7 days
# of 10-minute windows in PostgreSQL (TOPICS=10000: 60 480 000 window rows, each with one
# latency bucket), in a database of its own on the dev server, dropped at the end.
# Reports, in one run:
#   - seeding (bench/seed-windows.sql: set-based INSERT ... SELECT generate_series, one day
#     per session, SEED_JOBS=2 sessions, indexes built after the load) and disk used;
#   - serve cold start: seconds to /readyz 200 (recent windows evaluated) and to the whole
#     7-day horizon evaluated (/readyz without `loading`), serve RSS at both;
#   - GET /api/v1/anomalies (1 h, 24 h) and /api/v1/topics/{topic}/compare (1 h) under wrk,
#     with /healthz as the baseline of the same run;
#   - the collector's ingest rate into this store and its ratio to a raw COPY
#     (bench/collector-store.sh --url);
#   - retention of one day on this store: time and WAL volume of the day partitions
#     dropped vs the old batched DELETE of the next day (bench/store-retention.sh measures
#     the same on a private instance, against the old schema).
#
#   bench/store-scale.sh                   # 60 M window rows
#   TOPICS=1000 bench/store-scale.sh       # 6 M (development)
#   WINDOWS=12 bench/store-scale.sh        # the last 2 hours of the 60 M store only: what
#                                          # the cold start reads before /readyz (720 000 rows)
#   KEEP=1 ... / SEED=0 ...                # keep the database / reuse a kept one
#   INGEST= ... / RETENTION=0 ...          # leave out the collector ingest / retention
#                                          # (retention deletes two days and a half: off
#                                          # by default with KEEP=1)
#   LOADED_WAIT=300 ...                    # wait at most 5 min for the whole horizon (default 30)
#
# Needs the dev PostgreSQL (deploy/dev/postgres start), wrk, bc. Refuses to seed when
# less than 10 GB of disk would stay free (about 0.4 GB per million window rows).
set -euo pipefail
cd "$(dirname "$0")/.."

PG=${PG:-postgres://postgres@127.0.0.1:55432}
DB=${DB:-kafka_audit_scale}
TOPICS=${TOPICS:-10000}
DAYS=${DAYS:-7}
WINDOWS=${WINDOWS:-$(( DAYS * 144 ))}
ADDR=${ADDR:-127.0.0.1:18482}
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
KEEP=${KEEP:-0}
INGEST=${INGEST---increments 200000 --rounds 3}
TARGET=${BENCH_TARGET_DIR:-/tmp/kafka-audit-bench-target}
OUT=${OUT:-/tmp/kafka-audit-scale}
mkdir -p "$OUT"
rows=$(( TOPICS * 6 * WINDOWS ))

. bench/web-lib.sh
cleanup() {
    stop_serve
    if [ "$KEEP" != 1 ]; then psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" || true; fi
}
trap cleanup EXIT

if [ "$SEED" = 1 ]; then
    need_gb=$(( rows * 4 / 10000000 + 1 ))
    free_gb=$(df --output=avail -BG "${PGDATA_DIR:-/work}" | tail -1 | tr -dc 0-9)
    if [ $(( free_gb - need_gb )) -lt 10 ]; then
        echo "refusing: $rows window rows need ~${need_gb} GB, ${free_gb} GB free (keep >= 10 GB)" >&2
        exit 1
    fi
fi
# Builds first (not part of the bench's time): the server and seeder, and the collector
# bench that bench/collector-store.sh runs.
build_started=$(date +%s)
build_web_bench
if [ -n "$INGEST" ]; then cargo bench -p store --bench collector_store --no-run -q 2>&1 | grep -v '^ *Executable' || true; fi
bench_started=$(date +%s)
echo "== builds: $(( bench_started - build_started )) s (not counted below)"

echo "== store: $TOPICS topics x 3 tiers x 2 dcs x $WINDOWS windows of 10 min = $rows window rows"
# Windows up to the one before the current: a store being written to, so that the cold
# start reads as many recent windows as it would live.
seed_times "$DAYS" 10 "$WINDOWS"
if [ "$SEED" = 1 ]; then
    seed_windows "$PG" "$DB" "$TOPICS"
    echo "  seed rate: $(echo "$rows / $SEED_SECONDS" | bc) window rows/s (+ one bucket row each)"
    start=$(date +%s.%N)
    psql "$PG/$DB" -qc "VACUUM ANALYZE"
    echo "  VACUUM ANALYZE (what autovacuum does to a store that is not fresh): $(echo "$(date +%s.%N) - $start" | bc) s"
else
    LAST=$(psql "$PG/$DB" -Atc "SELECT max(window_start_ms) FROM audit_window")
    FIRST=$(psql "$PG/$DB" -Atc "SELECT min(window_start_ms) FROM audit_window")
fi
psql "$PG/$DB" -At <<'SQL' | sed 's/^/  /'
SELECT 'window rows: ' || count(*) FROM audit_window;
SELECT 'database: ' || pg_size_pretty(pg_database_size(current_database()));
SELECT 'table ' || t || ': ' || pg_size_pretty(sum(pg_table_size(relid))) || ' + indexes '
       || pg_size_pretty(sum(pg_indexes_size(relid)))
FROM unnest(ARRAY['audit_window', 'audit_window_bucket']) t, pg_partition_tree(t::regclass) GROUP BY t ORDER BY 1;
SQL

echo "== serve cold start (horizon 7 days)"
sed -e "s/^listen = .*/listen = \"$ADDR\"/" \
    -e "s|^database_url = .*|database_url = \"$PG/$DB\"|" \
    bench/web-anomalies.toml >"$OUT/serve.toml"
start_serve "$OUT/serve.toml" "$ADDR"
echo "  ready (/readyz 200) after $(wait_ready "http://$ADDR/readyz") s; RSS $(ps -o rss= -p "$SERVER") KB"
curl -fsS "http://$ADDR/readyz" | sed 's/^/  \/readyz: /'; echo
# (At most LOADED_WAIT s, default 1800: at 60 M rows the load took 409 s on this machine
# when quiet; past it the wrk runs go on beside the background load, and ranges not
# loaded yet answer 503.)
if loaded=$(LOADED_WAIT=${LOADED_WAIT:-1800} wait_loaded "http://$ADDR/readyz"); then
    echo "  whole horizon evaluated after $loaded s; RSS $(ps -o rss= -p "$SERVER") KB"
else
    echo "  horizon NOT loaded after ${LOADED_WAIT:-1800} s; RSS $(ps -o rss= -p "$SERVER") KB"
    curl -fsS "http://$ADDR/readyz" | sed 's/^/  \/readyz: /'; echo
fi

to=$(( LAST + 600000 ))
echo "== wrk -t$THREADS -c$CONNECTIONS -d$DURATION"
wrk_run healthz "http://$ADDR/healthz"
wrk_run anomalies-1h "http://$ADDR/api/v1/anomalies?from=$(( to - 3600000 ))&to=$to"
wrk_run anomalies-24h "http://$ADDR/api/v1/anomalies?from=$(( to - 86400000 ))&to=$to"
wrk_run compare-1h "http://$ADDR/api/v1/topics/topic-00042/compare?from=$(( to - 3600000 ))&to=$to"
echo "  serve RSS after the load: $(ps -o rss= -p "$SERVER") KB"
echo "  evaluation cycles (every minute, during the load too):"
curl -fsS "http://$ADDR/metrics" | grep -E "^kafka_audit_(evaluation_duration_seconds_(sum|count)|evaluated_windows_total)" | sed 's/^/    /'
stop_serve

if [ -n "$INGEST" ]; then
echo "== collector ingest into this store (bench/collector-store.sh --url, $INGEST)"
# (It exits 1 when its absolute targets are not met: reported, not fatal here.)
bench/collector-store.sh --url "$PG/$DB" $INGEST | sed 's/^/  /' || true
fi

psql "$PG/$DB" -Atc "SELECT '  database after: ' || pg_size_pretty(pg_database_size(current_database()))"

RETENTION=${RETENTION:-$(( KEEP != 1 ))}
if [ "$RETENTION" = 1 ]; then
# Two whole days of this store, one each way: the day partitions of the oldest whole day
# dropped (the store's retention), and the next day deleted by the old retention
# statement (the collector's before the day partitions: 10 000 windows with their
# buckets and offsets per transaction, here with the new keys). The oldest day is
# partial (the horizon starts mid-day) and is dropped unmeasured first. WAL from
# pg_current_wal_lsn() is the whole server's: nothing else writes while the bench runs.
day_ms=86400000
first_day=$(( FIRST / day_ms * day_ms ))
d1=$(( first_day + day_ms )) d2=$(( first_day + 2 * day_ms )) d3=$(( first_day + 3 * day_ms ))
if [ "$d3" -le "$LAST" ]; then
    echo "== retention of one day (TOPICS x 6 x 144 = $(( TOPICS * 6 * 144 )) window rows), on this store"
    psql "$PG/$DB" -qAtc "SELECT audit_drop_day_partitions($d1, 0)" >/dev/null
    psql "$PG/$DB" -qc "CHECKPOINT"
    retention_measure() { # label, SQL
        local before after start end rows
        rows=$(psql "$PG/$DB" -Atc "SELECT count(*) FROM audit_window WHERE window_start_ms < $3")
        before=$(psql "$PG/$DB" -Atc "SELECT pg_current_wal_lsn()")
        start=$(date +%s.%N)
        psql "$PG/$DB" -v ON_ERROR_STOP=1 -q -o /dev/null -c "$2"
        end=$(date +%s.%N)
        after=$(psql "$PG/$DB" -Atc "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$before')")
        printf '  %-52s %9d rows %8.2f s  WAL %8.1f MB\n' "$1" "$rows" \
            "$(echo "$end - $start" | bc)" "$(echo "$after / 1048576" | bc -l)"
    }
    retention_measure "new: DROP of the day's partitions" \
        "SELECT audit_drop_day_partitions($d2, 0)" "$d2"
    retention_measure "old: batched DELETE (10 000 per transaction)" "
DO \$\$
DECLARE n bigint;
BEGIN
  LOOP
    WITH doomed AS (
        SELECT topic, window_start_ms, tier, datacenter, id FROM audit_window
        WHERE window_start_ms >= $d2 AND window_start_ms < $d3
        ORDER BY window_start_ms LIMIT 10000 FOR UPDATE SKIP LOCKED),
    w AS (DELETE FROM audit_window a USING doomed d
          WHERE a.window_start_ms >= $d2 AND a.window_start_ms < $d3
            AND (a.topic, a.window_start_ms, a.tier, a.datacenter)
              = (d.topic, d.window_start_ms, d.tier, d.datacenter)
          RETURNING a.topic, a.window_start_ms, a.id),
    b AS (DELETE FROM audit_window_bucket x USING w
          WHERE x.window_start_ms >= $d2 AND x.window_start_ms < $d3
            AND (x.topic, x.window_start_ms, x.window_id) = (w.topic, w.window_start_ms, w.id)),
    o AS (DELETE FROM audit_window_offset x USING w
          WHERE x.window_start_ms >= $d2 AND x.window_start_ms < $d3
            AND (x.topic, x.window_start_ms, x.window_id) = (w.topic, w.window_start_ms, w.id))
    SELECT count(*) INTO n FROM w;
    COMMIT;
    EXIT WHEN n = 0;
  END LOOP;
END \$\$;" "$d3"
    psql "$PG/$DB" -Atc "SELECT '  window rows of that day left: ' || count(*) FROM audit_window
        WHERE window_start_ms >= $d2 AND window_start_ms < $d3"
else
    echo "== retention: left out (the store holds less than three days)"
fi
fi
echo "== total $(( $(date +%s) - bench_started )) s (builds not counted)"
