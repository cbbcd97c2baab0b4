"""A table topic end to end: Kafka producer with confluent-kafka's AvroSerializer in, Iceberg
table out, read with pyiceberg through the node's REST catalog.

Usage: table_topic_e2e.py BOOTSTRAP REGISTRY_URL ICEBERG_URI first|after-restart

Creates a 3-partition topic with table.topic.enable=true and a 1 s commit interval, produces
30 records, waits until the table holds exactly them, then produces 10 more with an evolved
schema (a new optional field) and waits for those. after-restart (the node was killed and
restarted): 10 more records, and the table holds all 50 exactly once. Prints OK at the end;
raises on a mismatch.
"""

import decimal
import json
import os
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import duckdb_iceberg  # noqa: E402
from inlet_clients import ORDER_SCHEMA, wait_for_table  # noqa: E402

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
TOPIC = "orders"

V1 = ORDER_SCHEMA
V2 = json.loads(V1)
V2["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
V2 = json.dumps(V2)

if phase == "first":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1, config={
        "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"})])[TOPIC].result(30)

registry = SchemaRegistryClient({"url": registry_url})
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})


def produce(schema, ids, extra=None):
    ser = AvroSerializer(registry, schema)
    for i in ids:
        value = {"id": i, "customer": {"name": f"c{i}", "vip": i % 2 == 0},
                 "amount": __import__("decimal").Decimal(f"{i}.25"), "at": 1_700_000_000_000 + i}
        if extra:
            value.update(extra(i))
        producer.produce(TOPIC, key=str(i).encode(), value=ser(value, SerializationContext(TOPIC, MessageField.VALUE)))
    producer.flush(30)


catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)


def wait_for_rows(n):
    return wait_for_table(catalog, f"default.{TOPIC}", n)


if phase == "after-restart":
    produce(V2, range(40, 50), extra=lambda i: {"note": f"n{i}"})
    # A duplicate from before the kill would show up as more than 50 rows here.
    table, rows = wait_for_rows(50)
    assert sorted(r["id"] for r in rows) == list(range(50)), sorted(r["id"] for r in rows)
    keys = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows}
    assert len(keys) == 50, "every record exactly once"
    # DuckDB reads the same table through the same catalog.
    con = duckdb_iceberg.connect(iceberg_uri)
    if con is not None:
        got = con.execute(
            f"SELECT count(*), count(DISTINCT id), sum(id), count(note), "
            f"max(customer.name) FILTER (WHERE id = 7), "
            f"CAST(max(amount) FILTER (WHERE id = 7) AS VARCHAR), "
            f'count(DISTINCT (_kafka."partition", _kafka."offset")) FROM inlet.default.{TOPIC}'
        ).fetchall()
        assert got == [(50, 50, sum(range(50)), 20, "c7", "7.25", 50)], got
        print("DuckDB OK")
    print("OK")
    sys.exit(0)

produce(V1, range(30))
table, rows = wait_for_rows(30)
assert len(rows) == 30, len(rows)
assert sorted(r["id"] for r in rows) == list(range(30))
keys = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows}
assert len(keys) == 30, "every record once"
r = next(r for r in rows if r["id"] == 7)
assert r["customer"] == {"name": "c7", "vip": False}, r
assert str(r["amount"]) == "7.25", r
assert r["_kafka"]["key"] == b"7", r
summary = table.metadata.current_snapshot().summary
offsets = json.loads(summary["inlet.offsets"])
assert sum(offsets.values()) == 30, offsets
assert int(summary["inlet.watermark"]) >= 1_700_000_000_000, summary
print("first batch OK:", offsets)

produce(V2, range(30, 40), extra=lambda i: {"note": f"n{i}"})
table, rows = wait_for_rows(40)
assert len(rows) == 40, len(rows)
assert "note" in table.schema().column_names, table.schema()
notes = {r["id"]: r["note"] for r in rows}
assert notes[35] == "n35" and notes[5] is None, notes
keys = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows}
assert len(keys) == 40, "every record once"

# errors.tolerance=all: records that do not convert land in <table>_dlq, raw and with the reason.
admin.create_topics([NewTopic("payments", num_partitions=1, replication_factor=1, config={
    "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
    "table.topic.errors.tolerance": "all"})])["payments"].result(30)
ser = AvroSerializer(registry, V1)
for i in range(5):
    value = {"id": i, "customer": {"name": "p", "vip": True},
             "amount": __import__("decimal").Decimal("1.00"), "at": 1_700_000_000_000}
    producer.produce("payments", value=ser(value, SerializationContext("payments", MessageField.VALUE)))
    if i == 2:
        producer.produce("payments", value=b"not framed at all")
producer.flush(30)
deadline = time.time() + 90
while time.time() < deadline:
    try:
        good = catalog.load_table("default.payments").scan().to_arrow().to_pylist()
        dlq = catalog.load_table("default.payments_dlq").scan().to_arrow().to_pylist()
        if len(good) >= 5 and len(dlq) >= 1:
            break
    except Exception:
        pass
    time.sleep(0.5)
else:
    raise AssertionError("the payments table and its dead-letter table did not fill")
assert len(good) == 5 and len(dlq) == 1, (len(good), len(dlq))
assert dlq[0]["value"] == b"not framed at all" and "magic" in dlq[0]["error"], dlq[0]
assert dlq[0]["offset"] == 3, dlq[0]

# table.topic.partition.by: the table is created with the spec, its files under partitions.
admin.create_topics([NewTopic("events", num_partitions=1, replication_factor=1, config={
    "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
    "table.topic.partition.by": "[bucket(id, 4)]"})])["events"].result(30)
