//! `ObjectSchemaDiff`: two object schemas, property by property (required, declared,
//! dependencies), then what each says of undeclared properties, and the property count bounds.
//! Also how `additionalProperties` and `additionalItems` are read, which arrays share.
//!
//! Invariants:
//! - An object's content model is open (any undeclared property allowed), partially open
//!   (undeclared properties must match `patternProperties` or an `additionalProperties`
//!   schema) or closed; a property added or removed is judged by the content model of the
//!   side that lacks it, as in Confluent.
//! - A property's `default` is looked for through its `$ref`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::difference::{escape, Ctx, Kind};
use super::scalar::bound;
use super::shape::{Sch, Shape};
use super::Comparer;

static EMPTY_MAP: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

impl<'a> Comparer<'a> {
    /// `ObjectSchemaDiff`.
    pub(super) fn compare_object(&mut self, ctx: &mut Ctx, o: Sch<'a>, u: Sch<'a>) {
        let op = o
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY_MAP);
        let up = u
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&EMPTY_MAP);
        let o_required = required(&o);
        let u_required = required(&u);

        ctx.enter("required");
        for key in op.keys() {
            let Some(u_prop) = up.get(key) else { continue };
            let (was, is) = (
                o_required.contains(key.as_str()),
                u_required.contains(key.as_str()),
            );
            ctx.enter(key);
            if was && !is {
                ctx.add(Kind::REQUIRED_ATTRIBUTE_REMOVED);
            } else if !was && is {
                ctx.add(if self.has_default(u.child(u_prop)) {
                    Kind::REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED
                } else {
                    Kind::REQUIRED_ATTRIBUTE_ADDED
                });
            }
            ctx.leave();
        }
        ctx.leave();

        ctx.enter("properties");
        let keys: BTreeSet<&String> = op.keys().chain(up.keys()).collect();
        for key in keys {
            ctx.enter(key);
            match (op.get(key), up.get(key)) {
                (Some(o_prop), None) => {
                    let o_prop = o.child(o_prop);
                    if self.is_open(&u) {
                        ctx.add(Kind::PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL);
                    } else if let Some(partial) = self.partial_schema(&u, key) {
                        self.covered(
                            ctx,
                            o_prop,
                            partial,
                            Kind::PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                            Kind::PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                        );
                    } else if matches!(self.shape(&o_prop), Shape::False) {
                        ctx.add(Kind::PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL);
                    } else {
                        ctx.add(Kind::PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL);
                    }
                }
                (None, Some(u_prop)) => {
                    let u_prop = u.child(u_prop);
                    if self.is_open(&o) {
                        ctx.add(if matches!(self.shape(&u_prop), Shape::Empty) {
                            Kind::PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
                        } else {
                            Kind::PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL
                        });
                    } else {
                        if let Some(partial) = self.partial_schema(&o, key) {
                            self.covered(
                                ctx,
                                partial,
                                u_prop,
                                Kind::PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                                Kind::PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                            );
                        }
                        ctx.add(if !u_required.contains(key.as_str()) {
                            Kind::OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
                        } else if self.has_default(u_prop) {
                            Kind::REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL
                        } else {
                            Kind::REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
                        });
                    }
                }
                (Some(o_prop), Some(u_prop)) => {
                    self.compare(ctx, Some(o.child(o_prop)), Some(u.child(u_prop)))
                }
                (None, None) => {}
            }
            ctx.leave();
        }
        ctx.leave();

        ctx.enter("dependencies");
        let (o_arrays, u_arrays) = (dependency_arrays(&o), dependency_arrays(&u));
        let keys: BTreeSet<&str> = o_arrays.keys().chain(u_arrays.keys()).copied().collect();
        for key in keys {
            let kind = match (o_arrays.get(key), u_arrays.get(key)) {
                (_, None) => Some(Kind::DEPENDENCY_ARRAY_REMOVED),
                (None, Some(_)) => Some(Kind::DEPENDENCY_ARRAY_ADDED),
                (Some(a), Some(b)) if a == b => None,
                (Some(a), Some(b)) if b.is_superset(a) => Some(Kind::DEPENDENCY_ARRAY_EXTENDED),
                (Some(a), Some(b)) if a.is_superset(b) => Some(Kind::DEPENDENCY_ARRAY_NARROWED),
                (Some(_), Some(_)) => Some(Kind::DEPENDENCY_ARRAY_CHANGED),
            };
            if let Some(kind) = kind {
                ctx.add_at(&escape(key), kind);
            }
        }
        let (o_schemas, u_schemas) = (dependency_schemas(&o), dependency_schemas(&u));
        let keys: BTreeSet<&str> = o_schemas.keys().chain(u_schemas.keys()).copied().collect();
        for key in keys {
            ctx.enter(key);
            match (o_schemas.get(key), u_schemas.get(key)) {
                (_, None) => ctx.add(Kind::DEPENDENCY_SCHEMA_REMOVED),
                (None, Some(_)) => ctx.add(Kind::DEPENDENCY_SCHEMA_ADDED),
                (Some(a), Some(b)) => self.compare(ctx, Some(*a), Some(*b)),
            }
            ctx.leave();
        }
        ctx.leave();

        compare_additional_with(
            self,
            ctx,
            "additionalProperties",
            additional(&o, "additionalProperties"),
            additional(&u, "additionalProperties"),
            ADDITIONAL_PROPERTIES,
        );

        bound(ctx, "maxProperties", &o, &u);
        bound(ctx, "minProperties", &o, &u);
    }

    /// everit's `isOpenContentModel` for objects.
    fn is_open(&self, s: &Sch<'a>) -> bool {
        let no_patterns = s
            .get("patternProperties")
            .and_then(Value::as_object)
            .is_none_or(|m| m.is_empty());
        let (permits, schema) = additional(s, "additionalProperties");
        no_patterns && permits && schema.is_none()
    }

    /// The schema a partially open object gives an undeclared property `key`: the first
    /// `patternProperties` entry whose pattern matches it, else `additionalProperties`.
    fn partial_schema(&self, s: &Sch<'a>, key: &str) -> Option<Sch<'a>> {
        if let Some(patterns) = s.get("patternProperties").and_then(Value::as_object) {
            for (pattern, schema) in patterns {
                if pattern_matches(pattern, key) {
                    return Some(s.child(schema));
                }
            }
        }
        additional(s, "additionalProperties").1
    }

    /// Whether a property's schema has a default (looking through a `$ref`).
    fn has_default(&self, s: Sch<'a>) -> bool {
        s.get("default").is_some() || self.normalize(s).get("default").is_some()
    }
}

