"""SASL/OAUTHBEARER on a Kafka listener with confluent-kafka (librdkafka's `oauth_cb`): tokens
of an identity provider checked against its JSON Web Key Set, and Inlet's own tokens from the
HTTP listener's OAuth2 token endpoint.

Usage: oauthbearer.py SASL_BOOTSTRAP HTTP_URL JWKS_PATH

The node runs a SASL_PLAINTEXT listener with `sasl.enabled.mechanisms=SCRAM-SHA-512,OAUTHBEARER`,
`sasl.oauthbearer.jwks.endpoint.url=file://JWKS_PATH`, `sasl.oauthbearer.expected.issuer=
https://idp.test`, `sasl.oauthbearer.expected.audience=inlet`, a short
`sasl.oauthbearer.jwks.endpoint.retry.backoff.ms`, the ACL authorizer with
`super.users=User:admin`, and `[http] authentication = "token"`; the users admin, alice and
bob (password `<user>-secret`) exist. This script plays the identity provider: it makes an
RSA key and an EC P-256 key, publishes the RSA one in JWKS_PATH, and signs tokens itself.

Checks:
- alice's RS256 token authenticates her: the authorizer refuses her a topic until admin grants
  it to User:alice, then she produces and consumes;
- a token for another subject gives that principal (refused where alice is allowed);
- refused at authentication, with the reason: a token for another audience, another issuer,
  expired, unsigned (alg none), with a forged signature, or signed by a key the set does not
  hold;
- key rotation: once JWKS_PATH also holds the EC key, an ES256 token it signs authenticates
  (the node fetched the set again when a token named a key it did not have);
- Inlet's own token, from `HTTP_URL/iceberg/v1/oauth/tokens` with alice's client credentials,
  authenticates her too;
- the HTTP listener takes the provider's tokens as bearer tokens, and refuses one for another
  audience (401, with the reason).

Prints OK at the end; exits non-zero on a mismatch.
"""

import base64
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

bootstrap, http_url, jwks_path = sys.argv[1], sys.argv[2], sys.argv[3]
ISSUER, AUDIENCE, TOPIC = "https://idp.test", "inlet", "payments"


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def uint(n):
    return b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ec_key = ec.generate_private_key(ec.SECP256R1())
other_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def rsa_jwk(key, kid):
    n = key.public_key().public_numbers()
    return {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": uint(n.n), "e": uint(n.e)}


def ec_jwk(key, kid):
    n = key.public_key().public_numbers()
    return {"kty": "EC", "kid": kid, "crv": "P-256", "x": b64(n.x.to_bytes(32, "big")),
            "y": b64(n.y.to_bytes(32, "big"))}


def publish(*jwks):
    with open(jwks_path + ".tmp", "w") as f:
        json.dump({"keys": list(jwks)}, f)
    import os
    os.replace(jwks_path + ".tmp", jwks_path)


def token(sub, *, key=rsa_key, kid="rsa-1", alg="RS256", **claims):
    now = int(time.time())
    body = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300, **claims}
    header = b64(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}).encode())
    payload = b64(json.dumps(body).encode())
    signed = f"{header}.{payload}".encode()
    if alg == "none":
        return f"{header}.{payload}."
    if alg == "RS256":
        sig = key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
    else:
        r, s = decode_dss_signature(key.sign(signed, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{header}.{payload}.{b64(sig)}"


def conf(tok):
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        # librdkafka asks for a token (and again before it expires): (token, expiry in s).
        "oauth_cb": lambda _config: (tok, time.time() + 300),
    }


def produce(c, value):
    p = Producer(c)
    result = {}
    p.produce(TOPIC, value=value, on_delivery=lambda err, _m: result.setdefault("err", err))
    p.flush(30)
    return result.get("err", "no delivery report")


def auth_error(c):
    """The authentication error a client with `c` gets, or None when it authenticates."""
    errors = []
    a = AdminClient({**c, "error_cb": lambda e: errors.append(e)})
    try:
        a.list_topics(timeout=8)
        return None
    except KafkaException as e:
        errors.append(e.args[0])
    a.poll(1)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    return str(auth[0]) if auth else f"no authentication error: {errors}"


publish(rsa_jwk(rsa_key, "rsa-1"))
admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                     "sasl.password": "admin-secret"})
admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)

