"""Kafka ACLs with confluent-kafka (librdkafka): administered with CreateAcls, DescribeAcls
and DeleteAcls, and enforced on produce, consume, metadata, groups and transactions.

Usage: acls.py BOOTSTRAP PHASE

The node runs with `authorizer.class.name` set and `allow.everyone.if.no.acl.found=true`, and
this client connects without authentication, as `User:ANONYMOUS` (a resource no ACL names is
open to it; one an ACL names is open only as the ACLs say).

PHASE is
- `run`: creates ACLs (ANONYMOUS may write `orders` but not read it; `hidden` is readable by
  bob only; the group `locked` and the transactional id `locked-txn` are bob's) and checks:
  DescribeAcls with MATCH and ANY filters; a produce to `orders` is acknowledged and a consume
  refused with TOPIC_AUTHORIZATION_FAILED; `hidden` is left out of the metadata of every topic
  and refused when named; a produce to a topic no ACL names works; the group `locked` and the
  transactional id `locked-txn` are refused; bad bindings are refused with the reason. Then
  DeleteAcls of the DENY lets the consumer read `orders`.
- `after-restart`: the ACLs are still there and still enforced.
- `disabled` (a node without an authorizer): CreateAcls answers SECURITY_DISABLED.

Prints OK at the end; exits non-zero on a mismatch.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, NewTopic, ResourcePatternType,
                                   ResourceType)

bootstrap, phase = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap})
ME = "User:ANONYMOUS"


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def binding(rtype, name, principal, op, perm, pattern=ResourcePatternType.LITERAL):
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def acls_of(filt):
    return admin.describe_acls(filt, request_timeout=30).result()


def create(bindings):
    for b, fut in admin.create_acls(bindings, request_timeout=30).items():
        fut.result()


def produce(topic, value, conf=None):
    p = Producer({"bootstrap.servers": bootstrap, **(conf or {})})
    result = {}

    def done(err, msg):
        result["err"] = err
        result["offset"] = msg.offset() if msg is not None else None

    p.produce(topic, value=value, on_delivery=done)
    p.flush(30)
    return result.get("err")


def consume_error(topic, group):
    """The first error a consumer of `topic` in `group` meets, or None once it reads a record."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    c.subscribe([topic])
    deadline = time.time() + 30
    try:
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return m.error().code()
            return None
        return "timeout"
    finally:
        c.close()


ANY_FILTER = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


def check_enforced(orders_readable):
    err = produce("orders", b"acked")
    check(err is None, f"a produce to orders is acknowledged, not {err}")
    err = consume_error("orders", f"reader-{time.time()}")
    if orders_readable:
        check(err is None, f"orders is readable, not {err}")
    else:
        check(err == KafkaError.TOPIC_AUTHORIZATION_FAILED,
              f"reading orders is refused with TOPIC_AUTHORIZATION_FAILED, not {err}")
    # hidden: left out of every-topic metadata, refused when named.
    md = admin.list_topics(timeout=30)
    check("hidden" not in md.topics, f"hidden is not listed: {sorted(md.topics)}")
    check("orders" in md.topics and "open" in md.topics, f"orders and open are: {sorted(md.topics)}")
    named = admin.list_topics(topic="hidden", timeout=30).topics["hidden"]
    check(named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED,
          f"naming hidden is refused, not {named.error}")
    err = produce("hidden", b"x")
    check(err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED,
          f"a produce to hidden is refused, not {err}")
    # A group of bob's.
    err = consume_error("open", "locked")
    check(err == KafkaError.GROUP_AUTHORIZATION_FAILED,
          f"the group locked is refused with GROUP_AUTHORIZATION_FAILED, not {err}")
    # A transactional id of bob's.
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "locked-txn"})
    try:
        p.init_transactions(30)
        check(False, "init_transactions of locked-txn is refused")
    except KafkaException as e:
        code = e.args[0].code()
        check(code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
              f"locked-txn is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, not {e}")


if phase == "disabled":
    futs = admin.create_acls([binding(ResourceType.TOPIC, "t", "User:alice", AclOperation.READ,
                                      AclPermissionType.ALLOW)], request_timeout=30)
    for _, fut in futs.items():
        try:
            fut.result()
            check(False, "CreateAcls without an authorizer is refused")
        except KafkaException as e:
            check(e.args[0].code() == KafkaError.SECURITY_DISABLED,
                  f"CreateAcls without an authorizer answers SECURITY_DISABLED, not {e}")
    print("OK", flush=True)
    sys.exit(0)

if phase == "run":
    for name in ["orders", "hidden", "open"]:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result()
    create([
        # The cluster stays ANONYMOUS's to administer once it has an ACL.
        binding(ResourceType.BROKER, "kafka-cluster", ME, AclOperation.ALL,
                AclPermissionType.ALLOW),
        binding(ResourceType.TOPIC, "orders", ME, AclOperation.WRITE, AclPermissionType.ALLOW),
        binding(ResourceType.TOPIC, "ord", ME, AclOperation.READ, AclPermissionType.DENY,
                ResourcePatternType.PREFIXED),
        binding(ResourceType.TOPIC, "hidden", "User:bob", AclOperation.READ,
                AclPermissionType.ALLOW),
        binding(ResourceType.GROUP, "locked", "User:bob", AclOperation.READ,
                AclPermissionType.ALLOW),
        binding(ResourceType.TRANSACTIONAL_ID, "locked-txn", "User:bob", AclOperation.WRITE,
                AclPermissionType.ALLOW),
    ])
    everything = acls_of(ANY_FILTER)
    check(len(everything) == 6, f"six ACLs are described, not {everything}")
    matching = acls_of(AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH,
                                        None, None, AclOperation.ANY, AclPermissionType.ANY))
    check(sorted((b.name, b.permission_type) for b in matching)
          == sorted([("orders", AclPermissionType.ALLOW), ("ord", AclPermissionType.DENY)]),
          f"MATCH orders finds the literal and the prefixed ACL: {matching}")
    # Bad bindings are refused with the reason.
    for bad, why in [
        (binding(ResourceType.TOPIC, "t", "alice", AclOperation.READ, AclPermissionType.ALLOW),
         "Type:name"),
        (binding(ResourceType.GROUP, "g", "User:alice", AclOperation.WRITE,
                 AclPermissionType.ALLOW), "not an operation"),
    ]:
        try:
            create([bad])
            check(False, f"{bad} is refused")
        except KafkaException as e:
            check(why in str(e), f"{bad} is refused saying {why!r}: {e}")
    check(produce("open", b"anyone") is None, "a topic no ACL names is open")
    check_enforced(orders_readable=False)
    print("enforced before the delete", flush=True)

    deleted = admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, ME, None, AclOperation.ANY,
        AclPermissionType.DENY)], request_timeout=30)
    for _, fut in deleted.items():
        gone = fut.result()
        check(len(gone) == 1 and gone[0].name == "ord", f"DeleteAcls deletes the DENY: {gone}")
    # Readable only with an ALLOW: WRITE does not imply READ.
    create([binding(ResourceType.TOPIC, "orders", ME, AclOperation.READ,
                    AclPermissionType.ALLOW)])
    check_enforced(orders_readable=True)
    print("OK", flush=True)

elif phase == "after-restart":
    everything = acls_of(ANY_FILTER)
    check(len(everything) == 6, f"the six ACLs survive a restart: {everything}")
    check_enforced(orders_readable=True)
    print("OK", flush=True)
else:
    sys.exit(f"unknown phase {phase}")
