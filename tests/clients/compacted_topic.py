"""Compacted topics (cleanup.policy=compact) with confluent-kafka (librdkafka).

Usage: compacted_topic.py BOOTSTRAP PHASE [MIN_COMPACTION_LAG_MS]

PHASE is
- `run`: the configs (DescribeConfigs reports the policy; IncrementalAlterConfigs APPEND and
  SUBTRACT treat cleanup.policy as Kafka's comma list; a table topic may not be compacted,
  with the reason), a record without a key refused, then `fill` and `check`, and the
  tombstones gone after delete.retention.ms;
- `again` (after `run`): a second generation of half the live keys (and tombstones for five),
  compacted again over the compacted part;
- `fill`: 50 keys written 20 times each, then tombstones for 10 of them, all acknowledged at
  the offsets the test expects;
- `check`: a consumer from offset 0 sees every key's latest value at the offset it was
  written at, and, once the node has compacted, nothing else: exactly one record per key
  (the tombstones too, unless delete.retention.ms passed before the compaction).

- `transactions`: a compacted topic written by a transactional producer (Kafka Streams'
  exactly-once changelogs are): a committed transaction, an aborted one over the same keys,
  and a committed one over half of them. Once compacted, a `read_uncommitted` consumer from
  offset 0 sees only the committed latest value of every key (the aborted records are gone,
  not just hidden), and a `read_committed` one the same.

The node under test runs with a short upload interval and `log.cleaner.backoff.ms=500`.
Prints OK at the end; exits non-zero on a mismatch.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic)

bootstrap, phase = sys.argv[1], sys.argv[2]
# The topic's min.compaction.lag.ms (default 0): a test that must see compaction start only
# after `fill` has finished sets it.
lag_ms = sys.argv[3] if len(sys.argv) > 3 else "0"
TOPIC = "customers"
KEYS, ROUNDS, DELETED = 50, 20, 10
admin = AdminClient({"bootstrap.servers": bootstrap})


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def topic_config(topic, name):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(30)[name].value


def offset_of(n, k):
    """Where round `n`'s record of key `k` lands (one partition, written in order)."""
    return n * KEYS + k


def tombstone_offset(k):
    return ROUNDS * KEYS + k


def fill():
    new = NewTopic(TOPIC, 1, 1, config={"cleanup.policy": "compact",
                                        "min.cleanable.dirty.ratio": "0.01",
                                        "delete.retention.ms": "4000",
                                        "min.compaction.lag.ms": lag_ms})
    admin.create_topics([new])[TOPIC].result(30)
    acked = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def report(err, msg):
        if err is not None:
            check(False, f"delivery of {msg.key()}: {err}")
        acked[(msg.key().decode(), msg.value())] = msg.offset()

    for n in range(ROUNDS):
        for k in range(KEYS):
            producer.produce(TOPIC, key=f"k{k}", value=f"v{k}-{n}", on_delivery=report)
        check(producer.flush(30) == 0, f"round {n} acknowledged")
    for k in range(DELETED):
        producer.produce(TOPIC, key=f"k{k}", value=None, on_delivery=report)
    check(producer.flush(30) == 0, "tombstones acknowledged")
    wrong = [(key, off) for key, off in acked.items()
             if off != (tombstone_offset(int(key[0][1:])) if key[1] is None
                        else offset_of(int(key[1].decode().split("-")[1]), int(key[0][1:])))]
    check(not wrong and len(acked) == KEYS * ROUNDS + DELETED,
          f"{len(acked)} records acknowledged at the expected offsets")


