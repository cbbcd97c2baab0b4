"""Spark 3.5 with Iceberg's Spark runtime against a running `inlet serve` (the embedded catalog).

Usage: iceberg_spark.py ICEBERG_URI

pyiceberg creates a namespace and a table, appends, evolves the schema and appends again; Spark
reads that table through Inlet's REST catalog. Then Spark creates a namespace and a table, inserts,
evolves the schema and inserts again, and appends to pyiceberg's table; pyiceberg reads both back.
One local Spark session on loopback; the runtime jar is the one the PyPI package
snowpark-connect-deps-iceberg ships: nothing is downloaded. Prints OK at the end; any failed check
raises.
"""

import os
import sys

from pyiceberg.catalog import load_catalog
from inlet_clients import check_engine_table, check_shop_orders_appended, write_shop_orders

URI = sys.argv[1]
# pyiceberg writes shop.orders: two snapshots, the second after a schema change.
catalog = load_catalog("inlet", type="rest", uri=URI)
catalog.create_namespace("shop")
orders = write_shop_orders(catalog)

# Spark: one local session (spark_session.py, beside this script).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_session  # noqa: E402

spark = spark_session.start(URI, "inlet-iceberg-spark")


def rows(sql):
    return [tuple(r) for r in spark.sql(sql).collect()]


try:
    # Spark reads pyiceberg's table.
    got = rows("SELECT count(*), sum(amount), sum(id) FROM inlet.shop.orders")
    assert got == [(4, 12.0, 10)], got
    got = rows("SELECT id, note FROM inlet.shop.orders ORDER BY id")
    assert got == [(1, None), (2, None), (3, None), (4, "late")], got

    # Spark writes through the catalog: a namespace, a table, inserts and a schema change.
    spark.sql("CREATE NAMESPACE inlet.spark")
    spark.sql("CREATE TABLE inlet.spark.clicks (id BIGINT, page STRING, ms DOUBLE) USING iceberg")
    spark.sql("INSERT INTO inlet.spark.clicks VALUES (1, 'home', 1.5), (2, 'cart', 2.5)")
    spark.sql("ALTER TABLE inlet.spark.clicks ADD COLUMN referrer STRING")
    spark.sql("INSERT INTO inlet.spark.clicks "
              "SELECT id, concat('p', id), id * 0.5, 'ad' FROM range(10, 20)")
    got = rows("SHOW NAMESPACES IN inlet")
    assert ("shop",) in got and ("spark",) in got, got
    got = rows("SHOW TABLES IN inlet.spark")
    assert [t[1] for t in got] == ["clicks"], got
    got = rows("SELECT count(*), sum(id), sum(ms), count(referrer) FROM inlet.spark.clicks")
    assert got == [(12, 148, 76.5, 10)], got
    # ... and appends to pyiceberg's table.
    spark.sql("INSERT INTO inlet.shop.orders VALUES (5, 5.5, 'spark')")
    got = rows("SELECT count(*), sum(amount), sum(id) FROM inlet.shop.orders")
    assert got == [(5, 17.5, 15)], got
finally:
    spark_session.stop(spark)

# pyiceberg reads what Spark wrote.
location = check_engine_table(catalog, "spark.clicks", ["id", "page", "ms", "referrer"],
                              {"id": 1, "page": "home", "ms": 1.5, "referrer": None},
                              {"id": 19, "page": "p19", "ms": 9.5, "referrer": "ad"})
check_shop_orders_appended(catalog, "spark")
print("location:", location)
print("OK")
