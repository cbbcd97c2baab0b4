#!/usr/bin/env python3
"""Inlet's Kafka transactions with Python's confluent-kafka (librdkafka) as an independent client.

Usage: txn_confluent_kafka.py BOOTSTRAP [PREFIX]

PREFIX (default: one from the process id) starts every topic, group and transactional id, so
that reruns against one node do not meet. Each case creates its own topics (3 partitions):

  a. commit, abort, commit across 3 partitions: read_committed sees exactly the committed
     records, in each partition's order; read_uncommitted sees the aborted ones too (and never a
     control record).
  b. an open transaction holds read_committed back: its flushed records and a later
     non-transactional record in the same partition stay invisible to read_committed (polled
     for a bounded time) while read_uncommitted sees both; after the commit read_committed sees
     both.
  c. read-process-write: a group consumer's input goes transformed to an output topic with the
     consumer's offsets sent in the transaction; a commit moves the group's committed offsets
     to the processed positions, an abort leaves them alone, and after seeking back and
     committing again the output holds every input record exactly once.
  d. zombie fencing: a second producer with the same transactional.id fences the first (its
     next produce and commit fail), aborts its open transaction, and commits normally.
  e. transaction timeout (transaction.timeout.ms=3000): the broker aborts an idle transaction,
     read_committed reads past it within 20 s, and the timed-out producer's commit fails.

Every step prints what it checked; the first mismatch exits with status 1 and a message naming
it. The last line is OK.
"""

import os
import sys
import time
import traceback

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
    libversion,
)
from confluent_kafka import version as client_version
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 30.0
PARTITIONS = 3
# How long a read_committed consumer is watched to show that it sees nothing.
ABSENCE_SECONDS = 5.0
# How long committed offsets may take to show once a transaction has ended.
OFFSETS_WITHIN_SECONDS = 10.0
# How long the broker may take to abort a transaction that timed out.
TXN_TIMEOUT_MS = 3000
ABORTED_WITHIN_SECONDS = 20.0
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


class Mismatch(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Mismatch(what)


def log(msg):
    print(msg, flush=True)


def call(what, fn, *args):
    """`fn(*args)`; a KafkaException becomes a Mismatch naming `what`."""
    try:
        return fn(*args)
    except KafkaException as e:
        raise Mismatch(f"{what} failed: {e.args[0]}") from e


def base_config(servers):
    return {"bootstrap.servers": servers, "broker.address.family": "v4"}


def create_topics(admin, *topics):
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1) for t in topics],
        request_timeout=TIMEOUT,
    )
    for topic, future in futures.items():
        call(f"create_topics({topic})", future.result, TIMEOUT)


# ---------------------------------------------------------------------------------------------
# Producers
# ---------------------------------------------------------------------------------------------


class Sender:
    """A producer whose deliveries are checked: `send` queues a record, `flush` waits for them all
    and fails on the first delivery error."""

    def __init__(self, servers, name, **config):
        self.name = name
        self.errors = []
        self.producer = Producer({**base_config(servers), **config})

    def _delivered(self, err, msg):
        if err is not None:
            self.errors.append(f"{msg.topic()}[{msg.partition()}] {msg.value()!r}: {err}")

    def send(self, topic, partition, value):
        self.producer.produce(topic, value=value.encode(), partition=partition, on_delivery=self._delivered)

    def flush(self):
        left = self.producer.flush(TIMEOUT)
        check(left == 0, f"{self.name}: {left} records still undelivered after {TIMEOUT} s")
        check(not self.errors, f"{self.name}: delivery failed: {self.errors}")


def transactional(servers, txn_id, **config):
    """A Sender with `transactional.id` `txn_id`, its transactions initialized."""
    sender = Sender(servers, f"producer {txn_id}", **{"transactional.id": txn_id, **config})
    call(f"init_transactions({txn_id})", sender.producer.init_transactions, TIMEOUT)
    return sender


def plain(servers, name):
    """A non-transactional (idempotent) Sender."""
    return Sender(servers, name, **{"enable.idempotence": True})


def send_all(sender, topic, records):
    """Sends `records` ([(partition, value)]) and waits until each is stored."""
    for partition, value in records:
        sender.send(topic, partition, value)
    sender.flush()


def in_transaction(sender, topic, records, commit):
    """One transaction of `records` ([(partition, value)]): committed if `commit`, else aborted."""
    call(f"{sender.name}: begin_transaction", sender.producer.begin_transaction)
    send_all(sender, topic, records)
    if commit:
        call(f"{sender.name}: commit_transaction", sender.producer.commit_transaction, TIMEOUT)
    else:
        call(f"{sender.name}: abort_transaction", sender.producer.abort_transaction, TIMEOUT)


