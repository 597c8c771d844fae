"""Files from analytics tools into widesql and back: pyarrow writes a Parquet
file with nested and exotic columns (`make`), widesql imports it into a new
table and exports the table, and the export must hold the same values
(`compare`).

usage: nested.py make PATH | nested.py compare ORIGINAL EXPORTED
"""
import datetime
import decimal
import sys

import pyarrow as pa
import pyarrow.parquet as pq

ROWS = 500


def make(path):
    keys = [f"row{i:04}" for i in range(ROWS)]
    table = pa.table({
        "_key": keys,
        "ints": [None if i % 7 == 0 else list(range(i % 5)) for i in range(ROWS)],
        "point": [None if i % 11 == 0 else {"x": i * 0.5, "label": f"p{i}"} for i in range(ROWS)],
        "words": pa.array([["a", "b"][: i % 3] for i in range(ROWS)], pa.large_list(pa.string())),
        "color": pa.array(["red", "green", "blue"] * (ROWS // 3) + ["red"] * (ROWS % 3)).dictionary_encode(),
        "at": pa.array([datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
                        + datetime.timedelta(minutes=i) for i in range(ROWS)], pa.timestamp("us", tz="UTC")),
        "big": pa.array([decimal.Decimal(f"{i}1234567890123456789012345678901234567.25") for i in range(ROWS)],
                        pa.decimal256(50, 2)),
        "digest": pa.array([bytes([i % 256]) * 16 for i in range(ROWS)], pa.binary(16)),
    })
    pq.write_table(table, path)


def compare(original, exported):
    want = pq.read_table(original)
    got = pq.read_table(exported)
    checks = 0
    assert got.num_rows == want.num_rows, (got.num_rows, want.num_rows)
    checks += 1
    assert got.column_names == want.column_names, (got.column_names, want.column_names)
    checks += 1
    for name in want.column_names:
        w = want.column(name).combine_chunks()
        g = got.column(name).combine_chunks()
        if pa.types.is_dictionary(w.type):
            w = w.cast(w.type.value_type)  # a dictionary is stored as its values
        if g.type != w.type:
            g = g.cast(w.type)
        assert g.equals(w), f"column {name}: {g.slice(0, 3)} != {w.slice(0, 3)}"
        checks += 1
    print(f"interop: import round trip: {checks} checks passed ({want.num_rows} rows, "
          f"types {', '.join(str(t) for t in want.schema.types)})")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        compare(sys.argv[2], sys.argv[3])
