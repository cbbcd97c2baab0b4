use base64::Engine as _;
use proptest::prelude::*;
use prost_reflect::prost::Message as _;
use prost_reflect::prost_types::{
    field_descriptor_proto::{Label, Type},
    DescriptorProto, EnumDescriptorProto, EnumValueDescriptorProto, FieldDescriptorProto,
    FileDescriptorProto, MessageOptions, OneofDescriptorProto,
};
use prost_reflect::{DynamicMessage, ReflectMessage as _, Value};

use super::*;

fn schema(text: &str) -> ProtoSchema {
    schema_with(text, &[])
}

fn schema_with(text: &str, refs: &[(&str, &str)]) -> ProtoSchema {
    let refs: Vec<(String, String)> = refs
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    match parse(text, &refs) {
        Ok(s) => s,
        Err(e) => panic!("{e}\n--- schema:\n{text}"),
    }
}

fn p3(body: &str) -> String {
    format!("syntax = \"proto3\";\n{body}")
}

/// Every difference from `original` to `update` as Confluent writes them ("KIND path"), sorted.
fn changes(original: &ProtoSchema, update: &ProtoSchema) -> Vec<String> {
    let mut out: Vec<String> = compat::diff(original, update)
        .into_iter()
        .map(|d| format!("{} {}", d.kind.name(), d.path))
        .collect();
    out.sort();
    out
}

fn b64(proto: &FileDescriptorProto) -> String {
    base64::engine::general_purpose::STANDARD.encode(proto.encode_to_vec())
}

// ---------------------------------------------------------------------------------------------
// Compatibility rules
// ---------------------------------------------------------------------------------------------

