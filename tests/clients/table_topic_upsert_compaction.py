"""An upsert table topic's small files are compacted while it is updated: position deletes
applied, the primary-key index rebuilt, the latest row per key kept throughout.

Usage: table_topic_upsert_compaction.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

A 2-partition upsert topic (table.topic.id.columns=[id], 1 s commits,
table.topic.compaction.interval.ms=1000) gets rounds of updates of keys 0..59, with some keys
deleted by tombstones and others inserted again. After every round the table must hold
exactly the latest row per key. Once the history has a `replace` snapshot (Inlet's
compaction), more rounds update the same keys: their position deletes must hit the rows'
new places, so no key gets two live rows and no deleted key comes back. At the end the table
has fewer live data files than it had before the compaction. Prints OK at the end; raises
on a mismatch.
"""

import json
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
assert phase == "run", phase
TOPIC = "churn"
KEYS = 60
SCHEMA = json.dumps({"type": "record", "name": "Churn", "namespace": "churn", "fields": [
    {"name": "id", "type": "long"}, {"name": "version", "type": "long"},
]})

admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1, config={
    "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000",
    "table.topic.id.columns": "[id]", "table.topic.upsert.enable": "true",
    "table.topic.convert.key.type": "string", "table.topic.compaction.interval.ms": "1000"})])[TOPIC].result(30)
ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)
latest = {}


def round_of(version):
    """Every key updated to `version`; a few deleted, and the ones deleted before back."""
    for i in range(KEYS):
        if (i + version) % 7 == 0:
            producer.produce(TOPIC, key=str(i).encode(), value=None)
            latest.pop(i, None)
        else:
            value = ser({"id": i, "version": version}, SerializationContext(TOPIC, MessageField.VALUE))
            producer.produce(TOPIC, key=str(i).encode(), value=value)
            latest[i] = version
    assert producer.flush(30) == 0, "every record acked"


def rows():
    got = {}
    for r in catalog.load_table(f"default.{TOPIC}").scan().to_arrow().to_pylist():
        assert r["id"] not in got, f"id {r['id']} has two live rows"
        got[r["id"]] = r["version"]
    return got


def wait_for_latest(timeout=60):
    deadline = time.time() + timeout
    got = None
    while time.time() < deadline:
        try:
            got = rows()
        except NoSuchTableError:  # the first round creates it
            got = {}
        if got == latest:
            return
        time.sleep(0.25)
    missing = {k: v for k, v in latest.items() if got.get(k) != v}
    extra = {k: v for k, v in got.items() if k not in latest}
    raise AssertionError(f"not the latest rows in {timeout}s: wrong {missing}, deleted but live {extra}")


def replaced():
    t = catalog.load_table(f"default.{TOPIC}")
    return any(s.summary.operation.value == "replace" for s in t.metadata.snapshots), t


def live_files(t):
    return [task.file.file_path for task in t.scan().plan_files()]


version = 0
while True:
    version += 1
    assert version <= 40, "no compaction in 40 rounds"
    round_of(version)
    wait_for_latest()
    done, t = replaced()
    if done:
        break
    files_before = len(live_files(t))
# Rounds after the compaction: their deletes must find the rows where it moved them.
for _ in range(4):
    version += 1
    round_of(version)
    wait_for_latest()
t = catalog.load_table(f"default.{TOPIC}")
files_after = len(live_files(t))
assert files_after < files_before + 2 * 4, (files_before, files_after)
print(f"OK: compacted after {version - 4} rounds; {files_before} live data files before, {files_after} after")
