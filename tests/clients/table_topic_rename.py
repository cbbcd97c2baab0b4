"""A table topic's table renamed through the REST catalog while the topic is written: the
old table keeps its rows and files, and a new table under the topic's table name gets every
retained record once.

Usage: table_topic_rename.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

Creates a 3-partition table topic, produces ids 0..299 and waits until they are rows. Renames
`default.moved` to `default.moved_old`, then produces ids 300..349 as fast as it can, so a
round built before the rename is likely in flight. The coordinator's rounds were pinned to
the table it registered: they are refused once the name holds no table, and conversion starts
again for the new table from the stream's start. So `default.moved` ends with ids 0..349 once
each, and `default.moved_old` with ids 0..299 once each, its files untouched: no file path of
one table is a file of the other (names derived from offsets alone would collide). Before the
fix the pending round created the new table with only the records after the rename. Prints OK
at the end; raises on a mismatch.
"""

import json
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog
from table_wait import wait_for_rows

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
assert phase == "run", phase
TOPIC = "moved"
SCHEMA = json.dumps({"type": "record", "name": "Moved", "namespace": "moved", "fields": [
    {"name": "id", "type": "long"},
]})

catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)
admin = AdminClient({"bootstrap.servers": bootstrap})
ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1, config={
    "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"})])[TOPIC].result(30)


def produce(ids):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failed = []
    for i in ids:
        value = ser({"id": i}, SerializationContext(TOPIC, MessageField.VALUE))
        producer.produce(TOPIC, key=str(i).encode(), value=value,
                         on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed


def files(table):
    return {task.file.file_path for task in table.scan().plan_files()}


produce(range(300))
wait_for_rows(catalog, TOPIC, 300)
catalog.rename_table(f"default.{TOPIC}", f"default.{TOPIC}_old")
produce(range(300, 350))

rows = wait_for_rows(catalog, TOPIC, 350, timeout=180)
ids = sorted(rows.column("id").to_pylist())
assert ids == list(range(350)), f"{len(ids)} rows in the new table: {ids[:20]} ... {ids[-20:]}"
old = catalog.load_table(f"default.{TOPIC}_old")
old_ids = sorted(old.scan().to_arrow().column("id").to_pylist())
assert old_ids == list(range(300)), f"{len(old_ids)} rows in the renamed table"
new = catalog.load_table(f"default.{TOPIC}")
assert new.metadata.table_uuid != old.metadata.table_uuid
shared = files(new) & files(old)
assert not shared, f"the new table writes over the renamed one's files: {sorted(shared)[:5]}"
print("OK")
