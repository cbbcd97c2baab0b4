//! Named Avro types and the walk over a schema that both the mapping and the decoder share.
//!
//! A parsed `apache_avro::Schema` defines each record, enum and fixed once and names it with
//! `Schema::Ref` everywhere after; referenced schemas (`refs`) define more. [`Names`] resolves a
//! `Ref` by its full name, the way Avro does: a name without a namespace takes the enclosing
//! one. [`Expansion`] guards a walk that expands references: it refuses recursive types (no
//! table mapping, unbounded nesting), schemas nested deeper than [`MAX_DEPTH`], and schemas
//! whose expansion passes [`MAX_NODES`] (a type referenced twice per level doubles per level).
//!
//! The union branch names are here because the table schema and the decoder must agree on them:
//! [`branch_names`] is the one place they are computed.

use std::collections::HashMap;

use apache_avro::schema::{Name, Namespace, Schema, UnionSchema};

use inlet_schema_registry::avro::{kind, Kind};

use crate::error::Error;

/// Deepest nesting of records, arrays, maps and unions accepted. Decoding recurses once per
/// level, so this also bounds the decoder's stack on any input.
pub(crate) const MAX_DEPTH: usize = 64;

/// Most schema nodes one expansion may visit.
pub(crate) const MAX_NODES: usize = 100_000;

/// The named types defined by a schema and its references, by full name.
pub(crate) struct Names<'a> {
    types: HashMap<Name, &'a Schema>,
}

impl<'a> Names<'a> {
    /// Collects the named types defined anywhere in `schema` and `refs`. The first definition of
    /// a name wins (apache-avro refuses two definitions of one name in one parse).
    pub(crate) fn new(schema: &'a Schema, refs: &'a [Schema]) -> Self {
        let mut names = Names {
            types: HashMap::new(),
        };
        for r in refs {
            names.collect(r, &None, 0);
        }
        names.collect(schema, &None, 0);
        names
    }

    fn collect(&mut self, schema: &'a Schema, enclosing: &Namespace, depth: usize) {
        if depth > MAX_DEPTH {
            // The walks that use these names refuse such a schema with a clear error.
            return;
        }
        match schema {
            Schema::Record(record) => {
                let full = record.name.fully_qualified_name(enclosing);
                let inner = full.namespace.clone();
                self.types.entry(full).or_insert(schema);
                for field in &record.fields {
                    self.collect(&field.schema, &inner, depth + 1);
                }
            }
            Schema::Enum(e) => {
                self.types
                    .entry(e.name.fully_qualified_name(enclosing))
                    .or_insert(schema);
            }
            Schema::Fixed(f) => {
                self.types
                    .entry(f.name.fully_qualified_name(enclosing))
                    .or_insert(schema);
            }
            Schema::Decimal(d) => self.collect(&d.inner, enclosing, depth + 1),
            Schema::Array(a) => self.collect(&a.items, enclosing, depth + 1),
            Schema::Map(m) => self.collect(&m.types, enclosing, depth + 1),
            Schema::Union(u) => {
                for branch in u.variants() {
                    self.collect(branch, enclosing, depth + 1);
                }
            }
            _ => {}
        }
    }

    /// `schema` itself, or the definition a `Ref` names; with the namespace that names inside
    /// it are relative to.
    pub(crate) fn resolve(
        &self,
        schema: &'a Schema,
        enclosing: &Namespace,
    ) -> Result<(&'a Schema, Namespace), Error> {
        let schema = match schema {
            Schema::Ref { name } => {
                let full = name.fully_qualified_name(enclosing);
                *self.types.get(&full).ok_or_else(|| {
                    Error::Schema(format!(
                        "the schema refers to type `{}`, which neither it nor its references define",
                        full.fullname(None)
                    ))
                })?
            }
            other => other,
        };
        let namespace = match schema {
            Schema::Record(r) => r.name.fully_qualified_name(enclosing).namespace,
            _ => enclosing.clone(),
        };
        Ok((schema, namespace))
    }
}

/// Guards one walk that expands named types: recursion, depth and size.
pub(crate) struct Expansion {
    open_records: Vec<Name>,
    depth: usize,
    nodes: usize,
}

impl Expansion {
    pub(crate) fn new() -> Self {
        Expansion {
            open_records: Vec::new(),
            depth: 0,
            nodes: 0,
        }
    }

    /// Enters one level of nesting at `path`. Pair with [`Expansion::leave`].
    pub(crate) fn enter(&mut self, path: &str) -> Result<(), Error> {
        self.depth += 1;
        self.nodes += 1;
        if self.depth > MAX_DEPTH {
            return Err(Error::Schema(format!(
                "`{path}` is nested more than {MAX_DEPTH} levels deep"
            )));
        }
        if self.nodes > MAX_NODES {
            return Err(Error::Schema(format!(
                "the schema expands to more than {MAX_NODES} types (at `{path}`)"
            )));
        }
        Ok(())
    }

    pub(crate) fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// Opens record `name` (fully qualified) at `path`: refused if it is already open, that is,
    /// if the record contains itself. Pair with [`Expansion::close_record`].
    pub(crate) fn open_record(&mut self, name: Name, path: &str) -> Result<(), Error> {
        if self.open_records.contains(&name) {
            return Err(Error::Schema(format!(
                "recursive type `{}` at `{path}`: a record that contains itself has no Iceberg mapping",
                name.fullname(None)
            )));
        }
        self.open_records.push(name);
        Ok(())
    }

    pub(crate) fn close_record(&mut self) {
        self.open_records.pop();
    }
}

/// The name of one union branch's field in the struct a union with several non-null branches
/// maps to: the primitive type name (`int`, `long`, `string`, `bytes`, `boolean`, `float`,
/// `double`; a logical type is named after the type it annotates, so `timestamp-millis` is
/// `long` and `uuid` is `string`), the short name of a record, enum or fixed (`Ref`s resolved
/// first), `array`, `map`, `duration` (apache-avro keeps no name for a duration's fixed), `null`.
fn branch_name(schema: &Schema) -> String {
    match schema {
        Schema::Duration => "duration".into(),
        Schema::Record(r) => r.name.name.clone(),
        Schema::Enum(e) => e.name.name.clone(),
        Schema::Fixed(f) => f.name.name.clone(),
        Schema::Decimal(d) => match &*d.inner {
            Schema::Fixed(f) => f.name.name.clone(),
            Schema::Ref { name } => name.name.clone(),
            _ => "bytes".into(),
        },
        Schema::Ref { name } => name.name.clone(),
        // The rest by the kind it is read as: a logical type as the type it annotates.
        other => kind(other).map_or("null", Kind::name).to_string(),
    }
}

/// The field names for a union's branches, in branch order (the null branch included, named
/// `null`): [`branch_name`] of each resolved branch, a repeated name suffixed `_1`, `_2`, ...
pub(crate) fn branch_names<'a>(
    names: &Names<'a>,
    union: &'a UnionSchema,
    enclosing: &Namespace,
) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = Vec::with_capacity(union.variants().len());
    for branch in union.variants() {
        let (resolved, _) = names.resolve(branch, enclosing)?;
        let base = branch_name(resolved);
        let mut name = base.clone();
        let mut n = 0;
        while out.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        out.push(name);
    }
    Ok(out)
}

/// `parent.child`, or `child` at the top.
pub(crate) fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}
