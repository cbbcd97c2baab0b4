"""A table topic committed to AWS Glue (moto): the node's tables live in Glue, their files in
S3 (moto too). Produce with confluent-kafka's AvroSerializer, read with pyiceberg's own
GlueCatalog.

Usage: table_topic_glue.py BOOTSTRAP REGISTRY_URL AWS_ENDPOINT WAREHOUSE NODE_ICEBERG_URI NAMESPACE PHASE

first: creates a 2-partition table topic in NAMESPACE, produces records 0..20, then waits until
pyiceberg's GlueCatalog reads exactly them, with Inlet's summary, and checks the Glue table's
parameters and columns with boto3. Then the node's /iceberg (which fronts Glue) reads the same
rows, and a pyiceberg append through it lands in Glue; a table pyiceberg writes to Glue
directly reads back through the node.
produce:A:B: produces records A..B (the node is about to crash at a fail point) and returns.
check:N: waits until the table holds records 0..N exactly once (record i went to partition
i % 2), with the snapshot's committed offsets matching. Prints OK at the end; raises on a mismatch.
"""

import os
import sys
import time

import boto3
import pyarrow as pa
from confluent_kafka.admin import AdminClient
from pyiceberg.catalog import load_catalog
from inlet_clients import check_clicks, create_table_topic, produce_clicks, wait_for_table

bootstrap, registry_url, endpoint, warehouse, node_uri, ns, phase = sys.argv[1:8]
TOPIC = f"{ns}_clicks"
REGION = "us-east-1"

if phase == "first":
    create_table_topic(AdminClient({"bootstrap.servers": bootstrap}), TOPIC, 2, {"table.topic.namespace": ns})
    ids = range(20)
elif phase.startswith("produce:"):
    _, first, last = phase.split(":")
    ids = range(int(first), int(last))
else:
    ids = range(0)

if ids:
    produce_clicks(bootstrap, registry_url, TOPIC, ids, {"acks": "all"})
if phase.startswith("produce:"):
    print("OK")
    sys.exit(0)

keys = {
    "access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
    "secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"],
}
glue = load_catalog("glue", **{
    "type": "glue",
    "glue.endpoint": endpoint,
    "glue.region": REGION,
    "glue.access-key-id": keys["access-key-id"],
    "glue.secret-access-key": keys["secret-access-key"],
    "client.region": REGION,
    "s3.endpoint": endpoint,
    "s3.region": REGION,
    "s3.access-key-id": keys["access-key-id"],
    "s3.secret-access-key": keys["secret-access-key"],
    "warehouse": warehouse,
})
node = load_catalog("node", type="rest", uri=node_uri)


def wait_for_rows(catalog, n):
    return wait_for_table(catalog, f"{ns}.{TOPIC}", n)


if phase.startswith("check:"):
    # A record committed twice would show up as more than N rows.
    n = int(phase.split(":")[1])
    wait_for_rows(glue, n)
    time.sleep(2)  # a duplicate commit would land by now
    check_clicks(*wait_for_rows(glue, n), n)
    print("OK")
    sys.exit(0)

table, rows = wait_for_rows(glue, 20)
summary = check_clicks(table, rows, 20)
assert summary["inlet.commit-id"], summary
assert (ns,) in glue.list_namespaces(), glue.list_namespaces()
assert table.metadata_location.startswith(warehouse + "/"), (table.metadata_location, warehouse)
print("Glue holds the table topic's table:", table.metadata_location)

# The Glue table is laid out as Athena and the other engines expect.
raw = boto3.client("glue", endpoint_url=endpoint, region_name=REGION).get_table(
    DatabaseName=ns, Name=TOPIC)["Table"]
params = raw["Parameters"]
assert params["table_type"] == "ICEBERG", params
assert params["metadata_location"] == table.metadata_location, params
assert params.get("previous_metadata_location"), params
columns = {c["Name"]: c["Type"] for c in raw["StorageDescriptor"]["Columns"]}
assert columns["id"] == "bigint" and columns["page"] == "string", columns

# The node's /iceberg fronts Glue: the same rows, and commits through it land in Glue.
_, via_node = wait_for_rows(node, 20)
assert sorted(r["id"] for r in via_node) == list(range(20))
t = node.create_table(f"{ns}.vianode", schema=pa.schema([("x", pa.int64())]))
t.append(pa.table({"x": [1, 2, 3]}))
assert sorted(glue.load_table(f"{ns}.vianode").scan().to_arrow()["x"].to_pylist()) == [1, 2, 3]

# A table pyiceberg writes to Glue itself reads back through the node.
g = glue.create_table(f"{ns}.fromglue", schema=pa.schema([("y", pa.int64())]))
g.append(pa.table({"y": [7, 8]}))
assert sorted(node.load_table(f"{ns}.fromglue").scan().to_arrow()["y"].to_pylist()) == [7, 8]
print("OK")
