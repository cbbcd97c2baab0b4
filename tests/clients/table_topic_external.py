"""A table topic committed to an external REST catalog: node B's tables live in node A's
catalog. Produce to B with confluent-kafka's AvroSerializer, read with pyiceberg through A.

Usage: table_topic_external.py B_BOOTSTRAP B_REGISTRY_URL A_ICEBERG_URI B_ICEBERG_URI first|after-restart

first: creates a 2-partition topic on B with table.topic.enable=true in namespace "ext",
produces 20 records, then waits until A's catalog holds exactly them, with Inlet's summary.
Then through B's own /iceberg (which fronts A): the same rows, a pyiceberg append to a new
table and namespace property changes land in A.
after-restart (B was killed with SIGKILL and restarted): 10 more records, and A's table
holds all 30 exactly once. Prints OK at the end; raises on a mismatch.
"""

import sys

import pyarrow as pa
from confluent_kafka.admin import AdminClient
from pyiceberg.catalog import load_catalog
from inlet_clients import check_clicks, create_table_topic, produce_clicks, wait_for_table

bootstrap, registry_url, a_uri, b_uri, phase = sys.argv[1:6]
TOPIC = "clicks"

if phase == "first":
    create_table_topic(AdminClient({"bootstrap.servers": bootstrap}), TOPIC, 2, {"table.topic.namespace": "ext"})
produce_clicks(bootstrap, registry_url, TOPIC, range(20) if phase == "first" else range(20, 30))

a = load_catalog("a", type="rest", uri=a_uri)
b = load_catalog("b", type="rest", uri=b_uri)


def wait_for_rows(catalog, n):
    return wait_for_table(catalog, f"ext.{TOPIC}", n)


if phase == "after-restart":
    # A record committed twice would show up as more than 30 rows.
    check_clicks(*wait_for_rows(a, 30), 30)
    print("OK")
    sys.exit(0)

table, rows = wait_for_rows(a, 20)
summary = check_clicks(table, rows, 20)
assert summary["inlet.commit-id"], summary
assert ("ext",) in a.list_namespaces(), a.list_namespaces()
print("A's catalog holds B's table:", table.metadata_location)

# B's /iceberg fronts A: the same table, and commits made through it land in A.
_, via_b = wait_for_rows(b, 20)
assert sorted(r["id"] for r in via_b) == list(range(20))
b.create_namespace_if_not_exists("viab")
t = b.create_table("viab.t", schema=pa.schema([("x", pa.int64())]))
t.append(pa.table({"x": [1, 2, 3]}))
assert sorted(a.load_table("viab.t").scan().to_arrow()["x"].to_pylist()) == [1, 2, 3]
b.update_namespace_properties("viab", updates={"owner": "b", "tmp": "1"})
summary = b.update_namespace_properties("viab", removals={"tmp", "nope"})
assert summary.removed == ["tmp"] and summary.missing == ["nope"], summary
props = a.load_namespace_properties("viab")
assert props.get("owner") == "b" and "tmp" not in props, props
print("OK")
