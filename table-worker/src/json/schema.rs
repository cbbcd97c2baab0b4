//! The shape of a JSON Schema as a table sees it ([`JType`]): `$ref`s followed, `allOf`s
//! merged, unions collapsed, and everything without one Iceberg type turned into JSON text.

use inlet_common::text::percent_decode;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// How deep schemas may nest (properties, items, `$ref`s and combinators all count).
const MAX_DEPTH: usize = 64;

/// The type a JSON Schema maps to.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum JType {
    String,
    Long,
    Double,
    Boolean,
    Date,
    Timestamptz,
    Time,
    /// Anything without a single Iceberg type: a string column holding the value's JSON text.
    JsonText,
    /// An object with `properties`, in the order of the schema's keys.
    Struct(Vec<(String, JType)>),
    /// An object whose `additionalProperties` is a schema: string keys.
    Map(Box<JType>),
    List(Box<JType>),
}

impl JType {
    pub(super) fn name(&self) -> &'static str {
        match self {
            JType::String => "string",
            JType::Long => "integer",
            JType::Double => "number",
            JType::Boolean => "boolean",
            JType::Date => "date string",
            JType::Timestamptz => "date-time string",
            JType::Time => "time string",
            JType::JsonText => "JSON text",
            JType::Struct(_) => "object",
            JType::Map(_) => "map",
            JType::List(_) => "array",
        }
    }
}

/// The columns of a root schema: its properties. Error::Schema if the root is not an object
/// schema with properties, or anything in it does not resolve.
pub(super) fn root_fields(root: &Value) -> Result<Vec<(String, JType)>> {
    let mut resolver = Resolver {
        root,
        stack: Vec::new(),
        depth: 0,
    };
    match resolver.jtype(root, "")? {
        JType::Struct(fields) => Ok(fields),
        other => Err(Error::Schema(format!(
            "the root of a JSON Schema must be an object schema with `properties` to become a \
             table, not a {}",
            other.name()
        ))),
    }
}

struct Resolver<'a> {
    root: &'a Value,
    /// The `$ref`s being expanded on the way from the root: seeing one again is recursion.
    stack: Vec<&'a str>,
    depth: usize,
}

/// What a schema says once its `$ref`s and `allOf`s are merged (the first mention wins, except
/// types, which intersect, and properties, which unite).
#[derive(Default)]
struct Facts<'a> {
    types: Option<Vec<&'a str>>,
    format: Option<&'a str>,
    properties: Vec<(&'a str, &'a Value)>,
    additional: Option<&'a Value>,
    items: Option<&'a Value>,
    enumeration: Option<&'a [Value]>,
    constant: Option<&'a Value>,
    /// The lists of `oneOf` and `anyOf`.
    alternatives: Vec<&'a [Value]>,
    /// The `$ref`s followed to gather these facts.
    refs: Vec<&'a str>,
}

impl<'a> Resolver<'a> {
    fn jtype(&mut self, schema: &'a Value, path: &str) -> Result<JType> {
        if self.depth >= MAX_DEPTH {
            return Err(Error::Schema(format!(
                "`{path}`: the schema nests deeper than {MAX_DEPTH} levels"
            )));
        }
        self.depth += 1;
        let mut facts = Facts::default();
        let result = self.collect(schema, &mut facts, path).and_then(|()| {
            let depth = self.stack.len();
            self.stack.extend(facts.refs.iter().copied());
            let decided = self.decide(&facts, path);
            self.stack.truncate(depth);
            decided
        });
        self.depth -= 1;
        result
    }

    fn collect(&mut self, schema: &'a Value, facts: &mut Facts<'a>, path: &str) -> Result<()> {
        let object = match schema {
            Value::Bool(_) => return Ok(()),
            Value::Object(object) => object,
            _ => {
                return Err(Error::Schema(format!(
                    "`{path}`: a schema must be an object or a boolean"
                )))
            }
        };
        if let Some(reference) = object.get("$ref") {
            let reference = reference
                .as_str()
                .ok_or_else(|| Error::Schema(format!("`{path}`: `$ref` must be a string")))?;
            if self.stack.contains(&reference) {
                return Err(Error::Schema(format!(
                    "`{path}`: the schema is recursive through `{reference}`: an Iceberg table \
                     cannot hold a recursive type"
                )));
            }
            let target = self.resolve(reference, path)?;
            self.stack.push(reference);
            let collected = self.collect(target, facts, path);
            self.stack.pop();
            collected?;
            facts.refs.push(reference);
        }
        if let Some(all) = object.get("allOf") {
            for member in array(all, "allOf", path)? {
                self.collect(member, facts, path)?;
            }
        }
        if let Some(types) = object.get("type") {
            let declared: Vec<&str> = match types {
                Value::String(one) => vec![one.as_str()],
                Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                _ => {
                    return Err(Error::Schema(format!(
                        "`{path}`: `type` must be a string or an array of strings"
                    )))
                }
            };
            facts.types = Some(match facts.types.take() {
                None => declared,
                Some(earlier) => earlier
                    .into_iter()
                    .filter(|t| declared.contains(t))
                    .collect(),
            });
        }
        if let Some(format) = object.get("format").and_then(Value::as_str) {
            facts.format.get_or_insert(format);
        }
        if let Some(properties) = object.get("properties") {
            let properties = properties.as_object().ok_or_else(|| {
                Error::Schema(format!("`{path}`: `properties` must be an object"))
            })?;
            for (name, schema) in properties {
                if !facts.properties.iter().any(|(seen, _)| *seen == name) {
                    facts.properties.push((name, schema));
                }
            }
        }
        first(&mut facts.additional, object, "additionalProperties");
        first(&mut facts.items, object, "items");
        first(&mut facts.constant, object, "const");
        if let Some(values) = object.get("enum") {
            let values = array(values, "enum", path)?;
            facts.enumeration.get_or_insert(values);
        }
        for keyword in ["oneOf", "anyOf"] {
            if let Some(alternatives) = object.get(keyword) {
                facts.alternatives.push(array(alternatives, keyword, path)?);
            }
        }
        Ok(())
    }

