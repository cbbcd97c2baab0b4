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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::LazyLock;

use inlet_common::text::percent_decode;
use jsonschema::Draft;
use serde_json::{Map, Value};

use super::{draft_of, JsonSchema};

/// Pair comparisons after which a comparison gives up (and reports it as an incompatibility).
const MAX_STEPS: usize = 100_000;
/// Nested pair comparisons (`$ref` chains nest without bound in the text's depth) after which a
/// comparison gives up, so the stack stays small.
const MAX_DEPTH: usize = 200;
/// `$ref` → `$ref` hops followed before a reference counts as unresolvable.
const MAX_REF_HOPS: usize = 32;
/// The empty schema an unresolvable `$ref` counts as.
static TRUE: Value = Value::Bool(true);
static EMPTY_MAP: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// Defines [`Kind`] from Confluent's compatible and incompatible difference types.
macro_rules! kinds {
    (compatible: $($c:ident)*; incompatible: $($i:ident)*;) => {
        /// Confluent's difference types that we detect (names are Confluent's, so messages
        /// match); the numeric-bound ones are [`Kind::Bound`].
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Kind {
            $($c,)*
            $($i,)*
            /// `<KEYWORD>_{ADDED, REMOVED, INCREASED, DECREASED}` of a numeric bound keyword.
            Bound(&'static str, Change),
        }

        impl Kind {
            /// Whether Confluent's `SchemaDiff.COMPATIBLE_CHANGES` has it. Of a bound, removing
            /// it and loosening it (raising a max*, lowering a min*) are compatible.
            fn is_compatible(self) -> bool {
                match self {
                    $(Kind::$c)|* => true,
                    Kind::Bound(keyword, change) => match change {
                        Change::REMOVED => true,
                        Change::ADDED => false,
                        Change::INCREASED => !is_lower_bound(keyword),
                        Change::DECREASED => is_lower_bound(keyword),
                    },
                    _ => false,
                }
            }
        }

        impl std::fmt::Display for Kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $(Kind::$c => f.write_str(stringify!($c)),)*
                    $(Kind::$i => f.write_str(stringify!($i)),)*
                    Kind::Bound(keyword, change) => {
                        // camelCase keyword → SCREAMING_SNAKE, as Confluent names them.
                        for c in keyword.chars() {
                            if c.is_ascii_uppercase() {
                                f.write_str("_")?;
                            }
                            write!(f, "{}", c.to_ascii_uppercase())?;
                        }
                        write!(f, "_{change:?}")
                    }
                }
            }
        }
    };
}

kinds! {
    compatible:
        SCHEMA_REMOVED TYPE_EXTENDED PATTERN_REMOVED MULTIPLE_OF_REDUCED MULTIPLE_OF_REMOVED
        REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED
        DEPENDENCY_ARRAY_NARROWED DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED
        ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED
        PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
        REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL
        OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL
        PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
        PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL
        PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        UNIQUE_ITEMS_REMOVED ADDITIONAL_ITEMS_ADDED ADDITIONAL_ITEMS_EXTENDED
        ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL ITEM_ADDED_TO_CLOSED_CONTENT_MODEL
        ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL
        ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED
        NOT_TYPE_NARROWED;
    incompatible:
        SCHEMA_ADDED TYPE_NARROWED TYPE_CHANGED PATTERN_ADDED PATTERN_CHANGED
        MULTIPLE_OF_ADDED MULTIPLE_OF_EXPANDED MULTIPLE_OF_CHANGED REQUIRED_ATTRIBUTE_ADDED
        ADDITIONAL_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_NARROWED
        DEPENDENCY_ARRAY_ADDED DEPENDENCY_ARRAY_EXTENDED DEPENDENCY_ARRAY_CHANGED
        DEPENDENCY_SCHEMA_ADDED PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL
        REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL
        PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        UNIQUE_ITEMS_ADDED ADDITIONAL_ITEMS_REMOVED ADDITIONAL_ITEMS_NARROWED
        ITEM_ADDED_TO_OPEN_CONTENT_MODEL ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL
        ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
        ENUM_ARRAY_NARROWED ENUM_ARRAY_CHANGED COMBINED_TYPE_CHANGED PRODUCT_TYPE_EXTENDED
        SUM_TYPE_NARROWED COMBINED_TYPE_SUBSCHEMAS_CHANGED NOT_TYPE_EXTENDED
        // Ours: the comparison exceeded `MAX_STEPS`.
        COMPARISON_TOO_COMPLEX;
}

fn is_lower_bound(keyword: &str) -> bool {
    keyword.starts_with("min") || keyword == "exclusiveMinimum"
}

/// How a numeric bound changed.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    ADDED,
    REMOVED,
    INCREASED,
    DECREASED,
}

/// One difference: its kind and its JSON path relative to the comparison it was found in
/// (segments joined by '/', without the leading "#/").
#[derive(Debug, Clone)]
struct Difference {
    kind: Kind,
    path: String,
}

/// The differences found under one path (Confluent's `Context`, minus the shared state).
#[derive(Debug, Default)]
struct Ctx {
    path: Vec<String>,
    diffs: Vec<Difference>,
}

