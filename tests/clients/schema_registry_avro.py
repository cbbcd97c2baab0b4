"""Inlet's Schema Registry with confluent-kafka's SchemaRegistryClient and Avro serdes.

Usage: schema_registry_avro.py REGISTRY_URL

Registers, looks up, evolves, rejects an incompatible change, sets configs, deletes (soft and
permanent) and round-trips a record through AvroSerializer/AvroDeserializer. Exits non-zero on
the first mismatch.
"""

import sys

from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from inlet_clients import check, expect_error, registry_client

URL = sys.argv[1]

V1 = """{"type": "record", "name": "User", "namespace": "inlet.test",
 "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}"""
V2 = """{"type": "record", "name": "User", "namespace": "inlet.test",
 "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
            {"name": "email", "type": ["null", "string"], "default": null}]}"""
INCOMPATIBLE = """{"type": "record", "name": "User", "namespace": "inlet.test",
 "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"},
            {"name": "age", "type": "int"}]}"""


def client():
    return registry_client(URL)


sr = client()
subject = "users-value"

# Register, and the same schema again (idempotent), and under another subject (same id).
id1 = sr.register_schema(subject, Schema(V1, "AVRO"))
check(id1 > 0, f"registered v1 with id {id1}")
check(client().register_schema(subject, Schema(V1, "AVRO")) == id1, "re-register gives the same id")
check(client().register_schema("other-value", Schema(V1, "AVRO")) == id1,
      "same schema under another subject gives the same id")

# Look up and fetch.
found = client().lookup_schema(subject, Schema(V1, "AVRO"))
check(found.schema_id == id1 and found.version == 1 and found.subject == subject, "lookup_schema")
fetched = client().get_schema(id1)
check(fetched.schema_type == "AVRO" and '"User"' in fetched.schema_str, "get_schema by id")
latest = client().get_latest_version(subject)
check(latest.version == 1 and latest.schema_id == id1, "get_latest_version")
check(set(client().get_subjects()) == {subject, "other-value"}, "get_subjects")
expect_error(lambda: client().get_schema(987654), 404, 40403, "unknown id")
expect_error(lambda: client().get_latest_version("nope-value"), 404, 40401, "unknown subject")
expect_error(lambda: client().get_version(subject, 42), 404, 40402, "unknown version")

# Evolve compatibly, then reject an incompatible change.
check(client().test_compatibility(subject, Schema(V2, "AVRO")), "v2 tests compatible")
check(not client().test_compatibility(subject, Schema(INCOMPATIBLE, "AVRO")), "incompatible tests so")
id2 = client().register_schema(subject, Schema(V2, "AVRO"))
check(id2 != id1, f"registered v2 with id {id2}")
check(client().get_versions(subject) == [1, 2], "versions [1, 2]")
expect_error(lambda: client().register_schema(subject, Schema(INCOMPATIBLE, "AVRO")), 409, 409,
             "incompatible change rejected")
expect_error(lambda: client().register_schema(subject, Schema("{not avro", "AVRO")), 422, 42201,
             "invalid schema rejected")

# Configs.
check(client().get_compatibility() == "BACKWARD", "global default BACKWARD")
client().set_compatibility(subject_name=subject, level="NONE")
check(client().get_compatibility(subject) == "NONE", "subject level NONE")
id3 = client().register_schema(subject, Schema(INCOMPATIBLE, "AVRO"))
check(client().get_versions(subject) == [1, 2, 3], f"NONE accepts the change (id {id3})")
client().set_compatibility(level="FULL")
check(client().get_compatibility() == "FULL", "global level FULL")
client().set_compatibility(level="BACKWARD")

# Deletes: a version soft then permanently, then the subject.
check(client().delete_version(subject, 3) == 3, "soft-deleted version 3")
check(client().get_versions(subject) == [1, 2], "version 3 hidden")
check(client().delete_version(subject, 3, permanent=True) == 3, "permanently deleted version 3")
check(client().delete_subject("other-value") == [1], "soft-deleted subject other-value")
check("other-value" not in client().get_subjects(), "other-value hidden")
check(client().delete_subject("other-value", permanent=True) == [1], "permanently deleted other-value")
expect_error(lambda: client().get_versions("other-value"), 404, 40401, "deleted subject is gone")
check(client().get_schema(id1).schema_str is not None, "id survives its subject's deletion")

# Serialize and deserialize a record through the registry.
ctx = SerializationContext("users", MessageField.VALUE)
ser = AvroSerializer(client(), V2, conf={"auto.register.schemas": False, "use.latest.version": True})
record = {"id": 7, "name": "ada", "email": "ada@example.com"}
payload = ser(record, ctx)
check(payload[0] == 0 and int.from_bytes(payload[1:5], "big") == id2, "framed with magic 0 and id v2")
de = AvroDeserializer(client())
check(de(payload, ctx) == record, "deserialized record equals the original")
ser_auto = AvroSerializer(client(), V1)
payload1 = ser_auto({"id": 1, "name": "bob"}, ctx)
check(int.from_bytes(payload1[1:5], "big") == id1, "auto-registered v1 reuses id v1")
check(AvroDeserializer(client())(payload1, ctx) == {"id": 1, "name": "bob"}, "v1 record round-trips")

print("ALL OK")
