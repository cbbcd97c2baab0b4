#!/usr/bin/env python3
"""An idempotent acks=all producer (Python confluent-kafka) against a cluster while the test
kills nodes under it.

Usage: cluster_produce.py BOOTSTRAP TOPIC PARTITIONS N RATE

Sends N records `e0` .. `e<N-1>` (key = value) round robin over PARTITIONS, about RATE a second,
and prints `acked K` each time another tenth of them is acknowledged, so the test can act in
the middle. Every record must be acknowledged (a failed delivery exits 1); at the end it prints
`partition offset value` for every acknowledgement, then OK.
"""

import sys
import time

from confluent_kafka import Producer
from confluent_kafka import libversion

BOOTSTRAP, TOPIC, PARTITIONS, N, RATE = (
    sys.argv[1],
    sys.argv[2],
    int(sys.argv[3]),
    int(sys.argv[4]),
    float(sys.argv[5]),
)
print(f"librdkafka {libversion()[0]}", flush=True)
producer = Producer(
    {
        "bootstrap.servers": BOOTSTRAP,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 120000,
        "topic.metadata.refresh.interval.ms": 1000,
    }
)
acked = []
failed = []


def on_delivery(err, msg):
    if err is not None:
        failed.append((msg.value(), err))
        return
    acked.append((msg.partition(), msg.offset(), msg.value().decode()))
    if len(acked) % max(1, N // 10) == 0:
        print(f"acked {len(acked)}", flush=True)


start = time.time()
for i in range(N):
    due = start + i / RATE
    while time.time() < due:
        producer.poll(min(0.01, max(0.0, due - time.time())))
    value = f"e{i}"
    while True:
        try:
            producer.produce(TOPIC, key=value, value=value, partition=i % PARTITIONS, on_delivery=on_delivery)
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)
left = producer.flush(180)
if failed or left or len(acked) != N:
    print(f"FAILED: {len(acked)} acked, {len(failed)} failed ({failed[:3]}), {left} left", flush=True)
    sys.exit(1)
for partition, offset, value in acked:
    print(f"{partition} {offset} {value}")
print("OK", flush=True)
