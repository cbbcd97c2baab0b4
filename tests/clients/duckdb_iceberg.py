"""DuckDB 1.5.5 with its iceberg extension, attached to an Iceberg REST catalog as `inlet`.

The extensions load from the PyPI packages duckdb-extension-{iceberg,avro,httpfs} (nothing is
downloaded). Outside CI, missing packages make `connect` return None (the caller skips its
DuckDB checks); in CI (`CI` set) they are an error."""

import glob
import importlib.util
import os

EXTENSIONS = ["httpfs", "avro", "iceberg"]


def extension_file(name):
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    pattern = os.path.join(os.path.dirname(spec.origin), "extensions", "*",
                           f"{name}.duckdb_extension")
    files = glob.glob(pattern)
    assert len(files) == 1, (pattern, files)
    return files[0]


def connect(iceberg_uri):
    """A connection with the catalog at `iceberg_uri` attached as `inlet`, or None."""
    try:
        import duckdb
        for name in EXTENSIONS:
            if importlib.util.find_spec(f"duckdb_extension_{name}") is None:
                raise ImportError(f"duckdb-extension-{name}")
    except ImportError as e:
        if os.environ.get("CI"):
            raise
        print("DuckDB check skipped:", e)
        return None
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for name in EXTENSIONS:
        con.execute(f"LOAD '{extension_file(name)}'")
    endpoint = os.environ.get("INLET_TEST_S3_ENDPOINT")
    if endpoint:
        # Tables on the tests' S3 server (a cluster's object store): DuckDB reads their files
        # there, not from AWS.
        host = endpoint.split("://", 1)[-1].rstrip("/")
        con.execute(
            "CREATE SECRET inlet_s3 (TYPE s3, KEY_ID $1, SECRET $2, REGION $3, ENDPOINT $4, "
            "URL_STYLE 'path', USE_SSL $5)",
            [os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
             os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
             os.environ.get("AWS_REGION", "us-east-1"), host,
             endpoint.startswith("https://")])
    con.execute(f"ATTACH 'inlet' AS inlet (TYPE ICEBERG, ENDPOINT '{iceberg_uri}', "
                "AUTHORIZATION_TYPE 'none')")
    return con
