"""Actions the audit trail must record (`[audit] file`), made as the test's users.

Usage: audit.py SASL_BOOTSTRAP HTTP_URL REGISTRY_URL

The node runs a SASL_PLAINTEXT listener, the ACL authorizer with `super.users=User:admin`,
`[http] authentication = "token"` and `[registry] authentication = "basic"`; the users
admin, alice and bob (password `<user>-secret`) exist. The test reads the audit file
afterwards and checks what it says; this script only acts:

- admin creates topic `audited`; alice tries to create `alice-topic` (refused by the
  authorizer); bob authenticates with a wrong password;
- admin grants alice READ on `audited`, then deletes the topic;
- admin creates the namespace `audit_ns` through the Iceberg REST catalog; alice tries to
  create `alice_ns` (403);
- admin registers a schema for `audited-value` in the Schema Registry.

Prints OK at the end; exits non-zero when an action does not go as planned.
"""

import base64
import json
import sys
import urllib.error
import urllib.request

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

sasl, http_url, registry_url = sys.argv[1], sys.argv[2], sys.argv[3]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def client(user, password, mechanism="PLAIN"):
    return AdminClient({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": mechanism, "sasl.username": user,
                        "sasl.password": password})


admin = client("admin", "admin-secret", "SCRAM-SHA-512")
admin.create_topics([NewTopic("audited", 1, 1)])["audited"].result(30)
check(True, "admin created audited")
alice = client("alice", "alice-secret")
try:
    alice.create_topics([NewTopic("alice-topic", 1, 1)])["alice-topic"].result(30)
    check(False, "alice is refused a topic")
except KafkaException as e:
    check(e.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"alice is refused: {e}")
bob = client("bob", "not-bobs-password")
try:
    bob.list_topics(timeout=5)
    check(False, "bob's wrong password fails")
except KafkaException:
    check(True, "bob's wrong password fails")
for _, f in admin.create_acls([AclBinding(ResourceType.TOPIC, "audited",
                                          ResourcePatternType.LITERAL, "User:alice", "*",
                                          AclOperation.READ, AclPermissionType.ALLOW)],
                              request_timeout=30).items():
    f.result()
check(True, "admin granted alice READ")
admin.delete_topics(["audited"])["audited"].result(30)
check(True, "admin deleted audited")


def post(url, user, body, content_type="application/json"):
    auth = base64.b64encode(f"{user}:{user}-secret".encode()).decode()
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Basic {auth}",
                                          "Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


status = post(f"{http_url}/iceberg/v1/namespaces", "admin", {"namespace": ["audit_ns"]})
check(status == 200, f"admin creates a namespace: {status}")
status = post(f"{http_url}/iceberg/v1/namespaces", "alice", {"namespace": ["alice_ns"]})
check(status == 403, f"alice may not create one: {status}")
status = post(f"{registry_url}/subjects/audited-value/versions", "admin",
              {"schema": json.dumps({"type": "record", "name": "A",
                                     "fields": [{"name": "id", "type": "long"}]})},
              "application/vnd.schemaregistry.v1+json")
check(status == 200, f"admin registers a schema: {status}")
print("OK", flush=True)
