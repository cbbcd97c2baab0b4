"""Watermarks from an event-time field, and idleness, on a running node.

A 2-partition table topic with `table.topic.event.time.field=at` and
`table.topic.watermark.idle.ms=3000`: the records' Kafka timestamps are "now" but their `at`
field is in 2024, so a watermark in 2024 proves the field is used. Partition 1 receives one old
record and falls silent; partition 0 keeps receiving newer ones. First the table watermark is
held at partition 1's time; once partition 1 has been idle for 3 s it follows partition 0.

Usage: table_topic_watermarks.py BOOTSTRAP REGISTRY_URL HTTP_BASE
"""

import json
import sys
import time
import urllib.request

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

bootstrap, registry_url, http = sys.argv[1:4]
TOPIC = "sensor"
SCHEMA = json.dumps({"type": "record", "name": "Reading", "fields": [
    {"name": "id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]})
BASE = 1_704_067_200_000  # 2024-01-01T00:00:00Z

admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1, config={
    "table.topic.enable": "true",
    "table.topic.commit.interval.ms": "1000",
    "table.topic.event.time.field": "at",
    "table.topic.watermark.idle.ms": "3000",
})])[TOPIC].result(30)

ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})


def produce(partition, ident, at):
    value = ser({"id": ident, "at": at}, SerializationContext(TOPIC, MessageField.VALUE))
    producer.produce(TOPIC, value=value, partition=partition)
    assert producer.flush(30) == 0


def watermark():
    try:
        with urllib.request.urlopen(f"{http}/v1/watermarks/default/{TOPIC}", timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError:
        return None


def wait_for(check, what, timeout=60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = watermark()
        if last is not None and check(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last answer {last}")


# Partition 1: one record at BASE + 1 min. Partition 0: a record at BASE + 10 min.
produce(1, 1, BASE + 60_000)
produce(0, 2, BASE + 600_000)
w = wait_for(lambda w: w.get("partitions", {}).get("0") == BASE + 600_000
             and w.get("partitions", {}).get("1") == BASE + 60_000, "both partitions committed")
# The event time rules, not the Kafka timestamp (now), and partition 1 holds the table back.
assert w["watermark_ms"] == BASE + 60_000, w
assert w["watermark"].startswith("2024-01-01T00:01:00"), w

# Partition 0 keeps receiving newer records, one a second; partition 1 stays silent. After
# 3 s of silence partition 1 no longer counts, and the table follows partition 0.
ident = 3
deadline = time.monotonic() + 60
while True:
    produce(0, ident, BASE + 600_000 + ident * 1000)
    ident += 1
    w = watermark()
    if w and w["watermark_ms"] > BASE + 600_000:
        break
    assert time.monotonic() < deadline, f"partition 1 never went idle: {w}"
    time.sleep(1)
assert w["partitions"]["1"] == BASE + 60_000, w

# Partition 1 comes back with an old record: the table watermark does not go back.
before = w["watermark_ms"]
produce(1, 999, BASE + 120_000)
w = wait_for(lambda w: w["partitions"]["1"] == BASE + 120_000, "partition 1's new record")
assert w["watermark_ms"] >= before, (before, w)
print("OK")
