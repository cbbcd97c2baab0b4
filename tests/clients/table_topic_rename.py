"""A table topic's table renamed through the REST catalog while the topic is written: the
old table keeps its rows and files, and a new table under the topic's table name gets every
retained record once.

Usage: table_topic_rename.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

Creates a 3-partition table topic, produces ids 0..299 and waits until they are rows. Renames
`default.moved` to `default.moved_old`, then produces ids 300..349 as fast as it can, so a
round built before the rename is likely in flight. The coordinator's rounds were pinned to
the table it registered: they are refused once the name holds no table, and conversion starts
again for the new table from the stream's start. So `default.moved` ends with ids 0..349 once
each, and `default.moved_old` with ids 0..299 once each, its files untouched: no file path of
one table is a file of the other (names derived from offsets alone would collide). Before the
fix the pending round created the new table with only the records after the rename. Prints OK
at the end; raises on a mismatch.
"""

from confluent_kafka import Producer
from inlet_clients import create_table_topic, id_schema, produce_ids, run_phase_args, table_topic_clients
from table_wait import wait_for_rows

bootstrap, registry_url, iceberg_uri = run_phase_args()
TOPIC = "moved"
catalog, admin, ser = table_topic_clients(bootstrap, registry_url, iceberg_uri, id_schema("Moved", "moved"))
create_table_topic(admin, TOPIC, 3)


def produce(ids):
    produce_ids(Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}), ser, TOPIC, ids, keyed=True)


def files(table):
    return {task.file.file_path for task in table.scan().plan_files()}


produce(range(300))
wait_for_rows(catalog, TOPIC, 300)
catalog.rename_table(f"default.{TOPIC}", f"default.{TOPIC}_old")
produce(range(300, 350))

rows = wait_for_rows(catalog, TOPIC, 350, timeout=180)
ids = sorted(rows.column("id").to_pylist())
assert ids == list(range(350)), f"{len(ids)} rows in the new table: {ids[:20]} ... {ids[-20:]}"
old = catalog.load_table(f"default.{TOPIC}_old")
old_ids = sorted(old.scan().to_arrow().column("id").to_pylist())
assert old_ids == list(range(300)), f"{len(old_ids)} rows in the renamed table"
new = catalog.load_table(f"default.{TOPIC}")
assert new.metadata.table_uuid != old.metadata.table_uuid
shared = files(new) & files(old)
assert not shared, f"the new table writes over the renamed one's files: {sorted(shared)[:5]}"
print("OK")
