"""TLS on Kafka listeners with confluent-kafka (librdkafka, with its own OpenSSL): an SSL
listener that requires client certificates (mTLS, the certificate naming the principal), and a
SASL_SSL listener with SCRAM-SHA-512 and PLAIN.

Usage: tls.py SSL_BOOTSTRAP SASL_SSL_BOOTSTRAP CERT_DIR PHASE

CERT_DIR holds `ca.pem` (the CA of the node's and the clients' certificates),
`client.pem`/`client.key` (CN=client-a,O=Example), `expired.pem`/`expired.key` (signed by
the CA, expired), `stranger.pem`/`stranger.key` (signed by another CA), and, after the node's
certificate is replaced, `ca2.pem`.

PHASE is
- `run`: over SASL_SSL, admin (SCRAM-SHA-512) creates the topic `secure` and grants
  `User:CN=client-a,O=Example` WRITE and READ on it and READ on the group `readers`; over
  SSL, client-a produces and consumes; no certificate, an expired one and a stranger's fail
  the handshake; PLAIN over SASL_SSL works and a wrong password fails; a client that does
  not trust the node's CA fails.
- `reloaded`: the node's certificate was replaced by one of `ca2.pem`'s, without a restart:
  a client trusting only ca2 connects, one trusting only the first CA does not.

Prints OK at the end; exits non-zero on a mismatch.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

ssl_bootstrap, sasl_ssl_bootstrap, certs, phase = sys.argv[1:5]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def ssl_conf(cert=None, ca="ca.pem"):
    c = {"bootstrap.servers": ssl_bootstrap, "security.protocol": "SSL",
         "ssl.ca.location": f"{certs}/{ca}"}
    if cert:
        c["ssl.certificate.location"] = f"{certs}/{cert}.pem"
        c["ssl.key.location"] = f"{certs}/{cert}.key"
    return c


def sasl_conf(mechanism, password="admin-secret", ca="ca.pem"):
    return {"bootstrap.servers": sasl_ssl_bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": f"{certs}/{ca}", "sasl.mechanism": mechanism,
            "sasl.username": "admin", "sasl.password": password}


def connects(c):
    """Whether a client with `c` gets metadata (else the errors it met)."""
    errors = []
    a = AdminClient({**c, "error_cb": lambda e: errors.append(e)})
    try:
        a.list_topics(timeout=8)
        return True, errors
    except KafkaException as e:
        errors.append(e.args[0])
    a.poll(1)
    return False, errors


def produce(c, topic, value):
    p = Producer(c)
    result = {}
    p.produce(topic, value=value, on_delivery=lambda err, msg: result.update(err=err))
    p.flush(30)
    return result.get("err", "no delivery report")


if phase == "run":
    admin = AdminClient(sasl_conf("SCRAM-SHA-512"))
    admin.create_topics([NewTopic("secure", 1, 1)])["secure"].result()
    client = "User:CN=client-a,O=Example"
    for _, fut in admin.create_acls([
        AclBinding(ResourceType.TOPIC, "secure", ResourcePatternType.LITERAL, client, "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "secure", ResourcePatternType.LITERAL, client, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "readers", ResourcePatternType.LITERAL, client, "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ], request_timeout=30).items():
        fut.result()

    err = produce(ssl_conf("client"), "secure", b"over-mtls")
    check(err is None, f"client-a produces over SSL, not {err}")
    c = Consumer({**ssl_conf("client"), "group.id": "readers", "auto.offset.reset": "earliest"})
    c.subscribe(["secure"])
    got, deadline = None, time.time() + 30
    while got is None and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None:
            check(not m.error() or m.error().code() == KafkaError._PARTITION_EOF,
                  f"client-a consumes: {m.error()}")
            if not m.error():
                got = m.value()
    c.close()
    check(got == b"over-mtls", f"client-a reads what it wrote: {got}")

    for cert, what in [(None, "no certificate"), ("expired", "an expired certificate"),
                       ("stranger", "a certificate of another CA")]:
        ok, errors = connects(ssl_conf(cert))
        check(not ok, f"{what} is refused: {errors}")
    ok, errors = connects(sasl_conf("PLAIN"))
    check(ok, f"PLAIN over SASL_SSL: {errors}")
    ok, errors = connects(sasl_conf("PLAIN", password="wrong"))
    check(not ok and any(e.code() == KafkaError._AUTHENTICATION for e in errors),
          f"a wrong password over SASL_SSL fails authentication: {errors}")
    ok, errors = connects({**sasl_conf("SCRAM-SHA-512"), "ssl.ca.location": f"{certs}/stranger-ca.pem"})
    check(not ok, f"a client that does not trust the node's CA fails: {errors}")
    print("OK", flush=True)
elif phase == "reloaded":
    ok, errors = connects(sasl_conf("SCRAM-SHA-512", ca="ca2.pem"))
    check(ok, f"a client trusting the new CA connects: {errors}")
    ok, errors = connects(sasl_conf("SCRAM-SHA-512"))
    check(not ok, f"a client trusting only the old CA does not: {errors}")
    print("OK", flush=True)
else:
    sys.exit(f"unknown phase {phase}")
