"""Spark 3.5 maintains a live table topic's table while Inlet writes to it: exactly once across
Spark's rewrites, snapshot expiry, a column it adds, and a kill -9 of the node.

Usage: table_topic_spark_maintenance.py BOOTSTRAP REGISTRY_URL ICEBERG_URI first|restarted

first: creates a 3-partition table topic (1 s commits) and produces 300 Avro records
(ids 0..299) in six bursts, each waited for, so the table has many small files. Spark then,
through the node's REST catalog, adds a column (`ALTER TABLE ... ADD COLUMN note`) and, while
300 more records (300..599) are produced, runs `rewrite_data_files` and `rewrite_manifests`:
its commits race Inlet's rounds. Once Inlet's progress covers 600 records, Spark rewrites the
data files again and expires every snapshot but the newest, its own: no snapshot left in the
table carries Inlet's progress. The test then kills the node at once.

restarted: 50 more records (600..649); once Inlet's progress covers them, the table must hold
ids 0..649 exactly once (read by pyiceberg and by Spark, which must agree), every Kafka
(partition, offset) once, and Spark's column kept. Before the fix, a restart on a history whose
progress had been expired started every partition again from offset 0. Prints OK at the end;
raises on a mismatch.
"""

import json
import os
import sys
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyiceberg.catalog import load_catalog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_session  # noqa: E402
import table_wait  # noqa: E402
from table_wait import inlet_progress  # noqa: E402

bootstrap, registry_url, iceberg_uri, phase = sys.argv[1:5]
TOPIC = "clicks"
TABLE = f"default.{TOPIC}"
SCHEMA = json.dumps({"type": "record", "name": "Click", "namespace": "web", "fields": [
    {"name": "id", "type": "long"},
    {"name": "page", "type": "string"},
]})

catalog = load_catalog("inlet", type="rest", uri=iceberg_uri)


def produce(ids, pause=0.0):
    """Produces `ids` idempotently, in bursts of 25 with `pause` seconds between them."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
    failed = []
    for n, i in enumerate(ids):
        value = ser({"id": i, "page": f"/p/{i}"}, SerializationContext(TOPIC, MessageField.VALUE))
        producer.produce(TOPIC, key=str(i).encode(), value=value,
                         on_delivery=lambda err, _m: err and failed.append(err))
        if pause and n % 25 == 24:
            producer.flush(30)
            time.sleep(pause)  # pacing the load, not waiting for a condition
    assert producer.flush(30) == 0 and not failed, failed


def wait_for_progress(n, timeout=180):
    return table_wait.wait_for_progress(catalog, TOPIC, n, timeout)


def procedure(spark, sql, tries=3):
    """Runs a Spark procedure; a commit that conflicts with Inlet's own compaction (which
    replaces the same small files) fails on Spark's side and is run again, as a user would."""
    for attempt in range(tries):
        try:
            rows = [r.asDict() for r in spark.sql(sql).collect()]
            print(sql.split("(")[0].strip(), rows)
            return rows
        except Exception as e:  # pyspark wraps the JVM's exception
            if attempt == tries - 1:
                raise
            print(f"{sql.split('(')[0].strip()} failed, running it again: {str(e)[:300]}")


spark = spark_session.start(iceberg_uri, "inlet-spark-maintenance")
try:
    if phase == "first":
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1, config={
            "table.topic.enable": "true", "table.topic.commit.interval.ms": "1000"})])[TOPIC].result(30)
        for burst in range(6):
            produce(range(burst * 50, burst * 50 + 50))
            wait_for_progress(burst * 50 + 50)
        files = len(catalog.load_table(TABLE).inspect.files())
        assert files >= 6, f"only {files} data files: nothing for Spark to rewrite"

        spark.sql(f"ALTER TABLE inlet.{TABLE} ADD COLUMN note string")
        load = threading.Thread(target=produce, args=(range(300, 600), 0.2))
        load.start()
        rewritten = procedure(spark, f"CALL inlet.system.rewrite_data_files(table => '{TABLE}', "
                                     "options => map('rewrite-all', 'true'))")
        # Inlet's own compaction may have merged the small files first (Spark's first try
        # then conflicts with it and runs again): at least one file is Spark's rewrite.
        assert rewritten[0]["rewritten_data_files_count"] >= 1, rewritten
        procedure(spark, f"CALL inlet.system.rewrite_manifests('{TABLE}')")
        load.join()
        table = wait_for_progress(600)
        assert "note" in [f.name for f in table.schema().fields], "Inlet reverted Spark's column"

        # Spark's snapshot becomes the only one: Inlet's progress is in none of them.
        procedure(spark, f"CALL inlet.system.rewrite_data_files(table => '{TABLE}', "
                         "options => map('rewrite-all', 'true'))")
        now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + 1))
        spark.sql("SET spark.sql.session.timeZone = UTC")
        procedure(spark, f"CALL inlet.system.expire_snapshots(table => '{TABLE}', "
                         f"older_than => TIMESTAMP '{now}', retain_last => 1)")
        table = catalog.load_table(TABLE)
        assert len(table.metadata.snapshots) == 1, [s.summary for s in table.metadata.snapshots]
        assert inlet_progress(table) == 0, "a snapshot with Inlet's progress is left"
        assert len(table.scan().to_arrow()) == 600
        print("OK")
        sys.exit(0)

    produce(range(600, 650))
    table = wait_for_progress(650)
    rows = table.scan().to_arrow()
    ids = sorted(rows.column("id").to_pylist())
    assert ids == list(range(650)), f"{len(ids)} rows, {len(set(ids))} distinct: duplicates or losses"
    keys = {(k["partition"], k["offset"]) for k in rows.column("_kafka").to_pylist()}
    assert len(keys) == 650, "every Kafka record once"
    assert "note" in [f.name for f in table.schema().fields], "Inlet reverted Spark's column"
    theirs = sorted(r[0] for r in spark.sql(f"SELECT id FROM inlet.{TABLE}").collect())
    assert theirs == ids, f"Spark sees {len(theirs)} rows, pyiceberg {len(ids)}"
    print("OK")
finally:
    spark_session.stop(spark)
