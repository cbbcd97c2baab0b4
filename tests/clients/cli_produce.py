"""What `inlet produce` wrote, read by other clients: confluent-kafka's AvroDeserializer (through
the node's registry) reads every record of the topic as the expected values, in order, and
pyiceberg finds the same rows in the table topic's table.

Usage: cli_produce.py BOOTSTRAP REGISTRY_URL ICEBERG_URI TOPIC EXPECTED_JSON

EXPECTED_JSON is the list of values (as the deserializer gives them: unions unwrapped) in
produce order, all in partition 0. Exits non-zero on the first mismatch.
"""

import json
import sys
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from inlet_clients import check
from pyiceberg.catalog import load_catalog

bootstrap, registry_url, iceberg_uri, topic, expected_json = sys.argv[1:6]
expected = json.loads(expected_json)

de = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-check",
                     "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, 0, 0)])
values = []
deadline = time.time() + 60
while len(values) < len(expected) and time.time() < deadline:
    m = consumer.poll(1.0)
    if m is None:
        continue
    check(m.error() is None, f"fetch: {m.error()}")
    values.append(de(m.value(), SerializationContext(topic, MessageField.VALUE)))
consumer.close()
check(values == expected, f"the AvroDeserializer read {values}, expected {expected}")
print(f"confluent-kafka's AvroDeserializer read the {len(values)} records")

catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)
deadline = time.time() + 90
rows = []
while time.time() < deadline:
    try:
        rows = catalog.load_table(f"default.{topic}").scan().to_arrow().to_pylist()
    except Exception as e:  # the table appears with the first commit
        print(f"not yet: {e}")
    if len(rows) >= len(expected):
        break
    time.sleep(1)
rows.sort(key=lambda r: r["id"])
want = sorted(expected, key=lambda r: r["id"])
check([(r["id"], r["name"], r["email"]) for r in rows] ==
      [(w["id"], w["name"], w["email"]) for w in want],
      f"the table holds {rows}, expected {want}")
print("OK")
