"""POST /v1/query from a real client: the Arrow IPC answer read with pyarrow, CSV with the csv
module, time travel through as_of() and snapshots(), and a refused write as a 403 JSON error.

Usage: query_http.py HTTP_BASE
"""

import csv
import io
import json
import sys
import urllib.error
import urllib.request

import pyarrow.ipc

BASE = sys.argv[1]


def post(sql, accept):
    req = urllib.request.Request(
        BASE + "/v1/query",
        data=json.dumps({"sql": sql}).encode(),
        headers={"Content-Type": "application/json", "Accept": accept},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.headers.get("Content-Type"), resp.read()
    except urllib.error.HTTPError as e:
        body = e.read()
        e.close()
        raise urllib.error.HTTPError(e.url, e.code, body.decode(errors="replace"), e.headers, io.BytesIO(body))


# Arrow IPC: every row of default.orders, read back by pyarrow.
ctype, body = post(
    "SELECT id, customer.name AS name, _kafka.partition AS p FROM default.orders ORDER BY id",
    "application/vnd.apache.arrow.stream",
)
assert ctype == "application/vnd.apache.arrow.stream", ctype
table = pyarrow.ipc.open_stream(io.BytesIO(body)).read_all()
ids = table.column("id").to_pylist()
assert ids == list(range(len(ids))) and len(ids) >= 40, ids
assert table.column("name").to_pylist()[7] == "c7", table.column("name").to_pylist()[:8]
assert set(table.column("p").to_pylist()) <= {0, 1, 2}

# CSV with a header.
ctype, body = post("SELECT id FROM default.orders WHERE id < 3 ORDER BY id", "text/csv")
assert ctype.startswith("text/csv"), ctype
rows = list(csv.reader(io.StringIO(body.decode())))
assert rows == [["id"], ["0"], ["1"], ["2"]], rows

# Time travel: the first snapshot holds fewer rows than (or as many as) the current one.
_, body = post(
    "SELECT snapshot_id FROM snapshots('default.orders') ORDER BY committed_at LIMIT 1",
    "application/json",
)
first = json.loads(body)[0]["snapshot_id"]
_, body = post(
    f"SELECT count(*) AS n FROM as_of('default.orders', {first})", "application/json"
)
then = json.loads(body)[0]["n"]
_, body = post("SELECT count(*) AS n FROM default.orders", "application/json")
now = json.loads(body)[0]["n"]
assert 0 < then <= now, (then, now)

# A write is refused with a JSON error.
try:
    post("DELETE FROM default.orders", "application/json")
    raise AssertionError("DELETE was accepted")
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code
    assert "not supported" in json.loads(e.read())["error"]

print("OK")