/// (name, old schema, new schema, BACKWARD-compatible, FORWARD-compatible), after Confluent's
/// rules and its diff-schema-examples.json cases. Bodies are proto3 unless they start with
/// `syntax`.
const CASES: &[(&str, &str, &str, bool, bool)] = &[
    (
        "add field",
        "message M { string a = 1; }",
        "message M { string a = 1; string b = 2; }",
        true,
        true,
    ),
    (
        "remove field",
        "message M { string a = 1; string b = 2; }",
        "message M { string a = 1; }",
        true,
        true,
    ),
    (
        "rename field",
        "message M { string a = 1; }",
        "message M { string b = 1; }",
        true,
        true,
    ),
    (
        "renumber field",
        "message M { string a = 1; }",
        "message M { string a = 2; }",
        true,
        true,
    ),
    (
        "int32 to int64",
        "message M { int32 a = 1; }",
        "message M { int64 a = 1; }",
        true,
        true,
    ),
    (
        "uint64 to bool",
        "message M { uint64 a = 1; }",
        "message M { bool a = 1; }",
        true,
        true,
    ),
    (
        "string to bytes",
        "message M { string a = 1; }",
        "message M { bytes a = 1; }",
        true,
        true,
    ),
    (
        "int32 to string",
        "message M { int32 a = 1; }",
        "message M { string a = 1; }",
        false,
        false,
    ),
    (
        "sint32 to int32",
        "message M { sint32 a = 1; }",
        "message M { int32 a = 1; }",
        false,
        false,
    ),
    (
        "sint32 to sint64",
        "message M { sint32 a = 1; }",
        "message M { sint64 a = 1; }",
        true,
        true,
    ),
    (
        "fixed32 to sfixed32",
        "message M { fixed32 a = 1; }",
        "message M { sfixed32 a = 1; }",
        true,
        true,
    ),
    (
        "fixed32 to fixed64",
        "message M { fixed32 a = 1; }",
        "message M { fixed64 a = 1; }",
        false,
        false,
    ),
    (
        "float to double",
        "message M { float a = 1; }",
        "message M { double a = 1; }",
        false,
        false,
    ),
    (
        "int32 to enum",
        "message M { int32 a = 1; }",
        "message M { E a = 1; } enum E { Z = 0; ONE = 1; }",
        true,
        true,
    ),
    (
        "scalar to message",
        "message M { int32 a = 1; } message N { int32 x = 1; }",
        "message M { N a = 1; } message N { int32 x = 1; }",
        false,
        false,
    ),
    (
        "field message type renamed",
        "message M { N a = 1; } message N { string s = 1; }",
        "message M { O a = 1; } message O { string s = 1; }",
        false,
        false,
    ),
    (
        "required field added",
        "syntax = \"proto2\"; message M { optional string a = 1; }",
        "syntax = \"proto2\"; message M { optional string a = 1; required string b = 2; }",
        false,
        false,
    ),
    (
        "optional field added (proto2)",
        "syntax = \"proto2\"; message M { optional string a = 1; }",
        "syntax = \"proto2\"; message M { optional string a = 1; optional int32 b = 2; }",
        true,
        true,
    ),
    (
        "map value int32 to string",
        "message M { map<string, int32> m = 1; }",
        "message M { map<string, string> m = 1; }",
        false,
        false,
    ),
    (
        "map value int32 to int64",
        "message M { map<string, int32> m = 1; }",
        "message M { map<string, int64> m = 1; }",
        true,
        true,
    ),
    (
        "map to repeated message",
        "message M { map<string, string> m = 1; }",
        "message M { repeated E m = 1; message E { string key = 1; string value = 2; } }",
        false,
        false,
    ),
    (
        "optional string to repeated",
        "message M { optional string a = 1; }",
        "message M { repeated string a = 1; }",
        true,
        true,
    ),
    (
        "optional int32 to repeated",
        "message M { optional int32 a = 1; }",
        "message M { repeated int32 a = 1; }",
        false,
        false,
    ),
    (
        // Confluent compares labels only when both fields have one in source.
        "unlabelled int32 to repeated",
        "message M { int32 a = 1; }",
        "message M { repeated int32 a = 1; }",
        true,
        true,
    ),
    (
        "message field optional to repeated",
        "message M { optional N a = 1; } message N { int32 x = 1; }",
        "message M { repeated N a = 1; } message N { int32 x = 1; }",
        true,
        true,
    ),
    (
        "proto3 optional to unlabelled",
        "message M { optional int32 a = 1; }",
        "message M { int32 a = 1; }",
        true,
        true,
    ),
    (
        "proto2 optional to proto3",
        "syntax = \"proto2\"; message M { optional int32 a = 1; }",
        "message M { int32 a = 1; }",
        true,
        true,
    ),
    (
        "add message",
        "message M { int32 a = 1; }",
        "message M { int32 a = 1; } message N { int32 b = 1; }",
        true,
        false,
    ),
    (
        "remove message",
        "message M { int32 a = 1; } message N { int32 b = 1; }",
        "message M { int32 a = 1; }",
        false,
        true,
    ),
    (
        "reorder messages",
        "message M { int32 a = 1; } message N { int32 b = 1; }",
        "message N { int32 b = 1; } message M { int32 a = 1; }",
        true,
        true,
    ),
    (
        "package changed",
        "package foo; message M { int32 a = 1; }",
        "package bar; message M { int32 a = 1; }",
        false,
        false,
    ),
    (
        "enum value renamed",
        "message M { E e = 1; } enum E { A = 0; B = 1; }",
        "message M { E e = 1; } enum E { A = 0; C = 1; }",
        true,
        true,
    ),
    (
        "enum value added",
        "message M { E e = 1; } enum E { A = 0; }",
        "message M { E e = 1; } enum E { A = 0; B = 1; }",
        true,
        true,
    ),
    (
        "enum replaced by int32",
        "message M { E e = 1; } enum E { A = 0; }",
        "message M { int32 e = 1; }",
        true,
        true,
    ),
    (
        "move one field into a new oneof",
        "message M { string a = 1; string b = 2; }",
        "message M { string a = 1; oneof o { string b = 2; int32 c = 3; } }",
        true,
        false, // back: field 3 is dropped from a oneof that survives in part
    ),
    (
        "move two fields into a new oneof",
        "message M { string a = 1; string b = 2; }",
        "message M { oneof o { string a = 1; string b = 2; } }",
        false,
        true,
    ),
    (
        "add field to oneof",
        "message M { oneof o { string a = 1; string b = 2; } }",
        "message M { oneof o { string a = 1; string b = 2; int32 c = 3; } }",
        true,
        false,
    ),
    (
        "move field into existing oneof",
        "message M { string a = 1; oneof o { string b = 2; string c = 3; } }",
        "message M { oneof o { string a = 1; string b = 2; string c = 3; } }",
        false,
        true,
    ),
    (
        "move field between oneofs",
        "message M { oneof a { int32 f1 = 1; int32 f2 = 2; } oneof b { int32 f3 = 3; } }",
        "message M { oneof a { int32 f1 = 1; } oneof b { int32 f3 = 3; int32 f2 = 2; } }",
        false,
        false,
    ),
    (
        "move field out of oneof",
        "message M { oneof x { int32 a = 1; int32 b = 2; } }",
        "message M { oneof x { int32 a = 1; } int32 b = 2; }",
        true,
        false,
    ),
    (
        "rename oneof",
        "message M { oneof old { float f = 1; int32 i = 2; } }",
        "message M { oneof renamed { float f = 1; int32 i = 2; } }",
        true,
        true,
    ),
    (
        "type change in renamed oneof",
        "message M { oneof old { float f = 1; int32 i = 2; } }",
        "message M { oneof renamed { float f = 1; string i = 2; } }",
        false,
        false,
    ),
    (
        "delete whole oneof",
        "message M { int32 k = 3; oneof o { int32 a = 1; string b = 2; } }",
        "message M { int32 k = 3; }",
        true,
        true,
    ),
    (
        "nested message field added",
        "message M { N n = 1; message N { int32 a = 1; } }",
        "message M { N n = 1; message N { int32 a = 1; int32 b = 2; } }",
        true,
        true,
    ),
    (
        "nested message field type changed",
        "message M { N n = 1; message N { int32 a = 1; } }",
        "message M { N n = 1; message N { string a = 1; } }",
        false,
        false,
    ),
    (
        "required field removed",
        "syntax = \"proto2\"; message M { required int32 a = 1; optional int32 b = 2; }",
        "syntax = \"proto2\"; message M { optional int32 b = 2; }",
        false,
        false,
    ),
];