def read_all(topic=TOPIC, isolation="read_committed"):
    """Every record of `topic` from offset 0 to the end: (offset, key, value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"compacted-{time.time()}",
                  "enable.partition.eof": True, "enable.auto.commit": False,
                  "isolation.level": isolation})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 30
    while time.time() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            continue
        got.append((m.offset(), m.key().decode(), m.value()))
    c.close()
    return got


def latest_expected(tombstones):
    want = {}
    for k in range(KEYS):
        if k < DELETED:
            if tombstones:
                want[f"k{k}"] = (tombstone_offset(k), None)
        else:
            want[f"k{k}"] = (offset_of(ROUNDS - 1, k), f"v{k}-{ROUNDS - 1}".encode())
    return want


def check_compacted(tombstones):
    """Waits until the topic holds exactly one record per key (and the tombstones; with
    `tombstones` None, with or without them, as delete.retention.ms may have passed by the
    time the node compacts); meanwhile every read must show each key's latest record at its
    offset, or, for a deleted key, nothing."""
    wants = [latest_expected(t) for t in ([True, False] if tombstones is None else [tombstones])]
    deadline = time.time() + 90
    while True:
        got = read_all()
        offsets = [off for off, _, _ in got]
        if offsets != sorted(set(offsets)):
            check(False, f"offsets rise: {offsets[:20]}")
        latest = {key: (off, value) for off, key, value in got}
        for key, (off, value) in latest_expected(True).items():
            if value is None:
                if key in latest and latest[key] != (off, None):
                    check(False, f"deleted key {key}: {latest[key]}")
            elif latest.get(key) != (off, value):
                check(False, f"key {key}'s latest record at {off}: {latest.get(key)}")
        if any(latest == want and len(got) == len(want) for want in wants):
            check(True, f"compacted: {len(got)} records, one per key, at their offsets")
            return
        if time.time() > deadline:
            check(False, f"not compacted in time: {len(got)} records, want {[len(w) for w in wants]}")
        time.sleep(0.5)


def second_generation():
    """After the topic was compacted: half the live keys once more, then tombstones for five
    of them. A pass now maps only what is new (the compacted part holds one record per key): it
    must remove the compacted part's records of the keys written again, and keep those of the
    keys that were not (which its map does not hold)."""
    acked = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def report(err, msg):
        if err is not None:
            check(False, f"delivery of {msg.key()}: {err}")
        acked[msg.key().decode()] = (msg.offset(), msg.value())

    again = range(DELETED, (DELETED + KEYS) // 2)
    for k in again:
        producer.produce(TOPIC, key=f"k{k}", value=f"w{k}", on_delivery=report)
    for k in range(DELETED, DELETED + 5):
        producer.produce(TOPIC, key=f"k{k}", value=None, on_delivery=report)
    check(producer.flush(30) == 0, "the second generation acknowledged")
    # The keys not written again keep their compacted record (the map does not hold them).
    kept = {f"k{k}": (offset_of(ROUNDS - 1, k), f"v{k}-{ROUNDS - 1}".encode())
            for k in range((DELETED + KEYS) // 2, KEYS)}
    with_tombstones = {**kept, **acked}
    without = {k: v for k, v in with_tombstones.items() if v[1] is not None}
    deadline = time.time() + 90
    while True:
        got = read_all()
        latest = {key: (off, value) for off, key, value in got}
        for key, (off, value) in without.items():
            if latest.get(key) != (off, value):
                check(False, f"key {key}'s latest record at {off}: {latest.get(key)}")
        if any(latest == want and len(got) == len(want) for want in [with_tombstones, without]):
            check(True, f"compacted again: {len(got)} records, one per key, at their offsets")
            return
        if time.time() > deadline:
            check(False, f"not compacted again in time: {len(got)} records: {got[:10]}")
        time.sleep(0.5)


if phase == "run":
    fill()
    check(topic_config(TOPIC, "cleanup.policy") == "compact", "DescribeConfigs reports compact")
    # A record without a key is refused, as Kafka refuses it.
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "retries": 0})
    p.produce(TOPIC, value=b"keyless", on_delivery=lambda err, _m: errors.append(err))
    p.flush(30)
    check(errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD,
          f"a record without a key is refused: {errors}")
    # cleanup.policy is a list: APPEND and SUBTRACT work on its items.
    admin.create_topics([NewTopic("policies", 1, 1)])["policies"].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, "policies", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([res])[res].result(30)
    check(topic_config("policies", "cleanup.policy") == "delete,compact", "APPEND compact")
    res = ConfigResource(ConfigResource.Type.TOPIC, "policies", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete",
                    incremental_operation=AlterConfigOpType.SUBTRACT)])
    admin.incremental_alter_configs([res])[res].result(30)
    check(topic_config("policies", "cleanup.policy") == "compact", "SUBTRACT delete")
    # A table topic may not be compacted.
    try:
        admin.create_topics([NewTopic("table_compacted", 1, 1, config={
            "table.topic.enable": "true", "cleanup.policy": "compact"})])["table_compacted"].result(30)
        check(False, "a compacted table topic is refused")
    except Exception as e:  # noqa: BLE001 - the admin client's KafkaException
        check("cannot be compacted" in str(e), f"a compacted table topic is refused: {e}")
    check_compacted(tombstones=True)
    # The tombstones go once delete.retention.ms has passed.
    check_compacted(tombstones=False)
elif phase == "again":
    second_generation()
elif phase == "transactions":
    topic = "changelog"
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "changelog-writer"})
    p.init_transactions(30)
    for values, keys, commit in [("v1", range(10), True), ("aborted", range(10), False),
                                 ("v3", range(5), True)]:
        p.begin_transaction()
        for k in keys:
            p.produce(topic, key=f"k{k}".encode(), value=values.encode())
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    want = {f"k{k}": ("v3" if k < 5 else "v1") for k in range(10)}

    def read(isolation):
        return [(k, v.decode()) for _, k, v in read_all(topic, isolation)]

    deadline = time.time() + 60
    got = read("read_uncommitted")
    while len(got) != len(want) and time.time() < deadline:
        time.sleep(0.5)
        got = read("read_uncommitted")
    check(dict(got) == want and len(got) == len(want),
          f"compacted: read_uncommitted sees the committed latest value of each key: {got}")
    got = read("read_committed")
    check(dict(got) == want and len(got) == len(want), f"read_committed the same: {got}")
elif phase == "fill":
    fill()
elif phase == "check":
    check_compacted(tombstones=None)
else:
    sys.exit(f"unknown phase {phase}")
print("OK", flush=True)
