"""Upsert and CDC table topics end to end: confluent-kafka's AvroSerializer in, the latest row
per key out, read with pyiceberg (and DuckDB, when its extension packages are installed)
through the node's REST catalog.

Usage: table_topic_upsert.py BOOTSTRAP REGISTRY_URL ICEBERG_URI first|after-restart

Three 3-partition topics with a 1 s commit interval and table.topic.id.columns=[id]:
- `users`: table.topic.upsert.enable=true; every record upserts its key. Keys are converted
  (table.topic.convert.key.type=string, so `_key` is the key as text), and a tombstone (a
  null value) deletes its key's row.
- `accounts`: table.topic.cdc.field=op; `I`/`U` upsert, `D` deletes the key's row.
- `items`: upsert, partitioned by bucket(id, 2): a round's position deletes in each partition
  point into several data files of that partition (readers match them by partition).

first: three steps, each waited for until the tables hold exactly the expected latest row per
key (inserts; then updates, a key updated twice in one burst, and deletes). Between the second
and the third, another writer (pyiceberg) appends a row to `users`: the node's next round was
built on the snapshot before, so it must be dropped and redone on the new base. A fourth step
is produced (acked) but not waited for: the node is killed with SIGKILL right after.
after-restart: a fifth step updates and deletes keys written before the kill (the node rebuilt
its primary-key indexes from the tables), then the tables must hold exactly the result of all
five steps. It prints which nodes wrote each table's files (`writers users 1,2,3`: in a
cluster, `tests/cluster.rs` runs this script on three nodes and kills one), then OK; raises on
a mismatch.
"""

import json
import os
import re
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import duckdb_iceberg  # noqa: E402

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]

USER = json.dumps({"type": "record", "name": "User", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "version", "type": "int"},
]})
ACCOUNT = json.dumps({"type": "record", "name": "Account", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "balance", "type": "long"},
    {"name": "op", "type": "string"},
]})

# The steps: (users records, accounts records), each record (id, value[, op]); a users value
# of None is a tombstone.
STEPS = [
    ([(i, f"u{i}-v1") for i in range(20)],
     [(i, 100 + i, "I") for i in range(12)]),
    ([(i, f"u{i}-v2") for i in range(0, 20, 2)] + [(4, "u4-v3"), (6, None)],
     [(i, 200 + i, "U") for i in range(4)] + [(5, 0, "D"), (6, 0, "D"), (12, 112, "I")]),
    ([(3, "u3-v2"), (3, "u3-v3"), (20, "u20-v1"), (9, None), (9, "u9-v7"), (7, None)],
     [(5, 305, "I"), (7, 307, "U"), (7, 0, "D"), (13, 113, "I")]),
    # Produced just before the kill.
    ([(i, f"u{i}-v4") for i in range(10, 15)],
     [(0, 0, "D"), (8, 408, "U"), (14, 114, "I")]),
    # After the restart.
    ([(1, "u1-v5"), (10, "u10-v5"), (21, "u21-v1"), (100, "u100-v5"), (11, None)],
     [(1, 0, "D"), (8, 508, "U"), (5, 505, "U"), (15, 115, "I")]),
]


# The row another writer appends to `users` after the second step.
EXTERNAL = (100, "external")


def expected(steps):
    users, accounts = {}, {}
    for n, (u, a) in enumerate(steps):
        if n == 2:
            users[EXTERNAL[0]] = EXTERNAL[1]
        for i, name in u:
            if name is None:
                users.pop(i, None)
            else:
                users[i] = name
        for i, balance, op in a:
            if op == "D":
                accounts.pop(i, None)
            else:
                accounts[i] = balance
    return users, accounts


