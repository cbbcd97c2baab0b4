"""DuckDB's side of the group_by benchmark: the same query over the same Iceberg table, read
with iceberg_scan() from its metadata file. Prints the median of RUNS and the answer as CSV.

Usage: duckdb_group_by.py METADATA_JSON RUNS
"""

import glob
import importlib.util
import os
import statistics
import sys
import time

import duckdb

METADATA, RUNS = sys.argv[1], int(sys.argv[2])


def extension_file(name):
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    assert spec is not None and spec.origin, f"no package duckdb-extension-{name}"
    pattern = os.path.join(os.path.dirname(spec.origin), "extensions", "*",
                           f"{name}.duckdb_extension")
    files = glob.glob(pattern)
    assert files, pattern
    return files[0]


con = duckdb.connect(config={"autoinstall_known_extensions": False,
                             "autoload_known_extensions": False})
for name in ["httpfs", "avro", "iceberg"]:
    con.execute(f"LOAD '{extension_file(name)}'")
path = METADATA.removeprefix("file://")
sql = (f"SELECT region, count(*) AS n, sum(amount) AS total FROM iceberg_scan('{path}') "
       "GROUP BY region ORDER BY region")
times = []
rows = None
for _ in range(RUNS):
    t = time.perf_counter()
    rows = con.execute(sql).fetchall()
    times.append(time.perf_counter() - t)
print("threads", con.execute("SELECT current_setting('threads')").fetchone()[0])
print("median_seconds", statistics.median(times))
print("answer")
for region, n, total in rows:
    print(f"{region},{n},{total}")
