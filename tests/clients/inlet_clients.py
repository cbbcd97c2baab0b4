"""What the client scripts of tests/clients/ share: their arguments, the clients a table topic
script opens, creating a table topic, producing Avro records and checking every delivery,
waiting for a table's rows, the clicks of the external-catalog scripts, the pyiceberg table
`shop.orders` the catalog scripts write and the checks of what another engine wrote, the Avro
schema of an order, and the schema registry scripts' checks.

The scripts import it from their own directory (on `sys.path` as the script's). Client
libraries are imported where they are used: a script needs only the ones it calls for.
"""

import json
import sys
import time

# The table topic settings every table topic script starts from: conversion on, a 1 s
# commit interval.
TABLE_TOPIC = {"table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"}

# The e2e test's Order: a nested record, a decimal and a timestamp.
ORDER_SCHEMA = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "name", "type": "string"}, {"name": "vip", "type": "boolean"}]}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]})


def run_phase_args():
    """`BOOTSTRAP REGISTRY_URL ICEBERG_URI run` of a one-phase table topic script."""
    bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
    assert phase == "run", phase
    return bootstrap, registry_url, iceberg_uri


def id_schema(name, namespace):
    """An Avro record `namespace.name` of one `long` field, `id`."""
    return json.dumps({"type": "record", "name": name, "namespace": namespace,
                       "fields": [{"name": "id", "type": "long"}]})


def table_topic_clients(bootstrap, registry_url, iceberg_uri, schema):
    """The node's Iceberg catalog (as `inlet`), an admin client, and an Avro serializer of
    `schema` on the node's registry."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), schema)
    return catalog, admin, ser


def create_table_topic(admin, topic, partitions, config=None):
    """Creates `topic` with [`TABLE_TOPIC`] and `config` on top; waits for it."""
    from confluent_kafka.admin import NewTopic

    new = NewTopic(topic, num_partitions=partitions, replication_factor=1,
                   config={**TABLE_TOPIC, **(config or {})})
    admin.create_topics([new])[topic].result(30)


def produce_ids(producer, ser, topic, ids, keyed=False, bad=False):
    """Produces `{"id": i}` for each of `ids` (keyed by the id's digits if `keyed`), then,
    if `bad`, a value the serializer did not frame; every record must be delivered."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    failed = []

    def delivered(err, _msg):
        if err:
            failed.append(err)

    for i in ids:
        value = ser({"id": i}, SerializationContext(topic, MessageField.VALUE))
        key = str(i).encode() if keyed else None
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    if bad:
        producer.produce(topic, value=b"not framed", on_delivery=delivered)
    assert producer.flush(30) == 0 and not failed, failed


def wait_for_table(catalog, name, n, timeout=90):
    """The table `name` and its rows (as dicts) once it holds at least `n`; raises after
    `timeout` s."""
    deadline = time.time() + timeout
    rows, last = [], None
    while time.time() < deadline:
        try:
            table = catalog.load_table(name)
            rows = table.scan().to_arrow().to_pylist()
            if len(rows) >= n:
                return table, rows
        except Exception as e:  # the table appears with the first commit
            last = e
        time.sleep(0.5)
    raise AssertionError(f"the table did not reach {n} rows in {timeout}s: {len(rows)} rows ({last})")


def write_shop_orders(catalog):
    """pyiceberg writes `shop.orders` (the namespace must exist): two snapshots, the second
    after a schema change (a new column `note`). Returns the table."""
    import pyarrow as pa
    from pyiceberg.types import StringType

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.float64())])
    orders = catalog.create_table("shop.orders", schema=schema)
    orders.append(pa.table({"id": [1, 2, 3], "amount": [1.5, 2.5, 3.5]}, schema=schema))
    with orders.update_schema() as update:
        update.add_column("note", StringType())
    orders = catalog.load_table("shop.orders")
    orders.append(pa.table({"id": [4], "amount": [4.5], "note": ["late"]},
                           schema=orders.schema().as_arrow()))
    return orders


def check(cond, what):
    """Fails the script unless `cond`; prints `what` when it holds."""
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


def expect_error(fn, status, code, what):
    """`fn()` must raise a SchemaRegistryError with this HTTP status and error code."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        fn()
    except SchemaRegistryError as e:
        check(e.http_status_code == status and e.error_code == code,
              f"{what} -> {e.http_status_code}/{e.error_code} ({e.error_message})")
        return
    raise SystemExit(f"FAILED: {what} did not raise")


def registry_client(url):
    """A fresh schema registry client: no cached answers."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": url})


# The clicks of table_topic_external.py and table_topic_glue.py.
CLICK_SCHEMA = json.dumps({"type": "record", "name": "Click", "fields": [
    {"name": "id", "type": "long"}, {"name": "page", "type": "string"}]})


def produce_clicks(bootstrap, registry_url, topic, ids, config=None):
    """Produces the click `{"id": i, "page": "/p<i>"}` for each of `ids`, keyed by the id, to
    partition `i % 2` of `topic`; every record must be acknowledged."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(config or {})})
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), CLICK_SCHEMA)
    for i in ids:
        producer.produce(topic, key=str(i).encode(), partition=i % 2,
                         value=ser({"id": i, "page": f"/p{i}"}, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0, "records left unacknowledged"


def check_clicks(table, rows, n):
    """The table of the clicks `0..n` ([`produce_clicks`]) holds each once, at its partition
    and offset, and its newest snapshot's Inlet offsets cover them all. Returns that
    snapshot's summary."""
    ids = sorted(r["id"] for r in rows)
    assert ids == list(range(n)), ids
    assert {r["id"]: r["page"] for r in rows} == {i: f"/p{i}" for i in range(n)}
    keys = {(r["_kafka"]["partition"], r["_kafka"]["offset"]) for r in rows}
    assert keys == {(i % 2, i // 2) for i in range(n)}, keys
    summary = table.metadata.current_snapshot().summary
    expected = {str(p): sum(1 for i in range(n) if i % 2 == p) for p in (0, 1)}
    assert json.loads(summary["inlet.offsets"]) == expected, (summary, expected)
    return summary


def check_engine_table(catalog, name, columns, first, last):
    """The table `name` another engine wrote through the node's catalog, read with pyiceberg:
    in the node's warehouse, with `columns`, two snapshots, ids 1, 2 and 10..19, the first row
    `first` and the last `last`. Returns its location."""
    table = catalog.load_table(name)
    location = table.metadata.location
    assert location.startswith("file://") and "/objects/warehouse/" in location, location
    assert [f.name for f in table.schema().fields] == columns, table.schema()
    assert len(table.metadata.snapshots) == 2, table.metadata.snapshots
    rows = table.scan().to_arrow().sort_by("id").to_pylist()
    assert [r["id"] for r in rows] == [1, 2] + list(range(10, 20)), rows
    assert rows[0] == first, rows[0]
    assert rows[-1] == last, rows[-1]
    return location


def check_shop_orders_appended(catalog, note):
    """`shop.orders` ([`write_shop_orders`]) after another engine appended id 5 with `note`:
    three snapshots, every row once."""
    orders = catalog.load_table("shop.orders")
    assert len(orders.metadata.snapshots) == 3, orders.metadata.snapshots
    rows = orders.scan().to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["note"]) for r in rows] == [
        (1, None), (2, None), (3, None), (4, "late"), (5, note)], rows