for i in range(20):
    value = {"id": i, "customer": {"name": "e", "vip": False},
             "amount": __import__("decimal").Decimal("2.00"), "at": 1_700_000_000_000 + i}
    producer.produce("events", value=ser(value, SerializationContext("events", MessageField.VALUE)))
producer.flush(30)
deadline = time.time() + 90
while time.time() < deadline:
    try:
        events = catalog.load_table("default.events")
        if len(events.scan().to_arrow()) >= 20:
            break
    except Exception:
        pass
    time.sleep(0.5)
else:
    raise AssertionError("the partitioned table did not fill")
spec = events.spec()
assert [str(f.transform) for f in spec.fields] == ["bucket[4]"], spec
files = [t.file.file_path for t in events.scan().plan_files()]
assert len(files) > 1 and all("id_bucket_4=" in f for f in files), files
assert len(events.scan(row_filter="id == 7").to_arrow()) == 1

# Protobuf: ProtobufSerializer's records become rows too (nested message, repeated, Timestamp).
# Their keys are Avro records (AvroSerializer on the key, convert.key.type=by_schema_id): the
# `_key` column.
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer  # noqa: E402

F = descriptor_pb2.FieldDescriptorProto
fdp = descriptor_pb2.FileDescriptorProto(name="shop/shipment.proto", package="shop", syntax="proto3",
                                         dependency=["google/protobuf/timestamp.proto"])
msg = fdp.message_type.add(name="Shipment")
msg.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
msg.field.add(name="parcels", number=2, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
msg.field.add(name="sent", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
              type_name=".google.protobuf.Timestamp")
dest = msg.nested_type.add(name="Address")
dest.field.add(name="city", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
msg.field.add(name="to", number=4, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
              type_name=".shop.Shipment.Address")
pool = descriptor_pool.DescriptorPool()
from google.protobuf import timestamp_pb2  # noqa: E402
pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
pool.Add(fdp)
Shipment = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Shipment"))
admin.create_topics([NewTopic("shipments", num_partitions=3, replication_factor=1, config={
    "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
    "table.topic.convert.key.type": "by_schema_id"})])["shipments"].result(30)
pb = ProtobufSerializer(Shipment, registry, {"use.deprecated.format": False})
key_ser = AvroSerializer(registry, json.dumps({
    "type": "record", "name": "ShipmentKey", "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "depot", "type": "string"}]}))
for i in range(10):
    m = Shipment(id=i, parcels=["a", "b"][: i % 3])
    m.sent.seconds = 1_704_067_200 + i
    getattr(m, "to").city = f"city{i}"
    producer.produce("shipments",
                     key=key_ser({"id": i, "depot": f"d{i % 2}"},
                                 SerializationContext("shipments", MessageField.KEY)),
                     value=pb(m, SerializationContext("shipments", MessageField.VALUE)))
producer.flush(30)
deadline = time.time() + 90
while time.time() < deadline:
    try:
        shipments = catalog.load_table("default.shipments").scan().to_arrow().to_pylist()
        if len(shipments) >= 10:
            break
    except Exception:
        pass
    time.sleep(0.5)
else:
    raise AssertionError("the Protobuf table did not fill")
assert sorted(r["id"] for r in shipments) == list(range(10)), shipments
s4 = next(r for r in shipments if r["id"] == 4)
assert s4["parcels"] == ["a"] and s4["to"] == {"city": "city4"}, s4
assert s4["sent"].isoformat().startswith("2024-01-01T00:00:04"), s4
assert all(r["_key"] == {"id": r["id"], "depot": f"d{r['id'] % 2}"} for r in shipments), shipments

# Compaction: a 3-partition topic gets a burst per round; after 10 commits the coordinator
# rewrites the ~30 small files as one in the background, in a `replace` snapshot. Readers see every record once.
admin.create_topics([NewTopic("clicks", num_partitions=3, replication_factor=1, config={
    "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"})])["clicks"].result(30)
click_ser = AvroSerializer(registry, V1)
produced = 0
for burst in range(12):
    for i in range(30):
        value = click_ser({"id": produced, "customer": {"name": f"c{produced}", "vip": False},
                           "amount": decimal.Decimal("1.00"), "at": 1_700_000_000_000 + produced},
                          SerializationContext("clicks", MessageField.VALUE))
        producer.produce("clicks", key=str(produced).encode(), value=value, partition=i % 3)
        produced += 1
    producer.flush(30)
    # One round per burst: wait until the table holds it.
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if len(catalog.load_table("default.clicks").scan().to_arrow()) == produced:
                break
        except Exception:
            pass
        time.sleep(0.2)
    else:
        raise AssertionError(f"clicks did not reach {produced} rows")
# Compaction runs beside the rounds: wait for its snapshot.
deadline = time.time() + 60
while True:
    clicks = catalog.load_table("default.clicks")
    operations = [s.summary.operation.value for s in clicks.metadata.snapshots]
    if "replace" in operations:
        break
    assert time.time() < deadline, f"no compaction in 60 s: {operations}"
    time.sleep(0.2)
rows = clicks.scan().to_arrow().to_pylist()
assert sorted(r["id"] for r in rows) == list(range(produced)), "every record once"
files = list(clicks.scan().plan_files())
assert len(files) < 12 * 3, f"{len(files)} files after compaction"
con = duckdb_iceberg.connect(iceberg_uri)
if con is not None:
    got = con.execute("SELECT count(*), count(DISTINCT id) FROM inlet.default.clicks").fetchall()
    assert got == [(produced, produced)], got
print("compaction OK:", len(files), "files,", operations.count("replace"), "replace snapshots")
print("OK")
