"""Reads Parquet data files with pyarrow and prints their rows as JSON lines.

Usage: read_parquet.py FILE...

Values are made JSON-friendly: timestamps and dates as ISO 8601, bytes as hex, decimals as
strings. Also prints each file's Arrow schema (with Parquet field ids) on a `schema:` line, so
the caller can check what an independent reader sees.
"""

import datetime
import decimal
import json
import sys

import pyarrow.parquet as pq


def plain(v):
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        # pyarrow gives maps as lists of (key, value) tuples.
        return [plain(x) for x in v]
    if isinstance(v, tuple):
        return [plain(x) for x in v]
    return v


for path in sys.argv[1:]:
    table = pq.read_table(path)
    ids = {f.name: (f.metadata or {}).get(b"PARQUET:field_id", b"").decode() for f in table.schema}
    print("schema:", json.dumps({"fields": [f.name for f in table.schema], "ids": ids,
                                 "types": {f.name: str(f.type) for f in table.schema}}))
    for row in table.to_pylist():
        print("row:", json.dumps(plain(row), sort_keys=True))