impl Ctx {
    fn sub(&self) -> Ctx {
        Ctx {
            path: self.path.clone(),
            diffs: Vec::new(),
        }
    }
    fn add(&mut self, kind: Kind) {
        self.diffs.push(Difference {
            kind,
            path: self.path.join("/"),
        });
    }
    fn add_at(&mut self, attribute: &str, kind: Kind) {
        self.path.push(attribute.to_string());
        self.add(kind);
        self.path.pop();
    }
    fn enter(&mut self, segment: &str) {
        self.path.push(escape(segment));
    }
    fn leave(&mut self) {
        self.path.pop();
    }
    fn is_compatible(&self) -> bool {
        self.diffs.iter().all(|d| d.kind.is_compatible())
    }
    fn extend(&mut self, other: Ctx) {
        self.diffs.extend(other.diffs);
    }
    /// Adds differences found relative to a nested pair, rebased onto the current path.
    fn add_rebased(&mut self, relative: &[Difference]) {
        let prefix = self.path.join("/");
        self.diffs.extend(relative.iter().map(|d| Difference {
            kind: d.kind,
            path: match (prefix.is_empty(), d.path.is_empty()) {
                (true, _) => d.path.clone(),
                (false, true) => prefix.clone(),
                (false, false) => format!("{prefix}/{}", d.path),
            },
        }));
    }
}

/// A property name as a JSON pointer segment.
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The criterion of a combined schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Crit {
    All,
    Any,
    One,
}

impl Crit {
    fn keyword(self) -> &'static str {
        match self {
            Crit::All => "allOf",
            Crit::Any => "anyOf",
            Crit::One => "oneOf",
        }
    }
}

/// A JSON type as everit models it (integer is a number that requires integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Ty {
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
enum Facet {
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
struct Sch<'a> {
    side: usize,
    doc: usize,
    value: &'a Value,
    facet: Facet,
}

/// Identity of a [`Sch`], for memoizing and cycle detection.
type Key = (usize, usize, Facet);

impl<'a> Sch<'a> {
    fn key(&self) -> Key {
        (self.side, self.value as *const Value as usize, self.facet)
    }
    fn child(&self, value: &'a Value) -> Sch<'a> {
        Sch {
            value,
            facet: Facet::Whole,
            ..*self
        }
    }
    fn with(&self, facet: Facet) -> Sch<'a> {
        Sch { facet, ..*self }
    }
    fn obj(&self) -> Option<&'a Map<String, Value>> {
        self.value.as_object()
    }
    fn get(&self, keyword: &str) -> Option<&'a Value> {
        self.obj().and_then(|m| m.get(keyword))
    }
    fn child_at(&self, keyword: &str) -> Option<Sch<'a>> {
        self.get(keyword).map(|v| self.child(v))
    }
}

/// What a [`Sch`] is, everit's schema classes.
enum Shape<'a> {
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

/// One side of a comparison: its root schema (document 0) and its references.
struct Side<'a> {
    docs: Vec<Doc<'a>>,
}

struct Doc<'a> {
    name: &'a str,
    id: Option<&'a str>,
    value: &'a Value,
    draft: Draft,
}

