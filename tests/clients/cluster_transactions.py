"""Transactions in a cluster, across the kill -9 of nodes (driven by tests/cluster.rs).

Usage: cluster_transactions.py BOOTSTRAP TOPIC PARTITIONS

A transactional producer (confluent-kafka, librdkafka) writes transactions of 2 records per
partition. Twice it stops with a transaction open and its records stored, prints `open N`
and waits for a line on stdin: meanwhile the test kills a node (the transaction
coordinator's the first time, a partition leader's the second) and writes `go`. The
producer then commits that transaction, whichever node coordinates it now, and goes on with
more transactions, every third one aborted. At the end a read_committed consumer reads the
topic from the start: every committed transaction whole, each record once, and no record of
an aborted one. Prints OK at the end; exits non-zero on a mismatch.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

bootstrap, topic, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])


def fail(what):
    print(f"FAILED: {what}", flush=True)
    sys.exit(1)


producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-writer",
                     "transaction.timeout.ms": 120000, "message.timeout.ms": 120000})
producer.init_transactions(60)
committed, aborted = set(), set()


def write(txn):
    values = [f"t{txn}-p{p}-{i}" for p in range(partitions) for i in range(2)]
    for v in values:
        producer.produce(topic, value=v, partition=int(v.split("-p")[1].split("-")[0]))
    if producer.flush(60) != 0:
        fail(f"transaction {txn}: records not acknowledged")
    return values


def end(txn, values, commit):
    for attempt in range(5):
        try:
            if commit:
                producer.commit_transaction(60)
                committed.update(values)
            else:
                producer.abort_transaction(60)
                aborted.update(values)
            print(f"{'committed' if commit else 'aborted'} {txn}", flush=True)
            return
        except KafkaException as e:
            err = e.args[0]
            if err.retriable() and attempt < 4:
                print(f"retrying the end of {txn}: {err}", flush=True)
                continue
            fail(f"transaction {txn}: {err}")


txn = 0
for pause in range(2):
    for _ in range(3):
        txn += 1
        producer.begin_transaction()
        end(txn, write(txn), txn % 3 != 0)
    txn += 1
    producer.begin_transaction()
    values = write(txn)
    print(f"open {txn}", flush=True)
    if sys.stdin.readline().strip() != "go":
        fail("no go")
    end(txn, values, True)
for _ in range(3):
    txn += 1
    producer.begin_transaction()
    end(txn, write(txn), txn % 3 != 0)

consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check",
                     "isolation.level": "read_committed", "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
seen = []
deadline = time.time() + 60
while time.time() < deadline and len(seen) < len(committed):
    m = consumer.poll(0.5)
    if m is not None and not m.error():
        seen.append(m.value().decode())
quiet = time.time() + 3
while time.time() < quiet:
    m = consumer.poll(0.2)
    if m is not None and not m.error():
        seen.append(m.value().decode())
consumer.close()
if len(seen) != len(set(seen)):
    fail(f"{len(seen) - len(set(seen))} records read twice")
if set(seen) & aborted:
    fail(f"aborted records read: {sorted(set(seen) & aborted)[:5]}")
if set(seen) != committed:
    fail(f"missing committed records: {sorted(committed - set(seen))[:5]}")
print(f"read_committed: {len(committed)} committed records, none of {len(aborted)} aborted")
print("OK", flush=True)
