#!/usr/bin/env bash
# Exports a fixture table in every format with the widesql command (the IPC
# stream through a pipe, as another program would read it), then reads the
# files with pyarrow, DuckDB, Polars and pandas installed from PyPI into a
# throwaway virtualenv (interop/check.py); then imports a Parquet file with
# nested columns that pyarrow wrote and checks that its export holds the same
# values (interop/nested.py); then imports the JSON arrays pandas and Polars
# write (interop/records.py); then serves the database with `widesql serve`
# (TLS with a certificate openssl makes here, a first admin) and reads and
# writes it through ADBC's Flight SQL driver as two users (interop/flight.py).
# The shell and Python examples of docs/export-import.md and docs/server.md
# run as a reader pastes them (interop/doc_blocks.py).
# Skips, saying why, only when python3 or the install is impossible.
#
# usage: interop/run.sh PATH-TO-WIDESQL-BINARY
set -euo pipefail
widesql="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! command -v python3 >/dev/null; then
  echo "interop: skipped: no python3 on this machine"
  exit 0
fi
if ! python3 -m venv "$work/venv" >/dev/null 2>&1 ||
  ! "$work/venv/bin/pip" install --quiet --disable-pip-version-check \
    pyarrow duckdb polars pandas adbc-driver-manager adbc-driver-flightsql >"$work/pip.log" 2>&1; then
  echo "interop: skipped: cannot install pyarrow, duckdb, polars, pandas and ADBC from PyPI:"
  tail -n 5 "$work/pip.log" 2>/dev/null || true
  exit 0
fi

db="$work/db"
out="$work/out"
mkdir -p "$out"
"$widesql" --db "$db" sql "
  CREATE TABLE t (k BIGINT PRIMARY KEY, name VARCHAR, price DECIMAL(10, 2), score DOUBLE,
                  at TIMESTAMP, day DATE, ok BOOLEAN, tags MAP(VARCHAR, BIGINT));
  INSERT INTO t (k, name, price, score, at, day, ok)
    SELECT value, concat('n', CAST(value AS VARCHAR)), CAST(value AS DECIMAL(10, 2)) / 4,
           value * 1.5, to_timestamp(value * 60), CAST(value AS INT) + DATE '1970-01-01',
           value % 3 = 0
    FROM generate_series(1, 1000) AS s(value);
  UPDATE t SET tags = MAP {'k': k, 'even': 1} WHERE k % 2 = 0" >/dev/null

query="SELECT k, name, price, score, at, day, ok, tags FROM t ORDER BY k"
for format in parquet arrow csv json ndjson; do
  "$widesql" --db "$db" export --quiet --output "$out/t.$format" "$query"
done
for format in parquet arrow; do
  "$widesql" --db "$db" export --quiet --plain-types --output "$out/t-plain.$format" "$query"
done
"$widesql" --db "$db" export --quiet "$query" >"$out/t.arrows"
"$widesql" --db "$db" export --quiet --plain-types --output - "$query" | cat >"$out/t-plain.arrows"

"$work/venv/bin/python" "$(dirname "$0")/check.py" "$out"

# The other way: a file pyarrow wrote, with nested columns, imported into a
# new table and exported again.
"$work/venv/bin/python" "$(dirname "$0")/nested.py" make "$out/nested.parquet"
"$widesql" --db "$db" import --quiet --table nested --create "$out/nested.parquet"
"$widesql" --db "$db" export --quiet --output "$out/nested-back.parquet" "SELECT * FROM nested ORDER BY _key"
"$work/venv/bin/python" "$(dirname "$0")/nested.py" compare "$out/nested.parquet" "$out/nested-back.parquet"

# JSON arrays as pandas and Polars write them, imported into new tables and
# exported again as newline-delimited JSON.
"$work/venv/bin/python" "$(dirname "$0")/records.py" make "$out"
for tool in pandas polars; do
  "$widesql" --db "$db" import --quiet --table "${tool}_rows" --create "$out/$tool.json"
  "$widesql" --db "$db" export --quiet --output "$out/$tool-back.ndjson" \
    "SELECT id, name, score FROM ${tool}_rows ORDER BY id"
done
"$work/venv/bin/python" "$(dirname "$0")/records.py" compare "$out"

# The shell and Python examples of docs/export-import.md, run as a reader
# pastes them, with this binary as `widesql` and the virtualenv's python.
mkdir -p "$work/bin" "$work/docs"
ln -s "$(cd "$(dirname "$widesql")" && pwd)/$(basename "$widesql")" "$work/bin/widesql"
PATH="$work/bin:$work/venv/bin:$PATH" "$work/venv/bin/python" "$(dirname "$0")/doc_blocks.py" \
  "$(dirname "$0")/../docs/export-import.md" "$work/docs"

# The database served over Flight SQL, with TLS (a self-signed certificate
# made here) and a first admin: the server prints its address once it
# takes calls, and stops cleanly on SIGTERM.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=localhost" \
  -addext "subjectAltName=DNS:localhost" \
  -keyout "$work/key.pem" -out "$work/cert.pem" >"$work/openssl.log" 2>&1 \
  || { echo "interop: openssl could not make a certificate:"; cat "$work/openssl.log"; exit 1; }
admin_password="interop-$(date +%s)"
WIDESQL_ADMIN_PASSWORD="$admin_password" "$widesql" --db "$db" serve --listen 127.0.0.1:0 \
  --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" --init-admin admin \
  >"$work/serve.out" 2>"$work/serve.err" &
server=$!
addr=""
for _ in $(seq 1 100); do
  addr="$(sed -n 's/^listening on //p' "$work/serve.out")"
  [ -n "$addr" ] && break
  if ! kill -0 "$server" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "interop: widesql serve did not start:"
  cat "$work/serve.err"
  kill "$server" 2>/dev/null || true
  exit 1
fi
"$work/venv/bin/python" "$(dirname "$0")/flight.py" "$addr" "$work/cert.pem" admin "$admin_password" \
  || { kill "$server"; exit 1; }
# docs/server.md's examples: its command starts a server on a database of
# its own (this run's password, certificate and a free port in place of the
# page's), its Python runs against it, and SIGTERM stops it.
PATH="$work/bin:$work/venv/bin:$PATH" "$work/venv/bin/python" "$(dirname "$0")/doc_blocks.py" \
  "$(dirname "$0")/../docs/server.md" "$work/docs-server" --serve \
  --replace "WIDESQL_ADMIN_PASSWORD=…" "WIDESQL_ADMIN_PASSWORD=$admin_password" \
  --replace '"…"' "\"$admin_password\"" --replace "127.0.0.1:50051" "127.0.0.1:0" \
  --replace "cert.pem" "$work/cert.pem" --replace "key.pem" "$work/key.pem" \
  || { kill "$server"; exit 1; }
kill -TERM "$server"
wait "$server"