impl<'a> Side<'a> {
    fn new(schema: &'a JsonSchema) -> Side<'a> {
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
    fn draft(&self, s: &Sch<'a>) -> Draft {
        self.sides[s.side].docs[s.doc].draft
    }

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

    fn shape(&self, s: &Sch<'a>) -> Shape<'a> {
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

    /// Follows `$ref`s (everit's `ReferenceSchema.getReferredSchema`). An unresolvable one (parse
    /// resolved it, so only forms we do not model) is taken as the empty schema.
    fn normalize(&self, mut s: Sch<'a>) -> Sch<'a> {
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

    fn compare_combined(
        &mut self,
        ctx: &mut Ctx,
        oc: Crit,
        os: Vec<Sch<'a>>,
        uc: Crit,
        us: Vec<Sch<'a>>,
    ) {
        let criterion_change = match (oc == uc, uc) {
            (true, _) => None,
            (false, Crit::Any) => Some(Kind::COMBINED_TYPE_EXTENDED),
            (false, Crit::One) if os.len() == 1 => Some(Kind::COMBINED_TYPE_EXTENDED),
            (false, Crit::All) if os.len() == 1 && us.len() == 1 => {
                Some(Kind::COMBINED_TYPE_EXTENDED)
            }
            (false, _) => Some(Kind::COMBINED_TYPE_CHANGED),
        };
        if let Some(kind) = criterion_change {
            ctx.add(kind);
            if kind == Kind::COMBINED_TYPE_CHANGED {
                return;
            }
        }
        let os = dedup(os);
        let us = dedup(us);
        if os.len() < us.len() {
            ctx.add(if uc == Crit::All {
                Kind::PRODUCT_TYPE_EXTENDED
            } else {
                Kind::SUM_TYPE_EXTENDED
            });
        } else if os.len() > us.len() {
            ctx.add(if uc == Crit::All {
                Kind::PRODUCT_TYPE_NARROWED
            } else {
                Kind::SUM_TYPE_NARROWED
            });
        }
        if os.len().saturating_mul(us.len()) > MAX_STEPS {
            self.exhausted = true;
            return;
        }
        // Compatible (original, update) pairs, then a maximum matching over them.
        let mut edges: Vec<Vec<(usize, Vec<Difference>)>> = Vec::with_capacity(os.len());
        for (i, o) in os.iter().enumerate() {
            ctx.enter(oc.keyword());
            ctx.enter(&i.to_string());
            let mut compatible = Vec::new();
            for (j, u) in us.iter().enumerate() {
                if self.exhausted {
                    break;
                }
                let mut sub = ctx.sub();
                self.compare(&mut sub, Some(*o), Some(*u));
                if sub.is_compatible() {
                    compatible.push((j, sub.diffs));
                }
            }
            ctx.leave();
            ctx.leave();
            edges.push(compatible);
        }
        if self.exhausted {
            return;
        }
        let adjacency: Vec<Vec<usize>> = edges
            .iter()
            .map(|e| e.iter().map(|(j, _)| *j).collect())
            .collect();
        let matching = max_matching(&adjacency, us.len());
        for &(i, j) in &matching {
            if let Some((_, diffs)) = edges[i].iter().find(|(jj, _)| *jj == j) {
                ctx.diffs.extend(diffs.iter().cloned());
            }
        }
        if matching.len() < os.len().min(us.len()) {
            ctx.add(Kind::COMBINED_TYPE_SUBSCHEMAS_CHANGED);
        }
    }

    /// `ObjectSchemaDiff`.
    fn compare_object(&mut self, ctx: &mut Ctx, o: Sch<'a>, u: Sch<'a>) {
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

    /// `ArraySchemaDiff`.
    fn compare_array(&mut self, ctx: &mut Ctx, o: Sch<'a>, u: Sch<'a>) {
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
const ADDITIONAL_ITEMS: [Kind; 4] = [
    Kind::ADDITIONAL_ITEMS_ADDED,
    Kind::ADDITIONAL_ITEMS_REMOVED,
    Kind::ADDITIONAL_ITEMS_EXTENDED,
    Kind::ADDITIONAL_ITEMS_NARROWED,
];

/// Compares what two schemas say of additional properties or items.
fn compare_additional_with<'a>(
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

/// `additionalProperties`/`additionalItems` as everit reads it: (permitted, its schema), where
/// a boolean is only permission and an object is a schema.
fn additional<'a>(s: &Sch<'a>, keyword: &str) -> (bool, Option<Sch<'a>>) {
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

/// A numeric bound keyword's change (a non-numeric value, e.g. draft 4's boolean
/// `exclusiveMaximum`, counts as absent).
fn bound(ctx: &mut Ctx, keyword: &'static str, o: &Sch<'_>, u: &Sch<'_>) {
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
fn compare_string(ctx: &mut Ctx, o: &Sch<'_>, u: &Sch<'_>) {
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
fn compare_number(ctx: &mut Ctx, o: &Sch<'_>, u: &Sch<'_>) {
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
fn compare_enum(ctx: &mut Ctx, o: &[Value], u: &[Value]) {
    let set = |values: &[Value]| -> HashSet<String> {
        values.iter().map(super::canonical_text).collect()
    };
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

/// Subschemas without duplicates (Confluent collects them into a set), in order.
fn dedup(subs: Vec<Sch<'_>>) -> Vec<Sch<'_>> {
    let mut seen = HashSet::new();
    subs.into_iter()
        .filter(|s| seen.insert((super::canonical_text(s.value), s.facet)))
        .collect()
}

/// A maximum matching of a bipartite graph (Kuhn's augmenting paths): `adjacency[i]` lists the
/// right vertices left vertex `i` may pair with. Returns the (left, right) pairs.
fn max_matching(adjacency: &[Vec<usize>], right: usize) -> Vec<(usize, usize)> {
    fn augment(
        left: usize,
        adjacency: &[Vec<usize>],
        seen: &mut [bool],
        owner: &mut [Option<usize>],
    ) -> bool {
        for &r in &adjacency[left] {
            if !seen[r] {
                seen[r] = true;
                if owner[r].is_none_or(|other| augment(other, adjacency, seen, owner)) {
                    owner[r] = Some(left);
                    return true;
                }
            }
        }
        false
    }
    let mut owner = vec![None; right];
    for left in 0..adjacency.len() {
        let mut seen = vec![false; right];
        augment(left, adjacency, &mut seen, &mut owner);
    }
    owner
        .iter()
        .enumerate()
        .filter_map(|(r, l)| l.map(|l| (l, r)))
        .collect()
}

/// Whether the ECMA-262 regex `pattern` matches somewhere in `text` (as `patternProperties`
/// applies it), using the validator's own regex engine. An unusable pattern matches nothing.
fn pattern_matches(pattern: &str, text: &str) -> bool {
    let schema = serde_json::json!({ "pattern": pattern });
    jsonschema::draft7::options()
        .build(&schema)
        .is_ok_and(|v| v.is_valid(&Value::String(text.to_string())))
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

#[cfg(test)]
mod tests {
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
}
