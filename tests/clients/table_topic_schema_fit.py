"""A writer schema the registry accepts but the table cannot take (Avro int promoted to
double; an Iceberg int column cannot become a double).

Usage: table_topic_schema_fit.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

Two 1-partition table topics get 10 records with `n: int` and become tables. Then records
with `n: double` are produced to both:
- `strict` (errors.tolerance=none) refuses them with INVALID_RECORD, naming the column and
  the change, and stores nothing;
- `tolerant` (errors.tolerance=all) stores them, and they land in `tolerant_dlq` with the
  reason.
Neither table stalls: int records produced after them become rows. Before the fix, both
topics stored the double records and both tables stopped converting for good. Prints OK at
the end; raises on a mismatch.
"""

import json
import sys

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog
from table_wait import wait_for_rows

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
assert phase == "run", phase


def schema(kind):
    return json.dumps({"type": "record", "name": "M", "namespace": "fit",
                       "fields": [{"name": "n", "type": kind}]})


catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)
registry = SchemaRegistryClient({"url": registry_url})
admin = AdminClient({"bootstrap.servers": bootstrap})
futures = admin.create_topics([
    NewTopic(t, num_partitions=1, replication_factor=1, config={
        "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
        "table.topic.errors.tolerance": tolerance})
    for t, tolerance in [("strict", "none"), ("tolerant", "all")]])
for f in futures.values():
    f.result(30)


def produce(topic, kind, values):
    """Produces `values`; returns the delivery errors."""
    ser = AvroSerializer(registry, schema(kind))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "retries": 0})
    errors = []
    for v in values:
        value = ser({"n": v}, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, value=value, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(30) == 0
    return errors


def rows(table):
    try:
        return catalog.load_table(f"default.{table}").scan().to_arrow()
    except Exception:  # the table appears with its first commit
        return None


for topic in ["strict", "tolerant"]:
    assert not produce(topic, "int", range(10))
    wait_for_rows(catalog, topic, 10)

errors = produce("strict", "double", [0.5, 1.5])
assert len(errors) == 2 and all(e.code() == KafkaError.INVALID_RECORD for e in errors), errors
# librdkafka reports only the error code; the test reads the message over the wire with
# this schema id.
double_id = registry.get_latest_version("strict-value").schema_id
print(f"strict refused: {errors[0].str()}; double schema id {double_id}")
assert not produce("tolerant", "double", [0.5, 1.5])

# Neither table stalls.
for topic in ["strict", "tolerant"]:
    assert not produce(topic, "int", range(10, 15))
    got = wait_for_rows(catalog, topic, 15)
    assert sorted(got.column("n").to_pylist()) == list(range(15)), got.column("n").to_pylist()
dead = wait_for_rows(catalog, "tolerant_dlq", 2)
why = dead.column("error").to_pylist()
assert all("int to double" in w for w in why), why
assert rows("strict_dlq") is None, "strict has no dead letters"
print("OK")