def spread(tag, count):
    """`count` records over the partitions in turn: [(partition, "tag-i")]."""
    return [(i % PARTITIONS, f"{tag}-{i}") for i in range(count)]


def by_partition(records):
    """{partition: [values in order]} of [(partition, value)]."""
    out = {p: [] for p in range(PARTITIONS)}
    for partition, value in records:
        out[partition].append(value)
    return out


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------


class Reader:
    """A consumer assigned to `topic`'s partitions from the beginning (no group membership) with
    `isolation`; collects the values it polls per partition and which partitions it has seen the
    end of."""

    def __init__(self, servers, topic, isolation, partitions=range(PARTITIONS)):
        self.what = f"{isolation} reader of {topic}"
        self.consumer = Consumer({
            **base_config(servers),
            "group.id": f"reader-{topic}-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        })
        self.partitions = list(partitions)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in self.partitions])
        self.got = {p: [] for p in self.partitions}
        self.at_end = set()

    def poll_for(self, seconds, until=lambda: False):
        """Polls for up to `seconds`, stopping early once `until()` holds; returns whether it did."""
        deadline = time.monotonic() + seconds
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            msg = self.consumer.poll(min(left, 0.5))
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    self.at_end.add(msg.partition())
                    continue
                raise Mismatch(f"{self.what}: poll failed: {msg.error()}")
            self.at_end.discard(msg.partition())
            self.got[msg.partition()].append(msg.value().decode())
        return True

    def count(self):
        return sum(len(v) for v in self.got.values())

    def wait_for(self, want, seconds=TIMEOUT):
        """Polls until it has read `want` ({partition: [values]}) and is at the end of every
        partition (the last stable offset for read_committed), for up to `seconds`; it must have
        read exactly `want`."""
        count = sum(len(v) for v in want.values())
        self.poll_for(seconds, lambda: self.count() >= count and self.at_end == set(self.partitions))
        check(self.got == want, f"{self.what}: read {self.got}, expected {want} "
                                f"(at the end of partitions {sorted(self.at_end)})")

    def close(self):
        self.consumer.close()


def expect_read(servers, topic, isolation, want, what):
    reader = Reader(servers, topic, isolation)
    try:
        reader.wait_for(want)
    finally:
        reader.close()
    log(f"{isolation} reads {reader.count()} records of {topic}: {what}")


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------


def commit_and_abort(admin, servers, prefix):
    topic = f"{prefix}-a"
    create_topics(admin, topic)
    first, aborted, third = spread("c1", 12), spread("ab", 6), spread("c3", 9)
    producer = transactional(servers, f"{prefix}-a-txn")
    in_transaction(producer, topic, first, commit=True)
    in_transaction(producer, topic, aborted, commit=False)
    in_transaction(producer, topic, third, commit=True)
    log("three transactions over 3 partitions: committed, aborted, committed")
    expect_read(servers, topic, "read_committed", by_partition(first + third),
                "the committed records, none aborted")
    expect_read(servers, topic, "read_uncommitted", by_partition(first + aborted + third),
                "committed and aborted records, no control records")


def open_transaction_holds_back(admin, servers, prefix):
    topic = f"{prefix}-b"
    create_topics(admin, topic)
    txn_records = [(0, f"open-{i}") for i in range(4)]
    producer = transactional(servers, f"{prefix}-b-txn")
    call("begin_transaction", producer.producer.begin_transaction)
    send_all(producer, topic, txn_records)
    other = plain(servers, "plain producer")
    send_all(other, topic, [(0, "plain-after")])
    want = {0: [v for _, v in txn_records] + ["plain-after"]}
    log("an open transaction wrote 4 records to partition 0, then a plain producer 1")

    uncommitted = Reader(servers, topic, "read_uncommitted", partitions=[0])
    uncommitted.wait_for(want)
    log("read_uncommitted sees the open transaction's records and the plain one")

    committed = Reader(servers, topic, "read_committed", partitions=[0])
    committed.poll_for(ABSENCE_SECONDS)
    check(committed.got == {0: []},
          f"read_committed read {committed.got} while the transaction was open; expected nothing")
    check(committed.at_end == {0}, f"read_committed did not reach the end of partition 0 (its last stable "
                                   f"offset, before the open transaction) within {ABSENCE_SECONDS} s")
    log(f"read_committed sees nothing for {ABSENCE_SECONDS} s while the transaction is open")

    call("commit_transaction", producer.producer.commit_transaction, TIMEOUT)
    committed.wait_for(want)
    log("after the commit read_committed sees both, in offset order")
    committed.close()
    uncommitted.close()


