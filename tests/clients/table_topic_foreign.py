"""A table topic that other writers commit to: exactly once across pyiceberg's deletes and
appends and a kill -9 of the node.

Usage: table_topic_foreign.py BOOTSTRAP REGISTRY_URL ICEBERG_URI first|restarted

first: creates a 3-partition table topic (1 s commits), produces 300 Avro records (ids 0..299)
and waits until they are rows. Then pyiceberg, as another writer, deletes the rows with
id < 10 and appends 5 rows of its own (ids 1000..1004); the newest snapshot is then pyiceberg's,
without Inlet's summary keys. 50 more records (ids 300..349) are produced, and the test kills
the node at once, before or after their round lands.

restarted: waits until Inlet's progress covers all 350 records, then the table must hold
exactly 345 rows: no Kafka record twice, the deleted rows still gone, pyiceberg's rows kept.
Before the fix, progress was read from the current (foreign) snapshot only, every partition
started again from offset 0, and the table held the 290 kept rows twice and the deleted
ones again. Prints OK at the end; raises on a mismatch.
"""

import json
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import LessThan

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
TOPIC = "shop"
SCHEMA = json.dumps({"type": "record", "name": "Sale", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item", "type": "string"},
]})

catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)


def produce(ids):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
    failed = []
    for i in ids:
        value = ser({"id": i, "item": f"item-{i}"}, SerializationContext(TOPIC, MessageField.VALUE))
        producer.produce(TOPIC, key=str(i).encode(), value=value,
                         on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed


def inlet_progress(table):
    """Records covered by the newest snapshot of main's history that has Inlet's keys."""
    meta = table.metadata
    snapshot = meta.current_snapshot()
    while snapshot is not None:
        offsets = snapshot.summary.additional_properties.get("inlet.offsets")
        if offsets is not None:
            return sum(json.loads(offsets).values())
        snapshot = meta.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return 0


def wait_for_progress(n, timeout=120):
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        try:
            table = catalog.load_table(f"default.{TOPIC}")
            seen = inlet_progress(table)
            if seen >= n:
                return table
        except Exception as e:  # the table appears with the first commit
            seen = e
        time.sleep(0.25)
    raise AssertionError(f"Inlet's progress did not reach {n} records in {timeout}s: {seen}")


if phase == "first":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1, config={
        "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"})])[TOPIC].result(30)
    produce(range(300))
    table = wait_for_progress(300)
    assert len(table.scan().to_arrow()) == 300

    # Another writer: a delete, then an append of rows shaped like the table's own.
    table.delete(delete_filter=LessThan("id", 10))
    table = catalog.load_table(f"default.{TOPIC}")
    theirs = table.scan(row_filter="id < 15", limit=5).to_arrow()
    assert len(theirs) == 5, len(theirs)
    theirs = theirs.set_column(theirs.schema.get_field_index("id"),
                               pa.field("id", pa.int64(), nullable=False),
                               pa.array(range(1000, 1005), pa.int64()))
    table.append(theirs)
    table = catalog.load_table(f"default.{TOPIC}")
    current = table.metadata.current_snapshot()
    assert "inlet.offsets" not in current.summary.additional_properties, current.summary
    assert len(table.scan().to_arrow()) == 295

    produce(range(300, 350))
    print("OK")
    sys.exit(0)

table = wait_for_progress(350)
rows = table.scan().to_arrow()
ids = sorted(rows.column("id").to_pylist())
expected = sorted(list(range(10, 350)) + list(range(1000, 1005)))
assert ids == expected, f"{len(ids)} rows; duplicates or resurrected rows: {ids[:20]}..."
mine = rows.filter(pc.less(rows.column("id"), 1000))
keys = {(k["partition"], k["offset"]) for k in mine.column("_kafka").to_pylist()}
assert len(keys) == 340, "every Kafka record once"
print("OK")
