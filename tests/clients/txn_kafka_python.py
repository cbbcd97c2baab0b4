#!/usr/bin/env python3
"""Inlet's Kafka transactions with kafka-python (pure Python) as an independent client.

Usage: txn_kafka_python.py BOOTSTRAP [PREFIX]

PREFIX (default: one from the process id) starts every topic, group and transactional id, so
that reruns against one node do not meet. Each case creates its own topics (3 partitions) with
KafkaAdminClient:

  a. commit, abort, commit across 3 partitions with KafkaProducer(transactional_id=...):
     isolation_level="read_committed" sees exactly the committed records, in each partition's
     order, up to the end offset (ListOffsets at that isolation); "read_uncommitted" sees the
     aborted ones too (and never a control record).
  b. an open transaction holds read_committed back: its flushed records and a later
     non-transactional record in the same partition stay invisible to read_committed (polled
     for a bounded time) while read_uncommitted sees both; after the commit read_committed sees
     both.
  c. read-process-write: a group consumer's input goes transformed to an output topic and
     send_offsets_to_transaction() carries the consumer's group_metadata() (member and
     generation, KIP-447); KafkaAdminClient.list_group_offsets shows the processed positions
     after a commit and the earlier ones after an abort; after seeking back and committing again
     the output holds every input record exactly once.
  d. zombie fencing: a second producer with the same transactional_id fences the first (its
     next send fails with InvalidProducerEpochError, the producer settles in
     ProducerFencedError and its commit fails), aborts its open transaction, and commits
     normally.
  e. transaction timeout (transaction_timeout_ms=3000): the broker aborts an idle transaction,
     read_committed reads past it within 20 s, and the timed-out producer's commit fails.

Every step prints what it checked; the first mismatch exits with status 1 and a message naming
it. The last line is OK.
"""

import os
import sys
import time
import traceback

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError
from kafka.structs import OffsetAndMetadata

TIMEOUT = 30.0
PARTITIONS = 3
# How long a read_committed consumer is watched to show that it sees nothing.
ABSENCE_SECONDS = 5.0
# How long committed offsets may take to show once a transaction has ended.
OFFSETS_WITHIN_SECONDS = 10.0
# How long the broker may take to abort a transaction that timed out.
TXN_TIMEOUT_MS = 3000
ABORTED_WITHIN_SECONDS = 20.0
FENCED = (ProducerFencedError, InvalidProducerEpochError)


