#!/usr/bin/env bash
# Fuzzes the API of a seeded server with schemathesis (from PyPI) against its own
# OpenAPI document and fails on any 5xx response (and on responses that do not match
# the document).
#
#   bench/schemathesis.sh            # default: 100 examples per operation
#   EXAMPLES=500 bench/schemathesis.sh
#
# Seeds a SQLite store with web/src/bin/web-bench-seed.rs (every kind of verdict), starts the
# server (web/src/bin/web-bench-serve.rs = `kafka-audit serve` without the Kafka parts) with
# bench/serve-seeded.toml on a free port (PORT=... to choose one), waits for /readyz, runs
# schemathesis with the admin token against the document the server derives from its
# handlers (web/src/openapi.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

EXAMPLES="${EXAMPLES:-100}"
WORK=/tmp/kafka-audit-schemathesis
# A free port unless one is given: the kernel picks it, the server binds it right after.
PORT="${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
ADDR=127.0.0.1:$PORT
TOKEN=schemathesis-admin-token-0001
VENV="${SCHEMATHESIS_VENV:-$WORK-venv}"

if [ ! -x "$VENV/bin/schemathesis" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet schemathesis
fi

cargo build -p web --features bench-bins --bin web-bench-seed --bin web-bench-serve
rm -rf "$WORK" && mkdir -p "$WORK"
target/debug/web-bench-seed "sqlite:$WORK/audit.db" 12

sed "s/^listen = .*/listen = \"$ADDR\"/" bench/serve-seeded.toml >"$WORK/serve.toml"
target/debug/web-bench-serve "$WORK/serve.toml" 2>"$WORK/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT

for _ in $(seq 1 300); do
    if curl -fsS "http://$ADDR/readyz" >/dev/null 2>&1; then break; fi
    if ! kill -0 $SERVER 2>/dev/null; then cat "$WORK/server.log"; exit 1; fi
    sleep 0.2
done
curl -fsS "http://$ADDR/readyz"; echo

set +e
"$VENV/bin/schemathesis" run "http://$ADDR/api/openapi.json" \
    -H "Authorization: Bearer $TOKEN" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --max-examples "$EXAMPLES" \
    --seed 6 \
    --report junit --report-dir "$WORK/report" \
    --no-color
STATUS=$?
set -e
if grep -q "panicked" "$WORK/server.log"; then
    echo "the server panicked:"; grep -A5 panicked "$WORK/server.log"; exit 1
fi
FIVEXX=$(grep -c 'status=5' "$WORK/server.log" || true)
echo "schemathesis exit status: $STATUS"
exit $STATUS
