#!/usr/bin/env bash
# Runs the README's first command as a newcomer would, and checks that it works:
#   1. clones this repository (HEAD, committed state) into a new directory,
#   2. (as root, unless --with-curl-headers) removes libcurl's headers
#      (libcurl4-openssl-dev), which librdkafka's cmake build once needed,
#   3. runs the first command of the README's quick start, verbatim, with an empty
#      CARGO_TARGET_DIR (the dashboard's address comes from KAFKA_AUDIT_DEMO_LISTEN, so
#      that it does not collide with anything on port 8080),
#   4. waits for the dashboard's HTTP 200 and for a first settled verdict,
#   5. stops it with SIGINT (Ctrl-C) and expects a clean exit (status 0),
# and prints the time of each step and what the binary links (ldd).
#
# The headers are put back as soon as librdkafka's build script has finished (nothing
# else in the build includes them; the link and the run do not need them), or at exit,
# whatever happens, so the machine is without them for a couple of minutes only.
# `--keep-headers-out` keeps them out until the build has finished.
#
# Usage: bench/first-command.sh [--with-curl-headers] [--keep-headers-out] [--keep]
# Env: WORK (default: a new temp dir), PORT (default: a free one), VERDICT_TIMEOUT (s, 300).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
remove_headers=1 keep_out=0 keep=0
for a in "$@"; do
  case $a in
    --with-curl-headers) remove_headers=0 ;;
    --keep-headers-out) keep_out=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 [--with-curl-headers] [--keep-headers-out] [--keep]" >&2; exit 2 ;;
  esac
done
fail() { echo "first-command: FAIL: $*" >&2; exit 1; }
t0=$SECONDS
mark() { printf '== %-34s %4ds\n' "$1" $((SECONDS - t0)); }

work=${WORK:-$(mktemp -d /tmp/kafka-audit-first-command.XXXXXX)}
port=${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
pkg=libcurl4-openssl-dev
removed=0 demo_pid=
restore_headers() {
  ((removed)) || return 0
  echo "== putting $pkg back"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$pkg" >/dev/null ||
    echo "first-command: could not reinstall $pkg: run apt-get install -y $pkg" >&2
  removed=0
}
cleanup() {
  [[ -n $demo_pid ]] && kill -KILL -- "-$demo_pid" 2>/dev/null
  restore_headers
  if ((keep)); then echo "== kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. a fresh clone --------------------------------------------------------------------
rev=$(git -C "$repo" rev-parse HEAD)
git clone -q --no-hardlinks "$repo" "$work/kafka-audit" || fail "git clone"
git -C "$work/kafka-audit" checkout -q "$rev" || fail "checkout $rev"
cd "$work/kafka-audit" || exit 1
# The first command of the quick start, exactly as printed (without its comment).
cmd=$(sed -n '/^## Quick start/,/^## /p' README.md | sed -n '/^```sh/,/^```/p' | sed -n 2p | sed 's/ *#.*//')
[[ $cmd == *demo* ]] || fail "no demo command in the README's quick start (found: $cmd)"
echo "== clone of $rev in $work; the README's first command: $cmd"
export CARGO_TARGET_DIR=$work/target KAFKA_AUDIT_DEMO_LISTEN=127.0.0.1:$port
mark clone

# --- 2. without libcurl's headers ------------------------------------------------------
if ((remove_headers)); then
  [[ $(id -u) -eq 0 ]] || fail "removing $pkg needs root (or pass --with-curl-headers)"
  if dpkg -s "$pkg" >/dev/null 2>&1; then
    removed=1
    DEBIAN_FRONTEND=noninteractive apt-get remove -y -q "$pkg" >/dev/null || fail "apt-get remove $pkg"
  fi
fi
if echo '#include <curl/curl.h>' | cc -E -x c - >/dev/null 2>&1; then
  headers="present"
  ((remove_headers)) && fail "curl/curl.h is still found after removing $pkg"
else
  headers="absent"
fi
echo "== curl/curl.h: $headers"
mark "without headers"

# --- 3. the first command ---------------------------------------------------------------
log=$work/demo.log
setsid bash -c "$cmd" >"$log" 2>&1 </dev/null &
demo_pid=$!
built=0
while kill -0 "$demo_pid" 2>/dev/null; do
  if ((removed && !keep_out)) && compgen -G "$CARGO_TARGET_DIR/debug/build/rdkafka-sys-*/output" >/dev/null; then
    mark "librdkafka built (headers back)"
    restore_headers
  fi
  if grep -q '^ *Running `' "$log"; then built=1; break; fi
  sleep 2
done
((built)) || { tail -40 "$log"; fail "the build failed"; }
build_s=$((SECONDS - t0))
mark "built; demo starting"
restore_headers
bin=$CARGO_TARGET_DIR/debug/kafka-audit
echo "== links (ldd $bin):"
ldd "$bin" | sed 's/^/   /'
ldd "$bin" | grep -q libcurl && fail "the binary links libcurl dynamically"

# --- 4. dashboard and a first verdict ---------------------------------------------------
base=http://127.0.0.1:$port
deadline=$((SECONDS + 60))
until [[ $(curl -s -o /dev/null -w '%{http_code}' "$base/") == 200 ]]; do
  kill -0 "$demo_pid" 2>/dev/null || { tail -40 "$log"; fail "the demo exited"; }
  ((SECONDS < deadline)) || { tail -40 "$log"; fail "no HTTP 200 from $base/ within 60 s of the start"; }
  sleep 1
done
mark "dashboard HTTP 200"
dashboard_s=$((SECONDS - build_s - t0))
deadline=$((SECONDS + ${VERDICT_TIMEOUT:-300}))
verdict=
while [[ -z $verdict ]]; do
  kill -0 "$demo_pid" 2>/dev/null || { tail -40 "$log"; fail "the demo exited"; }
  ((SECONDS < deadline)) || { tail -40 "$log"; fail "no settled verdict within ${VERDICT_TIMEOUT:-300} s"; }
  sleep 2
  verdict=$(curl -s "$base/api/v1/topics/payments/compare" | python3 -c '
import json, sys
try:
    edges = json.load(sys.stdin).get("edges", [])
except ValueError:
    edges = []
final = [e for e in edges if e.get("lifecycle") == "final" and (e.get("expected") or e.get("observed"))]
if final:
    e = min(final, key=lambda e: e["window_start"])
    print("%s (%s -> %s, window %s, expected %s, observed %s)" % (e["verdict"], e["upstream"], e["downstream"], e["window_start"], e["expected"], e["observed"]))
' 2>/dev/null)
done
mark "first verdict"
echo "   payments: $verdict"
verdict_s=$((SECONDS - build_s - t0))

# --- 5. Ctrl-C ---------------------------------------------------------------------------
kill -INT -- "-$demo_pid"
deadline=$((SECONDS + 60))
while kill -0 "$demo_pid" 2>/dev/null; do
  ((SECONDS < deadline)) || fail "the demo did not stop within 60 s of SIGINT"
  sleep 1
done
wait "$demo_pid"
status=$?
demo_pid=
mark "stopped (exit status $status)"
((status == 0)) || { tail -20 "$log"; fail "the demo exited with status $status after SIGINT"; }
echo "== PASS: clone + cold build ${build_s}s, then dashboard ${dashboard_s}s and first verdict ${verdict_s}s after start; total $((SECONDS - t0))s (curl headers $headers during the build)"
