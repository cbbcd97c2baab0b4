"""Reads a table topic's table through a cluster node's Iceberg REST catalog with pyiceberg.

Usage: cluster_table_read.py ICEBERG_URI TABLE N

Waits until Inlet's progress in `default.TABLE` covers N records, then checks that the table
holds exactly N rows with N distinct values (string table topic: one `value` column per
record), so every record landed once. Prints OK; any failed check raises.
"""

import sys

from pyiceberg.catalog import load_catalog
from table_wait import wait_for_progress

URI, TABLE, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
catalog = load_catalog("inlet", type="rest", uri=URI)
table = wait_for_progress(catalog, TABLE, N, timeout=180)
values = table.scan().to_arrow().column("value").to_pylist()
assert len(values) == N, f"{len(values)} rows, {N} records acknowledged"
assert len(set(values)) == N, f"{N - len(set(values))} records are in the table twice"
print("OK")