class Mismatch(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Mismatch(what)


def log(msg):
    print(msg, flush=True)


def call(what, fn, *args, **kwargs):
    """`fn(*args, **kwargs)`; a KafkaError becomes a Mismatch naming `what`."""
    try:
        return fn(*args, **kwargs)
    except KafkaError as e:
        raise Mismatch(f"{what} failed: {e!r}") from e


def create_topics(admin, *topics):
    spec = {t: {"num_partitions": PARTITIONS, "replication_factor": 1} for t in topics}
    call(f"create_topics({', '.join(topics)})", admin.create_topics, spec, wait_for_metadata=True)


# ---------------------------------------------------------------------------------------------
# Producers
# ---------------------------------------------------------------------------------------------


class Sender:
    """A producer whose deliveries are checked: `send` queues a record, `flush` waits for them all
    and returns the delivery errors, `flush_ok` fails on the first."""

    def __init__(self, servers, name, **config):
        self.name = name
        self.pending = []
        self.producer = KafkaProducer(bootstrap_servers=servers, max_block_ms=int(TIMEOUT * 1000), **config)

    def send(self, topic, partition, value):
        future = self.producer.send(topic, value=value.encode(), partition=partition)
        self.pending.append((f"{topic}[{partition}] {value!r}", future))

    def flush(self):
        try:
            self.producer.flush(timeout=TIMEOUT)
        except KafkaError as e:
            return [f"flush: {e!r}"]
        errors = []
        for what, future in self.pending:
            try:
                future.get(timeout=TIMEOUT)
            except KafkaError as e:
                errors.append(f"{what}: {e!r}")
        self.pending = []
        return errors

    def flush_ok(self):
        errors = self.flush()
        check(not errors, f"{self.name}: delivery failed: {errors}")


def transactional(servers, txn_id, **config):
    """A Sender with transactional_id `txn_id`, its transactions initialized."""
    sender = Sender(servers, f"producer {txn_id}", transactional_id=txn_id, **config)
    call(f"init_transactions({txn_id})", sender.producer.init_transactions)
    return sender


def plain(servers, name):
    """A non-transactional (idempotent) Sender."""
    return Sender(servers, name, enable_idempotence=True)


def send_all(sender, topic, records):
    """Sends `records` ([(partition, value)]) and waits until each is stored."""
    for partition, value in records:
        sender.send(topic, partition, value)
    sender.flush_ok()


def in_transaction(sender, topic, records, commit):
    """One transaction of `records` ([(partition, value)]): committed if `commit`, else aborted."""
    call(f"{sender.name}: begin_transaction", sender.producer.begin_transaction)
    send_all(sender, topic, records)
    if commit:
        call(f"{sender.name}: commit_transaction", sender.producer.commit_transaction)
    else:
        call(f"{sender.name}: abort_transaction", sender.producer.abort_transaction)


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
    """A consumer assigned to `topic`'s partitions from the beginning (no group) with
    `isolation`; collects the values it polls per partition."""

    def __init__(self, servers, topic, isolation, partitions=range(PARTITIONS)):
        self.what = f"{isolation} reader of {topic}"
        self.consumer = KafkaConsumer(
            bootstrap_servers=servers,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=isolation,
        )
        self.tps = [TopicPartition(topic, p) for p in partitions]
        self.consumer.assign(self.tps)
        self.consumer.seek_to_beginning(*self.tps)
        self.got = {p: [] for p in partitions}

    def count(self):
        return sum(len(v) for v in self.got.values())

    def poll_for(self, seconds, until=lambda: False):
        """Polls for up to `seconds`, stopping early once `until()` holds; returns whether it did."""
        deadline = time.monotonic() + seconds
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            batches = call(f"{self.what}: poll", self.consumer.poll, timeout_ms=int(min(left, 0.5) * 1000))
            for tp, records in batches.items():
                self.got[tp.partition].extend(r.value.decode() for r in records)
        return True

    def at_end(self):
        """Whether its position is at the end offset (the last stable offset for read_committed)
        of every partition."""
        ends = call(f"{self.what}: end_offsets", self.consumer.end_offsets, self.tps)
        return all(self.consumer.position(tp) >= ends[tp] for tp in self.tps)

    def wait_for(self, want, seconds=TIMEOUT):
        """Polls until it has read `want` ({partition: [values]}) and is at the end of every
        partition, for up to `seconds`; it must have read exactly `want`."""
        count = sum(len(v) for v in want.values())
        self.poll_for(seconds, lambda: self.count() >= count and self.at_end())
        check(self.got == want, f"{self.what}: read {self.got}, expected {want}")

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
    send_all(plain(servers, "plain producer"), topic, [(0, "plain-after")])
    want = {0: [v for _, v in txn_records] + ["plain-after"]}
    log("an open transaction wrote 4 records to partition 0, then a plain producer 1")

    uncommitted = Reader(servers, topic, "read_uncommitted", partitions=[0])
    uncommitted.wait_for(want)
    log("read_uncommitted sees the open transaction's records and the plain one")

    committed = Reader(servers, topic, "read_committed", partitions=[0])
    committed.poll_for(ABSENCE_SECONDS)
    check(committed.got == {0: []},
          f"read_committed read {committed.got} while the transaction was open; expected nothing")
    check(committed.at_end(), "read_committed's position is not at the end offset that ListOffsets gives at "
                              "read_committed (the last stable offset, before the open transaction)")
    log(f"read_committed sees nothing for {ABSENCE_SECONDS} s while the transaction is open")

    call("commit_transaction", producer.producer.commit_transaction)
    committed.wait_for(want)
    log("after the commit read_committed sees both, in offset order")
    committed.close()
    uncommitted.close()


def group_offsets(admin, group, topic):
    """The group's committed offsets of `topic`, {partition: offset}, those it has."""
    result = call(f"list_group_offsets({group})", admin.list_group_offsets, group)
    return {tp.partition: meta.offset for tp, meta in result.get(group, {}).items()
            if tp.topic == topic and meta.offset >= 0}


def expect_group_offsets(admin, group, topic, want, what, seconds=OFFSETS_WITHIN_SECONDS):
    """The group's offsets must become `want` within `seconds` (a transaction's offsets show
    once its markers are written, which Kafka may do after EndTxn answers)."""
    deadline = time.monotonic() + seconds
    while True:
        got = group_offsets(admin, group, topic)
        if got == want:
            return
        check(time.monotonic() < deadline, f"{what}: the group's offsets are {got}, expected {want}")
        time.sleep(0.2)


def expect_group_offsets_stay(admin, group, topic, want, what, seconds=2.0):
    """The group's offsets must stay `want` for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = group_offsets(admin, group, topic)
        check(got == want, f"{what}: the group's offsets are {got}, expected {want}")
        time.sleep(0.2)


def process(consumer, producer, out_topic, count, positions):
    """Polls `count` input records, sends each upper-cased to the same partition of `out_topic`,
    and moves `positions` ({partition: next offset}) past them."""
    deadline = time.monotonic() + TIMEOUT
    done = 0
    while done < count:
        check(time.monotonic() < deadline, f"read {done} of {count} input records within {TIMEOUT} s")
        batches = call("the group consumer's poll", consumer.poll, timeout_ms=500, max_records=count - done)
        for tp, records in batches.items():
            for record in records:
                producer.send(out_topic, tp.partition, record.value.decode().upper())
                positions[tp.partition] = record.offset + 1
                done += 1


def transform_round(consumer, producer, in_topic, out_topic, count, positions, commit):
    """One read-process-write transaction of `count` records with the consumer's offsets."""
    call("begin_transaction", producer.producer.begin_transaction)
    process(consumer, producer, out_topic, count, positions)
    producer.flush_ok()
    offsets = {TopicPartition(in_topic, p): OffsetAndMetadata(o, "", -1) for p, o in positions.items()}
    call("send_offsets_to_transaction", producer.producer.send_offsets_to_transaction,
         offsets, consumer.group_metadata())
    if commit:
        call("commit_transaction", producer.producer.commit_transaction)
    else:
        call("abort_transaction", producer.producer.abort_transaction)


def read_process_write(admin, servers, prefix):
    in_topic, out_topic, group = f"{prefix}-c-in", f"{prefix}-c-out", f"{prefix}-c-group"
    create_topics(admin, in_topic, out_topic)
    inputs = spread("in", 30)
    send_all(plain(servers, "input producer"), in_topic, inputs)

    consumer = KafkaConsumer(
        in_topic,
        bootstrap_servers=servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    producer = transactional(servers, f"{prefix}-c-txn")

    positions = {}
    transform_round(consumer, producer, in_topic, out_topic, 12, positions, commit=True)
    after_first = dict(positions)
    expect_group_offsets(admin, group, in_topic, after_first, "after the commit")
    log(f"a committed transaction commits the group's offsets {after_first}")

    transform_round(consumer, producer, in_topic, out_topic, 18, positions, commit=False)
    expect_group_offsets_stay(admin, group, in_topic, after_first, "after the abort")
    log("an aborted transaction leaves the group's offsets alone")

    for p in range(PARTITIONS):
        consumer.seek(TopicPartition(in_topic, p), after_first.get(p, 0))
    positions = dict(after_first)
    transform_round(consumer, producer, in_topic, out_topic, 18, positions, commit=True)
    expect_group_offsets(admin, group, in_topic, {p: 10 for p in range(PARTITIONS)},
                         "after the last commit")
    consumer.close()
    want = {p: [v.upper() for v in values] for p, values in by_partition(inputs).items()}
    expect_read(servers, out_topic, "read_committed", want,
                "every input record transformed exactly once (the aborted round left out)")


def settled_fatal_error(sender, seconds=10.0):
    """The fatal error `sender`'s transaction manager settles in, waiting up to `seconds`; None
    if it does not. After a refused produce kafka-python first bumps its epoch (KIP-360), which
    the broker refuses a fenced producer, and only then fails for good; meanwhile
    commit_transaction() fails with an invalid state transition, and afterwards with a plain
    KafkaError naming the fatal error. Neither tells the cause apart, so this reads the
    transaction manager (not public API)."""
    manager = sender.producer._transaction_manager
    deadline = time.monotonic() + seconds
    while not manager.has_fatal_error():
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
    return manager.last_error


def zombie_fencing(admin, servers, prefix):
    topic, txn_id = f"{prefix}-d", f"{prefix}-d-txn"
    create_topics(admin, topic)
    zombie = transactional(servers, txn_id)
    call("zombie: begin_transaction", zombie.producer.begin_transaction)
    zombie_records = spread("zombie", 3)
    send_all(zombie, topic, zombie_records)
    log("producer A began a transaction and wrote 3 records")

    successor = transactional(servers, txn_id)
    log("producer B with the same transactional_id initialized")
    zombie.send(topic, 0, "zombie-late")
    errors = zombie.flush()
    check(errors, "A's send after B's init was delivered; expected it to be fenced")
    log(f"A's send after B's init fails: {errors[0]}")
    fatal = settled_fatal_error(zombie)
    check(isinstance(fatal, FENCED), f"A's producer settled in the fatal error {fatal!r}; expected it fenced")
    log(f"A's producer is fenced: {fatal!r}")
    try:
        zombie.producer.commit_transaction()
    except KafkaError as e:
        log(f"A's commit_transaction fails: {e!r}")
    else:
        raise Mismatch("A's commit_transaction succeeded; expected it to be fenced")

    successor_records = spread("successor", 3)
    in_transaction(successor, topic, successor_records, commit=True)
    expect_read(servers, topic, "read_committed", by_partition(successor_records),
                "B's records only (A's transaction was aborted by B's init)")
    expect_read(servers, topic, "read_uncommitted", by_partition(zombie_records + successor_records),
                "A's stored records and B's, not A's fenced send")


def transaction_timeout(admin, servers, prefix):
    topic = f"{prefix}-e"
    create_topics(admin, topic)
    idle = transactional(servers, f"{prefix}-e-idle", transaction_timeout_ms=TXN_TIMEOUT_MS)
    call("begin_transaction", idle.producer.begin_transaction)
    send_all(idle, topic, [(0, f"idle-{i}") for i in range(3)])
    log(f"a producer with transaction_timeout_ms={TXN_TIMEOUT_MS} wrote 3 records and went idle")
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
        idle.producer.commit_transaction()
    except KafkaError as e:
        log(f"the timed-out producer's commit fails: {e!r}")
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
        sys.exit("usage: txn_kafka_python.py BOOTSTRAP [PREFIX]")
    servers = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else f"kp{os.getpid()}"
    log(f"kafka-python {kafka.__version__}, bootstrap {servers}, prefix {prefix}")
    try:
        admin = call("KafkaAdminClient", KafkaAdminClient, bootstrap_servers=servers)
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
