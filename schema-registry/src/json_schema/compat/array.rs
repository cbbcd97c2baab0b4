//! `ArraySchemaDiff`: two array schemas, their item schemas (one for every item, or a tuple
//! of the first items), what each says of items after the tuple, the item count bounds and
//! `uniqueItems`.
//!
//! Invariants:
//! - The array keywords are read per draft: from 2020-12 the tuple is `prefixItems` and the
//!   items after it `items`; before, `items` (as an array) and `additionalItems`.
//! - A tuple item added or removed is judged by the content model of the side that lacks it,
//!   as an object property is.

use jsonschema::Draft;
use serde_json::Value;

use super::difference::{Ctx, Kind};
use super::object::{additional, compare_additional_with, ADDITIONAL_ITEMS};
use super::scalar::bound;
use super::shape::{Sch, Shape};
use super::Comparer;

impl<'a> Comparer<'a> {
    /// `ArraySchemaDiff`.
    pub(super) fn compare_array(&mut self, ctx: &mut Ctx, o: Sch<'a>, u: Sch<'a>) {
        let oi = self.items(&o);
        let ui = self.items(&u);

        ctx.enter("items");
        self.compare(ctx, oi.all, ui.all);
        ctx.leave();

        let common = oi.tuple.len().min(ui.tuple.len());
        for index in 0..oi.tuple.len().max(ui.tuple.len()) {
            ctx.enter(oi.tuple_keyword);
            ctx.enter(&index.to_string());
            if index < common {
                self.compare(ctx, Some(oi.tuple[index]), Some(ui.tuple[index]));
            } else if let Some(&o_item) = oi.tuple.get(index) {
                if ui.is_open() {
                    ctx.add(Kind::ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL);
                } else if let Some(partial) = ui.additional_schema {
                    self.covered(
                        ctx,
                        o_item,
                        partial,
                        Kind::ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                        Kind::ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                    );
                } else if matches!(self.shape(&o_item), Shape::False) {
                    ctx.add(Kind::ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL);
                } else {
                    ctx.add(Kind::ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL);
                }
            } else if let Some(&u_item) = ui.tuple.get(index) {
                if oi.is_open() {
                    ctx.add(if matches!(self.shape(&u_item), Shape::Empty) {
                        Kind::ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
                    } else {
                        Kind::ITEM_ADDED_TO_OPEN_CONTENT_MODEL
                    });
                } else if let Some(partial) = oi.additional_schema {
                    self.covered(
                        ctx,
                        partial,
                        u_item,
                        Kind::ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                        Kind::ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                    );
                } else {
                    ctx.add(Kind::ITEM_ADDED_TO_CLOSED_CONTENT_MODEL);
                }
            }
            ctx.leave();
            ctx.leave();
        }

        compare_additional_with(
            self,
            ctx,
            oi.additional_keyword,
            (oi.additional_permitted, oi.additional_schema),
            (ui.additional_permitted, ui.additional_schema),
            ADDITIONAL_ITEMS,
        );

        bound(ctx, "maxItems", &o, &u);
        bound(ctx, "minItems", &o, &u);
        let unique = |s: &Sch<'a>| s.get("uniqueItems") == Some(&Value::Bool(true));
        match (unique(&o), unique(&u)) {
            (true, false) => ctx.add_at("uniqueItems", Kind::UNIQUE_ITEMS_REMOVED),
            (false, true) => ctx.add_at("uniqueItems", Kind::UNIQUE_ITEMS_ADDED),
            _ => {}
        }
    }

    /// The array keywords of a schema as everit models them, per draft (2020-12 renamed the
    /// tuple form `items` → `prefixItems` and `additionalItems` → `items`).
    fn items(&self, s: &Sch<'a>) -> Items<'a> {
        if self.draft(s) >= Draft::Draft202012 {
            if let Some(Value::Array(tuple)) = s.get("prefixItems") {
                let (permitted, schema) = additional(s, "items");
                return Items {
                    all: None,
                    tuple: tuple.iter().map(|v| s.child(v)).collect(),
                    tuple_keyword: "prefixItems",
                    additional_permitted: permitted,
                    additional_schema: schema,
                    additional_keyword: "items",
                };
            }
            return Items {
                all: s.child_at("items"),
                tuple: Vec::new(),
                tuple_keyword: "prefixItems",
                additional_permitted: true,
                additional_schema: None,
                additional_keyword: "items",
            };
        }
        let (all, tuple) = match s.get("items") {
            Some(Value::Array(tuple)) => (None, tuple.iter().map(|v| s.child(v)).collect()),
            Some(v) => (Some(s.child(v)), Vec::new()),
            None => (None, Vec::new()),
        };
        let (permitted, schema) = additional(s, "additionalItems");
        Items {
            all,
            tuple,
            tuple_keyword: "items",
            additional_permitted: permitted,
            additional_schema: schema,
            additional_keyword: "additionalItems",
        }
    }
}

/// The array keywords of one schema (see [`Comparer::items`]).
struct Items<'a> {
    /// The schema of every item (`items` as a schema).
    all: Option<Sch<'a>>,
    /// The schemas of the first items (tuple validation).
    tuple: Vec<Sch<'a>>,
    tuple_keyword: &'static str,
    /// Whether items after the tuple are allowed, and the schema they must match.
    additional_permitted: bool,
    additional_schema: Option<Sch<'a>>,
    additional_keyword: &'static str,
}

impl Items<'_> {
    fn is_open(&self) -> bool {
        self.additional_permitted && self.additional_schema.is_none()
    }
}
