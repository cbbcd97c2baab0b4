"""Client quotas with kafka-python (its own protocol code): a producer whose client id has a
`producer_byte_rate` of QUOTA bytes a second (set by the test for `kpy-slow`) is held to it,
while one without a quota (`kpy-fast`) is not.

Usage: quotas_kafka_python.py BOOTSTRAP QUOTA WINDOW_SECONDS

The node measures rates over WINDOW_SECONDS, so a client moving B bytes takes at least
(B - WINDOW_SECONDS * QUOTA - its last request) / QUOTA. Prints OK at the end; exits non-zero
on a mismatch.
"""

import sys
import time

from kafka import KafkaProducer

bootstrap, quota, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
TOTAL = 2 * 1024 * 1024
BATCH = 64 * 1024
least = (TOTAL - window * quota - BATCH) / quota * 0.9


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def produce(client_id):
    p = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks="all",
                      linger_ms=5, batch_size=BATCH, request_timeout_ms=60000)
    value = b"x" * 1024
    start = time.monotonic()
    futures = [p.send("kpy-quota", value) for _ in range(TOTAL // len(value))]
    p.flush(timeout=120)
    for f in futures:
        f.get(timeout=60)
    seconds = time.monotonic() - start
    p.close()
    return seconds


fast = produce("kpy-fast")
held = produce("kpy-slow")
print(f"produce: kpy-fast {fast:.2f} s, kpy-slow {held:.2f} s (at least {least:.2f} s)", flush=True)
check(held >= least, "kpy-slow's produce is held to its quota")
check(fast * 3 < held, "kpy-fast, without a quota, is not held")
print("OK")
