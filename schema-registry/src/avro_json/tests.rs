use serde_json::{json, Value};

use super::{to_json, Encoder};
use crate::avro::{parse, AvroSchema};
use crate::{ParsedSchema, StoredSchema};

const ORDER: &str = r#"{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "qty", "type": "int"},
    {"name": "price", "type": "double"},
    {"name": "ratio", "type": "float"},
    {"name": "paid", "type": "boolean"},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "code", "type": ["null", "string", "long"], "default": null},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "attrs", "type": {"type": "map", "values": "int"}, "default": {}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "raw", "type": "bytes", "default": ""},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 0},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": null},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, "default": "\u0000"},
    {"name": "address", "type": ["null", {"type": "record", "name": "Address",
        "fields": [{"name": "zip", "type": "int"}, {"name": "city", "type": "string"}]}], "default": null}
  ]
}"#;

fn order() -> AvroSchema {
    parse(ORDER).expect("the test schema parses")
}

/// Decodes `datum` as the node does (`framing::decode_payload`: apache-avro with Inlet's
/// allocation bound, which the first decode of a process sets; the whole datum used).
fn decode(schema: &AvroSchema, datum: &[u8]) -> Result<apache_avro::types::Value, String> {
    let stored = StoredSchema::new(1, ParsedSchema::Avro(schema.clone()), Vec::new());
    match crate::framing::decode_payload(&stored, datum) {
        Ok(crate::framing::Value::Avro(v)) => Ok(v),
        Ok(other) => Err(format!("not an Avro value: {other:?}")),
        Err(e) => Err(format!("the node cannot read what was written: {e}")),
    }
}

/// Encodes `input`, decodes it as the node does, and prints it back as JSON.
fn round_trip(schema: &AvroSchema, input: Value) -> Result<Value, String> {
    let mut out = Vec::new();
    Encoder::new(schema)
        .encode(&input, &mut out)
        .map_err(|e| e.to_string())?;
    let decoded = decode(schema, &out)?;
    let text = to_json(schema, &decoded);
    Ok(serde_json::from_str(&text).expect("to_json writes JSON"))
}

