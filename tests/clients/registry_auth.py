"""The Schema Registry with HTTP basic auth (`[registry] authentication = "basic"`), through
confluent-kafka's SchemaRegistryClient and AvroSerializer, authorized by the Kafka ACLs of
each subject's topic.

Usage: registry_auth.py REGISTRY_URL SASL_BOOTSTRAP HTTP_BASE

The node runs the ACL authorizer with `super.users=User:admin`; the users `admin`
(`admin-secret`), `alice` (`alice-secret`) and `bob` (`bob-secret`) were added with
`inlet users add`. ACLs are created by admin over SASL/SCRAM with the Kafka admin API.

Checks:
- no credentials, a wrong password, or a Bearer token: 401;
- admin registers `orders-value`; alice, with no ACL, is refused reading and writing it
  (403, error code 40301) and lists no subject;
- once admin allows alice WRITE on topic `orders`, she registers a new version (through the
  AvroSerializer with `basic.auth.user.info`, as a producer does), reads it back, lists
  `orders-value` and reads its schema by id; she may not delete the subject nor change its
  compatibility, nor the global one; with a bearer token of the HTTP listener's token
  endpoint (`bearer.auth.token`) she is the same principal;
- bob, allowed READ on `payments` only, may not read the `orders` schema by its id;
- a DENY of DESCRIBE on `orders` for alice overrides her ALLOW of WRITE.

Prints OK at the end; exits non-zero on a mismatch.
"""

import json
import sys
import time
import urllib.parse
import urllib.request

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

url, sasl, http_base = sys.argv[1], sys.argv[2], sys.argv[3]

V1 = '{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}'
V2 = ('{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},'
      '{"name":"note","type":"string","default":""}]}')


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def client(user_info=None, **extra):
    conf = {"url": url}
    if user_info:
        conf["basic.auth.user.info"] = user_info
    conf.update(extra)
    return SchemaRegistryClient(conf)


def refused(call, status, what):
    """`call()` must fail with `status` (and Confluent's 40301 for a 403)."""
    try:
        call()
    except SchemaRegistryError as e:
        check(e.http_status_code == status, f"{what}: status {e.http_status_code}, not {status}: {e}")
        if status == 403:
            check(e.error_code == 40301, f"{what}: error code {e.error_code}")
        return str(e)
    check(False, f"{what}: allowed, expected {status}")


def eventually(call, what, seconds=10):
    """`call()` succeeds within `seconds` (an ACL change reaches the authorizer)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except SchemaRegistryError as e:
            if time.monotonic() > deadline:
                check(False, f"{what}: still refused: {e}")
            time.sleep(0.2)


def acl(principal, topic, op, permission=AclPermissionType.ALLOW):
    admin = AdminClient({
        "bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
        "sasl.password": "admin-secret",
    })
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                         op, permission)
    for _, fut in admin.create_acls([binding], request_timeout=30).items():
        fut.result()


# Authentication.
text = refused(lambda: client().get_subjects(), 401, "no credentials")
check("basic authentication" in text, f"the 401 says what is needed: {text}")
refused(lambda: client("alice:wrong").get_subjects(), 401, "a wrong password")
refused(lambda: client("nobody:x").get_subjects(), 401, "an unknown user")
refused(lambda: client(**{"bearer.auth.credentials.source": "STATIC_TOKEN",
                          "bearer.auth.token": "t", "bearer.auth.logical.cluster": "c",
                          "bearer.auth.identity.pool.id": "p"}).get_subjects(),
        401, "a bearer token that is not one of the node's")

admin = client("admin:admin-secret")
alice = client("alice:alice-secret")
bob = client("bob:bob-secret")
v1_id = admin.register_schema("orders-value", Schema(V1, "AVRO"))
check(admin.get_subjects() == ["orders-value"], "admin lists the subject")

# alice has no ACL.
text = refused(lambda: alice.register_schema("orders-value", Schema(V2, "AVRO")), 403,
               "alice registers without WRITE")
check("SUBJECT_WRITE" in text and "User:alice" in text, f"the 403 names what was refused: {text}")
refused(lambda: alice.get_latest_version("orders-value"), 403, "alice reads without an ACL")
check(alice.get_subjects() == [], "alice lists no subject")

# WRITE on the topic: the producer's path.
acl("User:alice", "orders", AclOperation.WRITE)
serializer = AvroSerializer(alice, V2, conf={"auto.register.schemas": True})
framed = eventually(lambda: serializer({"id": 7, "note": "hi"},
                                       SerializationContext("orders", MessageField.VALUE)),
                    "alice's serializer registers once she may WRITE")
latest = alice.get_latest_version("orders-value")
check(latest.version == 2 and int.from_bytes(framed[1:5], "big") == latest.schema_id,
      f"alice registered version 2: {latest.version}")
check(alice.get_subjects() == ["orders-value"], "alice lists the subject she may read")
check("Order" in alice.get_schema(v1_id).schema_str, "alice reads a schema by id")
refused(lambda: alice.delete_subject("orders-value"), 403, "alice deletes without DELETE")
refused(lambda: alice.set_compatibility("orders-value", "NONE"), 403,
        "alice sets a subject's compatibility without ALTER_CONFIGS")
refused(lambda: alice.set_compatibility(level="NONE"), 403,
        "alice sets the global compatibility")

# A bearer token of the HTTP listener's token endpoint, as Confluent's `bearer.auth.token`.
form = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": "alice",
                               "client_secret": "alice-secret"}).encode()
with urllib.request.urlopen(f"{http_base}/iceberg/v1/oauth/tokens", data=form, timeout=30) as r:
    token = json.loads(r.read())["access_token"]
bearer = client(**{"bearer.auth.credentials.source": "STATIC_TOKEN", "bearer.auth.token": token,
                   "bearer.auth.logical.cluster": "inlet", "bearer.auth.identity.pool.id": "inlet"})
check(bearer.get_subjects() == ["orders-value"], "alice's bearer token lists what she may read")
refused(lambda: bearer.delete_subject("orders-value"), 403, "alice's bearer token deletes")

# bob reads another topic only.
acl("User:bob", "payments", AclOperation.READ)
refused(lambda: bob.get_schema(v1_id), 403, "bob reads the orders schema by id")
check(bob.get_subjects() == [], "bob lists no subject")

# Deny overrides allow.
acl("User:alice", "orders", AclOperation.DESCRIBE, AclPermissionType.DENY)
deadline = time.monotonic() + 10
while True:
    try:
        # A new client each time: the client caches what it read.
        client("alice:alice-secret").get_latest_version("orders-value")
    except SchemaRegistryError as e:
        check(e.http_status_code == 403, f"a deny answers 403: {e}")
        break
    check(time.monotonic() < deadline, "alice's DENY of DESCRIBE never took effect")
    time.sleep(0.2)
check(alice.get_subjects() == [], "denied, alice lists no subject")
check(client("admin:admin-secret").get_latest_version("orders-value").version == 2,
      "admin still reads it")
print("OK", flush=True)
