#!/usr/bin/env python3
"""Writes select1.test and select2.test: SQLite-style sqllogictest files.

Tables of random integers and text, then queries whose expected results come
from SQLite itself (Python's sqlite3), in the format of SQLite's
sqllogictest corpus: `hash-threshold`, `query I rowsort`, results of more
than the threshold as "N values hashing to <md5>", `CREATE INDEX`, and
`onlyif` / `skipif` records. Results are integers and text only (SQLite
prints reals with three decimals, DataFusion does not).

Run from this folder: python3 generate.py
"""
import hashlib
import random
import sqlite3

HASH_THRESHOLD = 8


def fmt(value):
    if value is None:
        return "NULL"
    if value == "":
        return "(empty)"
    return str(value)


def query_record(db, sql, types):
    rows = [[fmt(v) for v in row] for row in db.execute(sql).fetchall()]
    rows.sort(key=lambda r: " ".join(r))
    values = [v for row in rows for v in row]
    out = [f"query {types} rowsort", sql, "----"]
    if len(values) > HASH_THRESHOLD:
        digest = hashlib.md5("".join(v + "\n" for v in values).encode()).hexdigest()
        out.append(f"{len(values)} values hashing to {digest}")
    else:
        out.extend(" ".join(r) for r in rows)
    return "\n".join(out)


def statement(db, sql):
    db.execute(sql)
    return f"statement ok\n{sql}"


def generate(name, seed, queries):
    rng = random.Random(seed)
    db = sqlite3.connect(":memory:")
    records = [f"hash-threshold {HASH_THRESHOLD}"]
    records.append(statement(db, "CREATE TABLE t1(a INTEGER, b INTEGER, c INTEGER, d INTEGER, e INTEGER)"))
    records.append(statement(db, "CREATE TABLE t2(x INTEGER, y VARCHAR(16), z INTEGER)"))
    for _ in range(30):
        vals = [None if rng.random() < 0.1 else rng.randint(-20, 120) for _ in range(5)]
        sql = "INSERT INTO t1(a,b,c,d,e) VALUES(" + ",".join("NULL" if v is None else str(v) for v in vals) + ")"
        records.append(statement(db, sql))
    words = ["alpha", "beta", "gamma", "delta", "", "omega"]
    for i in range(20):
        y = "NULL" if rng.random() < 0.1 else "'" + rng.choice(words) + "'"
        records.append(statement(db, f"INSERT INTO t2(x,y,z) VALUES({rng.randint(0, 40)},{y},{i})"))
    records.append(statement(db, "CREATE INDEX t1i0 ON t1(a)"))
    records.append(statement(db, "CREATE INDEX t2i0 ON t2(y, x)"))
    records.append("onlyif sqlite\nstatement ok\nPRAGMA integrity_check")
    records.append("skipif widesql\nstatement ok\nTHIS IS NOT SQL")
    for sql, types in queries(rng):
        records.append(query_record(db, sql, types))
    with open(name, "w") as f:
        f.write("\n\n".join(records) + "\n")
    print(name, len(records) - 1, "records")


COLS = ["a", "b", "c", "d", "e"]


def select1(rng):
    exprs = [
        ("a+b*2", "I"), ("c-d", "I"), ("abs(b-c)", "I"), ("a*2+e", "I"),
        ("CASE WHEN a<b THEN a ELSE b END", "I"), ("CASE WHEN c>50 THEN 1 WHEN c>20 THEN 2 ELSE 3 END", "I"),
        ("coalesce(a, b, c)", "I"), ("e/3", "I"), ("d%7", "I"), ("-a", "I"),
    ]
    for _ in range(70):
        picked = rng.sample(exprs, rng.randint(1, 3))
        cond = rng.choice([
            "", f" WHERE {rng.choice(COLS)}>{rng.randint(0, 100)}",
            f" WHERE {rng.choice(COLS)} BETWEEN {rng.randint(-10, 40)} AND {rng.randint(40, 110)}",
            f" WHERE {rng.choice(COLS)} IN ({rng.randint(0, 50)},{rng.randint(0, 50)},{rng.randint(50, 120)})",
            f" WHERE {rng.choice(COLS)} IS NULL", f" WHERE {rng.choice(COLS)} IS NOT NULL AND {rng.choice(COLS)}<{rng.randint(10, 90)}",
            f" WHERE ({rng.choice(COLS)}>{rng.randint(0, 60)} OR {rng.choice(COLS)}<{rng.randint(0, 30)})",
        ])
        yield "SELECT " + ", ".join(e for e, _ in picked) + " FROM t1" + cond, "".join(t for _, t in picked)
    for col in COLS:
        yield f"SELECT count(*), count({col}), min({col}), max({col}), sum({col}) FROM t1", "IIIII"
        yield f"SELECT {col}, count(*) FROM t1 GROUP BY {col} HAVING count(*) > 1", "II"


def select2(rng):
    for _ in range(40):
        yield f"SELECT x, y FROM t2 WHERE z < {rng.randint(0, 20)}", "IT"
    for w in ["alpha", "beta", ""]:
        yield f"SELECT count(*) FROM t2 WHERE y = '{w}'", "I"
    yield "SELECT y, count(*), sum(x) FROM t2 GROUP BY y", "TII"
    yield "SELECT upper(y), length(y) FROM t2 WHERE y IS NOT NULL", "TI"
    yield "SELECT y || '-' || x FROM t2", "T"
    for _ in range(25):
        yield (f"SELECT t1.a, t2.y FROM t1 JOIN t2 ON t1.a = t2.x WHERE t2.z > {rng.randint(0, 15)}", "IT")
    for _ in range(15):
        yield (f"SELECT a FROM t1 WHERE a IN (SELECT x FROM t2 WHERE z < {rng.randint(0, 20)})", "I")
    for _ in range(10):
        yield (f"SELECT x FROM t2 WHERE EXISTS (SELECT 1 FROM t1 WHERE t1.b = t2.x + {rng.randint(0, 30)})", "I")
    yield "SELECT count(*) FROM t1, t2", "I"
    yield "SELECT a FROM t1 UNION SELECT x FROM t2", "I"
    yield "SELECT DISTINCT y FROM t2", "T"


if __name__ == "__main__":
    generate("select1.test", 1, select1)
    generate("select2.test", 2, select2)
