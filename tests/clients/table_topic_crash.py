"""The crash matrix's client: produces to a table topic and checks the table holds every
acknowledged record exactly once.

Usage:
  table_topic_crash.py create  BOOTSTRAP [compacting]
      creates the two topics below; with `compacting`, both compact every second
      (table.topic.compaction.interval.ms=1000) once ten rounds have landed
  table_topic_crash.py produce BOOTSTRAP REGISTRY_URL LEDGER FIRST_ID COUNT
      produces COUNT good records (ids FIRST_ID...) and one unframed record (a dead letter)
      to the 3-partition topic `crashy`, and appends each acknowledged record's
      "good|bad partition offset id" to LEDGER. From id 400 the records' schema adds an
      optional `tag`. Then COUNT updates to the upsert topic `crashy_kv` (keyed by `key`, 40
      keys, partitioned by bucket(key, 2); each update's `seq` is its id), as
      "kv partition offset key seq".
  table_topic_crash.py verify  ICEBERG_URI LEDGER
      waits until default.crashy and default.crashy_dlq hold every ledger record, then checks
      each (partition, offset) is there exactly once and nothing else is; and that
      default.crashy_kv holds one row per key, the key's last acknowledged update or one
      produced after it whose acknowledgement the crash lost.
"""

import json
import sys
import time

TOPIC = "crashy"
SCHEMA = json.dumps({"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"},
    {"name": "note", "type": "string"},
]})
# From id 400 on, records carry a new optional column: the rounds around it evolve the
# table's schema, and some of them crash.
SCHEMA_V2 = json.dumps({"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"},
    {"name": "note", "type": "string"},
    {"name": "tag", "type": ["null", "string"], "default": None},
]})
V2_FROM = 400
KV_TOPIC = "crashy_kv"
KV_SCHEMA = json.dumps({"type": "record", "name": "Update", "fields": [
    {"name": "key", "type": "long"},
    {"name": "seq", "type": "long"},
]})
KEYS = 40

action = sys.argv[1]

if action == "create":
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": sys.argv[2]})
    compacting = {"table.topic.compaction.interval.ms": "1000"} if sys.argv[3:] == ["compacting"] else {}
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1, config={
        "table.topic.enable": "true",
        "table.topic.commit.interval.ms": "1000",
        "table.topic.errors.tolerance": "all",
        **compacting,
    }), NewTopic(KV_TOPIC, num_partitions=3, replication_factor=1, config={
        "table.topic.enable": "true",
        "table.topic.commit.interval.ms": "1000",
        **compacting,
        "table.topic.id.columns": "[key]",
        "table.topic.upsert.enable": "true",
        "table.topic.partition.by": "[bucket(key, 2)]",
    })])
    for future in futures.values():
        future.result(30)
    print("OK")

elif action == "produce":
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    bootstrap, registry_url, ledger, first, count = sys.argv[2:7]
    first, count = int(first), int(count)
    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}),
                         SCHEMA_V2 if first >= V2_FROM else SCHEMA)
    # The node may die while we produce (a fail point fires): records not acknowledged by
    # then are "maybe" records, which may or may not be in the table, but never twice.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "message.timeout.ms": 10000})
    lines = []

    def on_delivery(kind, ident):
        def cb(err, msg):
            if err is None:
                lines.append(f"{kind} {msg.partition()} {msg.offset()} {ident}")
            else:
                lines.append(f"maybe-{kind} - - {ident}")
        return cb

    kv = AvroSerializer(SchemaRegistryClient({"url": registry_url}), KV_SCHEMA)
    try:
        # The first calls register the schemas with the node's registry; later ones use the
        # serializers' caches, so a node that dies while we produce does not fail them.
        ser({"id": 0, "note": ""}, SerializationContext(TOPIC, MessageField.VALUE))
        kv({"key": 0, "seq": 0}, SerializationContext(KV_TOPIC, MessageField.VALUE))
    except Exception as e:
        print(f"OK nothing produced: the node is down ({e})")
        sys.exit(0)
    for i in range(first, first + count):
        record = {"id": i, "note": f"n{i}"}
        if first >= V2_FROM:
            record["tag"] = f"t{i}"
        value = ser(record, SerializationContext(TOPIC, MessageField.VALUE))
        producer.produce(TOPIC, key=str(i).encode(), value=value,
                         on_delivery=on_delivery("good", i))
    bad = first + count
    producer.produce(TOPIC, key=b"bad", value=f"not a framed record {bad}".encode(),
                     partition=bad % 3, on_delivery=on_delivery("bad", bad))
    for i in range(first, first + count):
        key = i % KEYS
        value = kv({"key": key, "seq": i}, SerializationContext(KV_TOPIC, MessageField.VALUE))
        producer.produce(KV_TOPIC, key=str(key).encode(), value=value,
                         on_delivery=on_delivery("kv", f"{key} {i}"))
    producer.flush(60)
    assert len(lines) == 2 * count + 1, lines
    with open(ledger, "a") as f:
        f.write("".join(line + "\n" for line in lines))
    partial = sum(1 for line in lines if line.startswith("maybe"))
    print(f"OK {2 * count + 1 - partial} acknowledged, {partial} not")