def committed_offsets(consumer, topic):
    """The group's committed offsets of `topic`, {partition: offset}, those it has."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    got = call(f"committed({topic})", consumer.committed, tps, TIMEOUT)
    return {tp.partition: tp.offset for tp in got if tp.offset != OFFSET_INVALID}


def expect_committed(consumer, topic, want, what, seconds=OFFSETS_WITHIN_SECONDS):
    """The group's offsets must become `want` within `seconds` (a transaction's offsets show
    once its markers are written, which Kafka may do after EndTxn answers)."""
    deadline = time.monotonic() + seconds
    while True:
        got = committed_offsets(consumer, topic)
        if got == want:
            return
        check(time.monotonic() < deadline, f"{what}: the group's offsets are {got}, expected {want}")
        time.sleep(0.2)


def expect_committed_stay(consumer, topic, want, what, seconds=2.0):
    """The group's offsets must stay `want` for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = committed_offsets(consumer, topic)
        check(got == want, f"{what}: the group's offsets are {got}, expected {want}")
        time.sleep(0.2)


def process(consumer, producer, out_topic, count, positions):
    """Polls `count` input records, sends each upper-cased to the same partition of `out_topic`,
    and moves `positions` ({partition: next offset}) past them."""
    deadline = time.monotonic() + TIMEOUT
    done = 0
    while done < count:
        check(time.monotonic() < deadline, f"read {done} of {count} input records within {TIMEOUT} s")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise Mismatch(f"the group consumer's poll failed: {msg.error()}")
        producer.send(out_topic, msg.partition(), msg.value().decode().upper())
        positions[msg.partition()] = msg.offset() + 1
        done += 1


def transform_round(consumer, producer, in_topic, out_topic, count, positions, commit):
    """One read-process-write transaction of `count` records with the consumer's offsets."""
    call("begin_transaction", producer.producer.begin_transaction)
    process(consumer, producer, out_topic, count, positions)
    producer.flush()
    offsets = [TopicPartition(in_topic, p, o) for p, o in sorted(positions.items())]
    call("send_offsets_to_transaction", producer.producer.send_offsets_to_transaction,
         offsets, consumer.consumer_group_metadata(), TIMEOUT)
    end = producer.producer.commit_transaction if commit else producer.producer.abort_transaction
    call("commit_transaction" if commit else "abort_transaction", end, TIMEOUT)


