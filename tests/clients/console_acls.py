"""The console's listings for a principal who is not an operator: they name only what its Kafka
ACLs let it DESCRIBE (tests/console.rs).

Usage: console_acls.py SASL_BOOTSTRAP HTTP_URL REGISTRY_URL

The node authenticates HTTP with tokens and has the ACL authorizer on with `super.users=User:admin`;
`alice` and `admin` log in with `<name>-secret`. As admin (SASL/PLAIN over confluent-kafka) this
creates the topics `alice-orders` and `secret`, gives alice DESCRIBE and READ on `alice-orders`
and READ on the group `alice-g`, registers a schema for each topic, and commits offsets for the
groups `alice-g` (as alice, on `alice-orders`) and `admin-g` (as admin, on both topics). Then it
checks what `/v1/topics`, `/v1/groups`, `/v1/schemas`, a subject's version and diff,
`/v1/cluster` and `/v1/history` answer alice and admin.

Prints OK at the end; exits non-zero on a mismatch.
"""

import base64
import json
import sys
import time
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

bootstrap, http, registry = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3].rstrip("/")


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def sasl(user):
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret"}


def get(path, user):
    token = base64.b64encode(f"{user}:{user}-secret".encode()).decode()
    request = urllib.request.Request(http + path, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


admin = AdminClient(sasl("admin"))
for _, f in admin.create_topics([NewTopic("alice-orders", 1), NewTopic("secret", 1)],
                                request_timeout=30).items():
    f.result()
bindings = [
    AclBinding(ResourceType.TOPIC, "alice-orders", ResourcePatternType.LITERAL, "User:alice", "*",
               op, AclPermissionType.ALLOW)
    for op in (AclOperation.DESCRIBE, AclOperation.READ)
] + [AclBinding(ResourceType.GROUP, "alice-g", ResourcePatternType.LITERAL, "User:alice", "*",
                AclOperation.READ, AclPermissionType.ALLOW)]
for _, f in admin.create_acls(bindings, request_timeout=30).items():
    f.result()

producer = Producer(sasl("admin"))
for topic in ("alice-orders", "secret"):
    producer.produce(topic, value=b"x")
check(producer.flush(30) == 0, "admin's records are acknowledged")

schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]})
for subject in ("alice-orders-value", "secret-value"):
    body = json.dumps({"schema": schema}).encode()
    request = urllib.request.Request(
        f"{registry}/subjects/{subject}/versions", data=body,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        check(r.status == 200, f"{subject} registered")


def commit(user, group, topics):
    consumer = Consumer({**sasl(user), "group.id": group, "enable.auto.commit": False})
    deadline = time.time() + 60
    while True:
        try:
            consumer.commit(offsets=[TopicPartition(t, 0, 1) for t in topics], asynchronous=False)
            break
        except Exception as e:  # the coordinator may still be loading
            check(time.time() < deadline, f"{user} commits for {group}: {e}")
            time.sleep(0.5)
    consumer.close()


commit("alice", "alice-g", ["alice-orders"])
commit("admin", "admin-g", ["alice-orders", "secret"])

# Topics: alice sees hers; the operator sees both.
status, topics = get("/v1/topics", "alice")
check(status == 200, f"/v1/topics for alice: {status} {topics}")
check([t["name"] for t in topics] == ["alice-orders"], f"alice's topics: {topics}")
status, topics = get("/v1/topics", "admin")
check({"alice-orders", "secret"} <= {t["name"] for t in topics}, f"admin's topics: {topics}")

# Groups: alice sees hers, and of admin-g nothing (no DESCRIBE on it).
status, groups = get("/v1/groups", "alice")
check(status == 200, f"/v1/groups for alice: {status} {groups}")
check([g["group"] for g in groups] == ["alice-g"], f"alice's groups: {groups}")
check([(p["topic"], p["committed"]) for p in groups[0]["partitions"]] == [("alice-orders", 1)],
      f"alice-g's partitions: {groups[0]}")
status, groups = get("/v1/groups", "admin")
admin_g = [g for g in groups if g["group"] == "admin-g"]
check(len(admin_g) == 1 and {p["topic"] for p in admin_g[0]["partitions"]} == {"alice-orders", "secret"},
      f"admin's groups: {groups}")

# Subjects: by their topic, as the registry decides.
status, subjects = get("/v1/schemas", "alice")
check(status == 200 and [s["subject"] for s in subjects] == ["alice-orders-value"],
      f"alice's subjects: {status} {subjects}")
status, _ = get("/v1/schemas/alice-orders-value/versions/latest", "alice")
check(status == 200, f"alice reads her subject: {status}")
for path in ("/v1/schemas/secret-value/versions/latest", "/v1/schemas/secret-value/diff?from=1"):
    status, body = get(path, "alice")
    check(status == 403 and "DESCRIBE" in body["error"], f"{path} for alice: {status} {body}")
    status, _ = get(path, "admin")
    check(status == 200, f"{path} for admin: {status}")

# The cluster view: only what alice may describe; everything for the operator.
status, view = get("/v1/cluster", "alice")
check(status == 200 and list(view["partitions"]) == ["alice-orders"], f"alice's partitions: {status} {view.get('partitions')}")
check([g["group"] for g in view["groups"]] == ["alice-g"], f"alice's group owners: {view['groups']}")
status, view = get("/v1/cluster", "admin")
check({"alice-orders", "secret"} <= set(view["partitions"]), f"admin's partitions: {view['partitions']}")
check({"alice-g", "admin-g"} <= {g["group"] for g in view["groups"]}, f"admin's group owners: {view['groups']}")

# History: a group's series only to who may describe the group (sampled every 200 ms here).
deadline = time.time() + 60
while True:
    status, h = get("/v1/history?prefix=group:", "admin")
    names = set(h["series"]) if status == 200 else set()
    if {"group:alice-g:lag", "group:admin-g:lag"} <= names:
        break
    check(time.time() < deadline, f"admin's group history: {status} {h}")
    time.sleep(0.2)
status, h = get("/v1/history?prefix=group:", "alice")
check(status == 200 and set(h["series"]) == {"group:alice-g:lag"}, f"alice's history: {status} {h}")
status, h = get("/v1/history?prefix=node:", "alice")
check(status == 200 and "node:produced_bytes_per_s" in h["series"], f"node history: {status} {h}")
print("OK", flush=True)
