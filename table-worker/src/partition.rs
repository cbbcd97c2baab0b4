//! `table.topic.partition.by`: the Iceberg partition spec a table is written with, e.g.
//! `[day(ts), bucket(id, 16)]`.
//!
//! Accepted terms: a column name (identity), `identity(c)`, `year(c)`, `month(c)`, `day(c)`,
//! `hour(c)`, `bucket(c, N)` and `truncate(c, W)`; the number may also come first
//! (`bucket(16, c)`, as Spark SQL writes it). Columns are names in the table schema, nested
//! ones with dots (`customer.region`). Partition field names follow Iceberg's defaults
//! (`ts_day`, `id_bucket_16`, ...). An unknown column or transform, or a transform that does
//! not apply to the column's type, is an error naming the term.

use iceberg::spec::{PartitionSpec, Schema, Transform, UnboundPartitionField};

use crate::error::{Error, Result};

/// One parsed term: source column and transform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub column: String,
    pub transform: Transform,
}

/// Parses the config's value into terms (no schema needed).
pub fn parse(config: &str) -> Result<Vec<Term>> {
    let s = config.trim();
    let s = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s)
        .trim();
    if s.is_empty() {
        return Ok(Vec::new());
    }
    split_top_level(s)?
        .into_iter()
        .map(|t| term(t.trim()))
        .collect()
}

/// Splits at commas outside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(bad(s, "unbalanced parentheses"));
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(bad(s, "unbalanced parentheses"));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn bad(term: &str, why: &str) -> Error {
    Error::Schema(format!(
        "table.topic.partition.by: {term:?}: {why} (expected e.g. [day(ts), bucket(id, 16)])"
    ))
}

fn term(t: &str) -> Result<Term> {
    if t.is_empty() {
        return Err(bad(t, "empty term"));
    }
    let Some(open) = t.find('(') else {
        return Ok(Term {
            column: column_name(t)?,
            transform: Transform::Identity,
        });
    };
    let name = t[..open].trim().to_ascii_lowercase();
    let inner = t[open + 1..]
        .strip_suffix(')')
        .ok_or_else(|| bad(t, "missing ')'"))?;
    let args: Vec<&str> = inner.split(',').map(str::trim).collect();
    let one_column = || -> Result<String> {
        match args.as_slice() {
            [c] => column_name(c),
            _ => Err(bad(t, "takes one column")),
        }
    };
    // The column and the number, in either order.
    let column_and_number = || -> Result<(String, u32)> {
        let [a, b] = args.as_slice() else {
            return Err(bad(t, "takes a column and a number"));
        };
        match (a.parse::<u32>(), b.parse::<u32>()) {
            (Ok(n), Err(_)) => Ok((column_name(b)?, n)),
            (Err(_), Ok(n)) => Ok((column_name(a)?, n)),
            _ => Err(bad(t, "takes a column and a number")),
        }
    };
    let (column, transform) = match name.as_str() {
        "identity" => (one_column()?, Transform::Identity),
        "year" | "years" => (one_column()?, Transform::Year),
        "month" | "months" => (one_column()?, Transform::Month),
        "day" | "days" => (one_column()?, Transform::Day),
        "hour" | "hours" => (one_column()?, Transform::Hour),
        "bucket" => {
            let (c, n) = column_and_number()?;
            if n == 0 {
                return Err(bad(t, "needs at least one bucket"));
            }
            (c, Transform::Bucket(n))
        }
        "truncate" => {
            let (c, w) = column_and_number()?;
            if w == 0 {
                return Err(bad(t, "needs a width of at least 1"));
            }
            (c, Transform::Truncate(w))
        }
        other => return Err(bad(t, &format!("unknown transform {other:?}"))),
    };
    Ok(Term { column, transform })
}

fn column_name(c: &str) -> Result<String> {
    let c = c.trim().trim_matches('`');
    if c.is_empty()
        || !c
            .chars()
            .all(|ch| ch.is_alphanumeric() || ch == '_' || ch == '.' || ch == '-')
    {
        return Err(bad(c, "not a column name"));
    }
    Ok(c.to_string())
}

