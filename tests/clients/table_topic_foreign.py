"""A table topic that other writers commit to: exactly once across pyiceberg's deletes and
appends and a kill -9 of the node.

Usage: table_topic_foreign.py BOOTSTRAP REGISTRY_URL ICEBERG_URI first|restarted

(BOOTSTRAP may list several nodes: `tests/cluster.rs` runs it on three, the topic created
and spread over them first, and kills the table's coordinator between the phases.)

first: creates a 3-partition table topic (1 s commits), produces 300 Avro records (ids 0..299)
and waits until they are rows. Then pyiceberg, as another writer, deletes the rows with
id < 10, appends 5 rows of its own (ids 1000..1004) and overwrites the rows 20..24 with
changed items; the newest snapshot is then pyiceberg's,
without Inlet's summary keys. pyiceberg also adds a column `note`. 50 more records (ids
300..349) are produced with a schema that adds `qty`: the worker, which has not seen `note`,
gives `qty` the id pyiceberg gave `note`, so the round is refused at commit and converted
again with the table's schema; the test waits for it to land with both columns. Then 10 more
(350..359), and the test kills the node at once, before or after their round lands.

restarted: waits until Inlet's progress covers all 360 records, then the table must hold
exactly 355 rows: no Kafka record twice, the deleted rows still gone, pyiceberg's rows and
its overwrite kept,
and the schema has both `note` (never reverted) and `qty` (with the records' values).
Before the fix, progress was read from the current (foreign) snapshot only, every partition
started again from offset 0, and the table held the 290 kept rows twice and the deleted
ones again. Prints OK at the end; raises on a mismatch.
"""

import json
import sys

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog
import table_wait
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
from pyiceberg.types import StringType

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
TOPIC = "shop"
SCHEMA = json.dumps({"type": "record", "name": "Sale", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item", "type": "string"},
]})

SCHEMA_QTY = json.dumps({"type": "record", "name": "Sale", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item", "type": "string"},
    {"name": "qty", "type": ["null", "long"], "default": None},
]})

catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)


def produce(ids, schema=SCHEMA):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), schema)
    failed = []
    for i in ids:
        record = {"id": i, "item": f"item-{i}"}
        if schema is SCHEMA_QTY:
            record["qty"] = i
        value = ser(record, SerializationContext(TOPIC, MessageField.VALUE))
        producer.produce(TOPIC, key=str(i).encode(), value=value,
                         on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed


def wait_for_progress(n, timeout=120):
    return table_wait.wait_for_progress(catalog, TOPIC, n, timeout)


def check_schema(table, produced):
    """pyiceberg's column stayed, and the records' new column came with its values."""
    names = [f.name for f in table.schema().fields]
    assert "note" in names and "qty" in names, names
    assert len({f.field_id for f in table.schema().fields}) == len(names), table.schema()
    rows = table.scan().to_arrow()
    qty = {r["id"]: r["qty"] for r in rows.select(["id", "qty"]).to_pylist()}
    assert all(qty[i] == i for i in range(300, produced)), {i: qty[i] for i in range(300, 310)}
    assert all(qty[i] is None for i in range(10, 300)), "older rows have no qty"
    assert all(n is None for n in rows.column("note").to_pylist()), "nobody wrote a note"


if phase == "first":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1, config={
            "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"})])[TOPIC].result(30)
    except KafkaException as e:
        # A cluster test creates it first, to spread its partitions before producing.
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
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
    # An overwrite: the rows with 20 <= id < 25 replaced by the same rows, items changed.
    table = catalog.load_table(f"default.{TOPIC}")
    band = And(GreaterThanOrEqual("id", 20), LessThan("id", 25))
    changed = table.scan(row_filter=band).to_arrow()
    assert len(changed) == 5, len(changed)
    changed = changed.set_column(changed.schema.get_field_index("item"),
                                 pa.field("item", pa.string(), nullable=False),
                                 pa.array(["overwritten"] * 5, pa.string()))
    table.overwrite(changed, overwrite_filter=band)
    table = catalog.load_table(f"default.{TOPIC}")
    current = table.metadata.current_snapshot()
    assert "inlet.offsets" not in current.summary.additional_properties, current.summary
    assert len(table.scan().to_arrow()) == 295

    # Another engine's schema change: a column of its own. The next records add one of
    # theirs; the worker, which has not seen `note`, numbers `qty` with the id pyiceberg gave
    # `note`.
    with table.update_schema() as update:
        update.add_column("note", StringType())
    produce(range(300, 350), SCHEMA_QTY)
    # The round that adds `qty` does not fit the table (one id, two columns): it is converted
    # again with the table's schema, and lands with both columns.
    check_schema(wait_for_progress(350), 350)

    produce(range(350, 360), SCHEMA_QTY)
    print("OK")
    sys.exit(0)

table = wait_for_progress(360)
rows = table.scan().to_arrow()
ids = sorted(rows.column("id").to_pylist())
expected = sorted(list(range(10, 360)) + list(range(1000, 1005)))
assert ids == expected, f"{len(ids)} rows; duplicates or resurrected rows: {ids[:20]}..."
mine = rows.filter(pc.less(rows.column("id"), 1000))
keys = {(k["partition"], k["offset"]) for k in mine.column("_kafka").to_pylist()}
assert len(keys) == 350, "every Kafka record once"
check_schema(table, 360)
items = {r["id"]: r["item"] for r in rows.select(["id", "item"]).to_pylist()}
assert all(items[i] == "overwritten" for i in range(20, 25)), "the overwrite was undone"
assert items[25] == "item-25"
print("OK")
