"""The README's walkthrough: a table topic, Avro records through the Schema Registry, rows.

    python examples/orders.py [--count 1000] [--topic orders]

Against a node on its default ports (`cargo run --release -- serve`), it
1. creates the topic `orders` as a table topic (`table.topic.enable=true`), committed every
   5 s and partitioned by day of the `ts` field, unless the topic exists already;
2. produces `--count` orders with Confluent's AvroSerializer, which registers the value
   schema in Inlet's registry (subject `orders-value`);
3. waits until the rows are in the Iceberg table `default.orders` (Inlet's SQL endpoint),
   and prints the count.

Needs confluent-kafka with its Avro serializer: pip install 'confluent-kafka[avro,schemaregistry]'.
"""

import argparse
import json
import sys
import time
import urllib.request
from datetime import datetime, timezone

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

BOOTSTRAP = "127.0.0.1:9092"
REGISTRY = "http://127.0.0.1:8081"
HTTP = "http://127.0.0.1:8181"

SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
)


def create_table_topic(topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    config = {
        "table.topic.enable": "true",
        "table.topic.commit.interval.ms": "5000",
        "table.topic.partition.by": "[day(ts)]",
    }
    future = admin.create_topics([NewTopic(topic, num_partitions=3, config=config)])[topic]
    try:
        future.result(timeout=30)
        print(f"created the table topic {topic}")
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise
        print(f"the topic {topic} exists already")


def row_count(table: str) -> int:
    body = json.dumps({"sql": f"SELECT count(*) AS n FROM {table}"}).encode()
    request = urllib.request.Request(
        f"{HTTP}/v1/query", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(json.load(answer)[0]["n"])
    except urllib.error.HTTPError as e:
        # Before the first commit there is no table yet.
        if e.code in (400, 404):
            return 0
        raise


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--topic", default="orders")
    args.add_argument("--count", type=int, default=1000)
    opts = args.parse_args()
    table = f"default.{opts.topic}"

    create_table_topic(opts.topic)
    before = row_count(table)

    serialize = AvroSerializer(SchemaRegistryClient({"url": REGISTRY}), SCHEMA)
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "enable.idempotence": True})
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    failures = []
    for i in range(opts.count):
        order = {"id": i, "customer": f"c{i % 17}", "amount": round(i * 1.25, 2), "ts": now_ms + i}
        value = serialize(order, SerializationContext(opts.topic, MessageField.VALUE))
        producer.produce(
            opts.topic,
            key=str(i).encode(),
            value=value,
            on_delivery=lambda err, _msg: err and failures.append(err),
        )
        producer.poll(0)
    if producer.flush(30) != 0 or failures:
        print(f"produce failed: {failures[:3]}", file=sys.stderr)
        return 1
    print(f"produced {opts.count} orders to {opts.topic} (acks=all)")

    deadline = time.monotonic() + 120
    while (rows := row_count(table) - before) < opts.count:
        if time.monotonic() > deadline:
            print(f"only {rows} of {opts.count} orders are rows after 120 s", file=sys.stderr)
            return 1
        time.sleep(0.5)
    print(f"{rows} orders are rows of {table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
