#!/usr/bin/env python3
"""Inlet's Kafka transactions with aiokafka (asyncio, pure Python) as an independent client.

Usage: txn_aiokafka.py BOOTSTRAP [PREFIX]

aiokafka speaks version 0 of every transaction API (InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn), so a fenced producer must hear INVALID_PRODUCER_EPOCH
there (PRODUCER_FENCED only exists from the versions of KIP-588), and its
send_offsets_to_transaction carries the group id alone (no member or generation).

PREFIX (default: one from the process id) starts every topic, group and transactional id, so
that reruns against one node do not meet. Each case creates its own topics (3 partitions) with
AIOKafkaAdminClient:

  a. commit, abort, commit across 3 partitions with AIOKafkaProducer(transactional_id=...):
     isolation_level="read_committed" sees exactly the committed records, in each partition's
     order, up to the end offset (ListOffsets at that isolation); "read_uncommitted" sees the
     aborted ones too (and never a control record).
  b. an open transaction holds read_committed back: its flushed records and a later
     non-transactional record in the same partition stay invisible to read_committed (polled
     for a bounded time) while read_uncommitted sees both; after the commit read_committed sees
     both.
  c. read-process-write: a group consumer's input goes transformed to an output topic with
     send_offsets_to_transaction(offsets, group_id); list_consumer_group_offsets shows the
     processed positions after a commit and the earlier ones after an abort; after seeking back
     and committing again the output holds every input record exactly once.
  d. zombie fencing: a second producer with the same transactional_id fences the first (its
     next send fails and its commit raises ProducerFenced), aborts its open transaction, and
     commits normally.
  e. transaction timeout (transaction_timeout_ms=3000): the broker aborts an idle transaction,
     read_committed reads past it within 20 s, and the timed-out producer's commit fails.

Every step prints what it checked; the first mismatch exits with status 1 and a message naming
it. The last line is OK.
"""

import asyncio
import os
import sys
import time
import traceback

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, ProducerFenced

TIMEOUT = 30.0
PARTITIONS = 3
# How long a read_committed consumer is watched to show that it sees nothing.
ABSENCE_SECONDS = 5.0
# How long committed offsets may take to show once a transaction has ended.
OFFSETS_WITHIN_SECONDS = 10.0
# How long the broker may take to abort a transaction that timed out.
TXN_TIMEOUT_MS = 3000
ABORTED_WITHIN_SECONDS = 20.0


