"""A dead-letter table that refuses Inlet's commits does not stop the main table.

Usage: table_topic_dlq_refused.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

A tolerant table topic (errors.tolerance=all) gets 5 Avro records and one unframed record:
5 rows, 1 dead letter. Then pyiceberg, as another writer, drops the dead-letter table's
`error` column, so Inlet's dead-letter rounds no longer fit it and are refused. 5 more
records and another unframed one are produced: the main table must still get its 10 rows.
Before the fix, the failing dead-letter commit was retried before the main round at every
tick, and the main table stopped. Prints OK at the end; raises on a mismatch.
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
TOPIC = "lenient"
SCHEMA = json.dumps({"type": "record", "name": "L", "namespace": "lenient",
                     "fields": [{"name": "id", "type": "long"}]})

catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)
admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1, config={
    "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
    "table.topic.errors.tolerance": "all"})])[TOPIC].result(30)
ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)


def produce(ids):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failed = []
    for i in ids:
        value = ser({"id": i}, SerializationContext(TOPIC, MessageField.VALUE))
        producer.produce(TOPIC, value=value, on_delivery=lambda err, _m: err and failed.append(err))
    producer.produce(TOPIC, value=b"not framed", on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed


produce(range(5))
wait_for_rows(catalog, TOPIC, 5)
wait_for_rows(catalog, f"{TOPIC}_dlq", 1)
dlq = catalog.load_table(f"default.{TOPIC}_dlq")
with dlq.update_schema() as update:
    update.delete_column("error")

produce(range(5, 10))
ids = sorted(wait_for_rows(catalog, TOPIC, 10).column("id").to_pylist())
assert ids == list(range(10)), ids
print("OK")
