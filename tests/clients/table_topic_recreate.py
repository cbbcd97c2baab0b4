"""A table topic deleted and created again under the same name: the new topic's records all
become rows, although its offsets start again at 0 below the old topic's progress.

Usage: table_topic_recreate.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

Creates a 1-partition table topic, produces 200 records (ids 0..199) and waits until they
are rows. Deletes the topic, creates it again, and produces 50 records (ids 1000..1049): their
offsets 0..49 are all below the 200 that the table's progress names. The table keeps the old
rows and gains the new ones: 250 rows. Before the fix, the new topic resumed at offset 200 and
its first 200 records never became rows. Prints OK at the end; raises on a mismatch.
"""

import json
import time

from confluent_kafka import Producer
from inlet_clients import create_table_topic, id_schema, produce_ids, run_phase_args, table_topic_clients
from table_wait import wait_for_rows

bootstrap, registry_url, iceberg_uri = run_phase_args()
TOPIC = "again"
catalog, admin, ser = table_topic_clients(bootstrap, registry_url, iceberg_uri, id_schema("Again", "again"))


def create():
    create_table_topic(admin, TOPIC, 1)


def produce(ids):
    produce_ids(Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}), ser, TOPIC, ids)


create()
produce(range(200))
wait_for_rows(catalog, TOPIC, 200)
admin.delete_topics([TOPIC])[TOPIC].result(30)
# The topic is gone once a metadata request no longer lists it.
deadline = time.time() + 30
while TOPIC in admin.list_topics(timeout=10).topics:
    assert time.time() < deadline, "the topic was not deleted"
    time.sleep(0.1)
create()
produce(range(1000, 1050))
rows = wait_for_rows(catalog, TOPIC, 250)
ids = sorted(rows.column("id").to_pylist())
assert ids == list(range(200)) + list(range(1000, 1050)), f"{len(ids)} rows: {ids[-60:]}"
snapshot = catalog.load_table(f"default.{TOPIC}").metadata.current_snapshot()
assert json.loads(snapshot.summary.additional_properties["inlet.offsets"]) == {"0": 50}, snapshot.summary
print("OK")
