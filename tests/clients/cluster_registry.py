"""The Schema Registry of a cluster, through confluent-kafka's SchemaRegistryClient.

Usage: cluster_registry.py REGISTRY_URL [REGISTRY_URL ...]  (one per node)

- 48 distinct Avro schemas registered at once, spread over the nodes and over 8 threads, get
  48 distinct ids, and every node returns each id's schema.
- One schema registered under several subjects through different nodes gets one id.
- A subject evolved on one node (v2 adds a field with a default) is at v2 on every node, and
  an incompatible v3 sent to another node is refused there.

Prints OK; any failed check raises.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

URLS = sys.argv[1:]
assert len(URLS) >= 2, "give one registry URL per node"


def client(i):
    return SchemaRegistryClient({"url": URLS[i % len(URLS)]})


def record(name, fields):
    return Schema(
        json.dumps({"type": "record", "name": name, "fields": fields}), "AVRO"
    )


def register(i):
    schema = record(f"R{i}", [{"name": f"f{i}", "type": "long"}])
    return i, client(i).register_schema(f"subject-{i}", schema)


with ThreadPoolExecutor(max_workers=8) as pool:
    ids = dict(pool.map(register, range(48)))
assert len(set(ids.values())) == 48, f"ids shared by distinct schemas: {ids}"
for i, schema_id in ids.items():
    for n in range(len(URLS)):
        got = client(n).get_schema(schema_id)
        assert f'"f{i}"' in got.schema_str, (n, schema_id, got.schema_str)

shared = record("Shared", [{"name": "a", "type": "string"}])
with ThreadPoolExecutor(max_workers=6) as pool:
    same = set(
        pool.map(lambda i: client(i).register_schema(f"shared-{i}", shared), range(6))
    )
assert len(same) == 1, f"one schema got ids {same}"

v1 = record("Evolving", [{"name": "a", "type": "string"}])
v2 = record(
    "Evolving",
    [{"name": "a", "type": "string"}, {"name": "b", "type": "long", "default": 0}],
)
client(0).register_schema("evolving", v1)
client(1).register_schema("evolving", v2)
for n in range(len(URLS)):
    latest = client(n).get_latest_version("evolving")
    assert latest.version == 2, (n, latest.version)
    assert '"b"' in latest.schema.schema_str
v3 = record("Evolving", [{"name": "a", "type": "long"}])
try:
    client(2).register_schema("evolving", v3)
    raise AssertionError("an incompatible schema was registered on another node")
except SchemaRegistryError as e:
    assert e.http_status_code == 409, e
print("OK")
