"""Client quotas with confluent-kafka (librdkafka): a producer and a consumer whose client id
has produce and fetch quotas (set by the test, `producer_byte_rate` and `consumer_byte_rate`
of QUOTA bytes a second for the client id `rdkafka-slow`) are held to them, and librdkafka
reports the broker's throttle times through `throttle_cb` (KIP-219).

Usage: quotas.py BOOTSTRAP QUOTA WINDOW_SECONDS

The node measures rates over WINDOW_SECONDS, so a client moving B bytes takes at least
(B - WINDOW_SECONDS * QUOTA - its last request) / QUOTA. Prints OK at the end; exits non-zero on a mismatch.
"""

import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

bootstrap, quota, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
TOTAL = 2 * 1024 * 1024
TOPIC = "rdkafka-quota"
BATCH = 64 * 1024
FETCH_MAX = 256 * 1024
least = (TOTAL - window * quota - BATCH) / quota * 0.9
least_fetch = (TOTAL - window * quota - FETCH_MAX) / quota * 0.9


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


throttles = []


def on_throttle(event):
    throttles.append(event.throttle_time)


def produce(client_id):
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                  "throttle_cb": on_throttle, "linger.ms": 5, "batch.size": BATCH})
    value = b"x" * 1024
    start = time.monotonic()
    for _ in range(TOTAL // len(value)):
        while True:
            try:
                p.produce(TOPIC, value)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    check(p.flush(120) == 0, f"{client_id}'s records are all acknowledged")
    return time.monotonic() - start


fast = produce("rdkafka-fast")
check(not throttles, f"rdkafka-fast (no quota) saw no throttle: {throttles}")
held = produce("rdkafka-slow")
print(f"produce: rdkafka-fast {fast:.2f} s, rdkafka-slow {held:.2f} s (at least {least:.2f} s), "
      f"throttles {len(throttles)}, largest {max(throttles, default=0)} s", flush=True)
check(held >= least, "rdkafka-slow's produce is held to its quota")
check(throttles and max(throttles) > 0, "librdkafka reported the broker's throttle times")
check(fast * 3 < held, "rdkafka-fast is not held")

throttles.clear()
c = Consumer({"bootstrap.servers": bootstrap, "client.id": "rdkafka-slow", "group.id": "quota",
              "throttle_cb": on_throttle, "fetch.max.bytes": FETCH_MAX,
              "message.max.bytes": FETCH_MAX, "max.partition.fetch.bytes": FETCH_MAX,
              "enable.auto.commit": False})
c.assign([TopicPartition(TOPIC, 0, 0)])
start, got = time.monotonic(), 0
deadline = start + 120
while got < TOTAL and time.monotonic() < deadline:
    for m in c.consume(1000, timeout=0.5):
        check(m.error() is None, f"no fetch error: {m.error()}")
        got += len(m.value())
seconds = time.monotonic() - start
c.close()
print(f"fetch: {got} bytes in {seconds:.2f} s (at least {least_fetch:.2f} s), throttles {len(throttles)}",
      flush=True)
check(got >= TOTAL, "rdkafka-slow read the records back")
check(seconds >= least_fetch, "rdkafka-slow's fetches are held to its quota")
check(throttles and max(throttles) > 0, "the consumer saw throttle times")
print("OK")