elif action == "verify":
    from pyiceberg.catalog import load_catalog

    uri, ledger = sys.argv[2:4]
    good, bad = {}, {}  # acknowledged: (partition, offset) -> id
    maybe_good, maybe_bad = set(), set()  # ids
    kv_acked, kv_maybe = {}, {}  # key -> acknowledged seqs / unacknowledged seqs
    for line in open(ledger):
        kind, p, o, *rest = line.split()
        if kind in ("kv", "maybe-kv"):
            key, seq = int(rest[0]), int(rest[1])
            (kv_acked if kind == "kv" else kv_maybe).setdefault(key, set()).add(seq)
            continue
        ident = rest[0]
        if kind == "good":
            good[(int(p), int(o))] = int(ident)
        elif kind == "bad":
            bad[(int(p), int(o))] = int(ident)
        elif kind == "maybe-good":
            maybe_good.add(int(ident))
        else:
            maybe_bad.add(int(ident))
    catalog = load_catalog("inlet", type="rest", uri=uri)

    def rows(table, columns):
        return catalog.load_table(table).scan(selected_fields=columns).to_arrow().to_pylist()

    deadline = time.monotonic() + 120
    while True:
        try:
            main = rows("default.crashy", ("id", "_kafka"))
            dlq = rows("default.crashy_dlq", ("partition", "offset", "value"))
        except Exception:  # the tables may not exist yet
            main, dlq = [], []
        got = {}
        for r in main:
            got.setdefault((r["_kafka"]["partition"], r["_kafka"]["offset"]), []).append(r["id"])
        got_bad = {}
        for r in dlq:
            got_bad.setdefault((r["partition"], r["offset"]), []).append(r["value"])
        if set(got) >= set(good) and set(got_bad) >= set(bad):
            break
        assert time.monotonic() < deadline, (
            f"missing {len(set(good) - set(got))} good and {len(set(bad) - set(got_bad))} bad")
        time.sleep(0.5)
    # Exactly once: no position twice, no id twice, every acknowledged record with its id,
    # and nothing that was never produced.
    dup = {k: v for k, v in got.items() if len(v) > 1}
    assert not dup, f"duplicate rows: {dup}"
    ids = [v[0] for v in got.values()]
    assert len(ids) == len(set(ids)), "an id is in the table twice"
    for key, ident in good.items():
        assert got[key] == [ident], (key, got[key], ident)
    unknown = set(ids) - set(good.values()) - maybe_good
    assert not unknown, f"rows never produced: {unknown}"
    dup = {k: v for k, v in got_bad.items() if len(v) > 1}
    if dup:
        for name in ("default.crashy_dlq", "default.crashy"):
            for snap in catalog.load_table(name).snapshots():
                props = snap.summary.additional_properties if snap.summary else {}
                print(name, snap.snapshot_id, props.get("inlet.commit-id"),
                      props.get("inlet.offsets"), props.get("added-records"), file=sys.stderr)
    assert not dup, f"duplicate dead letters: {dup}"
    bad_ids = [int(v[0].decode().rsplit(" ", 1)[1]) for v in got_bad.values()]
    assert len(bad_ids) == len(set(bad_ids)), "a dead letter is there twice"
    for key, ident in bad.items():
        assert bad_ids[list(got_bad).index(key)] == ident, (key, ident)
    unknown = set(bad_ids) - set(bad.values()) - maybe_bad
    assert not unknown, f"dead letters never produced: {unknown}"
    maybe_in = len(set(ids) & maybe_good)
    # The schema change landed with its values, and older rows read it as null.
    tags = {r["id"]: r["tag"] for r in rows("default.crashy", ("id", "tag"))}
    for ident in good.values():
        batch_start = ident - ident % 51
        want = f"t{ident}" if batch_start >= V2_FROM else None
        assert tags[ident] == want, (ident, tags[ident], want)
    assert any(t is not None for t in tags.values()), "no record of the new schema landed"

    # The upsert table: one row per key, its last acknowledged update, or an update produced
    # after it whose acknowledgement was lost in a crash; never an older one (a lost update),
    # never two rows (a lost delete of the replaced row).
    def latest_ok(rows):
        by_key = {}
        for r in rows:
            by_key.setdefault(r["key"], []).append(r["seq"])
        for key, seqs in kv_acked.items():
            have = by_key.get(key, [])
            if len(have) != 1 or have[0] < max(seqs):
                return by_key, key
        return by_key, None

    deadline = time.monotonic() + 120
    while True:
        try:
            kv_rows = rows("default.crashy_kv", ("key", "seq"))
        except Exception:
            kv_rows = []
        by_key, waiting = latest_ok(kv_rows)
        if waiting is None:
            break
        # Two live rows for a key never go away by waiting.
        assert all(len(v) == 1 for v in by_key.values()), (
            f"keys with two live rows: {({k: v for k, v in by_key.items() if len(v) > 1})}")
        assert time.monotonic() < deadline, (
            f"key {waiting}: rows {by_key.get(waiting)}, last acknowledged {max(kv_acked[waiting])}")
        time.sleep(0.5)
    for key, (seq,) in by_key.items():
        last = max(kv_acked.get(key, {-1}))
        allowed = {last} | {s for s in kv_maybe.get(key, set()) if s > last}
        assert seq in allowed, f"key {key}: row seq {seq}, allowed {sorted(allowed)}"
    print(f"OK {len(got)} rows ({maybe_in} of {len(maybe_good)} unacknowledged), "
          f"{len(got_bad)} dead letters, {len(by_key)} upsert keys")