/// The partition spec of `terms` over `schema`.
pub fn spec(schema: &Schema, terms: &[Term]) -> Result<PartitionSpec> {
    let mut builder = PartitionSpec::builder(schema.clone());
    for t in terms {
        let field = schema.field_by_name(&t.column).ok_or_else(|| {
            Error::Schema(format!(
                "table.topic.partition.by: column {:?} is not in the table",
                t.column
            ))
        })?;
        let name = match t.transform {
            Transform::Identity => t.column.replace('.', "_"),
            Transform::Year => format!("{}_year", t.column.replace('.', "_")),
            Transform::Month => format!("{}_month", t.column.replace('.', "_")),
            Transform::Day => format!("{}_day", t.column.replace('.', "_")),
            Transform::Hour => format!("{}_hour", t.column.replace('.', "_")),
            Transform::Bucket(n) => format!("{}_bucket_{n}", t.column.replace('.', "_")),
            Transform::Truncate(w) => format!("{}_trunc_{w}", t.column.replace('.', "_")),
            _ => t.column.clone(),
        };
        builder = builder
            .add_unbound_field(UnboundPartitionField {
                source_id: field.id,
                field_id: None,
                name,
                transform: t.transform,
            })
            .map_err(|e| {
                Error::Schema(format!(
                    "table.topic.partition.by: {}({}) does not apply to column {:?} of type {}: {e}",
                    t.transform, t.column, t.column, field.field_type
                ))
            })?;
    }
    Ok(builder.build()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{NestedField, PrimitiveType, Type};
    use std::sync::Arc;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "ts",
                    Type::Primitive(PrimitiveType::Timestamptz),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "name",
                    Type::Primitive(PrimitiveType::String),
                )),
                Arc::new(NestedField::optional(
                    4,
                    "c",
                    Type::Struct(iceberg::spec::StructType::new(vec![Arc::new(
                        NestedField::optional(5, "region", Type::Primitive(PrimitiveType::String)),
                    )])),
                )),
            ])
            .build()
            .expect("schema")
    }

    #[test]
    fn terms_parse_in_both_argument_orders() {
        let terms = parse("[day(ts), bucket(id, 16), truncate(4, name), c.region, hours(ts)]")
            .expect("parse");
        assert_eq!(
            terms,
            vec![
                Term {
                    column: "ts".into(),
                    transform: Transform::Day
                },
                Term {
                    column: "id".into(),
                    transform: Transform::Bucket(16)
                },
                Term {
                    column: "name".into(),
                    transform: Transform::Truncate(4)
                },
                Term {
                    column: "c.region".into(),
                    transform: Transform::Identity
                },
                Term {
                    column: "ts".into(),
                    transform: Transform::Hour
                },
            ]
        );
        assert_eq!(
            parse("bucket(16, id)").expect("spark order")[0].transform,
            Transform::Bucket(16)
        );
        assert!(parse("").expect("empty").is_empty());
        assert!(parse("[]").expect("empty list").is_empty());
    }

    #[test]
    fn bad_terms_are_named() {
        for (config, says) in [
            ("[day(ts]", "unbalanced"),
            ("[weekday(ts)]", "unknown transform"),
            ("[bucket(id)]", "a column and a number"),
            ("[bucket(id, 0)]", "at least one bucket"),
            ("[day(ts, 3)]", "one column"),
            ("[, id]", "empty term"),
        ] {
            let err = parse(config).expect_err(config);
            assert!(err.to_string().contains(says), "{config}: {err}");
        }
    }

    #[test]
    fn specs_bind_to_the_schema() {
        let s = schema();
        let spec = spec(
            &s,
            &parse("[day(ts), bucket(id, 16), c.region]").expect("parse"),
        )
        .expect("spec");
        let names: Vec<_> = spec.fields().iter().map(|f| f.name.clone()).collect();
        assert_eq!(names, vec!["ts_day", "id_bucket_16", "c_region"]);
        assert_eq!(spec.fields()[1].source_id, 1);
        let err = spec_err(&s, "[day(missing)]");
        assert!(err.contains("not in the table"), "{err}");
        let err = spec_err(&s, "[day(name)]");
        assert!(err.contains("does not apply"), "{err}");
    }

    fn spec_err(s: &Schema, config: &str) -> String {
        spec(s, &parse(config).expect("parse"))
            .expect_err(config)
            .to_string()
    }
}