    fn resolve(&self, reference: &str, path: &str) -> Result<&'a Value> {
        let unresolved = |why: &str| {
            Error::Schema(format!(
                "`{path}`: cannot resolve `$ref` \"{reference}\": {why}"
            ))
        };
        let pointer = reference
            .strip_prefix('#')
            .ok_or_else(|| unresolved("only local references (\"#/...\") resolve here"))?;
        let pointer = percent_decode(pointer).ok_or_else(|| unresolved("bad percent-encoding"))?;
        if pointer.is_empty() {
            return Ok(self.root);
        }
        self.root
            .pointer(&pointer)
            .ok_or_else(|| unresolved("nothing in this schema at that pointer"))
    }

    fn decide(&mut self, facts: &Facts<'a>, path: &str) -> Result<JType> {
        let kind = match &facts.types {
            Some(types) => {
                let mut non_null = types.iter().copied().filter(|t| *t != "null");
                match (non_null.next(), non_null.next()) {
                    (Some(one), None) => Some(one),
                    // Only null, several types, or none left after intersecting.
                    _ => return Ok(JType::JsonText),
                }
            }
            None if !facts.properties.is_empty() || facts.additional.is_some() => Some("object"),
            None if facts.items.is_some() => Some("array"),
            None => None,
        };
        Ok(match kind {
            Some("string") => match facts.format {
                Some("date") => JType::Date,
                Some("date-time") => JType::Timestamptz,
                Some("time") => JType::Time,
                _ => JType::String,
            },
            Some("integer") => JType::Long,
            Some("number") => JType::Double,
            Some("boolean") => JType::Boolean,
            Some("object") => self.object(facts, path)?,
            Some("array") => match facts.items {
                Some(items @ Value::Object(_)) => {
                    JType::List(Box::new(self.jtype(items, &format!("{path}[]"))?))
                }
                // No items, `true`, or a tuple: the elements as JSON text.
                _ => JType::List(Box::new(JType::JsonText)),
            },
            Some(other) => {
                return Err(Error::Schema(format!("`{path}`: unknown type \"{other}\"")))
            }
            None => match (facts.enumeration, facts.constant) {
                (Some(values), _) => type_of_values(values.iter()),
                (None, Some(value)) => type_of_values(std::iter::once(value)),
                (None, None) => self.alternatives(facts, path)?,
            },
        })
    }

    fn object(&mut self, facts: &Facts<'a>, path: &str) -> Result<JType> {
        if !facts.properties.is_empty() {
            let mut fields = Vec::with_capacity(facts.properties.len());
            for (name, schema) in &facts.properties {
                let child = if path.is_empty() {
                    (*name).to_string()
                } else {
                    format!("{path}.{name}")
                };
                fields.push(((*name).to_string(), self.jtype(schema, &child)?));
            }
            return Ok(JType::Struct(fields));
        }
        Ok(match facts.additional {
            Some(values @ Value::Object(_)) => {
                JType::Map(Box::new(self.jtype(values, &format!("{path}{{}}"))?))
            }
            _ => JType::JsonText,
        })
    }

    /// `oneOf`/`anyOf`: the alternatives' type if they all (nulls aside) have the same one,
    /// JSON text otherwise.
    fn alternatives(&mut self, facts: &Facts<'a>, path: &str) -> Result<JType> {
        let mut found: Option<JType> = None;
        for alternative in facts.alternatives.iter().flat_map(|list| list.iter()) {
            if is_null_schema(alternative) {
                continue;
            }
            let jtype = self.jtype(alternative, path)?;
            match &found {
                None => found = Some(jtype),
                Some(seen) if *seen == jtype => {}
                Some(_) => return Ok(JType::JsonText),
            }
        }
        Ok(found.unwrap_or(JType::JsonText))
    }
}

fn first<'a>(slot: &mut Option<&'a Value>, object: &'a Map<String, Value>, keyword: &str) {
    if slot.is_none() {
        *slot = object.get(keyword);
    }
}

fn array<'a>(value: &'a Value, keyword: &str, path: &str) -> Result<&'a [Value]> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| Error::Schema(format!("`{path}`: `{keyword}` must be an array")))
}

/// `{"type": "null"}` (or `["null"]`): the null half of an optional union.
fn is_null_schema(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().all(|t| t == "null"),
        _ => false,
    }
}

/// The type of `enum` or `const` values: one scalar type shared by all (nulls aside), JSON
/// text otherwise.
fn type_of_values<'v>(values: impl Iterator<Item = &'v Value>) -> JType {
    let mut found: Option<JType> = None;
    for value in values {
        let jtype = match value {
            Value::Null => continue,
            Value::String(_) => JType::String,
            Value::Bool(_) => JType::Boolean,
            Value::Number(n) if n.is_i64() || n.is_u64() => JType::Long,
            Value::Number(_) => JType::Double,
            Value::Array(_) | Value::Object(_) => return JType::JsonText,
        };
        found = Some(match found {
            None => jtype,
            Some(seen) if seen == jtype => seen,
            // Integers and fractions together are numbers.
            Some(JType::Long | JType::Double) if matches!(jtype, JType::Long | JType::Double) => {
                JType::Double
            }
            Some(_) => return JType::JsonText,
        });
    }
    found.unwrap_or(JType::JsonText)
}
