"""A table topic reconfigured while it is written: its coordinator hands over with no overlap.

Usage: table_topic_reconfigure.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

Creates a 3-partition table topic (1 s commits) and produces 600 Avro records (ids
0..599) in six chunks. After each chunk, a Kafka admin call reconfigures the topic: the
commit interval flips between 500 and 700 ms, and once the topic grows to 4 partitions
(CreatePartitions). Each of these restarts the topic's coordinator. Then every record must
become a row exactly once, with Inlet's progress covering all 600.

Before the fix, the new coordinator started while the old one still ran; the old one's exit
then unregistered the new one's table from the worker, so the table stopped converting for
good (or two coordinators committed rounds of the same ranges). Prints OK at the end; raises
on a mismatch.
"""

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, ResourceType
from inlet_clients import create_table_topic, id_schema, produce_ids, run_phase_args, table_topic_clients
from table_wait import inlet_progress

bootstrap, registry_url, iceberg_uri = run_phase_args()
TOPIC = "moving"
catalog, admin, ser = table_topic_clients(bootstrap, registry_url, iceberg_uri, id_schema("Move", "moving"))
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                     "topic.metadata.refresh.interval.ms": 500})


def produce(ids):
    produce_ids(producer, ser, TOPIC, ids, keyed=True)


def set_interval(ms):
    resource = ConfigResource(ResourceType.TOPIC, TOPIC, incremental_configs=[
        ConfigEntry("table.topic.commit.interval.ms", str(ms),
                    incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)


def progress():
    """Records covered by Inlet's newest progress in main's history."""
    try:
        return inlet_progress(catalog.load_table(f"default.{TOPIC}"))
    except Exception:  # the table appears with the first commit
        return 0


create_table_topic(admin, TOPIC, 3)
for chunk in range(6):
    produce(range(chunk * 100, chunk * 100 + 100))
    if chunk == 2:
        admin.create_partitions([NewPartitions(TOPIC, 4)])[TOPIC].result(30)
    else:
        set_interval(1500 if chunk % 2 == 0 else 1000)
    # Space the changes out so that the node's table service (it reconciles once a second)
    # sees each one, with rounds in flight.
    time.sleep(1.2)

deadline = time.time() + 120
seen = 0
while time.time() < deadline and seen < 600:
    seen = progress()
    time.sleep(0.25)
assert seen == 600, f"Inlet's progress covers {seen} of 600 records"
rows = catalog.load_table(f"default.{TOPIC}").scan().to_arrow()
ids = sorted(rows.column("id").to_pylist())
assert ids == list(range(600)), f"{len(ids)} rows; duplicated or missing: {ids[:20]}..."
keys = {(k["partition"], k["offset"]) for k in rows.column("_kafka").to_pylist()}
assert len(keys) == 600, "every Kafka record once"
print("OK")
