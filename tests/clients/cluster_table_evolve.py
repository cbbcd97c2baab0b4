"""A table topic converted on several nodes while its partitions' schemas evolve apart, with
confluent-kafka's AvroSerializer and read with pyiceberg.

Usage: cluster_table_evolve.py BOOTSTRAP REGISTRY_URL ICEBERG_URI TABLE

TABLE has 3 partitions, each owned (and so converted) by another node. 40 records of
v1 {id} go to every partition; then, at the same moment, partition 0 gets 40 records of a
version adding `a` (string) and partition 1 gets 40 of one adding `b` (long) (both evolutions
are backward compatible, so the registry takes both). Two nodes each give their new column the
table's next field id; one chunk must be refused and converted again. The table must end
with `id`, `a` and `b`, every record exactly once, `a` set exactly on the records that had it
and `b` likewise. Prints OK; any failed check raises.
"""

import json
import os
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table_wait import wait_for_rows  # noqa: E402

BOOTSTRAP, REGISTRY, URI, TABLE = sys.argv[1:5]
N = 40


def schema(extra):
    fields = [{"name": "id", "type": "long"}] + extra
    return json.dumps({"type": "record", "name": "Event", "fields": fields})


V1 = schema([])
WITH_A = schema([{"name": "a", "type": "string", "default": ""}])
WITH_B = schema([{"name": "b", "type": "long", "default": 0}])

registry = SchemaRegistryClient({"url": REGISTRY})
producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all", "enable.idempotence": True})
failed = []


def delivered(err, _msg):
    if err is not None:
        failed.append(str(err))


def produce(schema_str, partition, values):
    ser = AvroSerializer(registry, schema_str)
    ctx = SerializationContext(TABLE, MessageField.VALUE)
    for v in values:
        producer.produce(TABLE, value=ser(v, ctx), partition=partition, on_delivery=delivered)


for p in range(3):
    produce(V1, p, [{"id": p * 1000 + i} for i in range(N)])
producer.flush(60)
assert not failed, failed
# Both evolutions at once, before either can be committed.
produce(WITH_A, 0, [{"id": 10_000 + i, "a": f"a{i}"} for i in range(N)])
produce(WITH_B, 1, [{"id": 20_000 + i, "b": i + 1} for i in range(N)])
producer.flush(60)
assert not failed, failed

catalog = load_catalog("inlet", type="rest", uri=URI)
total = 5 * N
rows = wait_for_rows(catalog, TABLE, total, timeout=180).to_pylist()
assert len(rows) == total, f"{len(rows)} rows for {total} records"
ids = [r["id"] for r in rows]
assert len(set(ids)) == total, f"{total - len(set(ids))} records are in the table twice"
for r in rows:
    has_a = 10_000 <= r["id"] < 20_000
    has_b = 20_000 <= r["id"]
    assert (r.get("a") not in (None, "")) == has_a, r
    assert (r.get("b") not in (None, 0)) == has_b, r
table = catalog.load_table(f"default.{TABLE}")
names = [f.name for f in table.schema().fields]
assert {"id", "a", "b"} <= set(names), names
print("columns " + ",".join(names))
print("OK")
