"""Inlet's Schema Registry with confluent-kafka's Protobuf and JSON Schema serdes.

Usage: schema_registry_protobuf_json.py REGISTRY_URL write|read

write: ProtobufSerializer registers a .proto that imports another one (the import becomes a
schema reference), frames records of two message types (message indexes [0] and [1]), and
ProtobufDeserializer reads them back; an evolution is accepted and an incompatible one refused
(409). JSONSerializer registers a JSON Schema, frames a record, JSONDeserializer validates and
reads it; evolution and refusal as for Protobuf; a referenced version cannot be deleted (42206);
a soft delete and a permanent delete. Framed records are written to a file for the read phase.

read (after the registry restarted on the same metadata store): fresh clients find the same
ids, versions and references, and the deserializers decode the records framed before.

The .proto files are built as descriptors in Python (no protoc needed); the serializer sends
them base64-encoded, as it always does. Exits non-zero on the first mismatch.
"""

import json
import os
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from inlet_clients import check, expect_error, registry_client

URL = sys.argv[1]
PHASE = sys.argv[2]
STATE = sys.argv[3]

F = descriptor_pb2.FieldDescriptorProto


def client():
    return registry_client(URL)


def field(msg, name, number, ftype, type_name=None, label=F.LABEL_OPTIONAL):
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = type_name
    return f


def proto_classes():
    """common.proto (Money) and orders.proto (Order, Refund) importing it."""
    common = descriptor_pb2.FileDescriptorProto(
        name="inlet/common.proto", package="inlet.common", syntax="proto3")
    money = common.message_type.add(name="Money")
    field(money, "currency", 1, F.TYPE_STRING)
    field(money, "units", 2, F.TYPE_INT64)

    orders = descriptor_pb2.FileDescriptorProto(
        name="inlet/orders.proto", package="inlet.orders", syntax="proto3",
        dependency=["inlet/common.proto"])
    order = orders.message_type.add(name="Order")
    field(order, "id", 1, F.TYPE_INT64)
    field(order, "customer", 2, F.TYPE_STRING)
    field(order, "total", 3, F.TYPE_MESSAGE, ".inlet.common.Money")
    field(order, "tags", 4, F.TYPE_STRING, label=F.LABEL_REPEATED)
    refund = orders.message_type.add(name="Refund")
    field(refund, "order_id", 1, F.TYPE_INT64)
    field(refund, "reason", 2, F.TYPE_STRING)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(common)
    pool.Add(orders)
    get = lambda n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n))
    return get("inlet.orders.Order"), get("inlet.orders.Refund"), get("inlet.common.Money")


ORDER_PROTO_V2 = """syntax = "proto3";
package inlet.orders;
import "inlet/common.proto";
message Order {
  int64 id = 1;
  string customer = 2;
  inlet.common.Money total = 3;
  repeated string tags = 4;
  string note = 5;
}
message Refund {
  int64 order_id = 1;
  string reason = 2;
}
"""
# Field 1 changes from int64 to string: not wire compatible.
ORDER_PROTO_BAD = ORDER_PROTO_V2.replace("int64 id = 1;", "string id = 1;")

def payment_schema(id_type="integer", **more):
    """The JSON Schema of a closed Payment object: `id` of `id_type`, `amount`, `currency`, and
    `more` optional properties (name: type)."""
    properties = {"id": {"type": id_type}, "amount": {"type": "number"}, "currency": {"type": "string"}}
    properties.update({name: {"type": t} for name, t in more.items()})
    return json.dumps({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Payment", "type": "object", "additionalProperties": False,
        "properties": properties,
        "required": ["id", "amount"],
    })


JSON_V1 = payment_schema()
# Adds an optional property to the closed content model: readers of v2 read v1 data.
JSON_V2 = payment_schema(memo="string")
# `id` becomes a string: old data does not validate.
JSON_BAD = payment_schema(id_type="string")

Order, Refund, Money = proto_classes()
orders_ctx = SerializationContext("orders", MessageField.VALUE)
refunds_ctx = SerializationContext("refunds", MessageField.VALUE)
payments_ctx = SerializationContext("payments", MessageField.VALUE)


