"""Spark 3.5 with Iceberg's Spark runtime against a node with `[http] authentication = "token"`:
Iceberg Java's OAuth2 client (`credential`, `oauth2-server-uri`) gets its tokens from the
catalog's token endpoint, and the Kafka ACLs decide what each user may do.

Usage: spark_oauth.py ICEBERG_URI

Runs after http_auth.py on the same node: `analytics.daily` holds 2 rows, alice may READ it
(not WRITE), bob has no ACL on it.

Checks: alice (catalog `inlet`) counts the 2 rows and is refused an INSERT and a CREATE
NAMESPACE; bob (catalog `bob`, the same endpoint) is refused the table; a wrong secret fails
the catalog's start. Prints OK at the end; any failed check raises.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spark_session  # noqa: E402

URI = sys.argv[1]
TOKENS = f"{URI}/v1/oauth/tokens"


def conf(user, password):
    return {"credential": f"{user}:{password}", "oauth2-server-uri": TOKENS, "scope": "catalog"}


spark = spark_session.start(URI, "inlet-spark-oauth", conf("alice", "alice-secret"))


def refused(sql, *needles):
    try:
        spark.sql(sql).collect()
    except Exception as e:  # noqa: BLE001 - Spark wraps the catalog's exception
        text = str(e)
        assert any(n in text for n in needles), f"{sql}: {text[:2000]}"
        return
    raise AssertionError(f"{sql}: allowed")


try:
    got = [tuple(r) for r in spark.sql("SELECT count(*) FROM inlet.analytics.daily").collect()]
    assert got == [(2,)], got
    refused("INSERT INTO inlet.analytics.daily VALUES (5)", "ForbiddenException", "may not write")
    refused("CREATE NAMESPACE inlet.alices", "ForbiddenException", "namespaces")
    for key, value in {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "rest",
                       ".uri": URI, **{f".{k}": v for k, v in conf("bob", "bob-secret").items()}}.items():
        spark.conf.set(f"spark.sql.catalog.bob{key}", value)
    refused("SELECT count(*) FROM bob.analytics.daily", "ForbiddenException", "may not describe")
    for key, value in {"": "org.apache.iceberg.spark.SparkCatalog", ".type": "rest",
                       ".uri": URI, **{f".{k}": v for k, v in conf("bob", "wrong").items()}}.items():
        spark.conf.set(f"spark.sql.catalog.wrong{key}", value)
    refused("SHOW NAMESPACES IN wrong", "invalid_client", "NotAuthorized", "invalid credentials")
finally:
    spark_session.stop(spark)
print("OK", flush=True)
