"""SASL on a Kafka listener with confluent-kafka (librdkafka): PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 against the users' SCRAM credentials, the principals they give to the
authorizer, SCRAM credentials managed with the admin API, and re-authentication (KIP-368).

Usage: sasl.py PLAINTEXT_BOOTSTRAP SASL_BOOTSTRAP

The node runs two listeners (PLAINTEXT and SASL_PLAINTEXT), the ACL authorizer with
`super.users=User:admin` and no `allow.everyone.if.no.acl.found`, and
`connections.max.reauth.ms=3000`. The users `admin` (password `admin-secret`) and `alice`
(`alice-secret`, SCRAM-SHA-256 only) were added with `inlet users add` before it started.

Checks:
- admin with SCRAM-SHA-512 creates a topic, produces and consumes: the metadata it gets
  names the SASL listener's addresses, not the PLAINTEXT one's;
- alice with PLAIN and with SCRAM-SHA-256 authenticates, and is refused what no ACL grants
  her (TOPIC_AUTHORIZATION_FAILED), then allowed once admin grants it; SCRAM-SHA-512 fails
  for her (she has no such credential);
- a wrong password fails authentication, for PLAIN and SCRAM;
- an anonymous client on the PLAINTEXT listener sees no topic;
- admin creates bob with AlterUserScramCredentials; bob authenticates; DescribeUserScram-
  Credentials lists admin, alice and bob; once deleted, bob no longer authenticates;
- a producer that keeps sending for 8 s (past two session lifetimes) has every record
  acknowledged: librdkafka re-authenticates as the node asks.

Prints OK at the end; exits non-zero on a mismatch.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

plaintext, sasl = sys.argv[1], sys.argv[2]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def conf(user, password, mechanism):
    return {
        "bootstrap.servers": sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def produce(c, topic, value):
    p = Producer(c)
    result = {}

    def done(err, msg):
        result["err"] = err

    p.produce(topic, value=value, on_delivery=done)
    p.flush(30)
    return result.get("err", "no delivery report")


def auth_fails(c):
    """Whether authenticating with `c` fails (the client reports an authentication error)."""
    errors = []
    a = AdminClient({**c, "error_cb": lambda e: errors.append(e)})
    try:
        a.list_topics(timeout=8)
        return False
    except KafkaException as e:
        errors.append(e.args[0])
    # The error callback is served by poll.
    a.poll(1)
    return any(e.code() == KafkaError._AUTHENTICATION for e in errors)


admin_conf = conf("admin", "admin-secret", "SCRAM-SHA-512")
admin = AdminClient(admin_conf)
admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result()
md = admin.list_topics(timeout=30)
ports = sorted(b.port for b in md.brokers.values())
sasl_port = int(sasl.rsplit(":", 1)[1])
check(ports == [sasl_port], f"the SASL listener's metadata names its own port {sasl_port}: {ports}")
check(produce(admin_conf, "orders", b"from-admin") is None, "admin produces")
c = Consumer({**admin_conf, "group.id": "admins", "auto.offset.reset": "earliest"})
c.subscribe(["orders"])
got = None
deadline = time.time() + 30
while got is None and time.time() < deadline:
    m = c.poll(0.5)
    if m is not None and not m.error():
        got = m.value()
c.close()
check(got == b"from-admin", f"admin consumes what it produced: {got}")

for mechanism in ["PLAIN", "SCRAM-SHA-256"]:
    alice = conf("alice", "alice-secret", mechanism)
    err = produce(alice, "orders", b"from-alice")
    check(err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED,
          f"alice ({mechanism}) is authenticated and refused by the authorizer, not {err}")
    check(auth_fails(conf("alice", "wrong", mechanism)), f"a wrong password fails ({mechanism})")
check(auth_fails(conf("alice", "alice-secret", "SCRAM-SHA-512")),
      "alice has no SCRAM-SHA-512 credential")
for _, fut in admin.create_acls([AclBinding(ResourceType.TOPIC, "orders",
                                            ResourcePatternType.LITERAL, "User:alice", "*",
                                            AclOperation.WRITE, AclPermissionType.ALLOW)],
                                request_timeout=30).items():
    fut.result()
for mechanism in ["PLAIN", "SCRAM-SHA-256"]:
    err = produce(conf("alice", "alice-secret", mechanism), "orders", b"from-alice")
    check(err is None, f"alice ({mechanism}) produces once allowed, not {err}")
print("alice ok", flush=True)

anonymous = AdminClient({"bootstrap.servers": plaintext})
seen = anonymous.list_topics(timeout=30).topics
check("orders" not in seen, f"an anonymous client sees no topic: {sorted(seen)}")

futs = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
    "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret")],
    request_timeout=30)
for _, fut in futs.items():
    fut.result()
check(not auth_fails(conf("bob", "bob-secret", "SCRAM-SHA-256")), "bob authenticates")
described = admin.describe_user_scram_credentials(request_timeout=30).result()
check(sorted(described) == ["admin", "alice", "bob"], f"three users: {sorted(described)}")
check([i.mechanism for i in described["alice"].scram_credential_infos]
      == [ScramMechanism.SCRAM_SHA_256], f"alice's mechanisms: {described['alice']}")
futs = admin.alter_user_scram_credentials([UserScramCredentialDeletion(
    "bob", ScramMechanism.SCRAM_SHA_256)], request_timeout=30)
for _, fut in futs.items():
    fut.result()
check(auth_fails(conf("bob", "bob-secret", "SCRAM-SHA-256")), "bob, deleted, fails")
print("credentials ok", flush=True)

# Re-authentication: the session lasts 3 s; records keep being acknowledged for 8 s.
p = Producer({**admin_conf, "linger.ms": 0})
acked, failed = [], []
start = time.time()
i = 0
while time.time() - start < 8:
    p.produce("orders", value=f"r{i}".encode(),
              on_delivery=lambda err, msg: (failed if err else acked).append(err or msg.offset()))
    p.poll(0.2)
    i += 1
p.flush(30)
check(not failed and len(acked) == i, f"{len(acked)} of {i} acknowledged across re-authentications: {failed[:3]}")
print("OK", flush=True)
