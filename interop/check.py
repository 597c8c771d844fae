"""Reads widesql's exports with pyarrow, DuckDB, Polars and pandas.

Run by interop/run.sh, which exports the files first; argv[1] is their
directory. Every check compares row counts, column names, types and values
with what the fixture inserted; the first mismatch fails the run.
"""

import datetime
import decimal
import sys
from pathlib import Path

import duckdb
import pandas
import polars
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

ROWS = 1000
COLUMNS = ["k", "name", "price", "score", "at", "day", "ok", "tags"]
out = Path(sys.argv[1])
checks = 0


def check(what, got, want):
    global checks
    checks += 1
    if got != want:
        sys.exit(f"interop: {what}: got {got!r}, want {want!r}")


def check_arrow_table(what, table, plain):
    check(f"{what} rows", table.num_rows, ROWS)
    check(f"{what} columns", table.column_names, COLUMNS)
    schema = table.schema
    check(f"{what} k type", schema.field("k").type, pa.int64())
    want_string = pa.string() if plain else pa.string_view()
    check(f"{what} name type", schema.field("name").type, want_string)
    check(f"{what} price type", schema.field("price").type, pa.decimal128(10, 2))
    check(f"{what} at type", pa.types.is_timestamp(schema.field("at").type), True)
    check(f"{what} day type", schema.field("day").type, pa.date32())
    check(f"{what} tags type", pa.types.is_map(schema.field("tags").type), True)
    rows = table.to_pylist()
    check(f"{what} order", [r["k"] for r in rows], list(range(1, ROWS + 1)))
    check(f"{what} row 2", (rows[1]["k"], str(rows[1]["name"]), rows[1]["price"]),
          (2, "n2", decimal.Decimal("0.50")))
    check(f"{what} day of row 2", rows[1]["day"], datetime.date(1970, 1, 3))
    check(f"{what} tags of row 2", sorted(rows[1]["tags"]), [("even", 1), ("k", 2)])
    check(f"{what} tags of row 1", rows[0]["tags"], None)


for plain in (False, True):
    suffix = "-plain" if plain else ""
    check_arrow_table(f"pyarrow parquet{suffix}", pq.read_table(out / f"t{suffix}.parquet"), plain)
    check_arrow_table(f"pyarrow arrow{suffix}", ipc.open_file(out / f"t{suffix}.arrow").read_all(), plain)
    with open(out / f"t{suffix}.arrows", "rb") as f:
        check_arrow_table(f"pyarrow piped stream{suffix}", ipc.open_stream(f).read_all(), plain)

# DuckDB reads the Parquet file by itself.
con = duckdb.connect()
count, total, names = con.execute(
    f"SELECT count(*), sum(k), count(DISTINCT name) FROM '{out / 't.parquet'}'"
).fetchone()
check("duckdb parquet count/sum/names", (count, total, names), (ROWS, ROWS * (ROWS + 1) // 2, ROWS))
price = con.execute(f"SELECT price FROM '{out / 't.parquet'}' WHERE k = 2").fetchone()[0]
check("duckdb parquet decimal", price, decimal.Decimal("0.50"))
tags = con.execute(f"SELECT tags['k'] FROM '{out / 't.parquet'}' WHERE k = 4").fetchone()[0]
check("duckdb parquet map lookup", tags, 4)

# Polars reads Parquet and both Arrow IPC forms.
for path in ("t.parquet", "t.arrow", "t-plain.arrow"):
    frame = polars.read_parquet(out / path) if path.endswith("parquet") else polars.read_ipc(out / path)
    check(f"polars {path} shape", frame.shape, (ROWS, len(COLUMNS)))
    check(f"polars {path} columns", frame.columns, COLUMNS)
    check(f"polars {path} sum", frame["k"].sum(), ROWS * (ROWS + 1) // 2)
    check(f"polars {path} name of row 3", frame.sort("k")["name"][2], "n3")

# pandas reads Parquet, the Arrow file (via pyarrow) and CSV.
frame = pandas.read_parquet(out / "t-plain.parquet")
check("pandas parquet shape", frame.shape, (ROWS, len(COLUMNS)))
check("pandas parquet name of row 1", frame.sort_values("k")["name"].iloc[0], "n1")
frame = pandas.read_csv(out / "t.csv")
check("pandas csv shape", frame.shape, (ROWS, len(COLUMNS)))
check("pandas csv columns", list(frame.columns), COLUMNS)
check("pandas csv map as JSON", frame.sort_values("k")["tags"].iloc[1], '{"even":1,"k":2}')
frame = pandas.read_json(out / "t.ndjson", lines=True)
check("pandas ndjson shape", frame.shape, (ROWS, len(COLUMNS)))
frame = pandas.read_json(out / "t.json")
check("pandas json shape", frame.shape, (ROWS, len(COLUMNS)))

print(f"interop: {checks} checks passed (pyarrow {pa.__version__}, duckdb {duckdb.__version__}, "
      f"polars {polars.__version__}, pandas {pandas.__version__})")