alice = conf(token("alice"))
err = produce(alice, b"before")
check(err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED,
      f"alice's token authenticates her, and the authorizer refuses her the topic: {err}")
for _, fut in admin.create_acls(
        [AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice", "*",
                    op, AclPermissionType.ALLOW)
         for op in (AclOperation.WRITE, AclOperation.READ)]
        + [AclBinding(ResourceType.GROUP, "oauth-readers", ResourcePatternType.LITERAL,
                      "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)],
        request_timeout=30).items():
    fut.result()
check(produce(alice, b"from-alice") is None, "alice produces once User:alice is allowed")
c = Consumer({**alice, "group.id": "oauth-readers", "auto.offset.reset": "earliest"})
c.subscribe([TOPIC])
got, deadline = None, time.time() + 30
while got is None and time.time() < deadline:
    m = c.poll(0.5)
    if m is not None and not m.error():
        got = m.value()
c.close()
check(got == b"from-alice", f"alice consumes with her token: {got}")
err = produce(conf(token("mallory")), b"x")
check(err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED,
      f"another subject is another principal: {err}")

now = int(time.time())
for what, tok, reason in [
    ("another audience", token("alice", aud="someone-else"), "audience"),
    ("another issuer", token("alice", iss="https://evil.test"), "issuer"),
    ("expired", token("alice", exp=now - 600, iat=now - 900), "expired"),
    ("unsigned", token("alice", alg="none"), "alg none"),
    ("forged", token("alice", key=other_rsa), "signature"),
    ("signed by a key the set does not hold", token("alice", key=ec_key, kid="ec-1", alg="ES256"),
     "no key"),
]:
    e = auth_error(conf(tok))
    check(e is not None and reason in e, f"a token {what} is refused with the reason: {e}")

# The provider rotates: its set now holds the EC key too; a token naming it makes the node
# fetch the set again (after the retry backoff the refusal above started).
publish(rsa_jwk(rsa_key, "rsa-1"), ec_jwk(ec_key, "ec-1"))
time.sleep(0.3)
check(produce(conf(token("alice", key=ec_key, kid="ec-1", alg="ES256")), b"es256") is None,
      "an ES256 token of the rotated key set authenticates alice")

# Inlet's own token: OAuth2 client credentials at the HTTP listener's token endpoint.
form = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": "alice",
                               "client_secret": "alice-secret"}).encode()
with urllib.request.urlopen(f"{http_url}/iceberg/v1/oauth/tokens", data=form, timeout=30) as r:
    inlet_token = json.loads(r.read())["access_token"]
check(produce(conf(inlet_token), b"inlet-token") is None,
      "Inlet's own token (the HTTP token endpoint's) authenticates alice on Kafka")
e = auth_error(conf(inlet_token[:-4] + ("AAAA" if not inlet_token.endswith("AAAA") else "BBBB")))
check(e is not None and "signature" in e, f"a tampered Inlet token is refused: {e}")


def http_status(tok):
    req = urllib.request.Request(f"{http_url}/iceberg/v1/namespaces",
                                 headers={"Authorization": f"Bearer {tok}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# The HTTP listener (catalog, SQL, watermarks) takes the provider's tokens the same way.
status, _ = http_status(token("alice"))
check(status == 200, f"the catalog takes the provider's token: {status}")
status, body = http_status(token("alice", aud="someone-else"))
check(status == 401 and "audience" in body, f"the catalog refuses another audience: {status} {body}")

print("OK", flush=True)
