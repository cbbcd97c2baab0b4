"""Transactions into a table topic: the table only ever holds committed records.

Usage: table_topic_transactions.py BOOTSTRAP REGISTRY_URL ICEBERG_URI PHASE

PHASE is
- `run`: `open`, then the open transaction commits, and the table gains it;
- `open`: a transactional producer commits ids 0..29 over 3 partitions, aborts 1000..1029,
  and leaves 2000..2029 in an open transaction; a plain producer then writes 3000..3009.
  The table takes exactly the committed ids, and Inlet's progress stops at each partition's
  last stable offset (the open transaction's first record): not the aborted ids, not the
  open ones, not the plain ones behind them;
- `settle` (after the node was killed with -9 and restarted): a new instance of the producer
  fences the old one, which aborts its open transaction; it commits 4000..4009. The table then
  holds 0..29, 3000..3009 and 4000..4009 and nothing else, and its progress accounts for
  every offset, markers and aborted records included.

A read_committed consumer from the start sees the same ids as the table. Prints OK at the
end; raises on a mismatch.
"""

import sys
import time

from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from confluent_kafka.serialization import MessageField, SerializationContext
from inlet_clients import check, create_table_topic, id_schema, table_topic_clients
from table_wait import inlet_progress, wait_for_progress

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
TOPIC = "txn_orders"
PARTITIONS = 3
TXN_ID = "txn-orders-writer"

catalog, admin, ser = table_topic_clients(
    bootstrap, registry_url, iceberg_uri, id_schema("Order", "shop.txn"))


def value(i):
    return ser({"id": i}, SerializationContext(TOPIC, MessageField.VALUE))


def produce(producer, ids):
    for i in ids:
        producer.produce(TOPIC, value=value(i), partition=i % PARTITIONS)


def transactional():
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                  "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    return p


def ends(isolation):
    """Each partition's end offset for `isolation` (read_committed: the last stable offset)."""
    spec = {TopicPartition(TOPIC, p): OffsetSpec.latest() for p in range(PARTITIONS)}
    found = admin.list_offsets(spec, isolation_level=isolation)
    return {tp.partition: f.result(30).offset for tp, f in found.items()}


def table_ids():
    table = catalog.load_table(f"default.{TOPIC}")
    return sorted(r["id"] for r in table.scan().to_arrow().to_pylist()), inlet_progress(table)


def committed_ids(expected):
    """What a read_committed consumer reads from the start (until it has `expected` ids, or
    20 s pass)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-table-check-{time.time()}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from inlet_clients import registry_client
    de = AvroDeserializer(registry_client(registry_url))
    got = []
    deadline = time.time() + 20
    while time.time() < deadline and len(got) < expected:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got.append(de(m.value(), SerializationContext(TOPIC, MessageField.VALUE))["id"])
    # A little longer, to see that nothing more arrives.
    end = time.time() + 2
    while time.time() < end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(de(m.value(), SerializationContext(TOPIC, MessageField.VALUE))["id"])
    c.close()
    return sorted(got)


def settled(want_ids, isolation_end):
    """The table holds exactly `want_ids` once Inlet's progress reaches the sum of
    `isolation_end`'s ends, and goes no further."""
    target = sum(isolation_end.values())
    table = wait_for_progress(catalog, TOPIC, target, timeout=120)
    ids, progress = table_ids()
    check(progress == target, f"the table's progress is {progress}, the partitions' ends {target}")
    check(ids == sorted(want_ids), f"the table holds exactly the committed ids ({len(ids)})")
    return table


def open_phase():
    create_table_topic(admin, TOPIC, PARTITIONS)
    p = transactional()
    p.begin_transaction()
    produce(p, range(30))
    p.commit_transaction(30)
    p.begin_transaction()
    produce(p, range(1000, 1030))
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    produce(p, range(2000, 2030))
    check(p.flush(30) == 0, "the open transaction's records are stored")
    plain = Producer({"bootstrap.servers": bootstrap})
    produce(plain, range(3000, 3010))
    check(plain.flush(30) == 0, "plain records behind the open transaction are acknowledged")
    stable, high = ends(IsolationLevel.READ_COMMITTED), ends(IsolationLevel.READ_UNCOMMITTED)
    check(all(stable[q] < high[q] for q in range(PARTITIONS)),
          f"the last stable offsets {stable} stay below the high watermarks {high}")
    settled(range(30), stable)
    check(committed_ids(30) == list(range(30)), "read_committed reads the same ids")
    return p


def settle_phase():
    p = transactional()  # fences the instance that was killed, aborting its transaction
    p.begin_transaction()
    produce(p, range(4000, 4010))
    p.commit_transaction(30)
    want = list(range(30)) + list(range(3000, 3010)) + list(range(4000, 4010))
    stable, high = ends(IsolationLevel.READ_COMMITTED), ends(IsolationLevel.READ_UNCOMMITTED)
    check(stable == high, f"nothing is open: last stable offsets {stable}, ends {high}")
    settled(want, high)
    check(committed_ids(len(want)) == sorted(want), "read_committed reads the same ids")


if phase == "run":
    producer = open_phase()
    producer.commit_transaction(30)
    want = list(range(30)) + list(range(2000, 2030)) + list(range(3000, 3010))
    high = ends(IsolationLevel.READ_UNCOMMITTED)
    check(ends(IsolationLevel.READ_COMMITTED) == high, "the commit settles every partition")
    settled(want, high)
elif phase == "open":
    open_phase()
elif phase == "settle":
    settle_phase()
else:
    raise SystemExit(f"unknown phase {phase}")
print("OK")
