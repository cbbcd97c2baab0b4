#!/usr/bin/env python3
"""Inlet's Kafka endpoint with Python's confluent-kafka as an independent client.

Usage: confluent_kafka_roundtrip.py [BOOTSTRAP]   (or INLET_KAFKA_BOOTSTRAP=host:port)

Covers: AdminClient topic creation with table configs, DescribeConfigs, IncrementalAlterConfigs
(SET, DELETE, APPEND), metadata; idempotent acks=all producers with every codec; a group consumer
with manual commits that reads everything exactly once, and a second member of the same group that
resumes at the committed position; the group admin calls; DeleteRecords and the new low
watermark; OffsetsForTimes on records with explicit timestamps, also after DeleteRecords.

Every step prints what it checked; any mismatch exits with status 1 and a message naming it.
Meant to be run on a fresh node (the topic and group names are fixed).
"""

import os
import sys
import time
import traceback

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka import libversion
from confluent_kafka import version as client_version
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

TIMEOUT = 30.0
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 200


class Mismatch(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Mismatch(what)


def log(msg):
    print(msg, flush=True)


def bootstrap():
    if len(sys.argv) > 1:
        return sys.argv[1]
    value = os.environ.get("INLET_KAFKA_BOOTSTRAP")
    if not value:
        sys.exit("usage: confluent_kafka_roundtrip.py BOOTSTRAP (or set INLET_KAFKA_BOOTSTRAP)")
    return value


def result(future, what):
    try:
        return future.result(timeout=TIMEOUT)
    except KafkaException as e:
        raise Mismatch(f"{what}: failed with {e.args[0]}") from e


def expect_refused(future, code, what):
    """`future` must fail with the Kafka error `code` (the name of a KafkaError code)."""
    try:
        future.result(timeout=TIMEOUT)
    except KafkaException as e:
        check(e.args[0].code() == getattr(KafkaError, code), f"{what}: expected {code}, got {e.args[0]}")
        return
    raise Mismatch(f"{what} succeeded; expected {code}")


def parse_list(value):
    inner = (value or "").strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    return [item.strip() for item in inner.split(",") if item.strip()]


def common_config(servers):
    return {"bootstrap.servers": servers, "broker.address.family": "v4"}


# ---------------------------------------------------------------------------------------------
# Admin: topics and configs
# ---------------------------------------------------------------------------------------------


def describe_topic(admin, topic):
    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = admin.describe_configs([resource], request_timeout=TIMEOUT)
    return result(futures[resource], f"describe_configs({topic})")


def incremental(admin, topic, name, value, op):
    """One incremental change (`op`, an AlterConfigOpType) of the config `name` of `topic`;
    returns the topic's configs after it."""
    entry = ConfigEntry(name, value, incremental_operation=op)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    futures = admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)
    result(futures[resource], f"incremental_alter_configs {op.name} {name}")
    return describe_topic(admin, topic)


