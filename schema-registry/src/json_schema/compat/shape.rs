//! A schema as everit models it: a [`Sch`] is one facet of a schema object (its `$ref`, a
//! combination, `not`, `enum`, `const`, or its type), and its [`Shape`] is which of everit's
//! schema classes that facet is.
//!
//! Invariants:
//! - A schema object with no facet is the empty schema, with one facet that facet, and with
//!   several a synthetic `allOf` of them, in everit's extraction order.
//! - Before draft 2019-09 a `$ref` hides the keywords beside it.
//! - Without `type`, type-specific keywords imply the type; `integer` is a number that
//!   requires integers.

use jsonschema::Draft;
use serde_json::{Map, Value};

use super::Comparer;

/// The criterion of a combined schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Crit {
    All,
    Any,
    One,
}

impl Crit {
    pub(super) fn keyword(self) -> &'static str {
        match self {
            Crit::All => "allOf",
            Crit::Any => "anyOf",
            Crit::One => "oneOf",
        }
    }
}

/// A JSON type as everit models it (integer is a number that requires integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Ty {
    String,
    Integer,
    Number,
    Boolean,
    Null,
    Object,
    Array,
}

impl Ty {
    fn parse(name: &str) -> Option<Ty> {
        Some(match name {
            "string" => Ty::String,
            "integer" => Ty::Integer,
            "number" => Ty::Number,
            "boolean" => Ty::Boolean,
            "null" => Ty::Null,
            "object" => Ty::Object,
            "array" => Ty::Array,
            _ => return None,
        })
    }
}

/// Which part of a schema object a [`Sch`] stands for (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Facet {
    Whole,
    Ref,
    Combined(Crit),
    Not,
    Enum,
    Const,
    Type(Ty),
    /// A `type` list of several types: an `anyOf` of one `Type` facet each.
    Types,
}

/// A (sub)schema: a value in one document of one side, seen as one facet.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sch<'a> {
    pub(super) side: usize,
    pub(super) doc: usize,
    pub(super) value: &'a Value,
    pub(super) facet: Facet,
}

/// Identity of a [`Sch`], for memoizing and cycle detection.
pub(super) type Key = (usize, usize, Facet);

impl<'a> Sch<'a> {
    pub(super) fn key(&self) -> Key {
        (self.side, self.value as *const Value as usize, self.facet)
    }
    pub(super) fn child(&self, value: &'a Value) -> Sch<'a> {
        Sch {
            value,
            facet: Facet::Whole,
            ..*self
        }
    }
    pub(super) fn with(&self, facet: Facet) -> Sch<'a> {
        Sch { facet, ..*self }
    }
    fn obj(&self) -> Option<&'a Map<String, Value>> {
        self.value.as_object()
    }
    pub(super) fn get(&self, keyword: &str) -> Option<&'a Value> {
        self.obj().and_then(|m| m.get(keyword))
    }
    pub(super) fn child_at(&self, keyword: &str) -> Option<Sch<'a>> {
        self.get(keyword).map(|v| self.child(v))
    }
}

