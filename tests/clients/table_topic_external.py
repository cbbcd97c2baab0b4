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

import json
import sys
import time

import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog

bootstrap, registry_url, a_uri, b_uri, phase = sys.argv[1:6]
TOPIC = "clicks"
SCHEMA = json.dumps({"type": "record", "name": "Click", "fields": [
    {"name": "id", "type": "long"}, {"name": "page", "type": "string"}]})

if phase == "first":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1, config={
        "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
        "table.topic.namespace": "ext"})])[TOPIC].result(30)
ids = range(20) if phase == "first" else range(20, 30)

registry = SchemaRegistryClient({"url": registry_url})
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
ser = AvroSerializer(registry, SCHEMA)
for i in ids:
    producer.produce(TOPIC, key=str(i).encode(), partition=i % 2,
                     value=ser({"id": i, "page": f"/p{i}"}, SerializationContext(TOPIC, MessageField.VALUE)))
producer.flush(30)

a = load_catalog("a", type="rest", uri=a_uri)
b = load_catalog("b", type="rest", uri=b_uri)


def wait_for_rows(catalog, n, timeout=90):
    deadline = time.time() + timeout
    rows, last = [], None
    while time.time() < deadline:
        try:
            table = catalog.load_table(f"ext.{TOPIC}")
            rows = table.scan().to_arrow().to_pylist()
            if len(rows) >= n:
                return table, rows
        except Exception as e:  # the table appears with the first commit
            last = e
        time.sleep(0.5)
    raise AssertionError(f"the table did not reach {n} rows in {timeout}s: {len(rows)} rows ({last})")


if phase == "after-restart":
    # A record committed twice would show up as more than 30 rows.
    table, rows = wait_for_rows(a, 30)
    assert sorted(r["id"] for r in rows) == list(range(30)), sorted(r["id"] for r in rows)
    keys = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows}
    assert keys == {(i % 2, i // 2) for i in range(30)}, keys
    assert json.loads(table.metadata.current_snapshot().summary["inlet.offsets"]) == {"0": 15, "1": 15}
    print("OK")
    sys.exit(0)

table, rows = wait_for_rows(a, 20)
assert sorted(r["id"] for r in rows) == list(range(20)), sorted(r["id"] for r in rows)
assert {r["id"]: r["page"] for r in rows} == {i: f"/p{i}" for i in range(20)}
keys = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows}
assert keys == {(i % 2, i // 2) for i in range(20)}, keys
summary = table.metadata.current_snapshot().summary
assert json.loads(summary["inlet.offsets"]) == {"0": 10, "1": 10}, summary
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
