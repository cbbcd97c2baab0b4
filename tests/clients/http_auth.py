"""The HTTP listener with `[http] authentication = "token"`: pyiceberg's `credential` through
the catalog's OAuth2 token endpoint, table privileges from the Kafka ACLs, SQL and watermarks
under the same tokens.

Usage: http_auth.py HTTP_BASE SASL_BOOTSTRAP

The node runs the ACL authorizer with `super.users=User:admin`; the users `admin`
(`admin-secret`), `alice` (`alice-secret`) and `bob` (`bob-secret`) were added with
`inlet users add`. ACLs and a table topic are made by admin over SASL/SCRAM.

Checks:
- without credentials every endpoint but /healthz answers 401 (the catalog's with its error
  model and a challenge); the token endpoint refuses a wrong secret (401 invalid_client) and
  an unknown grant (400 unsupported_grant_type); a tampered token is refused;
- admin (a super user) creates a namespace and a table through pyiceberg and appends to it;
- alice, with no ACL, lists no table, may not load, append to or drop it, nor create a
  namespace (403 ForbiddenError);
- once allowed READ on the topic named by the table's identifier (`analytics.daily`), she
  lists, loads and scans it, counts its rows with SQL and reads its watermark, but still may
  not append to it or drop it; bob's query finds no such table and his watermark is refused;
- a table topic's table (`default.clicks`) follows its topic's ACLs: alice reads it once
  allowed READ on `clicks`;
- a token exchanged for a new one (Iceberg Java's refresh) works.

Prints alice's token (`TOKEN <token>`), for the test's `inlet query`.

Prints OK at the end; exits non-zero on a mismatch.
"""

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

base, sasl = sys.argv[1], sys.argv[2]
iceberg = f"{base}/iceberg"


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def http(method, path, body=None, headers=None, form=None):
    """(status, headers, parsed JSON or text) of a request to the node."""
    data = None
    headers = dict(headers or {})
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, hdrs, text = r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        status, hdrs, text = e.code, e.headers, e.read().decode()
    try:
        return status, hdrs, json.loads(text)
    except ValueError:
        return status, hdrs, text


def token(user, password):
    status, _, body = http("POST", "/iceberg/v1/oauth/tokens",
                           form={"grant_type": "client_credentials", "client_id": user,
                                 "client_secret": password, "scope": "catalog"})
    check(status == 200 and body["token_type"] == "bearer" and body["expires_in"] > 0,
          f"a token for {user}: {status} {body}")
    return body["access_token"]


def bearer(t):
    return {"Authorization": f"Bearer {t}"}


def catalog(user, password):
    return load_catalog(f"inlet-{user}", **{
        "type": "rest", "uri": iceberg, "credential": f"{user}:{password}",
        "oauth2-server-uri": f"{iceberg}/v1/oauth/tokens"})


def forbidden(call, what):
    try:
        call()
    except ForbiddenError as e:
        return str(e)
    check(False, f"{what}: allowed, expected 403")


def kafka_admin():
    return AdminClient({
        "bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
        "sasl.password": "admin-secret",
    })


KAFKA_ADMIN = kafka_admin()  # kept: a client dropped before its futures resolve fails them


def allow(principal, topic, op):
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
                         op, AclPermissionType.ALLOW)
    for _, fut in KAFKA_ADMIN.create_acls([binding], request_timeout=30).items():
        fut.result()


def expect(cond, what):
    """Inside `eventually`: a mismatch to retry."""
    if not cond:
        raise AssertionError(what)


def eventually(call, what, seconds=30):
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - any failure until the deadline
            if time.monotonic() > deadline:
                check(False, f"{what}: {e!r}")
            time.sleep(0.3)


# Authentication.
check(http("GET", "/healthz")[0] == 200, "/healthz stays open")
for path in ["/v1/tables", "/metrics", "/v1/cluster", "/v1/watermarks/analytics/daily"]:
    status, _, body = http("GET", path)
    check(status == 401, f"{path} without credentials: {status} {body}")
status, hdrs, body = http("GET", "/iceberg/v1/config")
check(status == 401 and body["error"]["type"] == "NotAuthorizedException"
      and "Bearer" in (hdrs.get("WWW-Authenticate") or ""),
      f"the catalog without credentials: {status} {body}")
status, _, body = http("POST", "/iceberg/v1/oauth/tokens",
                       form={"grant_type": "client_credentials", "client_id": "alice",
                             "client_secret": "wrong"})
check(status == 401 and body["error"] == "invalid_client", f"a wrong secret: {status} {body}")
status, _, body = http("POST", "/iceberg/v1/oauth/tokens",
                       form={"grant_type": "password", "username": "alice", "password": "x"})
