"""Debezium's semantic types through Confluent's Avro serializer into a table topic.

Usage: table_topic_debezium_types.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

The value schema is what Debezium's PostgreSQL connector registers through Confluent's
AvroConverter: `connect.name` (and `connect.version`) on plain ints and longs, no Avro logical
types. The registry must hand that text back with its properties (Kafka Connect's converter
reads the types from them), and the table must hold dates, times and timestamps, not the raw
numbers: Debezium `Date` -> date, `MicroTime` -> time, `MicroTimestamp` and `NanoTimestamp`
-> timestamp, Connect `Timestamp` and Debezium `ZonedTimestamp` (ISO-8601 text) ->
timestamptz. Prints OK at the end; raises on a mismatch.
"""

import datetime
import json
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from inlet_clients import check, create_table_topic, registry_client, run_phase_args
from pyiceberg.catalog import load_catalog
from pyiceberg.types import DateType, TimestampType, TimestamptzType, TimeType
from table_wait import wait_for_rows

bootstrap, registry_url, iceberg_uri = run_phase_args()


def semantic(kind, name):
    return {"type": kind, "connect.version": 1, "connect.name": name}


SCHEMA = json.dumps({
    "type": "record", "name": "Value", "namespace": "pg.public.orders",
    "connect.name": "pg.public.orders.Value",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "day", "type": semantic("int", "io.debezium.time.Date")},
        {"name": "at", "type": semantic("long", "io.debezium.time.MicroTime")},
        {"name": "created", "type": ["null", semantic("long", "io.debezium.time.MicroTimestamp")],
         "default": None},
        {"name": "precise", "type": semantic("long", "io.debezium.time.NanoTimestamp")},
        {"name": "seen", "type": semantic("long", "org.apache.kafka.connect.data.Timestamp")},
        {"name": "zoned", "type": semantic("string", "io.debezium.time.ZonedTimestamp")},
    ],
})

topic = "dbz_types"
registry = registry_client(registry_url)
create_table_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, 1)
ser = AvroSerializer(registry, SCHEMA)
producer = Producer({"bootstrap.servers": bootstrap})
failed = []
n = 20
day0 = datetime.date(2024, 2, 28)
epoch = datetime.datetime(1970, 1, 1)
for i in range(n):
    day = day0 + datetime.timedelta(days=i)
    created = datetime.datetime(2024, 2, 28, 12, 30, 15, 123456) + datetime.timedelta(hours=i)
    created_us = (created - epoch) // datetime.timedelta(microseconds=1)
    value = {
        "id": i,
        "day": (day - datetime.date(1970, 1, 1)).days,
        "at": (3600 + i) * 1_000_000 + 250,
        "created": created_us if i % 2 == 0 else None,
        "precise": created_us * 1000 + 999,
        "seen": created_us // 1000,
        "zoned": created.isoformat() + "Z",
    }
    producer.produce(topic, value=ser(value, SerializationContext(topic, MessageField.VALUE)),
                     on_delivery=lambda err, _m: failed.append(err) if err else None)
check(producer.flush(30) == 0 and not failed, f"deliveries: {failed}")

# The registry hands the text back with Connect's properties on the primitive types.
subject = f"{topic}-value"
stored = json.loads(registry.get_latest_version(subject).schema.schema_str)
day_type = next(f for f in stored["fields"] if f["name"] == "day")["type"]
check(isinstance(day_type, dict) and day_type.get("connect.name") == "io.debezium.time.Date",
      f"the registry dropped connect.name: {day_type}")
print("registry: connect.name kept on primitive types")

catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)
rows = wait_for_rows(catalog, topic, n).to_pylist()
table = catalog.load_table(f"default.{topic}")
types = {f.name: f.field_type for f in table.schema().fields}
for name, want in [("day", DateType()), ("at", TimeType()), ("created", TimestampType()),
                   ("precise", TimestampType()), ("seen", TimestamptzType()),
                   ("zoned", TimestamptzType())]:
    check(types[name] == want, f"column {name} is {types[name]}, not {want}")
print("table columns:", {k: str(v) for k, v in types.items() if k != "_kafka"})
rows.sort(key=lambda r: r["id"])
check(len(rows) == n, f"{len(rows)} rows")
wrong = []
for i, row in enumerate(rows):
    created = datetime.datetime(2024, 2, 28, 12, 30, 15, 123456) + datetime.timedelta(hours=i)
    want = {
        "day": day0 + datetime.timedelta(days=i),
        "at": datetime.time(1, 0, i, 250),
        "created": created if i % 2 == 0 else None,
        "precise": created,
        "seen": created.replace(microsecond=123000, tzinfo=datetime.timezone.utc),
        "zoned": created.replace(tzinfo=datetime.timezone.utc),
    }
    wrong += [(i, k, row[k], v) for k, v in want.items() if row[k] != v]
check(not wrong, f"every value as written (mismatches: {wrong[:5]})")
print(f"{n} rows: dates, times and timestamps as Debezium meant them")
print("OK")
