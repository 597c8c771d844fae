"""Reads and writes a running `widesql serve` through ADBC's Flight SQL driver.

Run by interop/run.sh, which starts the server over the fixture table `t`
(1,000 rows with decimal, timestamp and MAP columns); argv[1] is its
address. Checks queries through the DB-API (pyarrow tables, pandas), Polars'
read_database and DuckDB over the Arrow table ADBC returns, executemany with
parameters, and get_objects listing the catalog; the first mismatch fails
the run.
"""

import decimal
import sys

import adbc_driver_flightsql.dbapi as flight_sql
import duckdb
import polars
import pyarrow as pa

ROWS = 1000
uri = f"grpc://{sys.argv[1]}"
checks = 0


def check(what, got, want):
    global checks
    checks += 1
    if got != want:
        sys.exit(f"interop (Flight SQL): {what}: got {got!r}, want {want!r}")


# widesql commits every statement on its own (Flight SQL transactions are
# not offered).
with flight_sql.connect(uri, autocommit=True) as conn:
    cur = conn.cursor()
    cur.execute("SELECT k, name, price, at, tags FROM t ORDER BY k")
    served = cur.fetch_arrow_table()
    check("rows", served.num_rows, ROWS)
    check("columns", served.column_names, ["k", "name", "price", "at", "tags"])
    check("price type", served.schema.field("price").type, pa.decimal128(10, 2))
    check("first price", served.column("price")[0].as_py(), decimal.Decimal("0.25"))
    check("tags of k=2 (keys in order)", served.column("tags")[1].as_py(), [("even", 1), ("k", 2)])
    check("timestamp type", pa.types.is_timestamp(served.schema.field("at").type), True)

    frame = duckdb.sql("SELECT sum(k) AS total, count(*) AS n FROM served").fetchall()
    check("DuckDB over the Arrow table", frame, [(ROWS * (ROWS + 1) // 2, ROWS)])

    cur.execute("SELECT count(*) AS n FROM t WHERE ok")
    check("pandas", int(cur.fetch_df()["n"][0]), ROWS // 3)

    rows = polars.read_database("SELECT k, score FROM t WHERE k <= 10 ORDER BY k", conn)
    check("Polars rows", rows.height, 10)
    check("Polars score", rows["score"].to_list()[:2], [1.5, 3.0])

    cur.execute("CREATE TABLE people (_key VARCHAR PRIMARY KEY, age BIGINT)")
    cur.executemany("INSERT INTO people VALUES ($1, $2)", [("ada", 36), ("lin", 29)])
    cur.execute("SELECT _key, age FROM people ORDER BY _key")
    check("executemany", cur.fetchall(), [("ada", 36), ("lin", 29)])
    cur.execute("SELECT age FROM people WHERE _key = $1", ("lin",))
    check("a parameter", cur.fetchall(), [(29,)])

    objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
    tables = {
        (catalog["catalog_name"], schema["db_schema_name"], table["table_name"])
        for catalog in objects
        for schema in catalog["catalog_db_schemas"] or []
        for table in schema["db_schema_tables"] or []
    }
    check("get_objects has t", ("default", "public", "t") in tables, True)
    check("get_objects has people", ("default", "public", "people") in tables, True)
    cur.close()

print(f"interop (Flight SQL): {checks} checks passed")