check(status == 400 and body["error"] == "unsupported_grant_type", f"a password grant: {body}")
alice_token = token("alice", "alice-secret")
head, claims, signature = alice_token.split(".")
tampered = f"{head}.{claims}.{'A' * len(signature)}"
status, _, body = http("GET", "/iceberg/v1/config", headers=bearer(tampered))
check(status == 401 and "signature" in body["error"]["message"], f"a tampered token: {body}")
status, _, body = http("GET", "/iceberg/v1/config", headers=bearer(alice_token))
check(status == 200, f"alice's token reads the config: {status} {body}")

# admin makes a table.
admin = catalog("admin", "admin-secret")
admin.create_namespace("analytics")
schema = Schema(NestedField(1, "id", LongType(), required=False))
table = admin.create_table("analytics.daily", schema=schema)
table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))

# alice without an ACL.
alice = catalog("alice", "alice-secret")
check(alice.list_tables("analytics") == [], "alice lists no table")
text = forbidden(lambda: alice.load_table("analytics.daily"), "alice loads")
check("User:alice" in text and "describe" in text, f"the 403 says who and what: {text}")
forbidden(lambda: alice.create_namespace("hers"), "alice creates a namespace")
forbidden(lambda: alice.drop_table("analytics.daily"), "alice drops")

# READ on the table's resource.
allow("User:alice", "analytics.daily", AclOperation.READ)
eventually(lambda: expect(alice.list_tables("analytics") == [("analytics", "daily")], "listed"),
           "alice lists the table once she may READ it")
theirs = alice.load_table("analytics.daily")
check(theirs.scan().to_arrow().num_rows == 2, "alice scans the table")
forbidden(lambda: theirs.append(pa.table({"id": pa.array([3], pa.int64())})), "alice appends")
forbidden(lambda: alice.drop_table("analytics.daily"), "alice drops with READ")

bob_token = token("bob", "bob-secret")
query = {"sql": "SELECT count(*) AS n FROM analytics.daily"}
status, _, body = http("POST", "/v1/query", body=query, headers=bearer(alice_token))
check(status == 200 and body == [{"n": 2}], f"alice's query: {status} {body}")
status, _, body = http("POST", "/v1/query", body=query, headers=bearer(bob_token))
check(status >= 400 and "daily" in json.dumps(body), f"bob's query finds no table: {status} {body}")
status, _, body = http("GET", "/v1/watermarks/analytics/daily", headers=bearer(alice_token))
check(status == 200 and body["table"].endswith("daily"), f"alice's watermark: {status} {body}")
status, _, body = http("GET", "/v1/watermarks/analytics/daily", headers=bearer(bob_token))
check(status == 403, f"bob's watermark: {status} {body}")
status, _, _ = http("GET", "/metrics", headers=bearer(bob_token))
check(status == 200, "an authenticated user reads /metrics")

# A table topic's table follows its topic's ACLs.
for _, fut in KAFKA_ADMIN.create_topics([NewTopic("clicks", 1, 1, config={
        "table.topic.enable": "true", "table.topic.convert.value.type": "string",
        "table.topic.commit.interval.ms": "1000"})]).items():
    fut.result()
producer = Producer({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                     "sasl.password": "admin-secret"})
for i in range(3):
    producer.produce("clicks", value=f"click-{i}".encode())
check(producer.flush(30) == 0, "the clicks are acknowledged")
eventually(lambda: expect(admin.load_table("default.clicks").scan().to_arrow().num_rows == 3,
                          "3 rows"), "the clicks reach their table", seconds=120)
forbidden(lambda: alice.load_table("default.clicks"), "alice loads clicks")
allow("User:alice", "clicks", AclOperation.READ)
rows = eventually(lambda: alice.load_table("default.clicks").scan().to_arrow().num_rows,
                  "alice reads clicks once she may READ the topic")
check(rows == 3, f"alice reads the 3 clicks: {rows}")
bob = catalog("bob", "bob-secret")
forbidden(lambda: bob.load_table("default.clicks"), "bob loads clicks")

# Token exchange, as Iceberg's Java client refreshes.
status, _, body = http("POST", "/iceberg/v1/oauth/tokens",
                       form={"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                             "subject_token": alice_token,
                             "subject_token_type": "urn:ietf:params:oauth:token-type:access_token"})
check(status == 200, f"token exchange: {status} {body}")
status, _, body = http("POST", "/v1/query", body=query, headers=bearer(body["access_token"]))
check(status == 200 and body == [{"n": 2}], f"the exchanged token queries: {status} {body}")
print(f"TOKEN {alice_token}", flush=True)
print("OK", flush=True)