fn case_schema(body: &str) -> ProtoSchema {
    if body.starts_with("syntax") {
        schema(body)
    } else {
        schema(&p3(body))
    }
}

#[test]
fn compatibility_rule_table() {
    assert!(CASES.len() >= 25);
    let mut failures = Vec::new();
    for (name, old, new, backward, forward) in CASES {
        let (old_s, new_s) = (case_schema(old), case_schema(new));
        let back = can_read(&new_s, &old_s);
        let fwd = can_read(&old_s, &new_s);
        if back.is_empty() != *backward {
            failures.push(format!(
                "{name}: BACKWARD expected {backward}, got {back:?}"
            ));
        }
        if fwd.is_empty() != *forward {
            failures.push(format!("{name}: FORWARD expected {forward}, got {fwd:?}"));
        }
        // A schema is always compatible with itself.
        assert!(can_read(&old_s, &old_s).is_empty(), "{name}: old vs itself");
        assert!(can_read(&new_s, &new_s).is_empty(), "{name}: new vs itself");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The exact differences of Confluent's diff-schema-examples.json for a few of its cases.
#[test]
fn confluent_change_lists() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "syntax = \"proto3\";\npackage foo;\nmessage TestMessage {\n string test_string = 1;\n .foo.TestMessage.Status test_int = 2;\n message Status { string test_string = 1; }\n}",
            "syntax = \"proto3\";\npackage bar;\nmessage TestMessage {\n string test_string = 1;\n .bar.TestMessage.Status test_int = 2;\n message Status { string test_string = 1; }\n}",
            &["PACKAGE_CHANGED #/"],
        ),
        (
            "message TestMessage { string test_string = 1; int32 test_int = 2; }",
            "message TestMessage { string test_string = 1; .TestMessage.Status test_int = 2; message Status { string test_string = 1; } } enum Status { ACTIVE = 0; INACTIVE = 1; }",
            &["ENUM_ADDED #/Status", "FIELD_KIND_CHANGED #/TestMessage/2", "MESSAGE_ADDED #/TestMessage/Status"],
        ),
        (
            "message TestMessage { string test_string = 1; TestMessage2 test_int = 2; } message TestMessage2 { string s1 = 1; }",
            "message TestMessage { string test_string = 1; TestMessage3 test_int = 2; } message TestMessage3 { string s1 = 1; }",
            &["FIELD_NAMED_TYPE_CHANGED #/TestMessage/2", "MESSAGE_ADDED #/TestMessage3", "MESSAGE_REMOVED #/TestMessage2"],
        ),
        (
            "message TestMessage { string test_string = 1; string test_string2 = 2; }",
            "message TestMessage { oneof new_oneof { string test_string = 1; string test_string2 = 2; int32 other_id = 3; } }",
            &[
                "MULTIPLE_FIELDS_MOVED_TO_ONEOF #/TestMessage/new_oneof",
                "ONEOF_ADDED #/TestMessage/new_oneof",
                "ONEOF_FIELD_ADDED #/TestMessage/new_oneof/3",
            ],
        ),
        (
            "message TestMessage { string test_string = 1; oneof new_oneof { string test_string2 = 2; string test_string3 = 3; } }",
            "message TestMessage { oneof new_oneof_2 { string test_string = 1; string test_string2 = 2; string test_string3 = 3; } }",
            &[
                "FIELD_MOVED_TO_EXISTING_ONEOF #/TestMessage/new_oneof_2",
                "ONEOF_ADDED #/TestMessage/new_oneof_2",
                "ONEOF_REMOVED #/TestMessage/new_oneof",
            ],
        ),
        (
            "message Message { oneof oldOneOf { float field_float = 1; int32 field_with_incompatible_type_change = 2; } }",
            "message Message { float field_float = 1; sint64 field_with_incompatible_type_change = 2; }",
            &[
                "FIELD_SCALAR_KIND_CHANGED #/Message/2",
                "ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/Message/1",
                "ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/Message/2",
                "ONEOF_REMOVED #/Message/oldOneOf",
            ],
        ),
        (
            "message Message { oneof g { int32 a = 1; int32 b = 2; } }",
            "message Message { oneof g2 { int32 a = 1; } }",
            &["ONEOF_ADDED #/Message/g2", "ONEOF_FIELD_REMOVED #/Message/g/2", "ONEOF_REMOVED #/Message/g"],
        ),
        (
            "message TestMessage { optional string test_string = 1; }",
            "message TestMessage { repeated string test_string = 1; }",
            &["FIELD_STRING_OR_BYTES_LABEL_CHANGED #/TestMessage/1"],
        ),
        (
            "message TestMessage { string test_string = 1; } message TestMessage2 { string test_string = 1; }",
            "message TestMessage2 { string test_string = 1; } message TestMessage { string test_string = 1; }",
            &["MESSAGE_MOVED #/TestMessage", "MESSAGE_MOVED #/TestMessage2"],
        ),
        (
            "message Wrapper { int32 wrapperInt = 1; message TestMessage { string test_string = 1; } }",
            "message Wrapper { int32 wrapperInt = 1; message TestMessage { string test_string = 1; string test_string2 = 2; } }",
            &["FIELD_ADDED #/Wrapper/TestMessage/2"],
        ),
        (
            "message M { map<string, Status> m = 1; message Status { string s = 1; } }",
            "message M { map<string, M.Status> m = 1; message Status { string s = 1; } }",
            &[],
        ),
    ];
    for (old, new, expected) in cases {
        let got = changes(&case_schema(old), &case_schema(new));
        let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(got, expected, "\nold: {old}\nnew: {new}");
    }
}

