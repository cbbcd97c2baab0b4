//! Where a `$ref` leads. Each side of a comparison is its documents: the root schema
//! (document 0) and its schema references, each with its draft. A `$ref` names a document (by
//! reference name, by `$id`, or by a name that is a URI's last segments) and a place in it (a
//! JSON pointer or an anchor).
//!
//! Invariants:
//! - Nothing is fetched: a `$ref` resolves only into the documents of its own side.
//! - Following `$ref`s always ends: after [`MAX_REF_HOPS`] hops, or at a reference that does
//!   not resolve, the schema counts as the empty schema (parse already refused references that
//!   do not resolve, so only forms not modelled here get there).

use inlet_common::text::percent_decode;
use jsonschema::Draft;
use serde_json::Value;

use super::shape::{Facet, Sch, Shape};
use super::Comparer;
use crate::json_schema::{draft_of, JsonSchema};

/// `$ref` → `$ref` hops followed before a reference counts as unresolvable.
const MAX_REF_HOPS: usize = 32;
/// The empty schema an unresolvable `$ref` counts as.
static TRUE: Value = Value::Bool(true);

/// One side of a comparison: its root schema (document 0) and its references.
pub(super) struct Side<'a> {
    docs: Vec<Doc<'a>>,
}

struct Doc<'a> {
    name: &'a str,
    id: Option<&'a str>,
    value: &'a Value,
    draft: Draft,
}

impl<'a> Side<'a> {
    pub(super) fn new(schema: &'a JsonSchema) -> Side<'a> {
        let doc = |name: &'a str, value: &'a Value| Doc {
            name,
            id: value
                .get("$id")
                .and_then(Value::as_str)
                .map(|id| id.trim_end_matches('#')),
            value,
            draft: draft_of(value),
        };
        let mut docs = vec![doc("", &schema.value)];
        docs.extend(schema.references.iter().map(|(n, v)| doc(n, v)));
        Side { docs }
    }

    /// The document a `$ref`'s URI part names.
    fn find_doc(&self, base: &str) -> Option<usize> {
        let base = base.trim_start_matches("./");
        let ends = |long: &str, short: &str| {
            !short.is_empty() && long.len() > short.len() && long.ends_with(short) && {
                long.as_bytes()[long.len() - short.len() - 1] == b'/'
            }
        };
        let docs = &self.docs;
        (1..docs.len())
            .find(|&i| docs[i].name == base)
            .or_else(|| (0..docs.len()).find(|&i| docs[i].id == Some(base)))
            .or_else(|| {
                (0..docs.len()).find(|&i| {
                    let name = docs[i].name.trim_start_matches("./");
                    (i > 0 && (ends(base, name) || ends(name, base)))
                        || docs[i].id.is_some_and(|id| ends(id, base))
                })
            })
    }
}

impl<'a> Comparer<'a> {
    pub(super) fn draft(&self, s: &Sch<'a>) -> Draft {
        self.sides[s.side].docs[s.doc].draft
    }

    /// Follows `$ref`s (everit's `ReferenceSchema.getReferredSchema`). An unresolvable one (parse
    /// resolved it, so only forms we do not model) is taken as the empty schema.
    pub(super) fn normalize(&self, mut s: Sch<'a>) -> Sch<'a> {
        for _ in 0..MAX_REF_HOPS {
            let reference = match self.shape(&s) {
                Shape::Ref(r) => r,
                _ => return s,
            };
            match self.resolve(&s, reference) {
                Some(target) => s = target,
                None => return s.child(&TRUE),
            }
        }
        s.child(&TRUE)
    }

    fn resolve(&self, s: &Sch<'a>, reference: &str) -> Option<Sch<'a>> {
        let side = &self.sides[s.side];
        let (base, fragment) = reference.split_once('#').unwrap_or((reference, ""));
        let doc = if base.is_empty() {
            s.doc
        } else {
            side.find_doc(base)?
        };
        let root = side.docs[doc].value;
        let fragment = percent_decode(fragment)?;
        let value = if fragment.is_empty() {
            root
        } else if fragment.starts_with('/') {
            root.pointer(&fragment)?
        } else {
            find_anchor(root, &fragment)?
        };
        Some(Sch {
            side: s.side,
            doc,
            value,
            facet: Facet::Whole,
        })
    }
}

/// The subschema of `root` that declares the plain-name fragment `name` (`$anchor`,
/// `$dynamicAnchor`, or a draft-6/7 `$id` / draft-4 `id` of "#name").
fn find_anchor<'a>(root: &'a Value, name: &str) -> Option<&'a Value> {
    let hashed = format!("#{name}");
    let mut stack = vec![root];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                let declares = ["$anchor", "$dynamicAnchor"]
                    .iter()
                    .any(|k| m.get(*k).and_then(Value::as_str) == Some(name))
                    || ["$id", "id"]
                        .iter()
                        .any(|k| m.get(*k).and_then(Value::as_str) == Some(hashed.as_str()));
                if declares {
                    return Some(v);
                }
                stack.extend(m.values());
            }
            Value::Array(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
    None
}
