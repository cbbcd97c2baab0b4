"""Reads a table topic's table through a cluster node's Iceberg REST catalog with pyiceberg.

Usage: cluster_table_read.py ICEBERG_URI TABLE N

Waits until Inlet's progress in `default.TABLE` covers N records, then checks that the table
holds exactly N rows with N distinct values (string table topic: one `value` column per
record), so every record landed once. Prints which nodes wrote the data files
(`writers 1,2,3`: a converter tags its files `n<node id>r<registration>`), then OK; any failed
check raises.
"""

import re
import sys

from pyiceberg.catalog import load_catalog
from table_wait import wait_for_progress

URI, TABLE, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
catalog = load_catalog("inlet", type="rest", uri=URI)
table = wait_for_progress(catalog, TABLE, N, timeout=180)
values = table.scan().to_arrow().column("value").to_pylist()
assert len(values) == N, f"{len(values)} rows, {N} records acknowledged"
assert len(set(values)) == N, f"{N - len(set(values))} records are in the table twice"
paths = table.inspect.files().column("file_path").to_pylist()
writers = sorted({int(m.group(1)) for p in paths if (m := re.search(r"n(\d+)r[0-9a-f]{6}", p))})
print("writers " + ",".join(str(w) for w in writers))
print("OK")
