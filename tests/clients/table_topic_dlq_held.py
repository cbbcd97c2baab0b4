"""A dead-letter table that refuses Inlet's commits holds its table back once the node's bound
of carried dead-letter files is reached, and nothing is lost when it is mended.

Usage: table_topic_dlq_held.py BOOTSTRAP REGISTRY_URL ICEBERG_URI run
(the node runs with `[tables] dead_letter_pending_files = 3`)

A tolerant table topic gets one good and one unframed record: a row and a dead letter. Then
pyiceberg drops the dead-letter table's `error` column, so Inlet's dead-letter rounds are
refused. Each of the next rounds gets one good and one unframed record (the script waits for
each good one to be a row, so every dead letter is a round, and a file, of its own). At three
carried files `/v1/tables` shows the table held, and records produced then do not become rows.
pyiceberg then drops the broken dead-letter table: Inlet makes a new one, every carried dead
letter lands in it, and the held records become rows. Prints OK at the end; raises on a
mismatch.
"""

import json
import time
import urllib.request

from confluent_kafka import Producer
from inlet_clients import create_table_topic, id_schema, produce_ids, run_phase_args, table_topic_clients
from table_wait import wait_for_rows

bootstrap, registry_url, iceberg_uri = run_phase_args()
TOPIC = "held"
STATUS = iceberg_uri.rsplit("/iceberg", 1)[0] + f"/v1/tables/default/{TOPIC}"
catalog, admin, ser = table_topic_clients(bootstrap, registry_url, iceberg_uri, id_schema("H", "held"))
create_table_topic(admin, TOPIC, 1, {"table.topic.errors.tolerance": "all"})
producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})


def produce(good, bad=True):
    produce_ids(producer, ser, TOPIC, good, bad=bad)


def status():
    with urllib.request.urlopen(STATUS, timeout=10) as r:
        return json.load(r)


def wait_for(what, ok, timeout=60):
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        seen = status()
        if ok(seen):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout}s; last status: {seen}")


produce([0])
wait_for_rows(catalog, TOPIC, 1)
wait_for_rows(catalog, f"{TOPIC}_dlq", 1)
with catalog.load_table(f"default.{TOPIC}_dlq").update_schema() as update:
    update.delete_column("error")

# One good and one bad record per round, three rounds: three carried dead-letter files.
for good in (1, 2, 3):
    produce([good])
    wait_for_rows(catalog, TOPIC, good + 1)
    wait_for("the dead-letter round to be refused", lambda s: s["pending_dead_letter_files"] == good)
held = wait_for("the table to be held", lambda s: s["held_by_dead_letters"])
assert held["pending_dead_letter_files"] == 3, held
rows_when_held = 4  # ids 0..3

# While held, records stay in the stream and do not become rows: three more ticks retry the
# dead-letter commit (each a failed commit) and build no round.
produce(range(100, 105), bad=False)
failed = held["failed_commits"]
wait_for("three more dead-letter retries", lambda s: s["failed_commits"] >= failed + 3)
t = catalog.load_table(f"default.{TOPIC}")
assert len(t.scan().to_arrow()) == rows_when_held, "a held table committed a round"
assert status()["held_by_dead_letters"], status()

# Mended: the broken dead-letter table goes, Inlet makes a new one with every carried letter.
catalog.drop_table(f"default.{TOPIC}_dlq")
ids = sorted(wait_for_rows(catalog, TOPIC, rows_when_held + 5).column("id").to_pylist())
assert ids == list(range(rows_when_held)) + list(range(100, 105)), ids
letters = wait_for_rows(catalog, f"{TOPIC}_dlq", 3)
assert all(v == b"not framed" for v in letters.column("value").to_pylist()), letters
s = wait_for("the hold to end", lambda s: not s["held_by_dead_letters"])
assert s["pending_dead_letter_files"] == 0, s
print("OK")
