//! Confluent's JSON Schema compatibility rules (io.confluent.kafka.schemaregistry.json.diff:
//! `SchemaDiff` and the `*SchemaDiff` classes, with their `Difference.Type`s and the
//! `COMPATIBLE_CHANGES` set), re-implemented over `serde_json::Value`.
//!
//! Confluent compares schemas loaded by the everit library, whose model we mirror: a schema
//! object is cut into "facets" (a `$ref`, each of `allOf`/`anyOf`/`oneOf`, `not`, `enum`, `const`,
//! and the type: explicit `type`, a list of types being an `anyOf` of one schema per type, or
//! inferred from type-specific keywords). No facet is the empty schema, one is that facet, and
//! several are a synthetic `allOf` of them. `integer` and `number` are the same (number) kind,
//! differing only in "requires integer".
//!
//! `$ref`s are followed into the same document (`#/definitions/..`, `#/$defs/..`, anchors) and
//! into the schema references (by name, by `$id`, or by a name that is a URI's last segments). A
//! pair of (writer, reader) subschemas already being compared higher up is a cycle and counts as
//! compatible, as in Confluent; results are memoized per pair, and the total work is bounded.
//!
//! Not compared (as in Confluent, or not supported here): titles, descriptions, defaults and
//! `$id`s (always compatible changes anyway), `format`, `if`/`then`/`else`, `contains`,
//! `propertyNames`, `unevaluatedProperties`/`unevaluatedItems`, and Confluent's metadata-based
//! reserved-property rules.
//!
//! The parts, one file each: `difference` (Confluent's difference types, which of them are
//! compatible, and the path each is found at), `shape` (a schema value as everit's model: its
//! facets and what each is), `refs` (each side's documents and where a `$ref` leads), and the
//! rules of each kind of schema: `combined` (`allOf`/`anyOf`/`oneOf`), `object`, `array`, and
//! `scalar` (strings, numbers, enums, and the numeric bounds). This file holds the comparison
//! itself: memoized per pair, cycles counted compatible, and the work bounded.

mod array;
mod combined;
mod difference;
mod object;
mod refs;
mod scalar;
mod shape;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

use super::JsonSchema;
use difference::{Ctx, Difference, Kind};
use refs::Side;
use scalar::{compare_enum, compare_number, compare_string};
use shape::{Crit, Facet, Key, Sch, Shape};

/// Pair comparisons after which a comparison gives up (and reports it as an incompatibility).
const MAX_STEPS: usize = 100_000;
/// Nested pair comparisons (`$ref` chains nest without bound in the text's depth) after which a
/// comparison gives up, so the stack stays small.
const MAX_DEPTH: usize = 200;

/// Confluent's `SchemaDiff` with its shared `Context` state (memo, pairs in progress).
struct Comparer<'a> {
    sides: [Side<'a>; 2],
    memo: HashMap<(Key, Key), Vec<Difference>>,
    in_progress: HashSet<(Key, Key)>,
    steps: usize,
    /// Set once `steps` passed [`MAX_STEPS`] or the nesting [`MAX_DEPTH`]: every further
    /// comparison returns at once.
    exhausted: bool,
}

/// Reasons `reader` cannot read data written with `writer` (see [`super::can_read`]).
pub(super) fn incompatibilities(reader: &JsonSchema, writer: &JsonSchema) -> Vec<String> {
    let mut cmp = Comparer {
        sides: [Side::new(writer), Side::new(reader)],
        memo: HashMap::new(),
        in_progress: HashSet::new(),
        steps: 0,
        exhausted: false,
    };
    let mut ctx = Ctx::default();
    cmp.compare(&mut ctx, Some(root(0, writer)), Some(root(1, reader)));
    if cmp.exhausted {
        ctx.diffs.clear();
        ctx.add(Kind::COMPARISON_TOO_COMPLEX);
    }
    let mut seen = HashSet::new();
    ctx.diffs
        .iter()
        .filter(|d| !d.kind.is_compatible())
        .map(|d| format!("#/{}: {}", d.path, d.kind))
        .filter(|msg| seen.insert(msg.clone()))
        .collect()
}

fn root(side: usize, schema: &JsonSchema) -> Sch<'_> {
    Sch {
        side,
        doc: 0,
        value: &schema.value,
        facet: Facet::Whole,
    }
}

