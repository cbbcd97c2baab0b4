"""pyiceberg's RestCatalog against Inlet's Iceberg REST catalog server.

Run by catalog/tests/rest_pyiceberg.rs with INLET_ICEBERG_URI set to the server's base URI.
Exits non-zero (with a traceback) on the first failed check and prints "OK" at the end.
"""

import logging
import os
import urllib.parse

import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.types import DoubleType

URI = os.environ["INLET_ICEBERG_URI"]
catalog = load_catalog("inlet", type="rest", uri=URI)

# Namespaces.
catalog.create_namespace("analytics", {"owner": "py"})
try:
    catalog.create_namespace("analytics")
    raise AssertionError("creating a namespace twice must fail")
except NamespaceAlreadyExistsError:
    pass
catalog.create_namespace(("analytics", "eu"))
assert ("analytics",) in catalog.list_namespaces(), catalog.list_namespaces()
assert catalog.list_namespaces("analytics") == [("analytics", "eu")], catalog.list_namespaces("analytics")
assert catalog.namespace_exists("analytics")
assert not catalog.namespace_exists("nowhere")
assert catalog.load_namespace_properties("analytics")["owner"] == "py"
summary = catalog.update_namespace_properties("analytics", updates={"tier": "gold"})
assert summary.updated == ["tier"], summary
assert catalog.load_namespace_properties("analytics")["tier"] == "gold"

# Create a table and append to it.
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
table = catalog.create_table("analytics.events", schema=schema)
assert catalog.list_tables("analytics") == [("analytics", "events")], catalog.list_tables("analytics")
assert catalog.table_exists("analytics.events")
try:
    catalog.create_table("analytics.events", schema=schema)
    raise AssertionError("creating a table twice must fail")
except TableAlreadyExistsError:
    pass

first = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}, schema=schema)
table.append(first)
scanned = catalog.load_table("analytics.events").scan().to_arrow()
assert scanned.num_rows == 3, scanned
assert sorted(scanned.column("id").to_pylist()) == [1, 2, 3]

# Evolve the schema, then append rows that carry the new column.
with table.update_schema() as update:
    update.add_column("score", DoubleType())
table = catalog.load_table("analytics.events")
assert [f.name for f in table.schema().fields] == ["id", "name", "score"], table.schema()
evolved = table.schema().as_arrow()
second = pa.table(
    {"id": pa.array([4, 5], pa.int64()), "name": ["d", "e"], "score": [0.5, 1.5]},
    schema=evolved,
)
table.append(second)
scanned = catalog.load_table("analytics.events").scan().to_arrow()
assert scanned.num_rows == 5, scanned
scores = dict(zip(scanned.column("id").to_pylist(), scanned.column("score").to_pylist()))
assert scores == {1: None, 2: None, 3: None, 4: 0.5, 5: 1.5}, scores

# Two writers on the same snapshot: the second commit gets a 409 (CommitFailedException).
# With pyiceberg's commit retries off, it surfaces and succeeds after a refresh ...
with catalog.load_table("analytics.events").transaction() as tx:
    tx.set_properties({"commit.retry.num-retries": "0"})
one = catalog.load_table("analytics.events")
two = catalog.load_table("analytics.events")
row = lambda i: pa.table({"id": pa.array([i], pa.int64()), "name": [f"r{i}"], "score": [float(i)]}, schema=evolved)
one.append(row(6))
try:
    two.append(row(7))
    raise AssertionError("the stale writer's commit must fail")
except CommitFailedException:
    pass
two.refresh()
two.append(row(7))
scanned = catalog.load_table("analytics.events").scan().to_arrow()
assert sorted(scanned.column("id").to_pylist()) == [1, 2, 3, 4, 5, 6, 7], scanned

# ... and with retries on (the default), pyiceberg retries the 409 by itself.
class RetryLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.retries = 0

    def emit(self, record):
        if "retrying" in record.getMessage():
            self.retries += 1


retry_log = RetryLog()
logging.getLogger("pyiceberg").addHandler(retry_log)
with catalog.load_table("analytics.events").transaction() as tx:
    tx.remove_properties("commit.retry.num-retries")
one = catalog.load_table("analytics.events")
two = catalog.load_table("analytics.events")
one.append(row(8))
two.append(row(9))
scanned = catalog.load_table("analytics.events").scan().to_arrow()
assert sorted(scanned.column("id").to_pylist()) == [1, 2, 3, 4, 5, 6, 7, 8, 9], scanned
assert retry_log.retries >= 1, "the second writer must have been refused once and retried"

# Table properties through a transaction.
table = catalog.load_table("analytics.events")
with table.transaction() as tx:
    tx.set_properties(purpose="test")
table = catalog.load_table("analytics.events")
assert table.properties["purpose"] == "test"
assert "commit.retry.num-retries" not in table.properties

# A create transaction (stage-create), as CTAS engines use.
with catalog.create_table_transaction("analytics.staged", schema=schema) as tx:
    tx.append(first)
staged = catalog.load_table("analytics.staged")
assert staged.scan().to_arrow().num_rows == 3

# Rename.
catalog.rename_table("analytics.events", "analytics.eu.events_renamed")
try:
    catalog.load_table("analytics.events")
    raise AssertionError("the old name must be gone")
except NoSuchTableError:
    pass
renamed = catalog.load_table("analytics.eu.events_renamed")
assert renamed.scan().to_arrow().num_rows == 9

# A namespace with tables cannot be dropped.
try:
    catalog.drop_namespace("analytics")
    raise AssertionError("dropping a non-empty namespace must fail")
except NamespaceNotEmptyError:
    pass

# Drop with purge: the table is gone and so are its files.
metadata_file = urllib.parse.urlparse(renamed.metadata_location).path
data_files = [
    urllib.parse.urlparse(task.file.file_path).path for task in renamed.scan().plan_files()
]
assert os.path.exists(metadata_file) and data_files and all(os.path.exists(p) for p in data_files)
catalog.purge_table("analytics.eu.events_renamed")
assert not catalog.table_exists("analytics.eu.events_renamed")
assert not os.path.exists(metadata_file), metadata_file
assert not any(os.path.exists(p) for p in data_files), data_files

catalog.drop_table("analytics.staged")
catalog.drop_namespace(("analytics", "eu"))
catalog.drop_namespace("analytics")
assert not catalog.namespace_exists("analytics")
print("OK")