def admin_topics_and_configs(admin, servers):
    topic = "py-table"
    created = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=3,
                replication_factor=1,
                config={"table.topic.enable": "true", "table.topic.id.columns": "[id]"},
            )
        ],
        request_timeout=TIMEOUT,
    )
    result(created[topic], f"create_topics({topic})")
    log(f"created {topic} with 3 partitions")

    again = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    expect_refused(again[topic], "TOPIC_ALREADY_EXISTS", f"creating {topic} a second time")
    log("a second create_topics is refused with TOPIC_ALREADY_EXISTS")

    configs = describe_topic(admin, topic)
    enable = configs.get("table.topic.enable")
    check(enable is not None, f"describe_configs: table.topic.enable missing: {sorted(configs)}")
    check(enable.value == "true", f"table.topic.enable = {enable.value!r}, expected 'true'")
    check(not enable.is_default, "table.topic.enable was set at creation but is reported as default")
    check("retention.ms" in configs, f"describe_configs: retention.ms missing: {sorted(configs)}")
    default_retention = configs["retention.ms"].value
    check(configs["retention.ms"].is_default, "retention.ms was never set but is not the default")
    log(f"describe_configs: table.topic.enable=true, retention.ms default {default_retention!r}")

    configs = incremental(admin, topic, "retention.ms", "3600000", AlterConfigOpType.SET)
    check(
        configs["retention.ms"].value == "3600000",
        f"after SET retention.ms=3600000 describe says {configs['retention.ms'].value!r}",
    )
    check(not configs["retention.ms"].is_default, "retention.ms after SET is reported as default")
    check(
        configs["table.topic.enable"].value == "true",
        "an incremental SET of retention.ms changed table.topic.enable",
    )
    log("incremental SET retention.ms=3600000 took effect; other configs kept")

    configs = incremental(admin, topic, "retention.ms", None, AlterConfigOpType.DELETE)
    check(configs["retention.ms"].is_default, "retention.ms after DELETE is not the default")
    check(
        configs["retention.ms"].value == default_retention,
        f"retention.ms after DELETE is {configs['retention.ms'].value!r}, "
        f"expected the default {default_retention!r}",
    )
    log("incremental DELETE retention.ms restored the default")

    configs = incremental(admin, topic, "table.topic.id.columns", "tenant", AlterConfigOpType.APPEND)
    ids = parse_list(configs["table.topic.id.columns"].value)
    check(
        ids == ["id", "tenant"],
        f"table.topic.id.columns after APPEND tenant is {configs['table.topic.id.columns'].value!r}, "
        "expected the list [id, tenant]",
    )
    log(f"incremental APPEND table.topic.id.columns -> {configs['table.topic.id.columns'].value}")

    # APPEND on a config that is not a list is INVALID_CONFIG in Kafka.
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    expect_refused(admin.incremental_alter_configs([resource])[resource], "INVALID_CONFIG",
                   "APPEND to retention.ms (not a list)")
    log("APPEND to a non-list config is refused with INVALID_CONFIG")

    md = admin.list_topics(topic=topic, timeout=TIMEOUT)
    check(topic in md.topics, f"list_topics: {topic} missing ({sorted(md.topics)})")
    t = md.topics[topic]
    check(t.error is None, f"list_topics: {topic} has error {t.error}")
    check(sorted(t.partitions) == [0, 1, 2], f"list_topics: partitions {sorted(t.partitions)}")
    check(len(md.brokers) >= 1, "list_topics: no brokers")
    brokers = {f"{b.host}:{b.port}": b.id for b in md.brokers.values()}
    check(servers in brokers, f"list_topics: brokers {sorted(brokers)} do not include {servers}")
    for p in t.partitions.values():
        check(p.error is None, f"list_topics: partition {p.id} has error {p.error}")
        check(p.leader in md.brokers, f"list_topics: partition {p.id} leader {p.leader} unknown")
        check(p.leader in p.replicas and p.leader in p.isrs, f"list_topics: partition {p.id} {p}")
    log(f"list_topics: {topic} has partitions 0..2 led by {sorted(md.brokers)}; brokers {brokers}")