def read_process_write(admin, servers, prefix):
    in_topic, out_topic, group = f"{prefix}-c-in", f"{prefix}-c-out", f"{prefix}-c-group"
    create_topics(admin, in_topic, out_topic)
    inputs = spread("in", 30)
    send_all(plain(servers, "input producer"), in_topic, inputs)

    consumer = Consumer({
        **base_config(servers),
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    consumer.subscribe([in_topic])
    producer = transactional(servers, f"{prefix}-c-txn")

    positions = {}
    transform_round(consumer, producer, in_topic, out_topic, 12, positions, commit=True)
    after_first = dict(positions)
    expect_committed(consumer, in_topic, after_first, "after the commit")
    log(f"a committed transaction commits the group's offsets {after_first}")

    transform_round(consumer, producer, in_topic, out_topic, 18, positions, commit=False)
    expect_committed_stay(consumer, in_topic, after_first, "after the abort")
    log("an aborted transaction leaves the group's offsets alone")

    for p in range(PARTITIONS):
        consumer.seek(TopicPartition(in_topic, p, after_first.get(p, 0)))
    positions = dict(after_first)
    transform_round(consumer, producer, in_topic, out_topic, 18, positions, commit=True)
    expect_committed(consumer, in_topic, {p: 10 for p in range(PARTITIONS)}, "after the last commit")
    consumer.close()
    want = {p: [v.upper() for v in values] for p, values in by_partition(inputs).items()}
    expect_read(servers, out_topic, "read_committed", want,
                "every input record transformed exactly once (the aborted round left out)")


def expect_fenced(what, fn, *args):
    try:
        fn(*args)
    except KafkaException as e:
        err = e.args[0]
        check(err.fatal() or err.code() in FENCED, f"{what} failed, but not fenced: {err}")
        log(f"{what} fails: {err}")
        return
    raise Mismatch(f"{what} succeeded; expected it to be fenced")


def await_reports(sender):
    """Polls `sender` until every record it sent is reported, for up to TIMEOUT; returns the
    fatal errors that poll raised on the way. (Not flush(): confluent-kafka 2.16.1's flush fails
    with a SystemError when a fatal error and a delivery report are served in one call.)"""
    fatal = []
    deadline = time.monotonic() + TIMEOUT
    while len(sender.producer) and time.monotonic() < deadline:
        try:
            sender.producer.poll(0.5)
        except KafkaException as e:
            fatal.append(e.args[0])
    return fatal


def zombie_fencing(admin, servers, prefix):
    topic, txn_id = f"{prefix}-d", f"{prefix}-d-txn"
    create_topics(admin, topic)
    zombie = transactional(servers, txn_id)
    call("zombie: begin_transaction", zombie.producer.begin_transaction)
    zombie_records = spread("zombie", 3)
    send_all(zombie, topic, zombie_records)
    log("producer A began a transaction and wrote 3 records")

    successor = transactional(servers, txn_id)
    log("producer B with the same transactional.id initialized")
    zombie.send(topic, 0, "zombie-late")
    fatal = await_reports(zombie)
    check(zombie.errors or len(zombie.producer),
          "A's produce after B's init was delivered; expected it to be fenced")
    check(zombie.errors, f"A's produce after B's init neither failed nor was delivered within {TIMEOUT} s")
    log(f"A's produce after B's init fails: {zombie.errors[0]}")
    check(fatal, "A's producer raised no fatal error after its produce was refused")
    log(f"A's producer raises the fatal error {fatal[0]}")
    expect_fenced("A's commit_transaction", zombie.producer.commit_transaction, TIMEOUT)

    successor_records = spread("successor", 3)
    in_transaction(successor, topic, successor_records, commit=True)
    expect_read(servers, topic, "read_committed", by_partition(successor_records),
                "B's records only (A's transaction was aborted by B's init)")
    expect_read(servers, topic, "read_uncommitted", by_partition(zombie_records + successor_records),
                "A's stored records and B's, not A's fenced produce")


def transaction_timeout(admin, servers, prefix):
    topic = f"{prefix}-e"
    create_topics(admin, topic)
    idle = transactional(servers, f"{prefix}-e-idle", **{"transaction.timeout.ms": TXN_TIMEOUT_MS})
    call("begin_transaction", idle.producer.begin_transaction)
    send_all(idle, topic, [(0, f"idle-{i}") for i in range(3)])
    log(f"a producer with transaction.timeout.ms={TXN_TIMEOUT_MS} wrote 3 records and went idle")
    other = transactional(servers, f"{prefix}-e-other")
    in_transaction(other, topic, [(0, "later")], commit=True)

    reader = Reader(servers, topic, "read_committed", partitions=[0])
    began = time.monotonic()
    reader.poll_for(ABORTED_WITHIN_SECONDS, lambda: reader.got[0])
    check(reader.got == {0: ["later"]},
          f"read_committed read {reader.got} within {ABORTED_WITHIN_SECONDS} s; expected only the later "
          "committed record once the broker aborted the timed-out transaction")
    log(f"the broker aborted the timed-out transaction: read_committed reads past it after "
        f"{time.monotonic() - began:.1f} s")
    reader.close()
    try:
        idle.producer.commit_transaction(TIMEOUT)
    except KafkaException as e:
        log(f"the timed-out producer's commit fails: {e.args[0]}")
        return
    raise Mismatch("the timed-out producer's commit_transaction succeeded; expected it to fail")


CASES = [
    ("a. commit and abort across partitions", commit_and_abort),
    ("b. an open transaction holds read_committed back", open_transaction_holds_back),
    ("c. read-process-write with send_offsets_to_transaction", read_process_write),
    ("d. zombie fencing", zombie_fencing),
    ("e. transaction timeout", transaction_timeout),
]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: txn_confluent_kafka.py BOOTSTRAP [PREFIX]")
    servers = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else f"ck{os.getpid()}"
    version = client_version()
    version = version[0] if isinstance(version, tuple) else version
    log(f"confluent-kafka {version}, librdkafka {libversion()[0]}, bootstrap {servers}, prefix {prefix}")
    admin = AdminClient(base_config(servers))
    try:
        for name, case in CASES:
            log(f"== {name}")
            case(admin, servers, prefix)
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