impl<'a> Comparer<'a> {
    /// `SchemaDiff.compare` with `Context.compareMemoized`: differences of `original` (the
    /// writer's) becoming `update` (the reader's).
    fn compare(&mut self, ctx: &mut Ctx, original: Option<Sch<'a>>, update: Option<Sch<'a>>) {
        let (o, u) = match (original, update) {
            (None, None) => return,
            (None, Some(_)) => return ctx.add(Kind::SCHEMA_ADDED),
            (Some(_), None) => return ctx.add(Kind::SCHEMA_REMOVED),
            (Some(o), Some(u)) => (self.normalize(o), self.normalize(u)),
        };
        if self.exhausted {
            return;
        }
        self.steps += 1;
        if self.steps > MAX_STEPS {
            self.exhausted = true;
            return;
        }
        let key = (o.key(), u.key());
        if let Some(found) = self.memo.get(&key) {
            ctx.add_rebased(found);
            return;
        }
        if !self.in_progress.insert(key) {
            // A cycle: the pair is being compared higher up; assume compatible, as Confluent.
            return;
        }
        if self.in_progress.len() > MAX_DEPTH {
            self.exhausted = true;
            return;
        }
        let mut sub = Ctx::default();
        self.compare_pair(&mut sub, o, u);
        self.in_progress.remove(&key);
        ctx.add_rebased(&sub.diffs);
        self.memo.insert(key, sub.diffs);
    }

    /// Compares into a subcontext; when that is compatible, keeps its differences (plus `also`).
    fn compatible_into(
        &mut self,
        ctx: &mut Ctx,
        o: Sch<'a>,
        u: Sch<'a>,
        also: Option<Kind>,
    ) -> bool {
        let mut sub = ctx.sub();
        self.compare(&mut sub, Some(o), Some(u));
        if !sub.is_compatible() {
            return false;
        }
        ctx.extend(sub);
        if let Some(kind) = also {
            ctx.add(kind);
        }
        true
    }

    /// Compares a declared property or item with the schema a partially open content model
    /// gives it: keeps the differences, then says whether it is covered.
    fn covered(&mut self, ctx: &mut Ctx, o: Sch<'a>, u: Sch<'a>, yes: Kind, no: Kind) {
        let mut sub = ctx.sub();
        self.compare(&mut sub, Some(o), Some(u));
        let covered = sub.is_compatible();
        ctx.extend(sub);
        ctx.add(if covered { yes } else { no });
    }

    fn compare_pair(&mut self, ctx: &mut Ctx, o: Sch<'a>, u: Sch<'a>) {
        let so = self.shape(&o);
        let su = self.shape(&u);
        // A schema becoming a union, or an intersection/singleton becoming a schema.
        match (&so, &su) {
            (Shape::Combined(..), Shape::Combined(..)) => {}
            (_, Shape::Combined(crit, subs)) => {
                if let [only] = subs.as_slice() {
                    if self.compatible_into(ctx, o, *only, None) {
                        return;
                    }
                } else if matches!(crit, Crit::Any | Crit::One) {
                    for sub in subs {
                        if self.compatible_into(ctx, o, *sub, Some(Kind::SUM_TYPE_EXTENDED)) {
                            return;
                        }
                    }
                }
            }
            (Shape::Combined(crit, subs), _) => {
                if let [only] = subs.as_slice() {
                    if self.compatible_into(ctx, *only, u, None) {
                        return;
                    }
                } else if *crit == Crit::All {
                    for sub in subs {
                        if self.compatible_into(ctx, *sub, u, Some(Kind::PRODUCT_TYPE_NARROWED)) {
                            return;
                        }
                    }
                }
            }
            _ => {}
        }
        // everit's classes: combined schemas of any criterion are one, and so are numbers.
        if std::mem::discriminant(&so) != std::mem::discriminant(&su) {
            // Anything may become the empty schema, and the false schema anything.
            if !matches!(so, Shape::False) && !matches!(su, Shape::Empty) {
                ctx.add(Kind::TYPE_CHANGED);
            }
            return;
        }
        match (so, su) {
            (Shape::String, Shape::String) => compare_string(ctx, &o, &u),
            (Shape::Number { integer: oi }, Shape::Number { integer: ui }) => {
                compare_number(ctx, &o, &u);
                if oi && !ui {
                    ctx.add(Kind::TYPE_EXTENDED);
                } else if !oi && ui {
                    ctx.add(Kind::TYPE_NARROWED);
                }
            }
            (Shape::Enum(oe), Shape::Enum(ue)) => compare_enum(ctx, oe, ue),
            (Shape::Const(oc), Shape::Const(uc)) if oc != uc => {
                ctx.add_at("const", Kind::ENUM_ARRAY_CHANGED);
            }
            (Shape::Combined(oc, os), Shape::Combined(uc, us)) => {
                self.compare_combined(ctx, oc, os, uc, us)
            }
            (Shape::Not(on), Shape::Not(un)) => {
                ctx.enter("not");
                let mut sub = ctx.sub();
                // Reversed: the reader must refuse at least what the writer refused.
                self.compare(&mut sub, Some(un), Some(on));
                ctx.add(if sub.is_compatible() {
                    Kind::NOT_TYPE_NARROWED
                } else {
                    Kind::NOT_TYPE_EXTENDED
                });
                ctx.leave();
            }
            (Shape::Object, Shape::Object) => self.compare_object(ctx, o, u),
            (Shape::Array, Shape::Array) => self.compare_array(ctx, o, u),
            _ => {}
        }
    }
}
