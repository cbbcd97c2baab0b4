use super::super::{can_read, parse};

/// The compatibility table, a case a line: BACKWARD (the new schema reads old data) and
/// FORWARD (the old schema reads new data) compatible?, then name | old schema | new schema.
const CASES: &str = r##"
yes yes | identical | {"type":"object","properties":{"a":{"type":"string"}}} | {"properties":{"a":{"type":"string"}},"type":"object"}
yes yes | metadata only (title, description, default, $id) | {"type":"string"} | {"$id":"x","title":"T","description":"D","default":"d","type":"string"}
no  no  | type changed | {"type":"string"} | {"type":"integer"}
yes no  | integer to number (extended) | {"type":"integer"} | {"type":"number"}
no  yes | number to integer (narrowed) | {"type":"number"} | {"type":"integer"}
yes no  | type made nullable | {"type":"string"} | {"type":["string","null"]}
no  yes | type list narrowed | {"type":["string","null"]} | {"type":"string"}
no  yes | anything to string | true | {"type":"string"}
yes no  | nothing to string | false | {"type":"string"}
no  yes | optional property added to open content model | {"type":"object","properties":{"a":{"type":"string"}}} | {"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}}}
yes yes | property with empty schema added to open content model | {"type":"object","properties":{"a":{"type":"string"}}} | {"type":"object","properties":{"a":{"type":"string"},"b":{}}}
yes no  | optional property added to closed content model | {"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false} | {"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"additionalProperties":false}
no  no  | required property added to closed content model | {"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false} | {"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["b"],"additionalProperties":false}
yes no  | required property with default added to closed content model | {"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false} | {"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string","default":"x"}},"required":["b"],"additionalProperties":false}
yes no  | property removed from open content model | {"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}}} | {"type":"object","properties":{"a":{"type":"string"}}}
yes yes | property added, covered by partially open content model | {"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}} | {"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"additionalProperties":{"type":"string"}}
no  no  | property added, not covered by partially open content model | {"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}} | {"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"additionalProperties":{"type":"string"}}
yes yes | property added, covered by patternProperties | {"type":"object","patternProperties":{"^x_":{"type":"integer"}}} | {"type":"object","properties":{"x_1":{"type":"integer"}},"patternProperties":{"^x_":{"type":"integer"}}}
yes no  | additionalProperties false to true | {"type":"object","additionalProperties":false} | {"type":"object","additionalProperties":true}
yes no  | additionalProperties schema removed | {"type":"object","additionalProperties":{"type":"string"}} | {"type":"object"}
no  yes | required attribute added | {"type":"object","properties":{"a":{"type":"string"}}} | {"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}
yes yes | required attribute with default added | {"type":"object","properties":{"a":{"type":"string","default":""}}} | {"type":"object","properties":{"a":{"type":"string","default":""}},"required":["a"]}
no  no  | nested object property type changed | {"type":"object","properties":{"p":{"type":"object","properties":{"zip":{"type":"string"}}}}} | {"type":"object","properties":{"p":{"type":"object","properties":{"zip":{"type":"integer"}}}}}
yes no  | enum extended | {"enum":["a","b"]} | {"enum":["b","a","c"]}
yes yes | enum reordered | {"enum":["a","b"]} | {"enum":["b","a"]}
no  no  | enum changed | {"enum":["a","b"]} | {"enum":["a","c"]}
yes no  | typed enum extended | {"type":"string","enum":["a","b"]} | {"type":"string","enum":["a","b","c"]}
yes no  | enum dropped from string | {"type":"string","enum":["a"]} | {"type":"string"}
no  no  | const changed | {"const":1} | {"const":2}
yes no  | maxLength increased | {"type":"string","maxLength":5} | {"type":"string","maxLength":10}
no  yes | maxLength added | {"type":"string"} | {"type":"string","maxLength":5}
no  yes | minLength increased | {"type":"string","minLength":1} | {"type":"string","minLength":3}
no  yes | pattern added | {"type":"string"} | {"type":"string","pattern":"^a"}
no  no  | pattern changed | {"type":"string","pattern":"^a"} | {"type":"string","pattern":"^b"}
no  yes | maximum decreased | {"type":"number","maximum":100} | {"type":"number","maximum":50}
yes no  | minimum removed | {"type":"integer","minimum":0} | {"type":"integer"}
no  yes | exclusiveMinimum increased | {"type":"number","exclusiveMinimum":0} | {"type":"number","exclusiveMinimum":1}
no  yes | multipleOf expanded | {"type":"integer","multipleOf":2} | {"type":"integer","multipleOf":4}
yes no  | maxItems increased | {"type":"array","maxItems":2} | {"type":"array","maxItems":3}
no  yes | minItems added | {"type":"array"} | {"type":"array","minItems":1}
no  yes | uniqueItems added | {"type":"array"} | {"type":"array","uniqueItems":true}
no  no  | items type changed | {"type":"array","items":{"type":"string"}} | {"type":"array","items":{"type":"integer"}}
yes no  | items widened | {"type":"array","items":{"type":"integer"}} | {"type":"array","items":{"type":"number"}}
no  yes | items schema added | {"type":"array"} | {"type":"array","items":{"type":"string"}}
no  yes | tuple item added to open content model | {"type":"array","items":[{"type":"string"}]} | {"type":"array","items":[{"type":"string"},{"type":"integer"}]}
yes no  | tuple item added to closed content model | {"type":"array","items":[{"type":"string"}],"additionalItems":false} | {"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false}
yes no  | 2020-12 prefixItems item added to closed content model | {"$schema":"https://json-schema.org/draft/2020-12/schema","type":"array","prefixItems":[{"type":"string"}],"items":false} | {"$schema":"https://json-schema.org/draft/2020-12/schema","type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}
yes no  | anyOf subschema added | {"anyOf":[{"type":"string"},{"type":"integer"}]} | {"anyOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]}
no  yes | oneOf subschema removed | {"oneOf":[{"type":"string"},{"type":"integer"}]} | {"oneOf":[{"type":"string"}]}
yes yes | oneOf subschemas reordered | {"oneOf":[{"type":"string"},{"type":"integer"}]} | {"oneOf":[{"type":"integer"},{"type":"string"}]}
no  no  | oneOf subschema changed | {"oneOf":[{"type":"string"},{"type":"integer"}]} | {"oneOf":[{"type":"string"},{"type":"boolean"}]}
no  yes | allOf subschema added | {"allOf":[{"type":"object"},{"required":["a"]}]} | {"allOf":[{"type":"object"},{"required":["a"]},{"maxProperties":3}]}
no  yes | anyOf to oneOf | {"anyOf":[{"type":"string"},{"type":"integer"}]} | {"oneOf":[{"type":"string"},{"type":"integer"}]}
yes yes | schema to singleton anyOf | {"type":"string"} | {"anyOf":[{"type":"string"}]}
no  yes | not widened | {"not":{"type":"string"}} | {"not":{"type":["string","null"]}}
yes no  | $ref into definitions followed | {"definitions":{"n":{"type":"integer"}},"type":"object","properties":{"x":{"$ref":"#/definitions/n"}}} | {"definitions":{"n":{"type":"number"}},"type":"object","properties":{"x":{"$ref":"#/definitions/n"}}}
yes yes | $ref replaced by its target | {"definitions":{"n":{"type":"integer"}},"$ref":"#/definitions/n"} | {"type":"integer"}
yes no  | recursive schema changed deep down | {"type":"object","properties":{"v":{"type":"integer"},"next":{"$ref":"#"}}} | {"type":"object","properties":{"v":{"type":"number"},"next":{"$ref":"#"}}}
no  yes | dependency array extended | {"type":"object","dependencies":{"a":["b"]}} | {"type":"object","dependencies":{"a":["b","c"]}}
"##;

/// The rows of [`CASES`]: (name, old, new, backward, forward).
fn cases() -> Vec<(&'static str, &'static str, &'static str, bool, bool)> {
    CASES
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cols: Vec<&str> = line.split(" | ").map(str::trim).collect();
            assert_eq!(cols.len(), 4, "bad case line: {line}");
            let flags: Vec<bool> = cols[0].split_whitespace().map(|f| f == "yes").collect();
            (cols[1], cols[2], cols[3], flags[0], flags[1])
        })
        .collect()
}

fn check(name: &str, old: &str, new: &str, refs: &[(String, String)], expect: (bool, bool)) {
    let old_s = parse(old, refs).unwrap_or_else(|e| panic!("{name}: old: {e}"));
    let new_s = parse(new, refs).unwrap_or_else(|e| panic!("{name}: new: {e}"));
    let backward = can_read(&new_s, &old_s);
    let forward = can_read(&old_s, &new_s);
    assert_eq!(
        backward.is_empty(),
        expect.0,
        "{name}: backward: {backward:?}"
    );
    assert_eq!(forward.is_empty(), expect.1, "{name}: forward: {forward:?}");
}

#[test]
fn compatibility_table() {
    let cases = cases();
    assert!(cases.len() >= 30);
    for (name, old, new, backward, forward) in cases {
        check(name, old, new, &[], (backward, forward));
        // A schema can always read itself.
        for s in [old, new] {
            let s = parse(s, &[]).unwrap();
            assert_eq!(can_read(&s, &s), Vec::<String>::new(), "{name}: self");
        }
    }
}

fn reasons(reader: &str, writer: &str) -> Vec<String> {
    can_read(&parse(reader, &[]).unwrap(), &parse(writer, &[]).unwrap())
}

#[test]
fn reasons_name_the_path_and_the_rule() {
    let old = r#"{"type":"object","properties":{"p":{"type":"object","properties":{"zip":{"type":"string"},"n":{"type":"number"}}}}}"#;
    let new = r#"{"type":"object","properties":{"p":{"type":"object","properties":{"zip":{"type":"integer"},"n":{"type":"integer"}}}}}"#;
    assert_eq!(
        reasons(new, old),
        vec![
            "#/properties/p/properties/n: TYPE_NARROWED",
            "#/properties/p/properties/zip: TYPE_CHANGED",
        ]
    );
    assert_eq!(
        reasons(
            r#"{"type":"object","properties":{"a":{}},"required":["a"]}"#,
            r#"{"type":"object","properties":{"a":{}}}"#
        ),
        vec!["#/required/a: REQUIRED_ATTRIBUTE_ADDED"]
    );
    assert_eq!(
        reasons(r#"{"type":"string","maxLength":3}"#, r#"{"type":"string"}"#),
        vec!["#/maxLength: MAX_LENGTH_ADDED"]
    );
    assert_eq!(
        reasons(r#"{"enum":[1]}"#, r#"{"enum":[1,2]}"#),
        vec!["#/enum: ENUM_ARRAY_NARROWED"]
    );
    assert_eq!(
        reasons(
            r#"{"type":"object","properties":{"a/b":{"type":"string"}}}"#,
            r#"{"type":"object"}"#
        ),
        vec!["#/properties/a~1b: PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]
    );
    let combined = reasons(
        r#"{"oneOf":[{"type":"string"},{"type":"boolean"}]}"#,
        r#"{"oneOf":[{"type":"string"},{"type":"integer"}]}"#,
    );
    assert_eq!(combined, vec!["#/: COMBINED_TYPE_SUBSCHEMAS_CHANGED"]);
}

#[test]
fn references_are_followed() {
    let r = |text: &str| vec![("address.json".to_string(), text.to_string())];
    let person = r#"{"type":"object","properties":{"address":{"$ref":"address.json"}}}"#;
    let v1 = r#"{"type":"object","properties":{"zip":{"type":"integer"}}}"#;
    let v2 = r#"{"type":"object","properties":{"zip":{"type":"number"}}}"#;
    let old = parse(person, &r(v1)).unwrap();
    let new = parse(person, &r(v2)).unwrap();
    // Same text, different references: not the same schema to the checker.
    assert_eq!(old.canonical, new.canonical);
    assert!(can_read(&new, &old).is_empty());
    assert_eq!(
        can_read(&old, &new),
        vec!["#/properties/address/properties/zip: TYPE_NARROWED"]
    );
    // A pointer into a reference, and the reference's own `$ref`s into its definitions.
    let v3 = r##"{"definitions":{"z":{"type":"string"}},"type":"object","properties":{"zip":{"$ref":"#/definitions/z"}}}"##;
    let pointed =
        r#"{"type":"object","properties":{"zip":{"$ref":"address.json#/properties/zip"}}}"#;
    let a = parse(pointed, &r(v1)).unwrap();
    let b = parse(pointed, &r(v3)).unwrap();
    assert_eq!(can_read(&b, &a), vec!["#/properties/zip: TYPE_CHANGED"]);
    // Inline and referenced forms of the same schema are compatible.
    let inline = parse(
        r#"{"type":"object","properties":{"address":{"type":"object","properties":{"zip":{"type":"integer"}}}}}"#,
        &[],
    )
    .unwrap();
    assert!(can_read(&inline, &old).is_empty());
    assert!(can_read(&old, &inline).is_empty());
}

#[test]
fn cycles_terminate() {
    // Mutually recursive definitions, a self-referencing reference, and a `$ref` chain.
    let tree = r##"{"definitions":{
            "node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/definitions/node"}},"leaf":{"$ref":"#/definitions/leaf"}}},
            "leaf":{"anyOf":[{"type":"null"},{"$ref":"#/definitions/node"}]}},
            "$ref":"#/definitions/node"}"##;
    check("tree", tree, tree, &[], (true, true));
    let refs = vec![(
        "list.json".to_string(),
        r#"{"type":"object","properties":{"next":{"$ref":"list.json"},"v":{"type":"string"}}}"#
            .to_string(),
    )];
    check(
        "list",
        r#"{"$ref":"list.json"}"#,
        r#"{"$ref":"list.json"}"#,
        &refs,
        (true, true),
    );
    // Combined schemas over recursive definitions stay cheap (memoized pairs).
    let wide = r##"{"definitions":{"a":{"oneOf":[{"type":"null"},{"type":"array","items":{"$ref":"#/definitions/b"}},{"type":"object","additionalProperties":{"$ref":"#/definitions/b"}}]},
            "b":{"anyOf":[{"$ref":"#/definitions/a"},{"type":"string"},{"type":"integer"},{"type":"array","items":{"$ref":"#/definitions/a"}}]}},
            "$ref":"#/definitions/a"}"##;
    check("wide", wide, wide, &[], (true, true));
}

