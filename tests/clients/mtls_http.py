"""Client certificates (mTLS) on the Schema Registry and the HTTP listener: a verified
certificate is the principal of a request that carries no Authorization header, and the Kafka
ACLs decide for it as for any user.

Usage: mtls_http.py REGISTRY_PORT HTTP_PORT SASL_BOOTSTRAP CERTS_DIR

The node: the registry wants basic auth and asks for a client certificate
(`tls_client_auth = "requested"`); the HTTP listener wants a token and requires one
(`"required"`); both trust CERTS_DIR/ca.pem (tls_certs.py's files). `admin` (admin-secret) is a
super user over SASL_PLAINTEXT at SASL_BOOTSTRAP.

Checks:
- registry, client-a's certificate (User:CN=client-a,O=Example), no ACL: registering under
  `mtls-value` is refused with 403 (Confluent's 40301), listing subjects answers 200;
- after an ACL allowing the principal WRITE on the topic `mtls`: the schema registers, and
  reads back by id;
- registry, no certificate and no Authorization: 401; a stranger CA's certificate: the
  handshake fails; basic auth still works without a certificate;
- HTTP listener: client-a's certificate reads the catalog's config (200) and, with no ACL on
  any table, lists no table of a namespace it may not see; no certificate: the handshake fails.

Prints OK at the end; exits non-zero on a mismatch.
"""

import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

registry_port, http_port, sasl, certs = sys.argv[1:5]
PRINCIPAL = "User:CN=client-a,O=Example"


def context(cert=None):
    ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(os.path.join(certs, f"{cert}.pem"), os.path.join(certs, f"{cert}.key"))
    return ctx


def call(port, path, cert=None, body=None, auth=None):
    """(status, parsed body) of one request; raises ssl.SSLError / URLError on a failed handshake."""
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers=headers,
        method="POST" if body is not None else "GET",
    )
    try:
        with urllib.request.urlopen(request, context=context(cert), timeout=20) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def refused_handshake(port, path, cert=None):
    try:
        status, _ = call(port, path, cert=cert)
    except (ssl.SSLError, urllib.error.URLError, ConnectionError) as e:
        return str(e)
    raise AssertionError(f"{path} with {cert or 'no'} certificate answered {status}, not a failed handshake")


schema = {"schema": json.dumps({"type": "record", "name": "M", "fields": [{"name": "a", "type": "int"}]})}

# The registry, as client-a, before any ACL names it.
status, answer = call(registry_port, "/subjects/mtls-value/versions", cert="client", body=schema)
assert status == 403 and answer.get("error_code") == 40301, (status, answer)
status, answer = call(registry_port, "/subjects", cert="client")
assert status == 200 and "mtls-value" not in answer, (status, answer)

admin = AdminClient({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
for _, f in admin.create_acls([
    AclBinding(ResourceType.TOPIC, "mtls", ResourcePatternType.LITERAL, PRINCIPAL, "*",
               AclOperation.WRITE, AclPermissionType.ALLOW),
]).items():
    f.result()

# ACLs reach the registry within a second or so: ask again until they do.
import time
deadline = time.time() + 30
while True:
    status, answer = call(registry_port, "/subjects/mtls-value/versions", cert="client", body=schema)
    if status == 200 or time.time() > deadline:
        break
    time.sleep(0.3)
assert status == 200 and "id" in answer, (status, answer)
status, read = call(registry_port, f"/schemas/ids/{answer['id']}", cert="client")
assert status == 200 and "M" in read["schema"], (status, read)

# No credentials at all: 401. A stranger CA's certificate: no handshake. Basic auth alone: fine.
status, answer = call(registry_port, "/subjects")
assert status == 401, (status, answer)
print("stranger on the registry:", refused_handshake(registry_port, "/subjects", cert="stranger"))
status, answer = call(registry_port, "/subjects", auth="admin:admin-secret")
assert status == 200 and "mtls-value" in answer, (status, answer)

# The HTTP listener requires a certificate.
status, answer = call(http_port, "/iceberg/v1/config", cert="client")
assert status == 200 and "defaults" in answer, (status, answer)
status, answer = call(http_port, "/iceberg/v1/namespaces", cert="client")
assert status == 200, (status, answer)
print("no certificate on the HTTP listener:", refused_handshake(http_port, "/iceberg/v1/config"))
print("OK")