#[test]
fn the_specifications_json_encoding_writes_a_datum_that_reads_back_the_same() {
    let s = order();
    let input = json!({
        "id": 9007199254740993_i64, "qty": -3, "price": 1.5, "ratio": 22.27, "paid": true,
        "note": {"string": "rush"}, "code": {"long": 7}, "tags": ["a", "b"],
        "attrs": {"x": 1, "y": -1}, "status": "PAID", "raw": "\u{0}\u{ff}A", "day": 19700,
        "at": {"long": 1700000000000_i64}, "amount": "\u{4}\u{d2}",
        "address": {"shop.Address": {"zip": 12345, "city": "Zürich"}}
    });
    let back = round_trip(&s, input.clone()).expect("encodes");
    assert_eq!(back, input, "printed back in the specification's form");
    // Fields in the schema's order, not sorted.
    let mut out = Vec::new();
    Encoder::new(&s).encode(&input, &mut out).unwrap();
    let decoded = decode(&s, &out).unwrap();
    assert!(to_json(&s, &decoded).starts_with(r#"{"id":9007199254740993,"qty":-3,"price":1.5,"ratio":22.27,"paid":true,"note":{"string":"rush"}"#));
}

#[test]
fn plain_json_is_taken_where_one_branch_holds_it_and_defaults_fill_missing_fields() {
    let s = order();
    let back = round_trip(
        &s,
        json!({"id": 1, "qty": 2, "price": 3, "ratio": 0.5, "paid": false, "status": "NEW",
               "note": "plain", "at": 5, "amount": 12.34,
               "address": {"zip": 1, "city": "Bern"}}),
    )
    .expect("encodes");
    assert_eq!(back["note"], json!({"string": "plain"}));
    assert_eq!(back["at"], json!({"long": 5}));
    assert_eq!(
        back["address"],
        json!({"shop.Address": {"zip": 1, "city": "Bern"}})
    );
    // 12.34 at scale 2 is 1234 = 0x04d2.
    assert_eq!(back["amount"], json!("\u{4}\u{d2}"));
    // Left out: their defaults.
    assert_eq!(back["code"], Value::Null);
    assert_eq!(back["tags"], json!([]));
    assert_eq!(back["day"], json!(0));
    assert_eq!(back["price"], json!(3.0));
}

fn refused(schema: &AvroSchema, input: Value) -> String {
    let mut out = Vec::new();
    match Encoder::new(schema).encode(&input, &mut out) {
        Ok(()) => panic!("{input} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_value_that_does_not_fit_is_refused_with_its_path_and_the_reason() {
    let s = order();
    let base = json!({"id": 1, "qty": 2, "price": 3, "ratio": 0.5, "paid": false, "status": "NEW"});
    let with = |k: &str, v: Value| {
        let mut o = base.clone();
        o[k] = v;
        o
    };
    assert_eq!(
        refused(&s, with("qty", json!("two"))),
        r#".qty: expected an int (32-bit), got "two""#
    );
    assert_eq!(
        refused(&s, with("qty", json!(1_i64 << 40))),
        ".qty: expected an int (32-bit), got 1099511627776"
    );
    assert!(refused(&s, with("status", json!("LOST")))
        .contains("\"LOST\" is not a symbol of shop.Status (one of NEW, PAID)"));
    assert_eq!(
        refused(&s, with("address", json!({"zip": "x", "city": "c"}))),
        r#".address.zip: expected an int (32-bit), got "x""#
    );
    assert_eq!(
        refused(&s, with("tags", json!(["a", 2]))),
        ".tags[1]: expected a string, got 2"
    );
    assert!(refused(&s, with("colour", json!("red"))).contains("has no field \"colour\""));
    let mut missing = base.clone();
    missing.as_object_mut().unwrap().remove("id");
    assert_eq!(
        refused(&s, missing),
        ".id: missing, and the field has no default"
    );
    assert!(refused(&s, with("amount", json!(1.234))).contains("more than 2 decimal places"));
    assert!(refused(&s, with("amount", json!(123456789012_i64))).contains("more than 10 digits"));
    assert!(refused(&s, with("raw", json!("\u{100}"))).contains("code points 0-255"));
    assert!(refused(&s, json!([1])).contains("expected an object (a record)"));
}

#[test]
fn a_plain_value_that_fits_two_branches_must_name_one() {
    let s = order();
    let base = json!({"id": 1, "qty": 2, "price": 3, "ratio": 0.5, "paid": false, "status": "NEW"});
    let mut o = base.clone();
    o["code"] = json!(7);
    // 7 fits only the long branch; "7" fits only the string branch.
    assert_eq!(
        round_trip(&s, o.clone()).unwrap()["code"],
        json!({"long": 7})
    );
    o["code"] = json!("7");
    assert_eq!(
        round_trip(&s, o.clone()).unwrap()["code"],
        json!({"string": "7"})
    );
    o["code"] = json!(true);
    assert!(refused(&s, o.clone()).contains("fits no branch of the union [null, string, long]"));

    let two = parse(r#"["null", "int", "long"]"#).unwrap();
    let e = refused(&two, json!(5));
    assert!(
        e.contains("fits the branches int, long") && e.contains(r#"{"int": …}"#),
        "{e}"
    );
    assert_eq!(
        round_trip(&two, json!({"long": 5})).unwrap(),
        json!({"long": 5})
    );
    assert_eq!(round_trip(&two, Value::Null).unwrap(), Value::Null);
}

#[test]
fn fixed_decimals_are_sign_extended_to_their_size() {
    let s = parse(
        r#"{"type": "fixed", "name": "D", "size": 4, "logicalType": "decimal", "precision": 9, "scale": 1}"#,
    )
    .unwrap();
    let mut out = Vec::new();
    Encoder::new(&s).encode(&json!(-1.5), &mut out).unwrap();
    assert_eq!(out, (-15_i32).to_be_bytes());
    out.clear();
    Encoder::new(&s).encode(&json!(2e2), &mut out).unwrap();
    assert_eq!(out, 2000_i32.to_be_bytes());
}

#[test]
fn nesting_beyond_the_bound_is_refused_not_a_stack_overflow() {
    let s = parse(r#"{"type": "array", "items": {"type": "array", "items": "int"}}"#).unwrap();
    assert!(round_trip(&s, json!([[1, 2], []])).is_ok());
    let mut deep = json!(1);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let r = parse(
        r#"{"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]}"#,
    )
    .unwrap();
    let mut nested = Value::Null;
    for _ in 0..200 {
        nested = json!({"next": nested});
    }
    assert!(refused(&r, nested).contains("nested deeper than"));
    assert!(refused(&s, deep).contains("expected an int"));
}
