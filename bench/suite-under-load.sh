#!/usr/bin/env bash
# The test suite on a busy machine: both cores kept busy by a CPU hog at the
# lowest priority (stress-ng --cpu 2 under nice 19, Debian's package) for the whole run,
# as a low-priority build beside the tests keeps a developer's or CI's machine busy. A
# test that fails here waits on time instead of on its condition.
#
#   bench/suite-under-load.sh [COMMAND...]     default: ./test.sh (every test)
#   e.g. bench/suite-under-load.sh ./test.sh -p kafka-audit --test it stuck_instance
#
# Prints the hog's CPU share at the end (how busy it kept the machine) and exits with
# the command's status.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v stress-ng >/dev/null; then
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
  "${sudo[@]}" apt-get install -y -q --no-install-recommends stress-ng >/dev/null ||
    { echo "suite-under-load: cannot install stress-ng" >&2; exit 2; }
fi
(($#)) || set -- ./test.sh
nice -n 19 stress-ng --cpu "$(nproc)" --timeout 6h --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null' EXIT
start=$SECONDS
"$@"
status=$?
hog_cpu=$(ps -o times= --ppid "$hog" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
echo "== suite-under-load: '$*' exited $status after $((SECONDS - start)) s; the hog used ${hog_cpu} CPU-seconds meanwhile ($(nproc) cores)"
exit "$status"
