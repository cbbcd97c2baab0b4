"""DuckDB's iceberg extension against a running `inlet serve` (the embedded catalog).

Usage: iceberg_duckdb.py ICEBERG_URI

pyiceberg creates a namespace and a table, appends, evolves the schema and appends again; DuckDB
attaches Inlet's REST catalog and reads that table. Then DuckDB creates a namespace and a table
through the catalog, inserts twice, and appends to pyiceberg's table; pyiceberg reads both back.
The extensions come from the duckdb-extension-* packages and are loaded from their files: nothing
is downloaded. Prints OK at the end; any failed check raises.
"""

import sys

import duckdb
from duckdb_iceberg import EXTENSIONS, extension_file
from pyiceberg.catalog import load_catalog
from inlet_clients import check_engine_table, check_shop_orders_appended, write_shop_orders

URI = sys.argv[1]


# pyiceberg writes shop.orders: two snapshots, the second after a schema change.
catalog = load_catalog("inlet", type="rest", uri=URI)
catalog.create_namespace("shop")
orders = write_shop_orders(catalog)

# DuckDB: no extension is installed or loaded from the network.
con = duckdb.connect(config={"autoinstall_known_extensions": False,
                             "autoload_known_extensions": False})
# The iceberg extension needs avro (manifests) and httpfs (the REST client) loaded first.
for name in EXTENSIONS:
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
location = check_engine_table(catalog, "duck.events", ["id", "name", "score"],
                              {"id": 1, "name": "a", "score": 0.5},
                              {"id": 19, "name": "r19", "score": 4.75})
check_shop_orders_appended(catalog, "duck")
print("location:", location)
print("OK")
