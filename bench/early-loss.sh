#!/usr/bin/env bash
# How long from a loss to its page, with replication evidence (docs/web.md, Replication
# evidence), 10-minute windows and the default 20-minute grace (the page comes while
# the window is open).
# Runs each end-to-end test ROUNDS times and prints every run's delay and the median:
#   consumer-group   kafka-audit --test it early_loss::records_a_replicator_drops_...
#                    (the suite's replicator drops 37 records; from the first drop)
#   mirror-maker-2   kafka-audit --test it early_loss::records_deleted_from_a_mirror_...
#                    (37 records deleted from MirrorMaker 2's copy; from the deletion)
#   producer-tier    kafka-audit-interceptor --test it pipeline::records_deleted_after_...
#                    (20 records deleted at the broker after a C producer with the
#                    plugin counted them; from the deletion)
# Needs the dev services: deploy/dev/kafka start a b; deploy/dev/postgres start;
# deploy/dev/mm2 start (or run it under ./test.sh's services).
#
# Usage: bench/early-loss.sh [ROUNDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
export KAFKA_AUDIT_TEST_KAFKA_A=${KAFKA_AUDIT_TEST_KAFKA_A:-127.0.0.1:19092}
export KAFKA_AUDIT_TEST_KAFKA_B=${KAFKA_AUDIT_TEST_KAFKA_B:-127.0.0.1:29092}
export KAFKA_AUDIT_TEST_PG_URL=${KAFKA_AUDIT_TEST_PG_URL:-postgres://postgres@127.0.0.1:55432/kafka_audit}
deploy/dev/kafka status a b >/dev/null && deploy/dev/postgres status >/dev/null && deploy/dev/mm2 status >/dev/null ||
  { echo "bench/early-loss.sh: start the dev services first (see the header)" >&2; exit 1; }

cases=(
  "consumer-group|kafka-audit|early_loss::records_a_replicator_drops_are_paged_as_loss_within_a_minute_while_the_window_is_open"
  "mirror-maker-2|kafka-audit|early_loss::records_deleted_from_a_mirror_maker_copy_are_paged_as_loss_within_a_minute"
  "producer-tier|kafka-audit-interceptor|pipeline::records_deleted_after_the_producer_tier_counted_them_are_paged_within_a_minute"
)
cargo test -q -p kafka-audit -p kafka-audit-interceptor --test it --no-run 2>/dev/null
for c in "${cases[@]}"; do
  IFS='|' read -r name crate test <<<"$c"
  delays=()
  for r in $(seq "$ROUNDS"); do
    out=$(cargo test -q -p "$crate" --test it -- "$test" --exact --nocapture 2>&1 | sed 's/\x1b\[[0-9;]*m//g') || {
      echo "$name round $r: the test failed" >&2
      echo "$out" | tail -30 >&2
      exit 1
    }
    ms=$(echo "$out" | sed -n 's/.*paged \([0-9]*\) ms after.*/\1/p' | head -1)
    left=$(echo "$out" | sed -n 's/.*the window ends \([0-9]*\) s later.*/\1/p' | head -1)
    echo "$name round $r: paged $ms ms after the loss, $left s before the window's end"
    delays+=("$ms")
  done
  median=$(printf '%s\n' "${delays[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
  echo "== $name: median $median ms over $ROUNDS runs (${delays[*]} ms)"
done