def admin_whole_cluster(admin, servers):
    """The calls a librdkafka 2.16 tool makes first: whole-cluster metadata (librdkafka sends
    bytes after the Metadata v12 body, which Kafka ignores), DescribeCluster, ListGroups, broker
    DescribeConfigs and the legacy AlterConfigs."""
    futures = admin.create_topics([NewTopic("py-admin", num_partitions=1)], request_timeout=TIMEOUT)
    result(futures["py-admin"], "create_topics(py-admin)")
    md = admin.list_topics(timeout=TIMEOUT)
    check(len(md.brokers) >= 1, "list_topics(): no brokers")
    check(md.cluster_id, f"list_topics(): no cluster id ({md.cluster_id!r})")
    check(
        "py-admin" in md.topics,
        f"list_topics(): py-admin missing ({sorted(md.topics)})",
    )
    log(f"list_topics() with no topic: {len(md.topics)} topics, cluster {md.cluster_id}")

    cluster = result(admin.describe_cluster(request_timeout=TIMEOUT), "describe_cluster")
    check(cluster.cluster_id == md.cluster_id, f"describe_cluster: id {cluster.cluster_id}")
    nodes = {f"{n.host}:{n.port}" for n in cluster.nodes}
    check(servers in nodes, f"describe_cluster: nodes {sorted(nodes)} do not include {servers}")
    check(cluster.controller is not None, "describe_cluster: no controller")
    log(f"describe_cluster: {sorted(nodes)}, controller {cluster.controller.id}")

    listed = result(admin.list_consumer_groups(request_timeout=TIMEOUT), "list_consumer_groups")
    check(not listed.errors, f"list_consumer_groups: errors {listed.errors}")
    log(f"list_consumer_groups on a fresh node: {len(listed.valid)} groups")

    broker = ConfigResource(ResourceType.BROKER, str(cluster.nodes[0].id))
    configs = result(admin.describe_configs([broker], request_timeout=TIMEOUT)[broker], "broker configs")
    for name in ["message.max.bytes", "fetch.max.bytes", "connections.max.idle.ms"]:
        check(name in configs, f"describe_configs(broker): {name} missing ({sorted(configs)})")
    log(f"describe_configs(broker): {len(configs)} configs, fetch.max.bytes={configs['fetch.max.bytes'].value}")

    # The legacy (non-incremental) AlterConfigs replaces a topic's whole set of configs.
    resource = ConfigResource(
        ResourceType.TOPIC, "py-admin", set_config={"retention.ms": "3600000"}
    )
    result(admin.alter_configs([resource], request_timeout=TIMEOUT)[resource], "alter_configs")
    configs = describe_topic(admin, "py-admin")
    check(
        configs["retention.ms"].value == "3600000",
        f"alter_configs: retention.ms is {configs['retention.ms'].value}",
    )
    log("alter_configs (legacy) set retention.ms=3600000")

    # Every value DescribeConfigs reports is accepted back, defaults included, for a plain
    # topic and a table topic: tools that copy a topic's configs (or re-apply them) send them.
    for topic, extra in [("py-copy", {}), ("py-copy-table", {"table.topic.enable": "true"})]:
        futures = admin.create_topics([NewTopic(topic, num_partitions=1, config=extra)],
                                      request_timeout=TIMEOUT)
        result(futures[topic], f"create_topics({topic})")
        described = describe_topic(admin, topic)
        everything = {name: c.value for name, c in described.items()
                      if c.value is not None and not c.is_read_only}
        check(len(everything) > 20, f"{topic}: only {sorted(everything)}")
        resource = ConfigResource(ResourceType.TOPIC, topic, set_config=everything)
        result(admin.alter_configs([resource], request_timeout=TIMEOUT)[resource],
               f"alter_configs({topic}) with every described value")
        again = describe_topic(admin, topic)
        changed = {n: (v, again[n].value) for n, v in everything.items() if again[n].value != v}
        check(not changed, f"{topic}: values changed by setting them back: {changed}")
        log(f"alter_configs({topic}) took back all {len(everything)} described values")


# ---------------------------------------------------------------------------------------------
# Produce with every codec
# ---------------------------------------------------------------------------------------------


def create_topic(admin, topic, partitions):
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)], request_timeout=TIMEOUT
    )
    result(futures[topic], f"create_topics({topic})")


