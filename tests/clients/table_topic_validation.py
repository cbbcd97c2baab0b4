"""Produce-time validation of table topics with confluent-kafka's AvroSerializer.

Usage: table_topic_validation.py BOOTSTRAP REGISTRY_URL
Exits non-zero with a message on the first mismatch; prints OK at the end.
"""
import sys

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

bootstrap, registry_url = sys.argv[1], sys.argv[2]

SCHEMA = """{"type": "record", "name": "Order", "namespace": "shop",
 "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}"""


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


admin = AdminClient({"bootstrap.servers": bootstrap})
topics = {
    "orders": {"table.topic.enable": "true"},
    "orders_tolerant": {"table.topic.enable": "true", "table.topic.errors.tolerance": "all"},
}
futures = admin.create_topics(
    [NewTopic(name, num_partitions=1, replication_factor=1, config=cfg) for name, cfg in topics.items()]
)
for name, f in futures.items():
    f.result(timeout=30)

registry = SchemaRegistryClient({"url": registry_url})
serializer = AvroSerializer(registry, SCHEMA)
deserializer = AvroDeserializer(registry)


def produce(topic, values):
    """Produces each value alone (one batch each); returns the delivery errors (None = ok)."""
    results = []
    for value in values:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
        outcome = []
        p.produce(topic, value=value, on_delivery=lambda err, msg: outcome.append(err))
        p.flush(30)
        if len(outcome) != 1:
            fail(f"no delivery report for a record to {topic}")
        results.append(outcome[0])
    return results


good = [
    serializer({"id": i, "item": f"item-{i}"}, SerializationContext("orders", MessageField.VALUE))
    for i in range(5)
]
unknown_id = b"\x00\x00\x00\x27\x0f" + good[0][5:]  # schema id 9999
bad = [b"not framed at all", unknown_id, good[0][:6], None]

errors = produce("orders", good)
if any(errors):
    fail(f"valid framed records were refused: {errors}")
for value, err in zip(bad, produce("orders", bad)):
    if err is None or err.code() != KafkaError.INVALID_RECORD:
        fail(f"record {value!r} should be refused with INVALID_RECORD, got {err}")

# Only the valid records were stored, and they decode through the registry.
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "validation-check", "auto.offset.reset": "earliest"})
c.subscribe(["orders"])
seen = []
while len(seen) < 5:
    m = c.poll(10)
    if m is None:
        fail(f"only {len(seen)} of 5 valid records came back")
    if m.error():
        fail(f"consume error {m.error()}")
    seen.append(deserializer(m.value(), SerializationContext("orders", MessageField.VALUE)))
extra = c.poll(2)
if extra is not None and not extra.error():
    fail(f"a refused record was stored: {extra.value()!r}")
c.close()
if [r["id"] for r in seen] != list(range(5)):
    fail(f"unexpected records {seen}")

# errors.tolerance=all: the same bad records are stored (for the dead-letter table).
errors = produce("orders_tolerant", good[:1] + bad[:2])
if any(errors):
    fail(f"errors.tolerance=all should accept everything: {errors}")
print("OK")
