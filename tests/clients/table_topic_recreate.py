"""A table topic deleted and created again under the same name: the new topic's records all
become rows, although its offsets start again at 0 below the old topic's progress.

Usage: table_topic_recreate.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

Creates a 1-partition table topic, produces 200 records (ids 0..199) and waits until they
are rows. Deletes the topic, creates it again, and produces 50 records (ids 1000..1049): their
offsets 0..49 are all below the 200 that the table's progress names. The table keeps the old
rows and gains the new ones: 250 rows. Before the fix, the new topic resumed at offset 200 and
its first 200 records never became rows. Prints OK at the end; raises on a mismatch.
"""

import json
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog
from table_wait import wait_for_rows

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
assert phase == "run", phase
TOPIC = "again"
SCHEMA = json.dumps({"type": "record", "name": "Again", "namespace": "again", "fields": [
    {"name": "id", "type": "long"},
]})

catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)
admin = AdminClient({"bootstrap.servers": bootstrap})
ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)


def create():
    admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1, config={
        "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"})])[TOPIC].result(30)


def produce(ids):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failed = []
    for i in ids:
        value = ser({"id": i}, SerializationContext(TOPIC, MessageField.VALUE))
        producer.produce(TOPIC, value=value, on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed


create()
produce(range(200))
wait_for_rows(catalog, TOPIC, 200)
admin.delete_topics([TOPIC])[TOPIC].result(30)
# The topic is gone once a metadata request no longer lists it.
deadline = time.time() + 30
while TOPIC in admin.list_topics(timeout=10).topics:
    assert time.time() < deadline, "the topic was not deleted"
    time.sleep(0.1)
create()
produce(range(1000, 1050))
rows = wait_for_rows(catalog, TOPIC, 250)
ids = sorted(rows.column("id").to_pylist())
assert ids == list(range(200)) + list(range(1000, 1050)), f"{len(ids)} rows: {ids[-60:]}"
snapshot = catalog.load_table(f"default.{TOPIC}").metadata.current_snapshot()
assert json.loads(snapshot.summary.additional_properties["inlet.offsets"]) == {"0": 50}, snapshot.summary
print("OK")