def produce(servers, topic, codec, records, linger_ms=5):
    """Produces (key, value[, partition, timestamp]) tuples; returns {(partition, offset)}."""
    p = Producer(
        {
            **common_config(servers),
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": linger_ms,
        }
    )
    errors = []
    acked = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(f"{msg.key()!r}: {err}")
        else:
            acked.append((msg.partition(), msg.offset(), msg.value().decode()))

    for record in records:
        key, value = record[0], record[1]
        extra = {}
        if len(record) > 2:
            extra["partition"] = record[2]
        if len(record) > 3:
            extra["timestamp"] = record[3]
        while True:
            try:
                p.produce(topic, value=value, key=key, on_delivery=on_delivery, **extra)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(TIMEOUT)
    check(left == 0, f"{codec}: {left} records not delivered within {TIMEOUT} s")
    check(not errors, f"{codec}: delivery errors: {errors[:5]}")
    check(len(acked) == len(records), f"{codec}: {len(acked)} acks for {len(records)} records")
    positions = {(pt, off) for pt, off, _ in acked}
    check(len(positions) == len(acked), f"{codec}: two records acked at the same offset")
    check(all(off >= 0 for _, off, _ in acked), f"{codec}: an ack without an offset")
    return positions


def consumer(servers, group, **extra):
    config = {
        **common_config(servers),
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 500,
    }
    config.update(extra)
    return Consumer(config)


def poll_until(c, what, done, seconds=60):
    """Polls c, collecting messages, until done(messages) holds; fails after `seconds`."""
    out = []
    deadline = time.monotonic() + seconds
    while not done(out):
        if time.monotonic() > deadline:
            raise Mismatch(f"timed out after {seconds} s waiting for {what}; got {len(out)} records")
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise Mismatch(f"{what}: consumer error {m.error()}")
        out.append(m)
    return out


