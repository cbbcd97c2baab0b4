"""The Schema Registry and the HTTP listener over TLS (`[registry] tls_keystore`,
`[http] tls_keystore`), with confluent-kafka's SchemaRegistryClient and Python's own HTTPS
client, and the certificate replaced while the node runs.

Usage: https.py REGISTRY_PORT HTTP_PORT CERTS_DIR KEYSTORE

CERTS_DIR holds tls_certs.py's files; the node reads its certificate from KEYSTORE (a copy of
`server.pem`), and the registry wants basic auth as `admin` (`admin-secret`).

Checks:
- the registry answers over HTTPS to a client trusting the CA, with basic auth; a client that
  does not trust it fails its handshake;
- the HTTP listener answers /healthz and the catalog's config over HTTPS; plain HTTP to it
  gets no answer;
- once KEYSTORE is replaced by `server2.pem` (another CA), both listeners serve the new
  certificate within 30 s, without a restart.

Prints OK at the end; exits non-zero on a mismatch.
"""

import http.client
import json
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

registry_port, http_port, certs, keystore = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
registry = f"https://localhost:{registry_port}"
base = f"https://localhost:{http_port}"
ca, ca2 = os.path.join(certs, "ca.pem"), os.path.join(certs, "ca2.pem")


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def get(url, cafile):
    context = ssl.create_default_context(cafile=cafile)
    with urllib.request.urlopen(url, context=context, timeout=30) as r:
        return r.status, r.read().decode()


def client(cafile):
    return SchemaRegistryClient({"url": registry, "ssl.ca.location": cafile,
                                 "basic.auth.user.info": "admin:admin-secret"})


schema = Schema('{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}', "AVRO")
check(client(ca).register_schema("tls-value", schema) > 0, "a schema registered over HTTPS")
check(client(ca).get_subjects() == ["tls-value"], "subjects listed over HTTPS")
try:
    client(ca2).get_subjects()
    check(False, "a client that does not trust the CA was answered")
except Exception as e:  # noqa: BLE001 - the client wraps the TLS failure
    check("certificate" in str(e).lower() or "ssl" in str(e).lower(), f"the failure is TLS: {e}")

status, body = get(f"{base}/healthz", ca)
check(status == 200 and body.strip() == "ok", f"/healthz over HTTPS: {status} {body}")
status, body = get(f"{base}/iceberg/v1/config", ca)
check(status == 200 and "defaults" in json.loads(body), f"the catalog's config over HTTPS: {body}")
try:
    urllib.request.urlopen(f"http://localhost:{http_port}/healthz", timeout=10).read()
    check(False, "plain HTTP to the TLS listener was answered")
except (urllib.error.URLError, http.client.HTTPException, OSError):
    pass  # a TLS alert where an HTTP status line should be, or the connection closed

# A new certificate, from another CA, without a restart.
shutil.copyfile(os.path.join(certs, "server2.pem"), keystore + ".new")
os.replace(keystore + ".new", keystore)
deadline = time.monotonic() + 30
while True:
    try:
        status, _ = get(f"{base}/healthz", ca2)
        check(status == 200, "/healthz with the new certificate")
        check(client(ca2).get_subjects() == ["tls-value"], "the registry's new certificate")
        break
    except (urllib.error.URLError, ssl.SSLError, OSError, Exception) as e:  # noqa: BLE001
        if time.monotonic() > deadline:
            check(False, f"the new certificate is not served within 30 s: {e}")
        time.sleep(0.5)
print("OK", flush=True)
