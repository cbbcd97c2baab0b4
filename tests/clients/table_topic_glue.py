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

import json
import os
import sys
import time

import boto3
import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog

bootstrap, registry_url, endpoint, warehouse, node_uri, ns, phase = sys.argv[1:8]
TOPIC = f"{ns}_clicks"
REGION = "us-east-1"
SCHEMA = json.dumps({"type": "record", "name": "Click", "fields": [
    {"name": "id", "type": "long"}, {"name": "page", "type": "string"}]})

if phase == "first":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1, config={
        "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
        "table.topic.namespace": ns})])[TOPIC].result(30)
    ids = range(20)
elif phase.startswith("produce:"):
    _, first, last = phase.split(":")
    ids = range(int(first), int(last))
else:
    ids = range(0)

if ids:
    registry = SchemaRegistryClient({"url": registry_url})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    ser = AvroSerializer(registry, SCHEMA)
    for i in ids:
        producer.produce(TOPIC, key=str(i).encode(), partition=i % 2,
                         value=ser({"id": i, "page": f"/p{i}"}, SerializationContext(TOPIC, MessageField.VALUE)))
    assert producer.flush(30) == 0, "records left unacknowledged"
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


def wait_for_rows(catalog, n, timeout=90):
    deadline = time.time() + timeout
    rows, last = [], None
    while time.time() < deadline:
        try:
            table = catalog.load_table(f"{ns}.{TOPIC}")
            rows = table.scan().to_arrow().to_pylist()
            if len(rows) >= n:
                return table, rows
        except Exception as e:  # the table appears with the first commit
            last = e
        time.sleep(0.5)
    raise AssertionError(f"the table did not reach {n} rows in {timeout}s: {len(rows)} rows ({last})")


if phase.startswith("check:"):
    # A record committed twice would show up as more than N rows.
    n = int(phase.split(":")[1])
    table, rows = wait_for_rows(glue, n)
    time.sleep(2)  # a duplicate commit would land by now
    table, rows = wait_for_rows(glue, n)
    assert sorted(r["id"] for r in rows) == list(range(n)), sorted(r["id"] for r in rows)
    offsets = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows}
    assert offsets == {(i % 2, i // 2) for i in range(n)}, offsets
    committed = json.loads(table.metadata.current_snapshot().summary["inlet.offsets"])
    expected = {str(p): sum(1 for i in range(n) if i % 2 == p) for p in (0, 1)}
    assert committed == expected, (committed, expected)
    print("OK")
    sys.exit(0)

table, rows = wait_for_rows(glue, 20)
assert sorted(r["id"] for r in rows) == list(range(20)), sorted(r["id"] for r in rows)
assert {r["id"]: r["page"] for r in rows} == {i: f"/p{i}" for i in range(20)}
offsets = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows}
assert offsets == {(i % 2, i // 2) for i in range(20)}, offsets
summary = table.metadata.current_snapshot().summary
assert json.loads(summary["inlet.offsets"]) == {"0": 10, "1": 10}, summary
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