if phase == "first":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    common = {"table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
              "table.topic.id.columns": "[id]"}
    # users and accounts may compact every 2 s (the node's [tables] compaction_min_files
    # decides whether there is anything to compact: a cluster test makes it 2); items keeps
    # its delete files, which this script checks.
    compacting = {"table.topic.compaction.interval.ms": "2000"}
    futures = admin.create_topics([
        NewTopic("users", num_partitions=3, replication_factor=1,
                 config={**common, **compacting, "table.topic.upsert.enable": "true",
                         "table.topic.convert.key.type": "string"}),
        NewTopic("accounts", num_partitions=3, replication_factor=1,
                 config={**common, **compacting, "table.topic.cdc.field": "op"}),
        NewTopic("items", num_partitions=3, replication_factor=1,
                 config={**common, "table.topic.upsert.enable": "true",
                         "table.topic.partition.by": "[bucket(id, 2)]"}),
    ])
    for f in futures.values():
        f.result(30)

registry = SchemaRegistryClient({"url": registry_url})
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
user_ser = AvroSerializer(registry, USER)
account_ser = AvroSerializer(registry, ACCOUNT)
catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)


def produce(step):
    users, accounts = step
    for i, name in users:
        if name is None:
            producer.produce("users", key=str(i).encode(), value=None)
            continue
        version = int(name.rsplit("-v", 1)[1])
        value = user_ser({"id": i, "name": name, "version": version},
                         SerializationContext("users", MessageField.VALUE))
        producer.produce("users", key=str(i).encode(), value=value)
    failed = []
    for i, balance, op in accounts:
        value = account_ser({"id": i, "balance": balance, "op": op},
                            SerializationContext("accounts", MessageField.VALUE))
        producer.produce("accounts", key=str(i).encode(), value=value)
        if op == "D":
            # Debezium follows a delete event with a null tombstone for log compaction: a CDC
            # topic takes it (it deletes nothing more), without table.topic.upsert.enable.
            producer.produce("accounts", key=str(i).encode(), value=None,
                             on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0, "every record acked"
    assert not failed, f"tombstones refused: {failed}"


def table_rows(name, value_column):
    rows = catalog.load_table(f"default.{name}").scan().to_arrow().to_pylist()
    got = {}
    for r in rows:
        assert r["id"] not in got, f"{name}: id {r['id']} has two live rows"
        if name == "users":
            # The converted key; the other writer's row has none.
            assert r["_key"] == str(r["id"]) or (r["_key"] is None and r["name"] == EXTERNAL[1]), r
        got[r["id"]] = r[value_column]
    return got


def wait_for(steps, timeout=90):
    """Waits until both tables hold exactly the latest rows of `steps`."""
    want_users, want_accounts = expected(steps)
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        try:
            got = (table_rows("users", "name"), table_rows("accounts", "balance"))
            if got == (want_users, want_accounts):
                return
        except AssertionError:
            raise
        except Exception as e:  # the tables appear with their first commits
            got = e
        time.sleep(0.5)
    raise AssertionError(f"tables did not reach the expected rows in {timeout}s:\n"
                         f"want {want_users}\n     {want_accounts}\ngot  {got}")


# `items`: (id, name) steps; the first three before the kill, the last after the restart.
ITEM_STEPS = [
    [(i, f"i{i}-v1") for i in range(10)],
    [(i, f"i{i}-v1") for i in range(10, 20)],
    [(i, f"i{i}-v2") for i in range(20)],
    [(5, "i5-v3"), (15, "i15-v3")],
]


def produce_items(step):
    for i, name in step:
        version = int(name.rsplit("-v", 1)[1])
        value = user_ser({"id": i, "name": name, "version": version},
                         SerializationContext("items", MessageField.VALUE))
        producer.produce("items", key=str(i).encode(), value=value)
    assert producer.flush(30) == 0, "every record acked"


def wait_for_items(steps, timeout=90):
    want = {}
    for step in steps:
        want.update(dict(step))
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        try:
            got = table_rows("items", "name")
            if got == want:
                return
        except AssertionError:
            raise
        except Exception as e:
            got = e
        time.sleep(0.5)
    raise AssertionError(f"items did not reach the expected rows in {timeout}s:\n"
                         f"want {want}\ngot  {got}")


def check_snapshot():
    users = catalog.load_table("default.users")
    summary = users.metadata.current_snapshot().summary
    assert "inlet.commit-id" in summary and "inlet.offsets" in summary, summary
    assert int(summary["inlet.watermark"]) > 0, summary
    # The id column is the table's identifier field, and its sort order.
    schema = users.schema()
    assert [schema.find_field(i).name for i in schema.identifier_field_ids] == ["id"], schema
    assert [f.source_id for f in users.sort_order().fields] == [schema.find_field("id").field_id]
    # Deletes are position deletes, never equality deletes (pyiceberg reads only those).
    ops = {s.summary.operation.value for s in users.snapshots()}
    assert "overwrite" in ops, ops
    assert int(summary.get("total-equality-deletes", "0")) == 0, summary
    # (A compaction may have applied every delete since: some snapshot added them.)
    added = [int(s.summary.get("added-position-deletes") or 0) for s in users.snapshots()]
    assert any(n > 0 for n in added), added


def check_duckdb(steps):
    con = duckdb_iceberg.connect(iceberg_uri)
    if con is None:
        return
    want_users, want_accounts = expected(steps)
    users = dict(con.execute("SELECT id, name FROM inlet.default.users").fetchall())
    accounts = dict(con.execute("SELECT id, balance FROM inlet.default.accounts").fetchall())
    items = dict(con.execute("SELECT id, name FROM inlet.default.items").fetchall())
    want_items = {}
    for step in ITEM_STEPS:
        want_items.update(dict(step))
    assert items == want_items, items
    count = con.execute("SELECT count(*) FROM inlet.default.users").fetchone()[0]
    assert count == len(want_users), (count, len(want_users))
    assert users == want_users, users
    assert accounts == want_accounts, accounts
    print("DuckDB OK")


def external_append():
    import pyarrow as pa
    users = catalog.load_table("default.users")
    schema = users.schema().as_arrow()
    data = {f.name: [None] for f in schema}
    data.update({"id": [EXTERNAL[0]], "name": [EXTERNAL[1]], "version": [1]})
    users.append(pa.Table.from_pydict(data, schema=schema))


if phase == "first":
    for n in range(3):
        if n == 2:
            external_append()
        produce(STEPS[n])
        wait_for(STEPS[: n + 1])
        print(f"step {n + 1} OK")
    check_snapshot()
    for n in range(3):
        produce_items(ITEM_STEPS[n])
        wait_for_items(ITEM_STEPS[: n + 1])
    items = catalog.load_table("default.items")
    assert [str(f.transform) for f in items.spec().fields] == ["bucket[2]"], items.spec()
    deletes = [d for t in items.scan().plan_files() for d in t.delete_files]
    assert deletes and all(d.partition is not None for d in deletes), deletes
    print("items OK")
    # Acked, then the node is killed before (or while) it commits these.
    produce(STEPS[3])
    print("OK")
    sys.exit(0)

produce(STEPS[4])
produce_items(ITEM_STEPS[3])
wait_for(STEPS)
wait_for_items(ITEM_STEPS)
check_snapshot()
check_duckdb(STEPS)
# Which nodes wrote each table's files: in a cluster a converter tags its files
# `n<node id>r<registration>`; a single node's carry no node. Every snapshot's files are
# looked at: a compaction may have replaced every live file with its own untagged outputs.
for name in ("users", "accounts", "items"):
    paths = catalog.load_table(f"default.{name}").inspect.all_files().column("file_path").to_pylist()
    nodes = sorted({int(m.group(1)) for p in paths if (m := re.search(r"n(\d+)r[0-9a-f]{6}", p))})
    print(f"writers {name} " + ",".join(str(n) for n in nodes))
print("OK")