/// The kinds for `additionalProperties`/`additionalItems`: added (now permitted), removed (no
/// longer permitted), extended (schema dropped), narrowed (schema added).
const ADDITIONAL_PROPERTIES: [Kind; 4] = [
    Kind::ADDITIONAL_PROPERTIES_ADDED,
    Kind::ADDITIONAL_PROPERTIES_REMOVED,
    Kind::ADDITIONAL_PROPERTIES_EXTENDED,
    Kind::ADDITIONAL_PROPERTIES_NARROWED,
];
pub(super) const ADDITIONAL_ITEMS: [Kind; 4] = [
    Kind::ADDITIONAL_ITEMS_ADDED,
    Kind::ADDITIONAL_ITEMS_REMOVED,
    Kind::ADDITIONAL_ITEMS_EXTENDED,
    Kind::ADDITIONAL_ITEMS_NARROWED,
];

/// Compares what two schemas say of additional properties or items.
pub(super) fn compare_additional_with<'a>(
    cmp: &mut Comparer<'a>,
    ctx: &mut Ctx,
    keyword: &str,
    (o_permits, o_schema): (bool, Option<Sch<'a>>),
    (u_permits, u_schema): (bool, Option<Sch<'a>>),
    [added, removed, extended, narrowed]: [Kind; 4],
) {
    ctx.enter(keyword);
    match (o_schema, u_schema) {
        _ if o_permits != u_permits => ctx.add(if u_permits { added } else { removed }),
        (None, Some(_)) => ctx.add(narrowed),
        (Some(_), None) => ctx.add(extended),
        (o_schema, u_schema) => cmp.compare(ctx, o_schema, u_schema),
    }
    ctx.leave();
}

/// `additionalProperties`/`additionalItems` as everit reads it: (permitted, its schema), where
/// a boolean is only permission and an object is a schema.
pub(super) fn additional<'a>(s: &Sch<'a>, keyword: &str) -> (bool, Option<Sch<'a>>) {
    match s.get(keyword) {
        Some(Value::Bool(permitted)) => (*permitted, None),
        Some(v @ Value::Object(_)) => (true, Some(s.child(v))),
        _ => (true, None),
    }
}

fn required<'a>(s: &Sch<'a>) -> HashSet<&'a str> {
    s.get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Property dependencies: `dependencies` entries that are arrays, and `dependentRequired`.
fn dependency_arrays<'a>(s: &Sch<'a>) -> HashMap<&'a str, BTreeSet<&'a str>> {
    let mut out = HashMap::new();
    for keyword in ["dependencies", "dependentRequired"] {
        for (key, v) in s
            .get(keyword)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if let Value::Array(names) = v {
                out.insert(
                    key.as_str(),
                    names.iter().filter_map(Value::as_str).collect(),
                );
            }
        }
    }
    out
}

/// Schema dependencies: `dependencies` entries that are schemas, and `dependentSchemas`.
fn dependency_schemas<'a>(s: &Sch<'a>) -> HashMap<&'a str, Sch<'a>> {
    let mut out = HashMap::new();
    for keyword in ["dependencies", "dependentSchemas"] {
        for (key, v) in s
            .get(keyword)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if v.is_object() || v.is_boolean() {
                out.insert(key.as_str(), s.child(v));
            }
        }
    }
    out
}

/// Whether the ECMA-262 regex `pattern` matches somewhere in `text` (as `patternProperties`
/// applies it), using the validator's own regex engine. An unusable pattern matches nothing.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    let schema = serde_json::json!({ "pattern": pattern });
    jsonschema::draft7::options()
        .build(&schema)
        .is_ok_and(|v| v.is_valid(&Value::String(text.to_string())))
}
