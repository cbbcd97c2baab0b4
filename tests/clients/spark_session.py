"""One local Spark 3.5 session with Iceberg's Spark runtime, its catalog `inlet` pointed at an
Iceberg REST catalog. Loopback only; its working directory (and any spark-warehouse) is a
temporary one; the runtime jar is the one the PyPI package snowpark-connect-deps-iceberg
ships, so nothing is downloaded."""

import importlib.util
import os
import shutil
import tempfile

JAR_NAME = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"


def runtime_jar():
    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    assert spec is not None and spec.origin, "no package snowpark-connect-deps-iceberg"
    jar = os.path.join(os.path.dirname(spec.origin), "jars", JAR_NAME)
    assert os.path.isfile(jar), jar
    return jar


def start(uri, app, catalog_conf=None):
    """A session whose catalog `inlet` is the REST catalog at `uri`, with `catalog_conf`
    (more of the catalog's properties: `credential`, `oauth2-server-uri`, ...)."""
    scratch = tempfile.mkdtemp(prefix="inlet-spark-")
    os.chdir(scratch)
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.pop("SPARK_HOME", None)
    from pyspark.sql import SparkSession  # after the environment is set

    spark = (
        SparkSession.builder.master("local[1]")
        .appName(app)
        .config("spark.jars", runtime_jar())
        .config("spark.driver.memory", "768m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "spark-warehouse"))
        .config("spark.sql.extensions",
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.inlet", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.inlet.type", "rest")
        .config("spark.sql.catalog.inlet.uri", uri)
    )
    for key, value in (catalog_conf or {}).items():
        spark = spark.config(f"spark.sql.catalog.inlet.{key}", value)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark._inlet_scratch = scratch
    print("spark", spark.version)
    return spark


def stop(spark):
    """Stops the session and removes its temporary directory."""
    spark.stop()
    os.chdir("/")
    shutil.rmtree(spark._inlet_scratch, ignore_errors=True)
