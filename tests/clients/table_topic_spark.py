"""Spark reads table topics' tables as pyiceberg does: the same rows, position deletes applied.

Usage: table_topic_spark.py ICEBERG_URI NAMESPACE.TABLE:KEY_COLUMN:VALUE_COLUMN...

For each table, Spark 3.5 with Iceberg's runtime (through the node's REST catalog) and
pyiceberg must return the same (key, value) rows, with each key once. Prints OK at the end.
"""

import os
import sys

from pyiceberg.catalog import load_catalog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_session  # noqa: E402

uri, specs = sys.argv[1], sys.argv[2:]
catalog = load_catalog("inlet", type="rest", uri=uri)
spark = spark_session.start(uri, "inlet-table-topic-spark")
try:
    for spec in specs:
        table, key, value = spec.split(":")
        spark_rows = [tuple(r) for r in spark.sql(f"SELECT {key}, {value} FROM inlet.{table}").collect()]
        keys = [r[0] for r in spark_rows]
        assert len(keys) == len(set(keys)), f"{table}: Spark sees a key twice"
        theirs = {r[key]: r[value] for r in catalog.load_table(table).scan().to_arrow().to_pylist()}
        assert dict(spark_rows) == theirs, f"{table}: Spark {sorted(spark_rows)}\npyiceberg {sorted(theirs.items())}"
        print(f"{table}: {len(spark_rows)} rows alike")
finally:
    spark_session.stop(spark)
print("OK")
