#!/usr/bin/env bash
# Retention of one day in PostgreSQL: dropping the day's partitions (the store's
# retention, docs/operations.md) vs the old batched DELETE (10 000 windows with their
# buckets and offsets per transaction, as the collector did before), on the same rows:
# time and WAL volume.
#
#   bench/store-retention.sh            # 2 M window rows (+ 2 M buckets, 2 M offsets)
#   TOPICS=6000 bench/store-retention.sh   # ~5.2 M window rows
#
# One day of windows: TOPICS x 3 tiers x 2 datacenters x 144 ten-minute windows, each
# with one latency bucket row and one offset row. Both schemas are loaded with psql
# from the repository (the old one from store/tests/fixtures/postgres_v1, the new one
# from migrations/postgres). WAL is measured with pg_current_wal_lsn() before and
# after, so the bench runs on a private PostgreSQL instance of its own (nothing else
# writes WAL there): initdb in $DIR, port $PORT, stopped at the end. Needs the
# postgresql-15 binaries and root (initdb runs as the postgres user).
set -euo pipefail
cd "$(dirname "$0")/.."

TOPICS=${TOPICS:-2315}
PORT=${PORT:-55491}
DIR=${DIR:-/tmp/kafka-audit-bench-retention}
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
URL="postgres://postgres@127.0.0.1:$PORT"

rm -rf "$DIR" && mkdir -p "$DIR" && chown postgres "$DIR"
su postgres -c "$BIN/initdb -D $DIR/data -U postgres --auth=trust >/dev/null"
su postgres -c "$BIN/pg_ctl -D $DIR/data -l $DIR/log -w -o '-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_wal_size=4GB -c shared_buffers=256MB' start >/dev/null"
trap 'su postgres -c "$BIN/pg_ctl -D $DIR/data -m fast stop >/dev/null" || true' EXIT

day_ms=86400000
day=$(( ($(date +%s) * 1000 / day_ms - 40) * day_ms ))  # a day 40 days back

apply() { # database, migration files...
    local db=$1; shift
    for f in "$@"; do psql "$URL/$db" -v ON_ERROR_STOP=1 -q -f "$f" >/dev/null; done
}

seed() { # database, "old"|"new"
    local extra_cols="" extra_vals=""
    if [ "$2" = new ]; then extra_cols="topic, window_start_ms,"; extra_vals="topic, window_start_ms,"; fi
    psql "$URL/$1" -v ON_ERROR_STOP=1 -q <<SQL
INSERT INTO audit_window (topic, tier, datacenter, window_start_ms, window_end_ms, count, bytes,
    no_time_count, malformed_count, out_of_bounds_count, checksum, latency_zero_count,
    latency_negative_count, latency_max_ms, increments, first_received_at_ms, last_received_at_ms)
SELECT format('topic-%s', lpad(t::text, 5, '0')), tier, dc, w, w + 600000,
       1000, 120000, 0, 0, 0, 1000003, 0, 0, 2100, 1, w + 660000, w + 660000
FROM generate_series(0, $TOPICS - 1) t,
     generate_series($day::bigint, $day::bigint + $day_ms - 600000, 600000) w,
     unnest(ARRAY['producer', 'regional', 'aggregate']) tier,
     unnest(ARRAY['dc1', 'dc2']) dc;
INSERT INTO audit_window_bucket ($extra_cols window_id, bucket, count)
SELECT $extra_vals id, 230, count FROM audit_window;
INSERT INTO audit_window_offset ($extra_cols window_id, partition_id, min_offset, max_offset)
SELECT $extra_vals id, 0, id * 10, id * 10 + 999 FROM audit_window;
VACUUM ANALYZE;
CHECKPOINT;
SQL
}

measure() { # database, label, SQL
    local before after start end
    before=$(psql "$URL/$1" -Atc "SELECT pg_current_wal_lsn()")
    start=$(date +%s.%N)
    psql "$URL/$1" -v ON_ERROR_STOP=1 -q -o /dev/null -c "$3"
    end=$(date +%s.%N)
    after=$(psql "$URL/$1" -Atc "SELECT pg_current_wal_lsn()")
    local wal
    wal=$(psql "$URL/$1" -Atc "SELECT pg_wal_lsn_diff('$after', '$before')")
    printf '%-44s %8.2f s  WAL %10.1f MB\n' "$2" "$(echo "$end - $start" | bc)" "$(echo "$wal / 1048576" | bc -l)"
}

psql "$URL/postgres" -qc "CREATE DATABASE old_schema" -c "CREATE DATABASE new_schema"
apply old_schema store/tests/fixtures/postgres_v1/*.sql
apply new_schema migrations/postgres/*.sql
psql "$URL/new_schema" -qAtc "SELECT audit_ensure_day_partitions($day, $day)" >/dev/null

start=$(date +%s.%N)
seed old_schema old
seed new_schema new
echo "seeded both in $(echo "$(date +%s.%N) - $start" | bc) s"
for db in old_schema new_schema; do
    psql "$URL/$db" -Atc "SELECT '$db: ' || (SELECT count(*) FROM audit_window) || ' window rows, '
        || pg_size_pretty(pg_database_size(current_database()))"
done

cutoff=$(( day + day_ms ))
# The old retention: the collector's statement before the day partitions, looped to the
# end, one transaction per batch of 10 000 windows.
measure old_schema "old: batched DELETE (10 000 per transaction)" "
DO \$\$
DECLARE n bigint;
BEGIN
  LOOP
    WITH doomed AS (
        SELECT id FROM audit_window WHERE window_start_ms < $cutoff
        ORDER BY window_start_ms LIMIT 10000 FOR UPDATE SKIP LOCKED),
    w AS (DELETE FROM audit_window WHERE id IN (SELECT id FROM doomed) RETURNING id),
    b AS (DELETE FROM audit_window_bucket WHERE window_id IN (SELECT id FROM w)),
    o AS (DELETE FROM audit_window_offset WHERE window_id IN (SELECT id FROM w))
    SELECT count(*) INTO n FROM w;
    COMMIT;
    EXIT WHEN n = 0;
  END LOOP;
END \$\$;"
measure new_schema "new: DROP of the day's partitions" \
    "SELECT audit_drop_day_partitions($cutoff, 0)"

for db in old_schema new_schema; do
    psql "$URL/$db" -Atc "SELECT '$db after: ' || (SELECT count(*) FROM audit_window) || ' window rows left'"
done