#[test]
fn incompatibility_messages_name_the_rule_and_path() {
    let old = case_schema("message M { int32 a = 1; }");
    let new = case_schema("message M { string a = 1; }");
    let reasons = can_read(&new, &old);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with("FIELD_SCALAR_KIND_CHANGED #/M/1: "),
        "{}",
        reasons[0]
    );
    assert!(
        reasons[0].contains("int32") && reasons[0].contains("string"),
        "{}",
        reasons[0]
    );
}

const HOME_V1: &str = "syntax = \"proto3\";\npackage io.demo;\nmessage Home {\n  int32 device_id = 1;\n  bool enabled = 2;\n}\n";
const HOME_V2_COMPATIBLE: &str = "syntax = \"proto3\";\npackage io.demo;\nmessage Home {\n  int64 device_id = 1;\n  bool enabled = 2;\n  string name = 3;\n}\n";
const HOME_V2_INCOMPATIBLE: &str = "syntax = \"proto3\";\npackage io.demo;\nmessage Home {\n  string device_id = 1;\n  bool enabled = 2;\n}\n";
const USES_HOME: &str =
    "syntax = \"proto3\";\nimport \"home.proto\";\nmessage Event {\n  io.demo.Home home = 1;\n}\n";

#[test]
fn referenced_types_are_compared_field_by_field() {
    let old = schema_with(USES_HOME, &[("home.proto", HOME_V1)]);
    let compatible = schema_with(USES_HOME, &[("home.proto", HOME_V2_COMPATIBLE)]);
    let incompatible = schema_with(USES_HOME, &[("home.proto", HOME_V2_INCOMPATIBLE)]);
    assert!(can_read(&compatible, &old).is_empty());
    assert!(can_read(&old, &compatible).is_empty());
    assert_eq!(
        changes(&old, &incompatible),
        vec![
            "FIELD_NAMED_TYPE_CHANGED #/Event/1",
            "FIELD_SCALAR_KIND_CHANGED #/Home/1"
        ]
    );
    assert_eq!(can_read(&incompatible, &old).len(), 2);
    assert_eq!(can_read(&old, &incompatible).len(), 2);

    // The same type under another import name and package is the same type to Confluent.
    let renamed_home = HOME_V1.replace("io.demo", "io.demo2");
    let moved = schema_with(
        &USES_HOME
            .replace("home.proto", "home2.proto")
            .replace("io.demo", "io.demo2"),
        &[("home2.proto", &renamed_home)],
    );
    assert!(
        changes(&old, &moved).is_empty(),
        "{:?}",
        changes(&old, &moved)
    );
}

#[test]
fn moving_a_message_to_an_import_removes_it() {
    let local = schema(&p3(
        "message Event { Home home = 1; }\nmessage Home { int32 device_id = 1; bool enabled = 2; }",
    ));
    let imported = schema_with(
        &p3("import \"home.proto\";\nmessage Event { .Home home = 1; }"),
        &[(
            "home.proto",
            "syntax = \"proto3\";\nmessage Home { int32 device_id = 1; bool enabled = 2; }",
        )],
    );
    assert_eq!(changes(&local, &imported), vec!["MESSAGE_REMOVED #/Home"]);
    assert!(!can_read(&imported, &local).is_empty());
    assert!(can_read(&local, &imported).is_empty()); // MESSAGE_ADDED
}