/// What a [`Sch`] is, everit's schema classes.
pub(super) enum Shape<'a> {
    Empty,
    False,
    Ref(&'a str),
    Combined(Crit, Vec<Sch<'a>>),
    Not(Sch<'a>),
    Enum(&'a [Value]),
    Const(&'a Value),
    String,
    Number { integer: bool },
    Boolean,
    Null,
    Object,
    Array,
}

/// The keywords that make a schema without `type` an object, array, number or string schema.
const IMPLIED_TYPES: [(&str, Ty); 4] = [
    (
        "properties required minProperties maxProperties dependencies dependentRequired \
      dependentSchemas patternProperties additionalProperties propertyNames",
        Ty::Object,
    ),
    (
        "items prefixItems additionalItems minItems maxItems uniqueItems contains",
        Ty::Array,
    ),
    (
        "minimum maximum exclusiveMinimum exclusiveMaximum multipleOf",
        Ty::Number,
    ),
    ("minLength maxLength pattern format", Ty::String),
];

/// The known types of a `type` list, without duplicates.
fn type_list(m: &Map<String, Value>) -> Vec<Ty> {
    let mut types = Vec::new();
    for ty in m
        .get("type")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(ty) = ty.as_str().and_then(Ty::parse) {
            if !types.contains(&ty) {
                types.push(ty);
            }
        }
    }
    types
}

impl<'a> Comparer<'a> {
    /// The facets of a schema object, in everit's extraction order.
    fn facets(&self, s: &Sch<'a>, m: &Map<String, Value>) -> Vec<Facet> {
        let mut out = Vec::new();
        if m.get("$ref").is_some_and(Value::is_string) {
            // Before 2019-09, keywords beside `$ref` are ignored.
            if self.draft(s) <= Draft::Draft7 {
                return vec![Facet::Ref];
            }
            out.push(Facet::Ref);
        }
        for crit in [Crit::All, Crit::Any, Crit::One] {
            if m.get(crit.keyword()).is_some_and(Value::is_array) {
                out.push(Facet::Combined(crit));
            }
        }
        if m.contains_key("not") {
            out.push(Facet::Not);
        }
        if m.get("enum").is_some_and(Value::is_array) {
            out.push(Facet::Enum);
        }
        if m.contains_key("const") {
            out.push(Facet::Const);
        }
        match m.get("type") {
            Some(Value::String(t)) => out.extend(Ty::parse(t).map(Facet::Type)),
            Some(Value::Array(_)) => {
                let types = type_list(m);
                match types.as_slice() {
                    [] => {}
                    [one] => out.push(Facet::Type(*one)),
                    _ => out.push(Facet::Types),
                }
            }
            _ => {
                for (keywords, ty) in IMPLIED_TYPES {
                    if keywords.split_whitespace().any(|k| m.contains_key(k)) {
                        out.push(Facet::Type(ty));
                    }
                }
            }
        }
        out
    }

    pub(super) fn shape(&self, s: &Sch<'a>) -> Shape<'a> {
        let m = match s.value {
            Value::Bool(false) => return Shape::False,
            Value::Object(m) => m,
            _ => return Shape::Empty,
        };
        match s.facet {
            Facet::Whole => {
                let facets = self.facets(s, m);
                match facets.as_slice() {
                    [] => Shape::Empty,
                    [one] => self.shape(&s.with(*one)),
                    _ => Shape::Combined(Crit::All, facets.iter().map(|f| s.with(*f)).collect()),
                }
            }
            Facet::Ref => Shape::Ref(m.get("$ref").and_then(Value::as_str).unwrap_or("#")),
            Facet::Combined(crit) => Shape::Combined(
                crit,
                m.get(crit.keyword())
                    .and_then(Value::as_array)
                    .map(|subs| subs.iter().map(|v| s.child(v)).collect())
                    .unwrap_or_default(),
            ),
            Facet::Not => m
                .get("not")
                .map_or(Shape::Empty, |v| Shape::Not(s.child(v))),
            Facet::Enum => Shape::Enum(
                m.get("enum")
                    .and_then(Value::as_array)
                    .map_or(&[], |a| a.as_slice()),
            ),
            Facet::Const => m.get("const").map_or(Shape::Empty, Shape::Const),
            Facet::Types => Shape::Combined(
                Crit::Any,
                type_list(m)
                    .into_iter()
                    .map(|t| s.with(Facet::Type(t)))
                    .collect(),
            ),
            Facet::Type(ty) => match ty {
                Ty::String => Shape::String,
                Ty::Integer => Shape::Number { integer: true },
                Ty::Number => Shape::Number { integer: false },
                Ty::Boolean => Shape::Boolean,
                Ty::Null => Shape::Null,
                Ty::Object => Shape::Object,
                Ty::Array => Shape::Array,
            },
        }
    }
}
