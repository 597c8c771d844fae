"""Reads and writes a running `widesql serve` through ADBC's Flight SQL driver.

Run by interop/run.sh, which starts the server over TLS with a
self-signed certificate and a first admin, over the fixture table `t` (1,000
rows with decimal, timestamp and MAP columns); argv: its address, the
certificate file, the admin's name and password. Checks queries through the
DB-API (pyarrow tables, pandas), Polars' read_database and DuckDB over the
Arrow table ADBC returns, executemany with parameters, adbc_ingest of a
pyarrow table, get_objects listing the catalog, a wrong password refused,
and a user with one grant who sees and does only what it allows; the first
mismatch fails the run.
"""

import decimal
import sys

import adbc_driver_flightsql
import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import duckdb
import polars
import pyarrow as pa

ROWS = 1000
address, cert_file, admin, admin_password = sys.argv[1:5]
# The certificate names localhost.
uri = f"grpc+tls://localhost:{address.rsplit(':', 1)[1]}"
with open(cert_file) as f:
    root_certs = f.read()
checks = 0


def connect(user, password):
    return flight_sql.connect(
        uri,
        db_kwargs={
            "username": user,
            "password": password,
            adbc_driver_flightsql.DatabaseOptions.TLS_ROOT_CERTS.value: root_certs,
        },
        autocommit=True,
    )


def refused(what, run, status):
    """Runs `run`, which must fail with a message holding `status`."""
    global checks
    checks += 1
    try:
        run()
    except adbc_driver_manager.Error as e:
        if status not in str(e):
            sys.exit(f"interop (Flight SQL): {what}: failed with {e!r}, want {status}")
        return
    sys.exit(f"interop (Flight SQL): {what}: it ran")


def check(what, got, want):
    global checks
    checks += 1
    if got != want:
        sys.exit(f"interop (Flight SQL): {what}: got {got!r}, want {want!r}")


# widesql commits every statement on its own (Flight SQL transactions are
# not offered).
def wrong_password():
    with connect(admin, admin_password + "x") as conn:
        conn.cursor().execute("SELECT 1")


refused("a wrong password", wrong_password, "wrong user name or password")

with connect(admin, admin_password) as conn:
    cur = conn.cursor()
    cur.execute("SELECT k, name, price, at, tags FROM t ORDER BY k")
    served = cur.fetch_arrow_table()
    check("rows", served.num_rows, ROWS)
    check("columns", served.column_names, ["k", "name", "price", "at", "tags"])
    check("price type", served.schema.field("price").type, pa.decimal128(10, 2))
    check("first price", served.column("price")[0].as_py(), decimal.Decimal("0.25"))
    check("tags of k=2 (keys in order)", served.column("tags")[1].as_py(), [("even", 1), ("k", 2)])
    check("timestamp type", pa.types.is_timestamp(served.schema.field("at").type), True)

    cur.execute("SELECT k, make_array(k, k + 1) AS pair FROM t WHERE k <= 3 ORDER BY k")
    lists = cur.fetch_arrow_table()
    check("list type", pa.types.is_list(lists.schema.field("pair").type), True)
    check("list values", lists.column("pair").to_pylist(), [[1, 2], [2, 3], [3, 4]])

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

    # adbc_ingest: a pyarrow table into a new table, then appended to.
    scores = pa.table({"_key": ["a", "b", "c"], "score": [1.5, 2.5, 3.5]})
    check("ingest create", cur.adbc_ingest("scores", scores, mode="create"), 3)
    more = pa.table({"_key": ["d"], "score": [4.5]})
    check("ingest append", cur.adbc_ingest("scores", more, mode="append"), 1)
    cur.execute("SELECT sum(score) AS s, count(*) AS n FROM scores")
    check("ingested rows", cur.fetchall(), [(12.0, 4)])

    cur.close()

    # A user who may read one table. (A cursor that ingested stays in
    # ADBC's ingest mode for statements it cannot prepare: a new one.)
    cur = conn.cursor()
    cur.execute("CREATE USER reader PASSWORD 'reader pw'")
    cur.execute("GRANT SELECT ON TABLE people TO reader")
    cur.close()

with connect("reader", "reader pw") as conn:
    cur = conn.cursor()
    cur.execute("SELECT count(*) FROM people")
    check("reader reads its table", cur.fetchall(), [(2,)])
    refused("reader reads t", lambda: cur.execute("SELECT count(*) FROM t"), "permission denied")
    refused(
        "reader writes",
        lambda: cur.execute("INSERT INTO people VALUES ('eve', 1)"),
        "permission denied",
    )
    refused(
        "reader ingests",
        lambda: cur.adbc_ingest("people", pa.table({"_key": ["x"], "age": [1]}), mode="append"),
        "permission denied",
    )
    objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
    seen = {
        (catalog["catalog_name"], schema["db_schema_name"], table["table_name"])
        for catalog in objects
        for schema in catalog["catalog_db_schemas"] or []
        for table in schema["db_schema_tables"] or []
    }
    check("reader's get_objects", seen, {("default", "public", "people")})
    cur.close()

print(f"interop (Flight SQL): {checks} checks passed")
