//! The rules of value keywords: `StringSchemaDiff`, `NumberSchemaDiff` and `EnumSchemaDiff`,
//! and numeric bounds (lengths, values, and the property and item counts of objects and arrays).
//!
//! Invariants:
//! - Loosening a bound (raising a max*, lowering a min*, removing it) is compatible; adding or
//!   tightening one is not. A non-numeric bound counts as absent.
//! - Enum values are compared as sets of their canonical text, so order does not matter.

use std::collections::HashSet;

use serde_json::Value;

use super::difference::{Change, Ctx, Kind};
use super::shape::Sch;
use crate::json_schema::canonical_text;

/// A numeric bound keyword's change (a non-numeric value, e.g. draft 4's boolean
/// `exclusiveMaximum`, counts as absent).
pub(super) fn bound(ctx: &mut Ctx, keyword: &'static str, o: &Sch<'_>, u: &Sch<'_>) {
    let number = |s: &Sch<'_>| s.get(keyword).and_then(Value::as_f64);
    let change = match (number(o), number(u)) {
        (None, Some(_)) => Change::ADDED,
        (Some(_), None) => Change::REMOVED,
        (Some(a), Some(b)) if a < b => Change::INCREASED,
        (Some(a), Some(b)) if a > b => Change::DECREASED,
        _ => return,
    };
    ctx.add_at(keyword, Kind::Bound(keyword, change));
}

/// `StringSchemaDiff`.
pub(super) fn compare_string(ctx: &mut Ctx, o: &Sch<'_>, u: &Sch<'_>) {
    bound(ctx, "maxLength", o, u);
    bound(ctx, "minLength", o, u);
    let pattern = |s: &Sch<'_>| s.get("pattern").and_then(Value::as_str).map(str::to_owned);
    match (pattern(o), pattern(u)) {
        (None, Some(_)) => ctx.add_at("pattern", Kind::PATTERN_ADDED),
        (Some(_), None) => ctx.add_at("pattern", Kind::PATTERN_REMOVED),
        (Some(a), Some(b)) if a != b => ctx.add_at("pattern", Kind::PATTERN_CHANGED),
        _ => {}
    }
}

/// `NumberSchemaDiff` (the integer/number change is the caller's).
pub(super) fn compare_number(ctx: &mut Ctx, o: &Sch<'_>, u: &Sch<'_>) {
    bound(ctx, "maximum", o, u);
    bound(ctx, "minimum", o, u);
    bound(ctx, "exclusiveMaximum", o, u);
    bound(ctx, "exclusiveMinimum", o, u);
    let multiple = |s: &Sch<'_>| s.get("multipleOf").and_then(Value::as_f64);
    let is_multiple = |x: f64, of: f64| {
        let ratio = x / of;
        of != 0.0 && ratio.is_finite() && (ratio - ratio.round()).abs() < 1e-9
    };
    let kind = match (multiple(o), multiple(u)) {
        (None, Some(_)) => Kind::MULTIPLE_OF_ADDED,
        (Some(_), None) => Kind::MULTIPLE_OF_REMOVED,
        (Some(a), Some(b)) if a == b => return,
        // The reader's multiple is a multiple of the writer's: fewer values pass.
        (Some(a), Some(b)) if is_multiple(b, a) => Kind::MULTIPLE_OF_EXPANDED,
        (Some(a), Some(b)) if is_multiple(a, b) => Kind::MULTIPLE_OF_REDUCED,
        (Some(_), Some(_)) => Kind::MULTIPLE_OF_CHANGED,
        (None, None) => return,
    };
    ctx.add_at("multipleOf", kind);
}

/// `EnumSchemaDiff`: the values compared as sets.
pub(super) fn compare_enum(ctx: &mut Ctx, o: &[Value], u: &[Value]) {
    let set = |values: &[Value]| -> HashSet<String> { values.iter().map(canonical_text).collect() };
    let (o, u) = (set(o), set(u));
    let kind = if o == u {
        return;
    } else if u.is_superset(&o) {
        Kind::ENUM_ARRAY_EXTENDED
    } else if o.is_superset(&u) {
        Kind::ENUM_ARRAY_NARROWED
    } else {
        Kind::ENUM_ARRAY_CHANGED
    };
    ctx.add_at("enum", kind);
}