#[test]
fn deep_reference_chains_give_up_as_incompatible() {
    let defs: Vec<String> = (0..1000)
        .map(|i| format!(r##""d{i}":{{"type":"object","properties":{{"x":{{"$ref":"#/definitions/d{}"}}}}}}"##, i + 1))
        .collect();
    let schema = format!(
        r##"{{"definitions":{{{},"d1000":{{"type":"string"}}}},"$ref":"#/definitions/d0"}}"##,
        defs.join(",")
    );
    assert_eq!(
        reasons(&schema, &schema),
        vec!["#/: COMPARISON_TOO_COMPLEX"]
    );
    let short = r##"{"definitions":{"a":{"properties":{"x":{"$ref":"#/definitions/b"}}},"b":{"type":"string"}},"$ref":"#/definitions/a"}"##;
    assert!(reasons(short, short).is_empty());
}

#[test]
fn huge_combinations_give_up_as_incompatible() {
    let many: Vec<String> = (0..400).map(|i| format!(r#"{{"const":{i}}}"#)).collect();
    let old = format!(r#"{{"anyOf":[{}]}}"#, many.join(","));
    let new = format!(r#"{{"anyOf":[{},{{"const":-1}}]}}"#, many.join(","));
    assert_eq!(reasons(&new, &old), vec!["#/: COMPARISON_TOO_COMPLEX"]);
}
