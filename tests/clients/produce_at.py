"""Produces one Avro record (the e2e test's Order schema) to a topic with a given timestamp.

Usage: produce_at.py BOOTSTRAP REGISTRY_URL TOPIC ID TIMESTAMP_MS
"""

import decimal
import sys

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from inlet_clients import ORDER_SCHEMA

bootstrap, registry_url, topic, ident, ts = sys.argv[1:6]
ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), ORDER_SCHEMA)
value = {"id": int(ident), "customer": {"name": "late", "vip": False},
         "amount": decimal.Decimal("1.00"), "at": int(ts)}
p = Producer({"bootstrap.servers": bootstrap})
p.produce(topic, value=ser(value, SerializationContext(topic, MessageField.VALUE)), timestamp=int(ts))
assert p.flush(30) == 0
print("OK")
