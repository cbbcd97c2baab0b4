"""The web console in a real browser: headless Chromium (the system's, Debian's `chromium`)
driven by Playwright. Every page loads without a console error, the values it shows match the
node's own API, the SQL box runs a query, the schema page shows the field diff, and each page
is saved as a screenshot. The charts start from the node's history (`/v1/history`), which the
node samples every 200 ms here.

Usage: console.py HTTP_URL SCREENSHOT_DIR

The node holds (tests/console.rs): topic `people` (a table topic, 1 partition, keeping dead
letters) with three records committed to `default.people` and a fourth, unframed, in
`default.people_dlq`; subject `people-value` with two versions (the second adds `email`);
group `billing`, which read two of the records.
"""

import json
import os
import shutil
import sys
import urllib.request

from inlet_clients import check
from playwright.sync_api import sync_playwright

url, shots = sys.argv[1:3]
os.makedirs(shots, exist_ok=True)


def get(path):
    with urllib.request.urlopen(url + path) as r:
        return r.read().decode()


def query(sql):
    req = urllib.request.Request(url + "/v1/query", data=json.dumps({"sql": sql}).encode(),
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


topics = json.loads(get("/v1/topics"))
tables = json.loads(get("/v1/tables"))
status = tables["default.people"]
produced = sum(float(line.rsplit(" ", 1)[1]) for line in get("/metrics").splitlines()
               if line.startswith("inlet_kafka_produced_records_total"))
rows = int(query("SELECT summary['total-records'] AS n FROM snapshots('default.people') ORDER BY committed_at DESC LIMIT 1")[0]["n"])
files = len(query("SELECT file_path FROM files('default.people')"))

errors = []
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))

    def visit(route, loaded, name):
        page.goto(f"{url}/ui#/{route}")
        page.wait_for_selector(f'#page[data-loaded="{loaded}"]', timeout=15000)
        check(page.get_attribute("#page", "data-loaded") != "error", f"{name} loads: {page.inner_text('#page')[:300]}")
        return page

    def shot(name):
        page.screenshot(path=os.path.join(shots, f"{name}.png"), full_page=True)

    def points(selector):
        return page.evaluate(f"Math.max(0, ...Array.from(document.querySelectorAll('{selector}')).map((l) => l.points.numberOfItems))")

    def cells(selector):
        return [[c.inner_text() for c in r.query_selector_all("td")] for r in page.query_selector_all(f"{selector} tbody tr")]

    visit("", "overview", "the overview")
    check(page.inner_text("#topic-count") == str(len(topics)), "overview: topics as /v1/topics counts them")
    check(page.inner_text("#table-count") == str(len(tables)), "overview: table topics as /v1/tables counts them")
    page.wait_for_function(f"document.getElementById('records-produced').textContent === '{int(produced):,}'", timeout=10000)
    page.wait_for_selector("#throughput-chart polyline", state="attached", timeout=10000)
    # The chart starts from the node's history (sampled every 200 ms here), not from the page's
    # own samples, of which there are at most two by now.
    history = json.loads(get("/v1/history?prefix=node:"))["series"]
    check(len(history.get("node:produced_bytes_per_s", [])) >= 5, f"history: the node's throughput ({history})")
    check(max(v for _, v in history["node:produced_bytes_per_s"]) > 0, "history: a produce shows as a rate")
    check(points("#throughput-chart polyline") >= 5, "overview: the throughput chart starts from the last hour")
    shot("overview")

    visit("topics", "topics", "the topics page")
    check(["people", "1", "4", "default.people"] in cells("#topics"), f"topics: people's row {cells('#topics')}")
    shot("topics")

    visit("tables", "tables", "the tables page")
    row = [r for r in cells("#tables") if r[0] == "default.people"]
    check(row and row[0][1] == f"{status['records_behind']:,}", f"tables: records behind as /v1/tables says ({row})")
    shot("tables")

    visit("tables/default.people", "tables/default.people", "a table's page")
    check(page.inner_text("#table-rows") == f"{rows:,}", f"table: {rows} rows, as its snapshot says")
    check(page.inner_text("#table-files") == f"{files:,}", f"table: {files} files, as files() lists them")
    check(cells("#partitions")[0][:3] == ["0", "4", "4"], f"table: partition 0 committed to 4 of 4 ({cells('#partitions')})")
    # Asked after the page: a commit may land in between (the dead letter's round), so the page's
    # rows must be real snapshots, exact to the digit (ids exceed JavaScript's integers), newest
    # first.
    snapshot_ids = {str(r["id"]) for r in query("SELECT CAST(snapshot_id AS VARCHAR) AS id FROM snapshots('default.people')")}
    shown = cells("#snapshots")
    check(shown and all(r[1] in snapshot_ids for r in shown), f"table: its last commits, ids exact ({shown}, {snapshot_ids})")
    check([r[0] for r in shown] == sorted((r[0] for r in shown), reverse=True), "table: newest commit first")
    check(len(cells("#file-sizes")) == 5, "table: its file sizes")
    check("null" not in page.inner_text("#page").split("\n"), "table: no stray null in the page")
    page.wait_for_selector("#partition-watermarks span", timeout=10000)
    check("partition 0: 20" in page.inner_text("#partition-watermarks"), "table: partition 0's watermark")
    table_history = json.loads(get("/v1/history?prefix=table:default.people:"))["series"]
    behind = table_history.get("table:default.people:records_behind", [])
    check(len(behind) >= 5 and behind[-1][1] == status["records_behind"], f"history: the table's records behind ({behind[-5:]})")
    check(points("#behind-chart polyline") >= 5 and points("#freshness-chart polyline") >= 5,
          "table: its lag and freshness charts start from the last hour")
    check(points("#watermark-chart polyline") >= 5, "table: its watermark chart starts from the last hour")
    watermarks = json.loads(get("/v1/watermarks/default/people"))
    partition_history = table_history.get("table:default.people:partition_watermark_ms:0", [])
    check(partition_history and partition_history[-1][1] == watermarks["partitions"]["0"],
          f"history: partition 0's watermark as /v1/watermarks says ({partition_history[-3:]}, {watermarks})")
    check(json.loads(get("/v1/tables"))["default.people"]["partition_watermarks"] == watermarks["partitions"],
          "/v1/tables: the partitions' watermarks as /v1/watermarks says")
    dead = cells("#dead-letter-errors")
    check(len(dead) == 1 and dead[0][1] == "3" and dead[0][2], f"table: the dead letter at offset 3 with its error ({dead})")
    shot("table")

    visit("schemas", "schemas", "the schemas page")
    check(["people-value", "1, 2"] == cells("#schemas")[0][:2], f"schemas: {cells('#schemas')}")
    shot("schemas")

    visit("schemas/people-value", "schemas/people-value", "a subject's page")
    page.wait_for_selector("#diff div", timeout=10000)
    diff = page.inner_text("#diff")
    check("+ email: [null, string] (default null)" in diff, f"schema diff: {diff}")
    check('"email"' in page.inner_text("#schema-text"), "subject: the latest schema's text")
    shot("schema")

    visit("groups", "groups", "the groups page")
    check(["billing", "Empty", "0", "2"] in cells("#groups"), f"groups: billing, empty, 2 behind ({cells('#groups')})")
    check(cells("#group-billing") == [["people", "0", "2", "4", "2", "–"]], f"groups: billing's partition ({cells('#group-billing')})")
    check(points("#group-lag-billing polyline") >= 5, "groups: billing's lag chart starts from the last hour")
    shot("groups")

    visit("sql", "sql", "the SQL page")
    page.fill("#sql-text", "SELECT count(*) AS n, max(id) AS last FROM default.people")
    page.click("#sql-run")
    page.wait_for_selector("#sql-result table", timeout=15000)
    check(cells("#sql-result") == [["3", "3"]], f"SQL box: {cells('#sql-result')}")
    shot("sql")

    visit("cluster", "cluster", "the cluster page")
    nodes = cells("#nodes")
    check(len(nodes) == 1 and nodes[0][3] == "yes", f"cluster: one live node ({nodes})")
    check(["people", "0"] == cells("#owners")[0][:2], "cluster: the partition's owner")
    check("No partition or group changed node" in page.inner_text("#moves"), "cluster: no moves on one node")
    check(cells("#group-owners") == [["billing", f"node {nodes[0][0]}", "1"]], f"cluster: billing's owner, this node ({cells('#group-owners')})")
    shot("cluster")
    browser.close()

check(not errors, f"no console errors: {errors}")
print("OK")
