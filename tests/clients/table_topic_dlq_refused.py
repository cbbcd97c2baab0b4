"""A dead-letter table that refuses Inlet's commits does not stop the main table.

Usage: table_topic_dlq_refused.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run

A tolerant table topic (errors.tolerance=all) gets 5 Avro records and one unframed record:
5 rows, 1 dead letter. Then pyiceberg, as another writer, drops the dead-letter table's
`error` column, so Inlet's dead-letter rounds no longer fit it and are refused. 5 more
records and another unframed one are produced: the main table must still get its 10 rows.
Before the fix, the failing dead-letter commit was retried before the main round at every
tick, and the main table stopped. Prints OK at the end; raises on a mismatch.
"""

from confluent_kafka import Producer
from inlet_clients import create_table_topic, id_schema, produce_ids, run_phase_args, table_topic_clients
from table_wait import wait_for_rows

bootstrap, registry_url, iceberg_uri = run_phase_args()
TOPIC = "lenient"
catalog, admin, ser = table_topic_clients(bootstrap, registry_url, iceberg_uri, id_schema("L", "lenient"))
create_table_topic(admin, TOPIC, 1, {"table.topic.errors.tolerance": "all"})


def produce(ids):
    produce_ids(Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}), ser, TOPIC, ids, bad=True)


produce(range(5))
wait_for_rows(catalog, TOPIC, 5)
wait_for_rows(catalog, f"{TOPIC}_dlq", 1)
dlq = catalog.load_table(f"default.{TOPIC}_dlq")
with dlq.update_schema() as update:
    update.delete_column("error")

produce(range(5, 10))
ids = sorted(wait_for_rows(catalog, TOPIC, 10).column("id").to_pylist())
assert ids == list(range(10)), ids
print("OK")
