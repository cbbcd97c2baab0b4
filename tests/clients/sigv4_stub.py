"""An AWS-style Iceberg REST endpoint for tests: every request must carry a valid AWS Signature
Version 4 (checked with botocore's own signer, independently of Inlet's), and is then
forwarded as it is to a real Iceberg REST catalog (another Inlet node's /iceberg).

Usage: sigv4_stub.py BACKEND_URI KEY_ID SECRET REGION SERVICE

Prints "LISTENING <port>" once it serves on 127.0.0.1. A request whose signature is missing,
malformed, for another key, region or service, older than 15 minutes, or does not match
what botocore computes for it is answered 403 with AWS's error shape, and not forwarded.

Two routes of its own, never signed and never forwarded:
- GET /__stub/stats: {"verified": n, "refused": n, "reasons": [...]} as JSON;
- GET /__stub/tamper: replays the last verified request to itself, first unchanged (must be
  verified again), then with its body, its path, a signed header and its signature changed
  (each must be refused); answers {"unchanged": status, "body": status, ...}.
"""

import datetime
import http.client
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

backend, key_id, secret, region, service = sys.argv[1:6]
backend_parts = urlsplit(backend)
AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$"
)
lock = threading.Lock()
stats = {"verified": 0, "refused": 0, "reasons": []}
last = {}


def check(method, host, path, headers, body):
    """None when the signature is valid, else why not."""
    auth = headers.get("authorization", "")
    m = AUTH.match(auth)
    if not m:
        return f"no SigV4 authorization header: {auth[:60]!r}"
    key, date, req_region, req_service, signed, signature = m.groups()
    if (key, req_region, req_service) != (key_id, region, service):
        return f"credential scope {key}/{req_region}/{req_service}"
    amz_date = headers.get("x-amz-date", "")
    try:
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return f"bad x-amz-date {amz_date!r}"
    if amz_date[:8] != date:
        return "x-amz-date is not the scope's date"
    if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 900:
        return "signature too old"
    names = signed.split(";")
    if "host" not in names or "x-amz-date" not in names:
        return "host and x-amz-date must be signed"
    missing = [n for n in names if n != "host" and n not in headers]
    if missing:
        return f"signed headers missing: {missing}"
    request = AWSRequest(
        method=method,
        url=f"http://{host}{path}",
        data=body,
        headers={n: (host if n == "host" else headers[n]) for n in names},
    )
    request.context["timestamp"] = amz_date
    signer = SigV4Auth(Credentials(key_id, secret, headers.get("x-amz-security-token")), service, region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if expected != signature:
        return "signature does not match"
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path == "/__stub/stats":
            with lock:
                return self.reply(200, json.dumps(stats).encode())
        if self.path == "/__stub/tamper":
            return self.reply(200, json.dumps(tamper()).encode())
        headers = {k.lower(): v for k, v in self.headers.items()}
        host = self.headers.get("Host", "")
        reason = check(self.command, host, self.path, headers, body)
        with lock:
            if reason:
                stats["refused"] += 1
                stats["reasons"].append(f"{self.command} {self.path}: {reason}")
            elif not headers.get("x-stub-replay"):
                stats["verified"] += 1
                last.update(method=self.command, path=self.path, headers=headers, body=body, host=host)
        if reason:
            return self.reply(403, json.dumps({"message": reason}).encode())
        if headers.get("x-stub-replay"):
            return self.reply(200, b"{}")
        forward = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization")}
        conn = http.client.HTTPConnection(backend_parts.hostname, backend_parts.port, timeout=60)
        try:
            conn.request(self.command, backend_parts.path.rstrip("/") + self.path.split("/iceberg", 1)[-1], body=body or None, headers=forward)
            answer = conn.getresponse()
            data = answer.read()
            self.reply(answer.status, data, answer.getheader("Content-Type") or "application/json")
        finally:
            conn.close()

    do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = handle_any


def tamper():
    """Replays the last verified request unchanged and tampered, through the server itself."""
    with lock:
        request = dict(last)
    if not request:
        return {"error": "no verified request yet"}

    def send(method, path, headers, body):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            h = {k: v for k, v in headers.items() if k not in ("content-length", "host")}
            h["x-stub-replay"] = "1"
            h["Host"] = request["host"]
            conn.request(method, path, body=body or None, headers=h)
            return conn.getresponse().status
        finally:
            conn.close()

    out = {"replayed": f'{request["method"]} {request["path"]}'}
    out["unchanged"] = send(request["method"], request["path"], request["headers"], request["body"])
    out["body"] = send(request["method"], request["path"], request["headers"], request["body"] + b" ")
    out["path"] = send(request["method"], request["path"] + "x", request["headers"], request["body"])
    date = dict(request["headers"])
    date["x-amz-date"] = date["x-amz-date"][:-3] + ("00Z" if not date["x-amz-date"].endswith("00Z") else "01Z")
    out["date"] = send(request["method"], request["path"], date, request["body"])
    sig = dict(request["headers"])
    sig["authorization"] = sig["authorization"][:-1] + ("0" if not sig["authorization"].endswith("0") else "1")
    out["signature"] = send(request["method"], request["path"], sig, request["body"])
    return out


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
port = server.server_address[1]
print(f"LISTENING {port}", flush=True)
server.serve_forever()