class Mismatch(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Mismatch(what)


def log(msg):
    print(msg, flush=True)


async def bounded(what, awaitable, seconds=TIMEOUT):
    """`awaitable` within `seconds`; a timeout or a KafkaError becomes a Mismatch naming `what`."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except asyncio.TimeoutError as e:
        raise Mismatch(f"{what} did not finish within {seconds} s") from e
    except KafkaError as e:
        raise Mismatch(f"{what} failed: {e!r}") from e


async def create_topics(admin, *topics):
    response = await bounded(f"create_topics({', '.join(topics)})",
                             admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]))
    errors = [(entry[0], entry[1]) for entry in response.topic_errors if entry[1] != 0]
    check(not errors, f"create_topics: errors {errors}")


# ---------------------------------------------------------------------------------------------
# Producers
# ---------------------------------------------------------------------------------------------


class Sender:
    """A producer whose deliveries are checked: `send` queues a record, `flush` waits for them all
    and returns the delivery errors, `flush_ok` fails on the first."""

    def __init__(self, servers, name, **config):
        self.name = name
        self.pending = []
        self.producer = AIOKafkaProducer(bootstrap_servers=servers, **config)

    async def start(self):
        """Starts the producer; an idempotent or transactional one waits for its InitProducerId."""
        await bounded(f"{self.name}: start (InitProducerId)", self.producer.start())
        return self

    async def send(self, topic, partition, value):
        future = await bounded(f"{self.name}: send", self.producer.send(topic, value.encode(), partition=partition))
        self.pending.append((f"{topic}[{partition}] {value!r}", future))

    async def flush(self):
        errors = []
        for what, future in self.pending:
            try:
                await asyncio.wait_for(future, TIMEOUT)
            except asyncio.TimeoutError:
                errors.append(f"{what}: not delivered within {TIMEOUT} s")
            except KafkaError as e:
                errors.append(f"{what}: {e!r}")
        self.pending = []
        return errors

    async def flush_ok(self):
        errors = await self.flush()
        check(not errors, f"{self.name}: delivery failed: {errors}")

    async def begin(self):
        await bounded(f"{self.name}: begin_transaction", self.producer.begin_transaction())

    async def end(self, commit):
        if commit:
            await bounded(f"{self.name}: commit_transaction", self.producer.commit_transaction())
        else:
            await bounded(f"{self.name}: abort_transaction", self.producer.abort_transaction())

    async def stop(self):
        """Stops the producer; a fenced one may fail to: that is not what is tested."""
        try:
            await asyncio.wait_for(self.producer.stop(), 10)
        except Exception as e:  # noqa: BLE001 (a producer that already failed)
            log(f"({self.name} stopped with {e!r})")


async def transactional(servers, txn_id, **config):
    """A started Sender with transactional_id `txn_id`."""
    return await Sender(servers, f"producer {txn_id}", transactional_id=txn_id,
                        enable_idempotence=True, **config).start()


async def plain(servers, name):
    """A started non-transactional (idempotent) Sender."""
    return await Sender(servers, name, enable_idempotence=True).start()


async def send_all(sender, topic, records):
    """Sends `records` ([(partition, value)]) and waits until each is stored."""
    for partition, value in records:
        await sender.send(topic, partition, value)
    await sender.flush_ok()


async def in_transaction(sender, topic, records, commit):
    """One transaction of `records` ([(partition, value)]): committed if `commit`, else aborted."""
    await sender.begin()
    await send_all(sender, topic, records)
    await sender.end(commit)


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
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=servers,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=isolation,
        )
        self.tps = [TopicPartition(topic, p) for p in partitions]
        self.got = {p: [] for p in partitions}

    async def start(self):
        await bounded(f"{self.what}: start", self.consumer.start())
        self.consumer.assign(self.tps)
        await bounded(f"{self.what}: seek_to_beginning", self.consumer.seek_to_beginning(*self.tps))
        return self

    def count(self):
        return sum(len(v) for v in self.got.values())

    async def poll_for(self, seconds, until=None):
        """Polls for up to `seconds`, stopping early once `await until()` holds; returns whether
        it did."""
        deadline = time.monotonic() + seconds
        while until is None or not await until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            batches = await bounded(f"{self.what}: getmany",
                                    self.consumer.getmany(timeout_ms=int(min(left, 0.5) * 1000)))
            for tp, records in batches.items():
                self.got[tp.partition].extend(r.value.decode() for r in records)
        return True

    async def at_end(self):
        """Whether its position is at the end offset (the last stable offset for read_committed)
        of every partition."""
        ends = await bounded(f"{self.what}: end_offsets", self.consumer.end_offsets(self.tps))
        for tp in self.tps:
            if await bounded(f"{self.what}: position", self.consumer.position(tp)) < ends[tp]:
                return False
        return True

    async def wait_for(self, want, seconds=TIMEOUT):
        """Polls until it has read `want` ({partition: [values]}) and is at the end of every
        partition, for up to `seconds`; it must have read exactly `want`."""
        count = sum(len(v) for v in want.values())

        async def done():
            return self.count() >= count and await self.at_end()

        await self.poll_for(seconds, done)
        check(self.got == want, f"{self.what}: read {self.got}, expected {want}")

    async def stop(self):
        await asyncio.wait_for(self.consumer.stop(), 10)


async def expect_read(servers, topic, isolation, want, what):
    reader = await Reader(servers, topic, isolation).start()
    try:
        await reader.wait_for(want)
    finally:
        await reader.stop()
    log(f"{isolation} reads {reader.count()} records of {topic}: {what}")


# ---------------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------------


async def commit_and_abort(admin, servers, prefix):
    topic = f"{prefix}-a"
    await create_topics(admin, topic)
    first, aborted, third = spread("c1", 12), spread("ab", 6), spread("c3", 9)
    producer = await transactional(servers, f"{prefix}-a-txn")
    await in_transaction(producer, topic, first, commit=True)
    await in_transaction(producer, topic, aborted, commit=False)
    await in_transaction(producer, topic, third, commit=True)
    await producer.stop()
    log("three transactions over 3 partitions: committed, aborted, committed")
    await expect_read(servers, topic, "read_committed", by_partition(first + third),
                      "the committed records, none aborted")
    await expect_read(servers, topic, "read_uncommitted", by_partition(first + aborted + third),
                      "committed and aborted records, no control records")


async def open_transaction_holds_back(admin, servers, prefix):
    topic = f"{prefix}-b"
    await create_topics(admin, topic)
    txn_records = [(0, f"open-{i}") for i in range(4)]
    producer = await transactional(servers, f"{prefix}-b-txn")
    await producer.begin()
    await send_all(producer, topic, txn_records)
    other = await plain(servers, "plain producer")
    await send_all(other, topic, [(0, "plain-after")])
    await other.stop()
    want = {0: [v for _, v in txn_records] + ["plain-after"]}
    log("an open transaction wrote 4 records to partition 0, then a plain producer 1")

    uncommitted = await Reader(servers, topic, "read_uncommitted", partitions=[0]).start()
    await uncommitted.wait_for(want)
    log("read_uncommitted sees the open transaction's records and the plain one")

    committed = await Reader(servers, topic, "read_committed", partitions=[0]).start()
    await committed.poll_for(ABSENCE_SECONDS)
    check(committed.got == {0: []},
          f"read_committed read {committed.got} while the transaction was open; expected nothing")
    check(await committed.at_end(), "read_committed's position is not at the end offset that ListOffsets gives at "
                                    "read_committed (the last stable offset, before the open transaction)")
    log(f"read_committed sees nothing for {ABSENCE_SECONDS} s while the transaction is open")

    await producer.end(commit=True)
    await committed.wait_for(want)
    log("after the commit read_committed sees both, in offset order")
    await committed.stop()
    await uncommitted.stop()
    await producer.stop()


async def group_offsets(admin, group, topic):
    """The group's committed offsets of `topic`, {partition: offset}, those it has."""
    result = await bounded(f"list_consumer_group_offsets({group})", admin.list_consumer_group_offsets(group))
    return {tp.partition: meta.offset for tp, meta in result.items() if tp.topic == topic and meta.offset >= 0}


async def expect_group_offsets(admin, group, topic, want, what, seconds=OFFSETS_WITHIN_SECONDS):
    """The group's offsets must become `want` within `seconds` (a transaction's offsets show
    once its markers are written, which Kafka may do after EndTxn answers)."""
    deadline = time.monotonic() + seconds
    while True:
        got = await group_offsets(admin, group, topic)
        if got == want:
            return
        check(time.monotonic() < deadline, f"{what}: the group's offsets are {got}, expected {want}")
        await asyncio.sleep(0.2)


async def expect_group_offsets_stay(admin, group, topic, want, what, seconds=2.0):
    """The group's offsets must stay `want` for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = await group_offsets(admin, group, topic)
        check(got == want, f"{what}: the group's offsets are {got}, expected {want}")
        await asyncio.sleep(0.2)


async def process(consumer, producer, out_topic, count, positions):
    """Polls `count` input records, sends each upper-cased to the same partition of `out_topic`,
    and moves `positions` ({partition: next offset}) past them."""
    deadline = time.monotonic() + TIMEOUT
    done = 0
    while done < count:
        check(time.monotonic() < deadline, f"read {done} of {count} input records within {TIMEOUT} s")
        batches = await bounded("the group consumer's getmany",
                                consumer.getmany(timeout_ms=500, max_records=count - done))
        for tp, records in batches.items():
            for record in records:
                await producer.send(out_topic, tp.partition, record.value.decode().upper())
                positions[tp.partition] = record.offset + 1
                done += 1


async def transform_round(consumer, producer, group, in_topic, out_topic, count, positions, commit):
    """One read-process-write transaction of `count` records with the consumer's offsets."""
    await producer.begin()
    await process(consumer, producer, out_topic, count, positions)
    await producer.flush_ok()
    offsets = {TopicPartition(in_topic, p): o for p, o in positions.items()}
    await bounded("send_offsets_to_transaction", producer.producer.send_offsets_to_transaction(offsets, group))
    await producer.end(commit)


async def read_process_write(admin, servers, prefix):
    in_topic, out_topic, group = f"{prefix}-c-in", f"{prefix}-c-out", f"{prefix}-c-group"
    await create_topics(admin, in_topic, out_topic)
    inputs = spread("in", 30)
    feeder = await plain(servers, "input producer")
    await send_all(feeder, in_topic, inputs)
    await feeder.stop()

    consumer = AIOKafkaConsumer(
        in_topic,
        bootstrap_servers=servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await bounded("the group consumer's start", consumer.start())
    producer = await transactional(servers, f"{prefix}-c-txn")

    positions = {}
    await transform_round(consumer, producer, group, in_topic, out_topic, 12, positions, commit=True)
    after_first = dict(positions)
    await expect_group_offsets(admin, group, in_topic, after_first, "after the commit")
    log(f"a committed transaction commits the group's offsets {after_first}")

    await transform_round(consumer, producer, group, in_topic, out_topic, 18, positions, commit=False)
    await expect_group_offsets_stay(admin, group, in_topic, after_first, "after the abort")
    log("an aborted transaction leaves the group's offsets alone")

    for p in range(PARTITIONS):
        consumer.seek(TopicPartition(in_topic, p), after_first.get(p, 0))
    positions = dict(after_first)
    await transform_round(consumer, producer, group, in_topic, out_topic, 18, positions, commit=True)
    await expect_group_offsets(admin, group, in_topic, {p: 10 for p in range(PARTITIONS)},
                               "after the last commit")
    await asyncio.wait_for(consumer.stop(), 10)
    await producer.stop()
    want = {p: [v.upper() for v in values] for p, values in by_partition(inputs).items()}
    await expect_read(servers, out_topic, "read_committed", want,
                      "every input record transformed exactly once (the aborted round left out)")


async def zombie_fencing(admin, servers, prefix):
    topic, txn_id = f"{prefix}-d", f"{prefix}-d-txn"
    await create_topics(admin, topic)
    zombie = await transactional(servers, txn_id)
    await zombie.begin()
    zombie_records = spread("zombie", 3)
    await send_all(zombie, topic, zombie_records)
    log("producer A began a transaction and wrote 3 records")

    # start() waits for B's InitProducerId, which fences A.
    successor = await transactional(servers, txn_id)
    log("producer B with the same transactional_id initialized")
    await zombie.send(topic, 0, "zombie-late")
    errors = await zombie.flush()
    check(errors, "A's send after B's init was delivered; expected it to be fenced")
    log(f"A's send after B's init fails: {errors[0]}")
    try:
        await asyncio.wait_for(zombie.producer.commit_transaction(), TIMEOUT)
    except ProducerFenced as e:
        log(f"A's commit_transaction fails: {e!r}")
    except asyncio.TimeoutError as e:
        raise Mismatch(f"A's commit_transaction did not finish within {TIMEOUT} s") from e
    except KafkaError as e:
        raise Mismatch(f"A's commit_transaction failed, but not with ProducerFenced (INVALID_PRODUCER_EPOCH "
                       f"at EndTxn v0): {e!r}") from e
    else:
        raise Mismatch("A's commit_transaction succeeded; expected it to be fenced")
    await zombie.stop()

    successor_records = spread("successor", 3)
    await in_transaction(successor, topic, successor_records, commit=True)
    await successor.stop()
    await expect_read(servers, topic, "read_committed", by_partition(successor_records),
                      "B's records only (A's transaction was aborted by B's init)")
    await expect_read(servers, topic, "read_uncommitted", by_partition(zombie_records + successor_records),
                      "A's stored records and B's, not A's fenced send")


async def transaction_timeout(admin, servers, prefix):
    topic = f"{prefix}-e"
    await create_topics(admin, topic)
    idle = await transactional(servers, f"{prefix}-e-idle", transaction_timeout_ms=TXN_TIMEOUT_MS)
    await idle.begin()
    await send_all(idle, topic, [(0, f"idle-{i}") for i in range(3)])
    log(f"a producer with transaction_timeout_ms={TXN_TIMEOUT_MS} wrote 3 records and went idle")
    other = await transactional(servers, f"{prefix}-e-other")
    await in_transaction(other, topic, [(0, "later")], commit=True)
    await other.stop()

    reader = await Reader(servers, topic, "read_committed", partitions=[0]).start()
    began = time.monotonic()

    async def read_something():
        return bool(reader.got[0])

    await reader.poll_for(ABORTED_WITHIN_SECONDS, read_something)
    check(reader.got == {0: ["later"]},
          f"read_committed read {reader.got} within {ABORTED_WITHIN_SECONDS} s; expected only the later "
          "committed record once the broker aborted the timed-out transaction")
    log(f"the broker aborted the timed-out transaction: read_committed reads past it after "
        f"{time.monotonic() - began:.1f} s")
    await reader.stop()
    try:
        await asyncio.wait_for(idle.producer.commit_transaction(), TIMEOUT)
    except asyncio.TimeoutError as e:
        raise Mismatch(f"the timed-out producer's commit_transaction did not finish within {TIMEOUT} s") from e
    except KafkaError as e:
        log(f"the timed-out producer's commit fails: {e!r}")
    else:
        raise Mismatch("the timed-out producer's commit_transaction succeeded; expected it to fail")
    await idle.stop()


CASES = [
    ("a. commit and abort across partitions", commit_and_abort),
    ("b. an open transaction holds read_committed back", open_transaction_holds_back),
    ("c. read-process-write with send_offsets_to_transaction", read_process_write),
    ("d. zombie fencing", zombie_fencing),
    ("e. transaction timeout", transaction_timeout),
]


async def run(servers, prefix):
    admin = AIOKafkaAdminClient(bootstrap_servers=servers)
    await bounded("the admin client's start", admin.start())
    try:
        for name, case in CASES:
            log(f"== {name}")
            await case(admin, servers, prefix)
    finally:
        await admin.close()


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: txn_aiokafka.py BOOTSTRAP [PREFIX]")
    servers = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else f"aio{os.getpid()}"
    log(f"aiokafka {aiokafka.__version__}, bootstrap {servers}, prefix {prefix}")
    try:
        asyncio.run(run(servers, prefix))
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
