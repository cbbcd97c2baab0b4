"""pyiceberg's RestCatalog against a running `inlet serve` (the embedded catalog).

Usage: iceberg_node.py ICEBERG_URI write|read

write: creates a namespace (and removes one of its properties) and a table, appends rows with
pyarrow, evolves the schema and appends again. read (after the node restarted): the
namespace's properties, the table, its schema and its rows are there.
Prints OK at the end; any failed check raises.
"""

import sys

from inlet_clients import write_shop_orders
from pyiceberg.catalog import load_catalog

URI, PHASE = sys.argv[1], sys.argv[2]
catalog = load_catalog("inlet", type="rest", uri=URI)

if PHASE == "write":
    catalog.create_namespace("shop", {"owner": "ops", "tmp": "1"})
    summary = catalog.update_namespace_properties("shop", removals={"tmp"}, updates={"team": "t"})
    assert summary.removed == ["tmp"] and summary.updated == ["team"], summary
    table = write_shop_orders(catalog)
    location = table.metadata.location
    assert (location.startswith("file://") and "/objects/warehouse/" in location) or (
        location.startswith("s3://") and "/warehouse/" in location), location
    print("location:", location)
else:
    assert ("shop",) in catalog.list_namespaces(), catalog.list_namespaces()
    props = catalog.load_namespace_properties("shop")
    assert props.get("owner") == "ops" and props.get("team") == "t" and "tmp" not in props, props
    table = catalog.load_table("shop.orders")
    rows = table.scan().to_arrow().sort_by("id").to_pylist()
    assert [r["id"] for r in rows] == [1, 2, 3, 4], rows
    assert rows[3]["note"] == "late" and rows[0]["note"] is None, rows
    assert len(table.metadata.snapshots) == 2, table.metadata.snapshots
print("OK")
