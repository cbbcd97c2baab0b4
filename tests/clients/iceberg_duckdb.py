"""DuckDB's iceberg extension against a running `inlet serve` (the embedded catalog).

Usage: iceberg_duckdb.py ICEBERG_URI

pyiceberg creates a namespace and a table, appends, evolves the schema and appends again; DuckDB
attaches Inlet's REST catalog and reads that table. Then DuckDB creates a namespace and a table
through the catalog, inserts twice, and appends to pyiceberg's table; pyiceberg reads both back.
The extensions come from the duckdb-extension-* packages and are loaded from their files: nothing
is downloaded. Prints OK at the end; any failed check raises.
"""

import glob
import importlib.util
import os
import sys

import duckdb
import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.types import StringType

URI = sys.argv[1]


def extension_file(name):
    """The extension file that the package duckdb-extension-NAME ships."""
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    assert spec is not None and spec.origin, f"no package duckdb-extension-{name}"
    pattern = os.path.join(os.path.dirname(spec.origin), "extensions", "*",
                           f"{name}.duckdb_extension")
    files = glob.glob(pattern)
    assert len(files) == 1, (pattern, files)
    return files[0]


# pyiceberg writes shop.orders: two snapshots, the second after a schema change.
catalog = load_catalog("inlet", type="rest", uri=URI)
catalog.create_namespace("shop")
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.float64())])
orders = catalog.create_table("shop.orders", schema=schema)
orders.append(pa.table({"id": [1, 2, 3], "amount": [1.5, 2.5, 3.5]}, schema=schema))
with orders.update_schema() as update:
    update.add_column("note", StringType())
orders = catalog.load_table("shop.orders")
orders.append(pa.table({"id": [4], "amount": [4.5], "note": ["late"]},
                       schema=orders.schema().as_arrow()))

# DuckDB: no extension is installed or loaded from the network.
con = duckdb.connect(config={"autoinstall_known_extensions": False,
                             "autoload_known_extensions": False})
# The iceberg extension needs avro (manifests) and httpfs (the REST client) loaded first.
for name in ["httpfs", "avro", "iceberg"]:
    con.execute(f"LOAD '{extension_file(name)}'")
print("duckdb", duckdb.__version__)
con.execute(f"ATTACH 'inlet' AS inlet (TYPE ICEBERG, ENDPOINT '{URI}', AUTHORIZATION_TYPE 'none')")

tables = {(r[1], r[2]) for r in con.execute("SHOW ALL TABLES").fetchall() if r[0] == "inlet"}
assert ("shop", "orders") in tables, tables
got = con.execute("SELECT count(*), sum(amount), sum(id) FROM inlet.shop.orders").fetchall()
assert got == [(4, 12.0, 10)], got
got = con.execute("SELECT id, note FROM inlet.shop.orders ORDER BY id").fetchall()
assert got == [(1, None), (2, None), (3, None), (4, "late")], got

# DuckDB writes through the catalog: a new namespace and table, two inserts.
con.execute("CREATE SCHEMA inlet.duck")
con.execute("CREATE TABLE inlet.duck.events (id BIGINT, name VARCHAR, score DOUBLE)")
con.execute("INSERT INTO inlet.duck.events VALUES (1, 'a', 0.5), (2, 'b', 1.5)")
con.execute("INSERT INTO inlet.duck.events SELECT i, 'r' || i, i * 0.25 FROM range(10, 20) t(i)")
got = con.execute("SELECT count(*), sum(id), sum(score) FROM inlet.duck.events").fetchall()
assert got == [(12, 148, 38.25)], got
# ... and appends to pyiceberg's table.
con.execute("INSERT INTO inlet.shop.orders VALUES (5, 5.5, 'duck')")
got = con.execute("SELECT count(*), sum(amount), sum(id) FROM inlet.shop.orders").fetchall()
assert got == [(5, 17.5, 15)], got
con.close()

# pyiceberg reads what DuckDB wrote.
events = catalog.load_table("duck.events")
location = events.metadata.location
assert location.startswith("file://") and "/objects/warehouse/" in location, location
assert [f.name for f in events.schema().fields] == ["id", "name", "score"], events.schema()
assert len(events.metadata.snapshots) == 2, events.metadata.snapshots
rows = events.scan().to_arrow().sort_by("id").to_pylist()
assert [r["id"] for r in rows] == [1, 2] + list(range(10, 20)), rows
assert rows[0] == {"id": 1, "name": "a", "score": 0.5}, rows[0]
assert rows[-1] == {"id": 19, "name": "r19", "score": 4.75}, rows[-1]
orders = catalog.load_table("shop.orders")
assert len(orders.metadata.snapshots) == 3, orders.metadata.snapshots
rows = orders.scan().to_arrow().sort_by("id").to_pylist()
assert [(r["id"], r["note"]) for r in rows] == [
    (1, None), (2, None), (3, None), (4, "late"), (5, "duck")], rows
print("location:", location)
print("OK")
