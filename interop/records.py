"""JSON arrays from pandas and Polars into widesql: `make` writes the same
rows as pandas (`to_json(orient="records", indent=2)`) and Polars
(`write_json`) write them; widesql imports each file into a new table and
exports it as newline-delimited JSON, which `compare` reads back and
checks against the rows.

usage: records.py make DIR | records.py compare DIR
"""
import sys
from pathlib import Path

import pandas
import polars

ROWS = 300


def rows():
    return pandas.DataFrame({
        "id": list(range(ROWS)),
        "name": [f'n{i}, [x] {{y}} "q"' for i in range(ROWS)],
        "score": [None if i % 5 == 0 else i * 0.25 for i in range(ROWS)],
    })


def make(out):
    frame = rows()
    frame.to_json(out / "pandas.json", orient="records", indent=2)
    polars.from_pandas(frame).write_json(out / "polars.json")


def compare(out):
    want = rows()
    checks = 0
    for tool in ["pandas", "polars"]:
        got = pandas.read_json(out / f"{tool}-back.ndjson", lines=True)
        assert list(got["id"]) == list(want["id"]), tool
        assert list(got["name"]) == list(want["name"]), tool
        got_scores = [None if pandas.isna(s) else s for s in got["score"]]
        want_scores = [None if pandas.isna(s) else s for s in want["score"]]
        assert got_scores == want_scores, tool
        checks += 3
    print(f"interop: JSON arrays of pandas and Polars imported: {checks} checks passed ({ROWS} rows each)")


if __name__ == "__main__":
    where = Path(sys.argv[2])
    if sys.argv[1] == "make":
        make(where)
    else:
        compare(where)
