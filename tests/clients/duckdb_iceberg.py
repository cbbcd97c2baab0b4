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
    con.execute(f"ATTACH 'inlet' AS inlet (TYPE ICEBERG, ENDPOINT '{iceberg_uri}', "
                "AUTHORIZATION_TYPE 'none')")
    return con