#[test]
fn recursive_referenced_types_terminate() {
    let node = |t: &str| {
        format!("syntax = \"proto3\";\npackage g;\nmessage Node {{\n  Node next = 1;\n  {t} value = 2;\n  repeated Node children = 3;\n}}\n")
    };
    let main = "syntax = \"proto3\";\nimport \"node.proto\";\nmessage Graph {\n  g.Node root = 1;\n  g.Node other = 2;\n}\n";
    let v1 = schema_with(main, &[("node.proto", &node("int32"))]);
    let v2 = schema_with(main, &[("node.proto", &node("string"))]);
    assert!(can_read(&v1, &v1).is_empty());
    let reasons = can_read(&v2, &v1);
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("FIELD_SCALAR_KIND_CHANGED #/Node/2")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("FIELD_NAMED_TYPE_CHANGED #/Graph/1")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("FIELD_NAMED_TYPE_CHANGED #/Graph/2")),
        "{reasons:?}"
    );

    // Local recursive types are compared once by the walk.
    let local = schema(&p3(
        "message Node { Node next = 1; int32 v = 2; map<string, Node> m = 3; }",
    ));
    assert!(can_read(&local, &local).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Parsing and the canonical text
// ---------------------------------------------------------------------------------------------

const RICH_PROTO3: &str = r#"
// A comment that the canonical text drops.
syntax = "proto3";

import "google/protobuf/timestamp.proto";
import public "google/protobuf/duration.proto";
package demo.v1;

option java_package = "com.example.demo";
option go_package = "example.com/demo;demo";
option java_multiple_files = true;
option optimize_for = SPEED;

message User {
  option deprecated = true;
  string name = 1;
  optional int32 age = 2;
  map<string, Address> addresses = 3;
  oneof contact {
    string email = 4;
    string phone = 5 [deprecated = true];
  }
  repeated int64 ids = 6 [packed = false];
  google.protobuf.Timestamp created = 7 [json_name = "createdAt"];
  Kind kind = 8;
  reserved 9, 12 to 15, 100 to max;
  reserved "old", "older";
  message Address { string city = 1; Kind kind = 2; }
  enum Kind { option allow_alias = true; KIND_UNSPECIFIED = 0; ADMIN = 1; ROOT = 1; reserved 5 to 7; reserved "X"; }
  google.protobuf.Duration ttl = 10;
  bytes blob = 11 [jstype = JS_NORMAL];
}

enum Color { COLOR_UNSPECIFIED = 0; RED = 1 [deprecated = true]; }

message Empty {}

service Users {
  rpc Get(User) returns (User);
  rpc Watch(stream User) returns (stream User) { option deprecated = true; option idempotency_level = NO_SIDE_EFFECTS; }
}
"#;

const RICH_PROTO2: &str = r#"
syntax = "proto2";
package legacy;
import "google/protobuf/descriptor.proto";

message Old {
  required string id = 1;
  optional int32 count = 2 [default = 7];
  optional string label = 3 [default = "a \"quoted\"\nline"];
  optional bytes raw = 4 [default = "\001\377x"];
  optional double ratio = 5 [default = -inf];
  optional float f = 6 [default = 1e10];
  optional Level level = 7 [default = HIGH];
  repeated int32 packed_ints = 8 [packed = true];
  optional group Result = 9 {
    required string url = 1;
    optional string title = 2;
  }
  oneof choice {
    string a = 10;
    int32 b = 11;
  }
  extensions 100 to 199, 1000 to max;
  extend Old { optional int32 ext_in_scope = 150; }
  enum Level { LOW = 1; HIGH = 2; }
}

extend Old {
  optional string tag = 100;
  repeated int32 numbers = 101;
}

extend google.protobuf.FieldOptions {
  optional string sensitivity = 50001;
}

message Note { optional int32 a = 1; optional string b = 2; }

extend google.protobuf.MessageOptions {
  optional Note msg_note = 50002;
  repeated string msg_tags = 50003;
}

message WithOption {
  optional string secret = 1 [(sensitivity) = "high", deprecated = true];
  option (msg_note) = { a: 1 b: "x" };
  option (msg_tags) = "t1";
  option (msg_tags) = "t2";
}
"#;

fn assert_fixpoint(s: &ProtoSchema) {
    let again = schema(&s.canonical);
    assert_eq!(
        again.canonical, s.canonical,
        "canonical text is not a fixpoint"
    );
}

#[test]
fn canonical_text_is_a_fixpoint() {
    for text in [
        RICH_PROTO3,
        RICH_PROTO2,
        USES_HOME
            .replace("import \"home.proto\";\n", "")
            .replace("io.demo.Home", "int32")
            .as_str(),
    ] {
        assert_fixpoint(&schema(text));
    }
    for (_, old, new, _, _) in CASES {
        assert_fixpoint(&case_schema(old));
        assert_fixpoint(&case_schema(new));
    }
    let with_ref = schema_with(USES_HOME, &[("home.proto", HOME_V1)]);
    let again = schema_with(&with_ref.canonical, &[("home.proto", HOME_V1)]);
    assert_eq!(again.canonical, with_ref.canonical);
}

#[test]
fn canonical_text_shape() {
    let s = schema(RICH_PROTO3);
    let c = &s.canonical;
    assert!(
        c.starts_with("syntax = \"proto3\";\npackage demo.v1;\n"),
        "{c}"
    );
    // Imports sorted, public kept.
    let dur = c
        .find("import public \"google/protobuf/duration.proto\";")
        .expect(c);
    let ts = c
        .find("import \"google/protobuf/timestamp.proto\";")
        .expect(c);
    assert!(dur < ts, "{c}");
    for needle in [
        "option java_package = \"com.example.demo\";",
        "option optimize_for = SPEED;",
        "  optional int32 age = 2;\n",
        "  map<string, .demo.v1.User.Address> addresses = 3;\n",
        "  oneof contact {\n    string email = 4;\n    string phone = 5 [deprecated = true];\n  }\n",
        "  repeated int64 ids = 6 [packed = false];\n",
        "  .google.protobuf.Timestamp created = 7 [json_name = \"createdAt\"];\n",
        "  reserved 9, 12 to 15, 100 to max;\n",
        "  reserved \"old\", \"older\";\n",
        "    option allow_alias = true;\n",
        "  rpc Watch(stream .demo.v1.User) returns (stream .demo.v1.User) {\n",
        "message Empty {\n}\n",
    ] {
        assert!(c.contains(needle), "missing {needle:?} in\n{c}");
    }
    assert!(!c.contains("Entry"), "{c}");
    assert!(!c.contains("_age"), "{c}");
    assert!(!c.contains("comment"), "{c}");

    let s2 = schema(RICH_PROTO2);
    let c2 = &s2.canonical;
    for needle in [
        "  required string id = 1;\n",
        "  optional int32 count = 2 [default = 7];\n",
        "  optional string label = 3 [default = \"a \\\"quoted\\\"\\nline\"];\n",
        "  optional .legacy.Old.Level level = 7 [default = HIGH];\n",
        "  optional group Result = 9 {\n    required string url = 1;\n",
        "  extensions 100 to 199;\n  extensions 1000 to max;\n",
        "extend .legacy.Old {\n  optional string tag = 100;\n  repeated int32 numbers = 101;\n}\n",
        "extend .google.protobuf.FieldOptions {\n",
        "  option (.legacy.msg_note) = {a:1,b:\"x\"};\n  option (.legacy.msg_tags) = \"t1\";\n  option (.legacy.msg_tags) = \"t2\";\n",
        "  optional string secret = 1 [deprecated = true, (.legacy.sensitivity) = \"high\"];\n",
    ] {
        assert!(c2.contains(needle), "missing {needle:?} in\n{c2}");
    }
}

#[test]
fn formatting_does_not_change_identity() {
    let a = schema("syntax=\"proto3\";package p;message M{int32 a=1;N n=2;message N{}}");
    let b = schema(
        "// hello\nsyntax = \"proto3\";\n\npackage p;\n\nmessage M {\n  int32 a = 1; // one\n  .p.M.N n = 2;\n  message N {\n  }\n}\n",
    );
    assert_eq!(a.canonical, b.canonical);
}

/// The descriptor protoc would produce for [`PROTOC_STYLE_TEXT`].
fn protoc_style_descriptor() -> FileDescriptorProto {
    let field = |name: &str, number: i32, ty: Type, type_name: Option<&str>, json: &str| {
        FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            label: Some(Label::Optional as i32),
            r#type: Some(ty as i32),
            type_name: type_name.map(Into::into),
            json_name: Some(json.into()),
            ..Default::default()
        }
    };
    let mut age = field("age", 2, Type::Int32, None, "age");
    age.oneof_index = Some(1);
    age.proto3_optional = Some(true);
    let mut tags = field(
        "tags",
        3,
        Type::Message,
        Some(".demo.User.TagsEntry"),
        "tags",
    );
    tags.label = Some(Label::Repeated as i32);
    let mut email = field("email", 4, Type::String, None, "email");
    email.oneof_index = Some(0);
    let mut phone = field("phone_number", 5, Type::String, None, "phoneNumber");
    phone.oneof_index = Some(0);
    FileDescriptorProto {
        name: Some("demo/user.proto".into()),
        package: Some("demo".into()),
        message_type: vec![DescriptorProto {
            name: Some("User".into()),
            field: vec![
                field("name", 1, Type::String, None, "name"),
                age,
                tags,
                email,
                phone,
                field("kind", 6, Type::Enum, Some(".demo.User.Kind"), "kind"),
            ],
            nested_type: vec![DescriptorProto {
                name: Some("TagsEntry".into()),
                field: vec![
                    field("key", 1, Type::String, None, "key"),
                    field("value", 2, Type::String, None, "value"),
                ],
                options: Some(MessageOptions {
                    map_entry: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            enum_type: vec![EnumDescriptorProto {
                name: Some("Kind".into()),
                value: vec![
                    EnumValueDescriptorProto {
                        name: Some("KIND_UNSPECIFIED".into()),
                        number: Some(0),
                        options: None,
                    },
                    EnumValueDescriptorProto {
                        name: Some("ADMIN".into()),
                        number: Some(1),
                        options: None,
                    },
                ],
                ..Default::default()
            }],
            oneof_decl: vec![
                OneofDescriptorProto {
                    name: Some("contact".into()),
                    options: None,
                },
                OneofDescriptorProto {
                    name: Some("_age".into()),
                    options: None,
                },
            ],
            ..Default::default()
        }],
        syntax: Some("proto3".into()),
        ..Default::default()
    }
}

const PROTOC_STYLE_TEXT: &str = r#"syntax = "proto3";
package demo;
message User {
  string name = 1;
  optional int32 age = 2;
  map<string, string> tags = 3;
  oneof contact { string email = 4; string phone_number = 5; }
  Kind kind = 6;
  enum Kind { KIND_UNSPECIFIED = 0; ADMIN = 1; }
}
"#;

#[test]
fn base64_descriptor_and_text_give_the_same_schema() {
    let text = schema(PROTOC_STYLE_TEXT);
    let desc = schema(&b64(&protoc_style_descriptor()));
    assert_eq!(desc.canonical, text.canonical);
    assert!(changes(&text, &desc).is_empty());
    assert_fixpoint(&desc);

    // Base64 with line breaks (as some clients wrap it) is accepted too.
    let wrapped: String = b64(&protoc_style_descriptor())
        .as_bytes()
        .chunks(60)
        .map(|c| String::from_utf8_lossy(c).into_owned() + "\n")
        .collect();
    assert_eq!(schema(&wrapped).canonical, text.canonical);

    // serialized() round-trips to the same schema.
    for s in [&text, &desc, &schema(RICH_PROTO3), &schema(RICH_PROTO2)] {
        let again = schema(&s.serialized());
        assert_eq!(again.canonical, s.canonical);
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.serialized())
        .expect("base64");
    let proto = FileDescriptorProto::decode(bytes.as_slice()).expect("descriptor");
    assert_eq!(proto.package(), "demo");
    assert!(proto.source_code_info.is_none());
}

#[test]
fn references_in_either_form() {
    let home = schema_with(HOME_V1, &[]);
    let via_text = schema_with(USES_HOME, &[("home.proto", HOME_V1)]);
    let via_b64 = schema_with(USES_HOME, &[("home.proto", &home.serialized())]);
    assert_eq!(via_text.canonical, via_b64.canonical);
    assert!(via_text.canonical.contains("import \"home.proto\";"));
    assert!(via_text.canonical.contains(".io.demo.Home home = 1;"));
    assert!(changes(&via_text, &via_b64).is_empty());

    // References of references are passed flattened.
    let outer =
        "syntax = \"proto3\";\nimport \"uses_home.proto\";\nmessage Outer { Event e = 1; }\n";
    let s = schema_with(
        outer,
        &[("uses_home.proto", USES_HOME), ("home.proto", HOME_V1)],
    );
    assert!(s.pool.get_message_by_name("io.demo.Home").is_some());

    // A reference named like the main file's default name does not clash with it.
    let clash = schema_with(
        "syntax = \"proto3\";\nimport \"schema.proto\";\nmessage Outer { io.demo.Home h = 1; }\n",
        &[("schema.proto", HOME_V1)],
    );
    assert_ne!(clash.file.name(), "schema.proto");
}

#[test]
fn invalid_schemas_are_rejected_with_usable_messages() {
    let missing = parse(USES_HOME, &[]).expect_err("missing import");
    let msg = missing.to_string();
    assert!(matches!(missing, Error::InvalidSchema(_)), "{msg}");
    assert!(msg.contains("import 'home.proto' not found"), "{msg}");
    assert!(msg.contains("schema reference"), "{msg}");
    assert!(msg.contains("schema.proto:2:1"), "{msg}");

    let syntax =
        parse("syntax = \"proto3\";\nmessage M {\n  int32 a = 1\n}\n", &[]).expect_err("syntax");
    let msg = syntax.to_string();
    assert!(msg.contains("schema.proto:4:1"), "{msg}");

    let undefined =
        parse("syntax = \"proto3\";\nmessage M {\n  Foo a = 1;\n}\n", &[]).expect_err("undefined");
    assert!(undefined.to_string().contains("Foo"), "{undefined}");

    let bad_ref =
        parse(USES_HOME, &[("home.proto".into(), "message {".into())]).expect_err("bad ref");
    assert!(bad_ref.to_string().contains("home.proto:"), "{bad_ref}");

    let cycle = parse(
        "syntax = \"proto3\";\nimport \"a.proto\";\nmessage M {}\n",
        &[
            (
                "a.proto".into(),
                "syntax = \"proto3\";\nimport \"b.proto\";\n".into(),
            ),
            (
                "b.proto".into(),
                "syntax = \"proto3\";\nimport \"a.proto\";\n".into(),
            ),
        ],
    )
    .expect_err("cycle");
    assert!(cycle.to_string().contains("cycle"), "{cycle}");

    // Not valid base64 of a descriptor, so parsed (and rejected) as source.
    assert!(parse("AAAA####", &[]).is_err());
}

#[test]
fn schemas_without_messages_parse_but_decode_nothing() {
    let s = schema(&p3("enum E { A = 0; }"));
    assert!(s.message_by_indexes(&[0]).is_none());
    assert!(decode_payload(&s, &[0]).is_err());
}

#[test]
fn estimated_bytes_is_plausible() {
    let small = schema(&p3("message M { int32 a = 1; }"));
    let big = schema(RICH_PROTO3);
    assert!(small.estimated_bytes() > small.canonical.len());
    assert!(big.estimated_bytes() > small.estimated_bytes());
}

// ---------------------------------------------------------------------------------------------
// Message indexes and payloads
// ---------------------------------------------------------------------------------------------

const INDEXED: &str = r#"syntax = "proto3";
package t;
message A { int32 x = 1; }
message B {
  map<string, int32> m = 1;
  message C { string s = 1; }
  message D { int64 y = 1; message E { bool z = 1; } }
}
"#;

fn zigzag_varint(v: i64, out: &mut Vec<u8>) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn payload(indexes: &[i64], message: &DynamicMessage) -> Vec<u8> {
    let mut out = Vec::new();
    if indexes == [0] {
        out.push(0);
    } else {
        zigzag_varint(indexes.len() as i64, &mut out);
        for &i in indexes {
            zigzag_varint(i, &mut out);
        }
    }
    out.extend(message.encode_to_vec());
    out
}

#[test]
fn message_indexes_skip_map_entries() {
    let s = schema(INDEXED);
    let name = |ix: &[i32]| s.message_by_indexes(ix).map(|m| m.full_name().to_owned());
    assert_eq!(name(&[]).as_deref(), Some("t.A"));
    assert_eq!(name(&[0]).as_deref(), Some("t.A"));
    assert_eq!(name(&[1]).as_deref(), Some("t.B"));
    assert_eq!(name(&[1, 0]).as_deref(), Some("t.B.C"));
    assert_eq!(name(&[1, 1]).as_deref(), Some("t.B.D"));
    assert_eq!(name(&[1, 1, 0]).as_deref(), Some("t.B.D.E"));
    assert_eq!(name(&[1, 2]), None);
    assert_eq!(name(&[2]), None);
    assert_eq!(name(&[-1]), None);
    // The canonical text keeps the indexes.
    let again = schema(&s.canonical);
    assert_eq!(
        again
            .message_by_indexes(&[1, 1, 0])
            .map(|m| m.full_name().to_owned())
            .as_deref(),
        Some("t.B.D.E")
    );
}

#[test]
fn decode_payloads() {
    let s = schema(INDEXED);
    let a_desc = s.message_by_indexes(&[0]).expect("A");
    let mut a = DynamicMessage::new(a_desc);
    a.set_field_by_name("x", Value::I32(42));
    let c_desc = s.message_by_indexes(&[1, 0]).expect("C");
    let mut c = DynamicMessage::new(c_desc);
    c.set_field_by_name("s", Value::String("hi".into()));
    let e_desc = s.message_by_indexes(&[1, 1, 0]).expect("E");
    let mut e = DynamicMessage::new(e_desc);
    e.set_field_by_name("z", Value::Bool(true));

    // [0] as the single byte 0, and spelled out as count 1, index 0.
    let decoded = decode_payload(&s, &payload(&[0], &a)).expect("A");
    assert_eq!(decoded, a);
    let mut explicit = vec![2, 0];
    explicit.extend(a.encode_to_vec());
    assert_eq!(decode_payload(&s, &explicit).expect("A"), a);
    assert_eq!(decode_payload(&s, &payload(&[1, 0], &c)).expect("C"), c);
    assert_eq!(decode_payload(&s, &payload(&[1, 1, 0], &e)).expect("E"), e);
    // An empty message after the prefix is a valid default message.
    assert_eq!(
        decode_payload(&s, &[0])
            .expect("empty A")
            .descriptor()
            .name(),
        "A"
    );

    // Errors.
    let err = |bytes: &[u8]| decode_payload(&s, bytes).expect_err("should fail");
    assert!(err(&[]).contains("count"));
    assert!(err(&[0x80]).contains("count"));
    assert!(err(&[1]).contains("negative"));
    let mut too_many = Vec::new();
    zigzag_varint(65, &mut too_many);
    assert!(err(&too_many).contains("limit"));
    assert!(err(&[4, 2]).contains("truncated"));
    assert!(err(&payload(&[3], &a)).contains("[3]"));
    assert!(err(&payload(&[1, 5], &a)).contains("[1, 5]"));
    assert!(err(&payload(&[-1], &a)).contains("[-1]"));
    // Trailing garbage after a valid message is rejected as prost does.
    let mut trailing = payload(&[0], &a);
    trailing.extend([0xff, 0xff]);
    assert!(err(&trailing).contains("t.A"));
    // A wrong wire type for a known field.
    assert!(err(&[0, 0x0a, 0x01, 0x00]).contains("t.A"));
    // A varint index too large for an i32.
    let mut big = vec![2];
    zigzag_varint(i64::from(i32::MAX) + 1, &mut big);
    assert!(err(&big).contains("out of range"));
    // Eleven continuation bytes are not a varint.
    assert!(err(&[0xff; 11]).contains("count"));
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let s = schema(INDEXED);
        let _ = decode_payload(&s, &bytes);
        // With a valid prefix, the message bytes themselves are arbitrary.
        let mut prefixed = vec![4, 2, 0];
        prefixed.extend(&bytes);
        let _ = decode_payload(&s, &prefixed);
    }

    #[test]
    fn base64_like_garbage_never_panics(text in "[A-Za-z0-9+/=]{0,64}") {
        let _ = parse(&text, &[]);
    }
}

#[test]
fn deeply_nested_payloads_hit_the_recursion_limit() {
    let s = schema(&p3("message Node { Node child = 1; int32 v = 2; }"));
    // 200 levels of `child { ... }`, built inside out.
    let mut message: Vec<u8> = vec![0x10, 0x01];
    for _ in 0..200 {
        let mut outer = vec![0x0a];
        prost_reflect::prost::encoding::encode_varint(message.len() as u64, &mut outer);
        outer.extend(message);
        message = outer;
    }
    let mut payload = vec![0];
    payload.extend(&message);
    let err = decode_payload(&s, &payload).expect_err("too deep");
    assert!(err.contains("recursion"), "{err}");
    // 50 levels are fine.
    let mut shallow: Vec<u8> = vec![0x10, 0x01];
    for _ in 0..50 {
        let mut outer = vec![0x0a];
        prost_reflect::prost::encoding::encode_varint(shallow.len() as u64, &mut outer);
        outer.extend(shallow);
        shallow = outer;
    }
    let mut payload = vec![0];
    payload.extend(&shallow);
    assert!(decode_payload(&s, &payload).is_ok());
}
