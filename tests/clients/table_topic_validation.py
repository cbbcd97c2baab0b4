"""Produce-time validation of table topics with confluent-kafka's Avro, Protobuf and JSON
serializers.

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
# A string whose length prefix says 8 while 2 bytes remain: the table workers' decoder refuses
# it, and so must produce-time validation (one decoder for both).
truncated_string = good[0][:6] + b"\x10it"
bad = [b"not framed at all", unknown_id, good[0][:6], None, truncated_string]

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

# Protobuf and JSON Schema framed records are checked the same way.
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402
from confluent_kafka.schema_registry.json_schema import JSONSerializer  # noqa: E402
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer  # noqa: E402

for name in ["shipments", "payments"]:
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                  config={"table.topic.enable": "true"})])[name].result(timeout=30)

F = descriptor_pb2.FieldDescriptorProto
fdp = descriptor_pb2.FileDescriptorProto(name="shop/shipment.proto", package="shop", syntax="proto3")
msg = fdp.message_type.add(name="Shipment")
msg.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
msg.field.add(name="carrier", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
pool = descriptor_pool.DescriptorPool()
pool.Add(fdp)
Shipment = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Shipment"))
pb = ProtobufSerializer(Shipment, registry, {"use.deprecated.format": False})
ctx = SerializationContext("shipments", MessageField.VALUE)
pb_good = pb(Shipment(id=1, carrier="post"), ctx)
# Message index [3] does not exist in the file; field 2 declared as a varint carrying a string
# is not a valid Shipment.
pb_bad = [pb_good[:5] + b"\x02\x06" + pb_good[6:], pb_good[:6] + b"\x10\xff"]
if any(produce("shipments", [pb_good])):
    fail("a valid Protobuf record was refused")
for value, err in zip(pb_bad, produce("shipments", pb_bad)):
    if err is None or err.code() != KafkaError.INVALID_RECORD:
        fail(f"Protobuf record {value!r} should be refused with INVALID_RECORD, got {err}")

JSON_SCHEMA = """{"type": "object", "properties": {"id": {"type": "integer"},
 "amount": {"type": "number"}}, "required": ["id", "amount"]}"""
js = JSONSerializer(JSON_SCHEMA, registry)
js_good = js({"id": 1, "amount": 2.5}, SerializationContext("payments", MessageField.VALUE))
# Framed with the right id, but not matching the schema, or not JSON at all.
js_bad = [js_good[:5] + b'{"id": "one", "amount": 2.5}', js_good[:5] + b"{not json"]
if any(produce("payments", [js_good])):
    fail("a valid JSON record was refused")
for value, err in zip(js_bad, produce("payments", js_bad)):
    if err is None or err.code() != KafkaError.INVALID_RECORD:
        fail(f"JSON record {value!r} should be refused with INVALID_RECORD, got {err}")
print("OK")