def poll_nothing(c, what, seconds=2.0):
    """Checks that nothing arrives for `seconds` (a wait for the absence of records)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            raise Mismatch(
                f"{what}: unexpected record {m.topic()}[{m.partition()}]@{m.offset()} {m.value()!r}"
            )


def high_watermarks(c, topic, partitions):
    return {
        p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1]
        for p in range(partitions)
    }


def produce_and_consume_in_a_group(admin, servers):
    topic, group = "py-data", "py-group"
    create_topic(admin, topic, 3)
    expected = set()
    for codec in CODECS:
        records = [(f"{codec}-k-{i}", f"{codec}-v-{i}") for i in range(PER_CODEC)]
        produce(servers, topic, codec, records)
        expected.update(v for _, v in records)
        log(f"produced {PER_CODEC} records with compression {codec} (idempotent, acks=all)")

    c = consumer(servers, group)
    c.subscribe([topic])
    msgs = poll_until(c, "every produced record", lambda out: len(out) >= len(expected))
    poll_nothing(c, "after reading every record once")
    values = [m.value().decode() for m in msgs]
    check(len(values) == len(expected), f"read {len(values)} records, produced {len(expected)}")
    check(set(values) == expected, f"read values differ: missing {sorted(expected - set(values))[:5]}, "
          f"unexpected {sorted(set(values) - expected)[:5]}")
    for m in msgs:
        codec = m.value().decode().split("-v-")[0]
        check(m.key().decode().startswith(f"{codec}-k-"), f"key {m.key()!r} for value {m.value()!r}")
    log(f"group consumer read all {len(values)} records exactly once")

    c.commit(asynchronous=False)
    highs = high_watermarks(c, topic, 3)
    check(sum(highs.values()) == len(expected), f"high watermarks {highs} != {len(expected)} records")
    committed = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=TIMEOUT)
    got = {tp.partition: tp.offset for tp in committed}
    check(got == highs, f"committed offsets {got}, expected the high watermarks {highs}")
    log(f"committed {got}")
    c.close()

    new = [(f"new-k-{i}", f"new-v-{i}") for i in range(10)]
    produce(servers, topic, "lz4", new)
    c = consumer(servers, group)
    c.subscribe([topic])
    msgs = poll_until(c, "the records produced after the commit", lambda out: len(out) >= len(new))
    poll_nothing(c, "second member after the new records")
    values = sorted(m.value().decode() for m in msgs)
    check(values == sorted(v for _, v in new), f"second member read {values[:12]}, expected only the 10 new ones")
    log("a second consumer in the group resumed at the committed position (only the 10 new records)")
    c.commit(asynchronous=False)
    c.close()

    total = len(expected) + len(new)

    # Group admin calls.
    listed = result(admin.list_consumer_groups(request_timeout=TIMEOUT), "list_consumer_groups")
    ids = [g.group_id for g in listed.valid]
    check(group in ids, f"list_consumer_groups: {group} not in {ids} (errors {listed.errors})")
    described = result(
        admin.describe_consumer_groups([group], request_timeout=TIMEOUT)[group], "describe_consumer_groups"
    )
    check(described.group_id == group, f"describe_consumer_groups: group_id {described.group_id}")
    check(len(described.members) == 0, f"describe_consumer_groups: members after close {described.members}")
    check(
        described.state == ConsumerGroupState.EMPTY,
        f"describe_consumer_groups: state {described.state} after every member left, expected EMPTY",
    )
    log(f"list/describe_consumer_groups: {group} state {described.state}, no members")
    offsets = result(
        admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group],
        "list_consumer_group_offsets",
    )
    check(offsets.group_id == group, f"list_consumer_group_offsets: group {offsets.group_id}")
    got = {tp.partition: tp.offset for tp in offsets.topic_partitions if tp.topic == topic}
    check(len(got) == 3, f"list_consumer_group_offsets: partitions {got}")
    check(sum(got.values()) == total, f"list_consumer_group_offsets: {got} do not add up to {total}")
    for tp in offsets.topic_partitions:
        check(tp.error is None, f"list_consumer_group_offsets: {tp} has error {tp.error}")
    log(f"list_consumer_group_offsets: {got}")
    return topic, got


# ---------------------------------------------------------------------------------------------
# DeleteRecords
# ---------------------------------------------------------------------------------------------


def delete_records(admin, servers, topic, ends):
    partition = max(ends, key=lambda p: ends[p])
    end = ends[partition]
    cut = end // 2
    check(cut > 0, f"partition {partition} of {topic} is too small ({end}) for delete_records")
    tp = TopicPartition(topic, partition, cut)
    futures = admin.delete_records([tp], request_timeout=TIMEOUT)
    (future,) = futures.values()
    deleted = result(future, f"delete_records({topic}[{partition}] before {cut})")
    check(deleted.low_watermark == cut, f"delete_records: low watermark {deleted.low_watermark}, expected {cut}")
    log(f"delete_records: {topic}[{partition}] now starts at {cut}")

    c = consumer(servers, "py-after-delete")
    low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT)
    check((low, high) == (cut, end), f"watermarks after delete_records ({low}, {high}), expected ({cut}, {end})")
    c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    msgs = poll_until(c, "records after the new low watermark", lambda out: len(out) >= end - cut)
    check(msgs[0].offset() == cut, f"a consumer from the beginning starts at {msgs[0].offset()}, expected {cut}")
    offsets = [m.offset() for m in msgs]
    check(offsets == list(range(cut, end)), f"offsets after delete_records: {offsets[:5]}..{offsets[-5:]}")
    c.close()
    log(f"a consumer from the beginning reads {cut}..{end - 1}")

    # Deleting below the low watermark is a no-op; beyond the high watermark is OFFSET_OUT_OF_RANGE.
    futures = admin.delete_records([TopicPartition(topic, partition, end + 100)])
    (future,) = futures.values()
    expect_refused(future, "OFFSET_OUT_OF_RANGE", "delete_records beyond the high watermark")
    log("delete_records beyond the high watermark is refused with OFFSET_OUT_OF_RANGE")


# ---------------------------------------------------------------------------------------------
# OffsetsForTimes
# ---------------------------------------------------------------------------------------------


def offsets_for_times(admin, servers):
    topic = "py-times"
    create_topic(admin, topic, 2)
    base = (int(time.time()) - 3600) * 1000
    records = [(f"t-{i}", f"t-{i}", 0, base + i * 1000) for i in range(20)]
    produce(servers, topic, "zstd", records)
    c = consumer(servers, "py-times-reader")
    queries = [
        (base, 0),  # the first record's exact timestamp
        (base + 7000, 7),  # an exact timestamp in the middle
        (base + 9500, 10),  # between two records: the next one
        (base - 60_000, 0),  # before everything: the first
        (base + 30_000, -1),  # after everything: no offset
    ]
    for ts, want in queries:
        (got,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=TIMEOUT)
        check(got.error is None, f"offsets_for_times({ts}): error {got.error}")
        check(got.offset == want, f"offsets_for_times(base{ts - base:+d} ms) = {got.offset}, expected {want}")
    (empty,) = c.offsets_for_times([TopicPartition(topic, 1, base)], timeout=TIMEOUT)
    check(empty.offset == -1, f"offsets_for_times on an empty partition = {empty.offset}, expected -1")
    log("offsets_for_times finds the first record at or after each timestamp")

    (start,) = c.offsets_for_times([TopicPartition(topic, 0, base + 12_000)], timeout=TIMEOUT)
    c.assign([start])
    msgs = poll_until(c, "records from the offsets_for_times position", lambda out: len(out) >= 8)
    got = [(m.offset(), m.timestamp()[1], m.value().decode()) for m in msgs]
    want = [(i, base + i * 1000, f"t-{i}") for i in range(12, 20)]
    check(got == want, f"records from offset {start.offset}: {got}, expected {want}")
    c.close()
    log("consuming from that offset returns the records with their CreateTime timestamps")


def offsets_for_times_after_delete_records(admin, servers):
    """OffsetsForTimes never answers below the log start offset, even when DeleteRecords cut a
    batch in the middle (Kafka searches from the log start offset)."""
    topic = "py-trimmed"
    create_topic(admin, topic, 1)
    base = (int(time.time()) - 3600) * 1000
    # Produced together with a long linger, so the records share one batch.
    records = [(f"r-{i}", f"r-{i}", 0, base + i * 1000) for i in range(10)]
    produce(servers, topic, "gzip", records, linger_ms=200)
    futures = admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=TIMEOUT)
    (future,) = futures.values()
    deleted = result(future, f"delete_records({topic}[0] before 5)")
    check(deleted.low_watermark == 5, f"delete_records: low watermark {deleted.low_watermark}, expected 5")
    c = consumer(servers, "py-trimmed-reader")
    queries = [
        (base - 60_000, 5),  # before every record: the log start offset
        (base + 3000, 5),  # a deleted record's timestamp: the log start offset
        (base + 5000, 5),
        (base + 7000, 7),
    ]
    for ts, want in queries:
        (got,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=TIMEOUT)
        check(
            got.offset == want,
            f"after delete_records({topic}[0] before 5): offsets_for_times(base{ts - base:+d} ms) = "
            f"{got.offset}, expected {want} (never below the low watermark)",
        )
    c.close()
    log("offsets_for_times after delete_records answers at or above the new low watermark")


def main():
    servers = bootstrap()
    version = client_version()
    version = version[0] if isinstance(version, tuple) else version
    log(f"confluent-kafka {version}, librdkafka {libversion()[0]}, bootstrap {servers}")
    admin = AdminClient(common_config(servers))
    try:
        log("== admin: topics and configs")
        admin_topics_and_configs(admin, servers)
        log("== admin: the whole cluster")
        admin_whole_cluster(admin, servers)
        log("== produce with every codec, consume in a group")
        topic, ends = produce_and_consume_in_a_group(admin, servers)
        log("== delete_records")
        delete_records(admin, servers, topic, ends)
        log("== offsets_for_times")
        offsets_for_times(admin, servers)
        log("== offsets_for_times after delete_records")
        offsets_for_times_after_delete_records(admin, servers)
    except Mismatch as e:
        print(f"FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    except Exception:
        print("FAILED with an unexpected exception:", file=sys.stderr, flush=True)
        traceback.print_exc()
        sys.exit(1)
    log("OK")


if __name__ == "__main__":
    main()