def write():
    sr = client()
    # --- Protobuf ---
    ser = ProtobufSerializer(Order, sr, {"use.deprecated.format": False})
    order = Order(id=7, customer="ada", total=Money(currency="EUR", units=42), tags=["a", "b"])
    framed_order = ser(order, orders_ctx)
    check(framed_order[0] == 0, "protobuf record framed with magic byte 0")
    order_id = int.from_bytes(framed_order[1:5], "big")
    latest = sr.get_latest_version("orders-value")
    check(latest.schema_id == order_id and latest.version == 1,
          f"serializer registered orders-value v1 with id {order_id}")
    check(latest.schema.schema_type == "PROTOBUF", "schemaType PROTOBUF")
    refs = latest.schema.references
    check(len(refs) == 1 and refs[0].name == "inlet/common.proto"
          and refs[0].subject == "inlet/common.proto" and refs[0].version == 1,
          f"the import became a reference: {[(r.name, r.subject, r.version) for r in refs]}")
    check("import \"inlet/common.proto\"" in latest.schema.schema_str
          and "message Order" in latest.schema.schema_str,
          "the registry serves the schema as .proto text")
    common = sr.get_latest_version("inlet/common.proto")
    check("message Money" in common.schema.schema_str, "the referenced file is its own subject")

    de = ProtobufDeserializer(Order, {"use.deprecated.format": False})
    back = de(framed_order, orders_ctx)
    check(back == order, f"protobuf round trip: {back}")

    # The second message type of the file is framed with message index [1].
    refund_ser = ProtobufSerializer(Refund, sr, {"use.deprecated.format": False})
    framed_refund = refund_ser(Refund(order_id=7, reason="late"), refunds_ctx)
    check(framed_refund[5] == 2 and framed_refund[6] == 2,
          f"Refund framed with message indexes [1]: {framed_refund[5:7].hex()}")
    check(int.from_bytes(framed_refund[1:5], "big") == order_id,
          "the same file under another subject keeps its id")
    check(ProtobufDeserializer(Refund, {"use.deprecated.format": False})(framed_refund, refunds_ctx).reason == "late",
          "Refund round trip")

    # Evolution: a new field is compatible; changing a field's type is not.
    proto_refs = latest.schema.references
    check(sr.test_compatibility("orders-value", Schema(ORDER_PROTO_V2, "PROTOBUF", proto_refs)),
          "adding a field is backward compatible")
    v2 = sr.register_schema("orders-value", Schema(ORDER_PROTO_V2, "PROTOBUF", proto_refs))
    check(v2 != order_id, f"v2 registered with id {v2}")
    check(not sr.test_compatibility("orders-value", Schema(ORDER_PROTO_BAD, "PROTOBUF", proto_refs)),
          "changing int64 to string is reported incompatible")
    expect_error(lambda: sr.register_schema("orders-value", Schema(ORDER_PROTO_BAD, "PROTOBUF", proto_refs)),
                 409, 409, "registering the incompatible change")
    found = sr.lookup_schema("orders-value", Schema(ORDER_PROTO_V2, "PROTOBUF", proto_refs))
    check(found.version == 2 and found.schema_id == v2, "the .proto text form is found by lookup")
    # A referenced version is protected from deletion.
    expect_error(lambda: sr.delete_version("inlet/common.proto", 1), 422, 42206,
                 "deleting a referenced version")

    # --- JSON Schema ---
    jser = JSONSerializer(JSON_V1, sr)
    payment = {"id": 1, "amount": 9.5, "currency": "EUR"}
    framed_payment = jser(payment, payments_ctx)
    payment_id = int.from_bytes(framed_payment[1:5], "big")
    got = sr.get_schema(payment_id)
    check(got.schema_type == "JSON", f"JSON schema registered with id {payment_id}")
    check(json.loads(got.schema_str)["properties"]["id"] == {"type": "integer"},
          "the JSON schema is served as registered (canonical form)")
    jde = JSONDeserializer(JSON_V1)
    check(jde(framed_payment, payments_ctx) == payment, "JSON round trip")
    v2j = sr.register_schema("payments-value", Schema(JSON_V2, "JSON"))
    check(sr.get_latest_version("payments-value").version == 2, f"JSON v2 registered ({v2j})")
    expect_error(lambda: sr.register_schema("payments-value", Schema(JSON_BAD, "JSON")),
                 409, 409, "an incompatible JSON schema")
    expect_error(lambda: sr.register_schema("payments-value", Schema('{"type": 5}', "JSON")),
                 422, 42201, "an invalid JSON schema")
    expect_error(lambda: sr.register_schema("orders-value", Schema("message {", "PROTOBUF")),
                 422, 42201, "an invalid .proto")

    # Deletes: a soft-deleted JSON version disappears from listings, permanent removes it.
    scratch = sr.register_schema("scratch-value", Schema(JSON_V1, "JSON"))
    check(scratch == payment_id, "the same JSON schema under another subject keeps its id")
    check(sr.delete_subject("scratch-value") == [1], "soft delete")
    check("scratch-value" not in sr.get_subjects(), "soft-deleted subject hidden")
    check(sr.delete_subject("scratch-value", permanent=True) == [1], "permanent delete")

    with open(STATE, "w") as f:
        json.dump({"order": framed_order.hex(), "refund": framed_refund.hex(),
                   "payment": framed_payment.hex(), "order_id": order_id,
                   "order_v2": v2, "payment_id": payment_id}, f)


def read():
    with open(STATE) as f:
        state = json.load(f)
    sr = client()
    latest = sr.get_latest_version("orders-value")
    check(latest.version == 2 and latest.schema_id == state["order_v2"],
          "after the restart orders-value is at v2 with the same id")
    check(sr.get_version("orders-value", 1).schema_id == state["order_id"], "v1 kept its id")
    check(latest.schema.references[0].subject == "inlet/common.proto", "references kept")
    order = ProtobufDeserializer(Order, {"use.deprecated.format": False})(
        bytes.fromhex(state["order"]), orders_ctx)
    check(order.total.units == 42 and list(order.tags) == ["a", "b"],
          "a record framed before the restart still decodes")
    refund = ProtobufDeserializer(Refund, {"use.deprecated.format": False})(
        bytes.fromhex(state["refund"]), refunds_ctx)
    check(refund.reason == "late", "and the second message type too")
    payment = JSONDeserializer(JSON_V2, schema_registry_client=sr)(
        bytes.fromhex(state["payment"]), payments_ctx)
    check(payment["amount"] == 9.5, "the JSON record decodes after the restart")
    check(sr.get_schema(state["payment_id"]).schema_type == "JSON", "JSON id kept")
    check("scratch-value" not in sr.get_subjects(deleted=True), "the permanent delete held")


{"write": write, "read": read}[PHASE]()
print("ALL OK")
