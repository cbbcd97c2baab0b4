//! Avro's JSON encoding, both ways, for the command line's producer and consumer: a JSON value
//! written as the binary datum of a schema (what `kafka-avro-console-producer` does with each
//! input line), and a decoded datum printed as JSON (what `kafka-avro-console-consumer`
//! prints).
//!
//! Input accepted by [`Encoder`]:
//! - the specification's JSON encoding: a union's non-null value wrapped as `{"branch": value}`
//!   (the branch named by its type: `string`, `long`, a named type's full or short name), bytes
//!   and fixed values as strings of code points 0–255, logical types as their underlying type
//!   (a `date` is an int of days);
//! - and plain JSON where it is unambiguous: a union's value unwrapped when exactly one branch
//!   can hold it, a record field left out when the field has a default, a decimal as a JSON
//!   number.
//!
//! Anything else is refused with the path of the value and the reason
//! (`.address.zip: expected an int, got "abc"`); a field the schema does not have is refused
//! too, since it is most often a misspelt name. [`to_json`] writes the specification's
//! encoding, so what the consumer prints the producer reads back.
//!
//! Contract: the bytes written for a value decode, with the same schema, to that value
//! (tested through apache-avro's own decoder).

use std::collections::HashMap;

use apache_avro::schema::{Name, Schema, UnionSchema};
use apache_avro::types::Value as Avro;
use serde_json::Value;

use crate::avro::AvroSchema;
use crate::avro_spec::Kind;

/// Why a JSON value does not fit a schema: where (a path of field names, map keys and array
/// indexes) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Innermost last.
    path: Vec<String>,
    reason: String,
}

impl Mismatch {
    fn new(reason: impl Into<String>) -> Mismatch {
        Mismatch {
            path: Vec::new(),
            reason: reason.into(),
        }
    }

    fn at(mut self, segment: impl Into<String>) -> Mismatch {
        self.path.insert(0, segment.into());
        self
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path.concat(), self.reason)
        }
    }
}

impl std::error::Error for Mismatch {}

type Result<T> = std::result::Result<T, Mismatch>;

/// Writes JSON values as binary datums of one schema.
pub struct Encoder<'a> {
    root: &'a Schema,
    names: HashMap<String, &'a Schema>,
}

impl<'a> Encoder<'a> {
    pub fn new(schema: &'a AvroSchema) -> Encoder<'a> {
        Encoder {
            root: &schema.schema,
            names: crate::avro::names(&schema.schema, &schema.refs),
        }
    }

    /// Appends `value` as a datum of the schema to `out`; on a mismatch `out` may hold part of
    /// it (truncate it to where it was).
    pub fn encode(&self, value: &Value, out: &mut Vec<u8>) -> Result<()> {
        self.write(self.root, value, out, 0)
    }

    fn resolve(&self, s: &'a Schema) -> Result<&'a Schema> {
        match s {
            Schema::Ref { name } => self
                .names
                .get(&name.fullname(None))
                .copied()
                .ok_or_else(|| Mismatch::new(format!("unknown type {}", name.fullname(None)))),
            s => Ok(s),
        }
    }

    fn write(&self, s: &'a Schema, v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Mismatch::new(format!(
                "nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let s = self.resolve(s)?;
        match s {
            Schema::Null => expect(v.is_null(), "null", v),
            Schema::Boolean => {
                let b = v.as_bool().ok_or_else(|| wrong("a boolean", v))?;
                out.push(u8::from(b));
                Ok(())
            }
            Schema::Float => {
                let n = number(v)?;
                out.extend_from_slice(&(n as f32).to_le_bytes());
                Ok(())
            }
            Schema::Double => {
                out.extend_from_slice(&number(v)?.to_le_bytes());
                Ok(())
            }
            Schema::Bytes => {
                let b = code_points(v)?;
                long(b.len() as i64, out);
                out.extend_from_slice(&b);
                Ok(())
            }
            Schema::String => {
                let text = v.as_str().ok_or_else(|| wrong("a string", v))?;
                long(text.len() as i64, out);
                out.extend_from_slice(text.as_bytes());
                Ok(())
            }
            Schema::Uuid => {
                let text = v.as_str().filter(|t| is_uuid(t));
                let text = text.ok_or_else(|| wrong("a UUID string", v))?;
                long(text.len() as i64, out);
                out.extend_from_slice(text.as_bytes());
                Ok(())
            }
            Schema::Array(a) => {
                let items = v.as_array().ok_or_else(|| wrong("an array", v))?;
                if !items.is_empty() {
                    long(items.len() as i64, out);
                    for (i, item) in items.iter().enumerate() {
                        self.write(&a.items, item, out, depth + 1)
                            .map_err(|e| e.at(format!("[{i}]")))?;
                    }
                }
                long(0, out);
                Ok(())
            }
            Schema::Map(m) => {
                let entries = v.as_object().ok_or_else(|| wrong("an object (a map)", v))?;
                if !entries.is_empty() {
                    long(entries.len() as i64, out);
                    for (k, item) in entries {
                        long(k.len() as i64, out);
                        out.extend_from_slice(k.as_bytes());
                        self.write(&m.types, item, out, depth + 1)
                            .map_err(|e| e.at(format!("[{k:?}]")))?;
                    }
                }
                long(0, out);
                Ok(())
            }
            Schema::Union(u) => self.write_union(u, v, out, depth),
            Schema::Record(r) => {
                let o = v
                    .as_object()
                    .ok_or_else(|| wrong("an object (a record)", v))?;
                for f in &r.fields {
                    let at = |e: Mismatch| e.at(format!(".{}", f.name));
                    match (o.get(&f.name), &f.default) {
                        (Some(value), _) => {
                            self.write(&f.schema, value, out, depth + 1).map_err(at)?
                        }
                        (None, Some(default)) => self
                            .write_default(&f.schema, default, out, depth + 1)
                            .map_err(at)?,
                        (None, None) => {
                            return Err(Mismatch::new("missing, and the field has no default")
                                .at(format!(".{}", f.name)))
                        }
                    }
                }
                if let Some(extra) = o.keys().find(|k| !r.lookup.contains_key(*k)) {
                    let known: Vec<&str> = r.fields.iter().map(|f| f.name.as_str()).collect();
                    return Err(Mismatch::new(format!(
                        "the record {} has no field {extra:?} (its fields: {})",
                        r.name.fullname(None),
                        known.join(", ")
                    )));
                }
                Ok(())
            }
            Schema::Enum(e) => {
                let symbol = v
                    .as_str()
                    .ok_or_else(|| wrong("a string (an enum symbol)", v))?;
                let at = e.symbols.iter().position(|s| s == symbol).ok_or_else(|| {
                    Mismatch::new(format!(
                        "{symbol:?} is not a symbol of {} (one of {})",
                        e.name.fullname(None),
                        e.symbols.join(", ")
                    ))
                })?;
                long(at as i64, out);
                Ok(())
            }
            Schema::Fixed(f) => fixed(v, f.size, out),
            Schema::Duration => fixed(v, 12, out),
            Schema::Decimal(d) => {
                let inner = self.resolve(&d.inner)?;
                let size = match inner {
                    Schema::Fixed(f) => Some(f.size),
                    _ => None,
                };
                if v.is_string() {
                    // The specification's form: the two's-complement bytes as code points.
                    return match size {
                        Some(size) => fixed(v, size, out),
                        None => self.write(&Schema::Bytes, v, out, depth),
                    };
                }
                let unscaled = unscaled(v, d.scale, d.precision)?;
                let bytes = twos_complement(unscaled, size).ok_or_else(|| {
                    Mismatch::new(format!("{v} does not fit {} bytes", size.unwrap_or(0)))
                })?;
                if size.is_none() {
                    long(bytes.len() as i64, out);
                }
                out.extend_from_slice(&bytes);
                Ok(())
            }
            Schema::BigDecimal => Err(Mismatch::new(
                "big-decimal values cannot be written from JSON",
            )),
            Schema::Ref { .. } => Err(Mismatch::new("a reference to a reference")),
            // The ints and longs, logical types among them (a date is an int of days), by the
            // kind they are written as.
            s => match crate::avro_spec::kind(s) {
                Some(Kind::Int) => {
                    let n = v
                        .as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or_else(|| wrong("an int (32-bit)", v))?;
                    long(i64::from(n), out);
                    Ok(())
                }
                Some(Kind::Long) => {
                    let n = v.as_i64().ok_or_else(|| wrong("a long (64-bit)", v))?;
                    long(n, out);
                    Ok(())
                }
                _ => Err(Mismatch::new(format!("{s:?} cannot be written from JSON"))),
            },
        }
    }

    /// A record field's default: for a union, a value of its first branch (the specification's
    /// rule for defaults), written without a wrapper.
    fn write_default(
        &self,
        s: &'a Schema,
        d: &Value,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<()> {
        match self.resolve(s)? {
            Schema::Union(u) => {
                let first = u
                    .variants()
                    .first()
                    .ok_or_else(|| Mismatch::new("an empty union"))?;
                long(0, out);
                self.write(first, d, out, depth)
            }
            s => self.write(s, d, out, depth),
        }
    }

    fn write_union(
        &self,
        u: &'a UnionSchema,
        v: &Value,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<()> {
        let variants = u.variants();
        if v.is_null() {
            let at = variants
                .iter()
                .position(|b| matches!(b, Schema::Null))
                .ok_or_else(|| {
                    Mismatch::new(format!(
                        "null, but the union {} has no null branch",
                        self.union_name(u)
                    ))
                })?;
            long(at as i64, out);
            return Ok(());
        }
        // The specification's form: {"branch": value}.
        if let Some((branch, inner)) = single_entry(v) {
            if let Some(at) = variants.iter().position(|b| self.names_branch(b, branch)) {
                long(at as i64, out);
                return self
                    .write(&variants[at], inner, out, depth + 1)
                    .map_err(|e| e.at(format!("<{branch}>")));
            }
        }
        // Plain JSON: the one branch that holds it.
        let candidates: Vec<usize> = (0..variants.len())
            .filter(|&i| !matches!(variants[i], Schema::Null))
            .collect();
        if let [only] = candidates[..] {
            long(only as i64, out);
            return self.write(&variants[only], v, out, depth + 1);
        }
        let mut fits = Vec::new();
        let mut trial = Vec::new();
        for &i in &candidates {
            trial.clear();
            if self.write(&variants[i], v, &mut trial, depth + 1).is_ok() {
                fits.push(i);
            }
        }
        match fits[..] {
            [only] => {
                long(only as i64, out);
                self.write(&variants[only], v, out, depth + 1)
            }
            [] => Err(Mismatch::new(format!(
                "{} fits no branch of the union {}",
                shown(v),
                self.union_name(u)
            ))),
            _ => {
                let names: Vec<String> = fits.iter().map(|&i| branch_name(&variants[i])).collect();
                Err(Mismatch::new(format!(
                    "{} fits the branches {} of the union: name one, as {{\"{}\": …}}",
                    shown(v),
                    names.join(", "),
                    names[0]
                )))
            }
        }
    }

    fn union_name(&self, u: &UnionSchema) -> String {
        let names: Vec<String> = u.variants().iter().map(branch_name).collect();
        format!("[{}]", names.join(", "))
    }

    /// Whether `name` names the branch `b`: its type's name, or a named type's full or short
    /// name.
    fn names_branch(&self, b: &Schema, name: &str) -> bool {
        let named = |n: &Name| n.fullname(None) == name || n.name == name;
        match b {
            Schema::Record(r) => named(&r.name),
            Schema::Enum(e) => named(&e.name),
            Schema::Fixed(f) => named(&f.name),
            Schema::Ref { name: n } => named(n),
            Schema::Decimal(d) => self
                .resolve(&d.inner)
                .is_ok_and(|i| self.names_branch(i, name)),
            b => branch_name(b) == name,
        }
    }
}

/// How deep a value may nest: deeper input is refused, not a stack overflow.
const MAX_DEPTH: usize = 64;

/// The name that wraps a union branch's value in Avro's JSON encoding.
fn branch_name(b: &Schema) -> String {
    match b {
        Schema::Record(r) => r.name.fullname(None),
        Schema::Enum(e) => e.name.fullname(None),
        Schema::Fixed(f) => f.name.fullname(None),
        Schema::Ref { name } => name.fullname(None),
        Schema::Decimal(d) => branch_name(&d.inner),
        Schema::Duration => "fixed".into(),
        b => match crate::avro_spec::kind(b) {
            Some(k) => k.name().into(),
            None => "?".into(),
        },
    }
}

fn single_entry(v: &Value) -> Option<(&str, &Value)> {
    let o = v.as_object()?;
    if o.len() != 1 {
        return None;
    }
    o.iter().next().map(|(k, v)| (k.as_str(), v))
}

/// A value as it appears in a message: at most 60 characters.
fn shown(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= 60 {
        return text;
    }
    let cut: String = text.chars().take(57).collect();
    format!("{cut}...")
}

fn wrong(expected: &str, v: &Value) -> Mismatch {
    Mismatch::new(format!("expected {expected}, got {}", shown(v)))
}

fn expect(ok: bool, expected: &str, v: &Value) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(wrong(expected, v))
    }
}

fn number(v: &Value) -> Result<f64> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| wrong("a number", v)),
        // As Java's encoder writes the values JSON has no number for.
        Value::String(s) if s == "NaN" => Ok(f64::NAN),
        Value::String(s) if s == "Infinity" => Ok(f64::INFINITY),
        Value::String(s) if s == "-Infinity" => Ok(f64::NEG_INFINITY),
        _ => Err(wrong("a number", v)),
    }
}

/// Bytes as Avro's JSON encoding gives them: one code point 0–255 per byte.
fn code_points(v: &Value) -> Result<Vec<u8>> {
    let text = v
        .as_str()
        .ok_or_else(|| wrong("a string of code points 0-255 (bytes)", v))?;
    text.chars()
        .map(|c| u8::try_from(u32::from(c)))
        .collect::<std::result::Result<Vec<u8>, _>>()
        .map_err(|_| wrong("a string of code points 0-255 (bytes)", v))
}

fn fixed(v: &Value, size: usize, out: &mut Vec<u8>) -> Result<()> {
    let b = code_points(v)?;
    if b.len() != size {
        return Err(Mismatch::new(format!(
            "expected {size} bytes, got {}",
            b.len()
        )));
    }
    out.extend_from_slice(&b);
    Ok(())
}

fn is_uuid(t: &str) -> bool {
    t.len() == 36
        && t.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A decimal's unscaled value from a JSON number with at most `scale` decimal places and
/// `precision` digits.
fn unscaled(v: &Value, scale: usize, precision: usize) -> Result<i128> {
    let Value::Number(n) = v else {
        return Err(wrong("a number (a decimal)", v));
    };
    let text = n.to_string();
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (
            m.to_string(),
            e.parse::<i64>().map_err(|_| wrong("a decimal number", v))?,
        ),
        None => (text.clone(), 0),
    };
    let negative = mantissa.starts_with('-');
    let mantissa = mantissa.trim_start_matches('-');
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    // The number is digits × 10^(exponent - fraction's length); scale it to 10^-scale.
    let shift = exponent - fraction.len() as i64 + scale as i64;
    let digits = if shift >= 0 {
        format!("{digits}{}", "0".repeat(shift as usize))
    } else {
        let cut = usize::try_from(-shift)
            .unwrap_or(usize::MAX)
            .min(digits.len());
        let (keep, dropped) = digits.split_at(digits.len() - cut);
        if dropped.chars().any(|c| c != '0') {
            return Err(Mismatch::new(format!(
                "{text} has more than {scale} decimal places"
            )));
        }
        keep.to_string()
    };
    let digits = digits.trim_start_matches('0');
    if digits.len() > precision {
        return Err(Mismatch::new(format!(
            "{text} has more than {precision} digits (the decimal's precision)"
        )));
    }
    let magnitude: i128 = if digits.is_empty() {
        0
    } else {
        digits
            .parse()
            .map_err(|_| Mismatch::new(format!("{text} is too large for a decimal")))?
    };
    Ok(if negative { -magnitude } else { magnitude })
}

/// The shortest big-endian two's complement bytes of `n`, or exactly `size` bytes (sign
/// extended); None when it does not fit `size`.
fn twos_complement(n: i128, size: Option<usize>) -> Option<Vec<u8>> {
    let full = n.to_be_bytes();
    let fill = if n < 0 { 0xff } else { 0 };
    // Drop leading bytes that only repeat the sign.
    let mut start = 0;
    while start < full.len() - 1 && full[start] == fill && (full[start + 1] & 0x80 == fill & 0x80) {
        start += 1;
    }
    let minimal = &full[start..];
    match size {
        None => Some(minimal.to_vec()),
        Some(size) if minimal.len() <= size => {
            let mut out = vec![fill; size - minimal.len()];
            out.extend_from_slice(minimal);
            Some(out)
        }
        Some(_) => None,
    }
}

/// Avro's `long` (and `int`): zig-zag, then a base-128 varint.
fn long(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// A decoded datum of `schema` in Avro's JSON encoding: a union's non-null value wrapped in its
/// branch's name, bytes and fixed values as code points, logical types as their underlying
/// type, as Java's `JsonEncoder` writes them.
pub fn to_json(schema: &AvroSchema, value: &Avro) -> String {
    let names = crate::avro::names(&schema.schema, &schema.refs);
    let mut out = String::new();
    write_json(&names, &schema.schema, value, &mut out);
    out
}

/// A JSON string literal.
fn quoted(s: &str, out: &mut String) {
    out.push_str(&Value::String(s.to_string()).to_string());
}

/// Writes `v` as JSON text: records' fields in the schema's order (a JSON object of serde's
/// would sort them), maps' keys sorted.
fn write_json(names: &HashMap<String, &Schema>, s: &Schema, v: &Avro, out: &mut String) {
    let s = match s {
        Schema::Ref { name } => names.get(&name.fullname(None)).copied().unwrap_or(s),
        s => s,
    };
    match (s, v) {
        (Schema::Union(u), Avro::Union(at, inner)) => match u.variants().get(*at as usize) {
            Some(Schema::Null) | None => write_json(names, &Schema::Null, inner, out),
            Some(branch) => {
                out.push('{');
                quoted(&branch_name(branch), out);
                out.push(':');
                write_json(names, branch, inner, out);
                out.push('}');
            }
        },
        (Schema::Record(r), Avro::Record(fields)) => {
            out.push('{');
            for (i, (name, fv)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let fs = r
                    .lookup
                    .get(name)
                    .and_then(|&i| r.fields.get(i))
                    .map_or(&Schema::Null, |f| &f.schema);
                quoted(name, out);
                out.push(':');
                write_json(names, fs, fv, out);
            }
            out.push('}');
        }
        (Schema::Array(a), Avro::Array(items)) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(names, &a.items, item, out);
            }
            out.push(']');
        }
        (Schema::Map(m), Avro::Map(entries)) => {
            let mut sorted: Vec<_> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                quoted(k, out);
                out.push(':');
                write_json(names, &m.types, item, out);
            }
            out.push('}');
        }
        (_, v) => out.push_str(&scalar(v).to_string()),
    }
}

fn scalar(v: &Avro) -> Value {
    let points = |b: &[u8]| Value::String(b.iter().map(|&c| char::from(c)).collect());
    match v {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(*b),
        Avro::Int(n) | Avro::Date(n) | Avro::TimeMillis(n) => Value::from(*n),
        Avro::Long(n)
        | Avro::TimeMicros(n)
        | Avro::TimestampMillis(n)
        | Avro::TimestampMicros(n)
        | Avro::TimestampNanos(n)
        | Avro::LocalTimestampMillis(n)
        | Avro::LocalTimestampMicros(n)
        | Avro::LocalTimestampNanos(n) => Value::from(*n),
        // Through the float's own shortest text: 22.27, not 22.270000457763672.
        Avro::Float(f) => float(f.to_string().parse().unwrap_or(f64::NAN)),
        Avro::Double(f) => float(*f),
        Avro::Bytes(b) | Avro::Fixed(_, b) => points(b),
        Avro::String(s) => Value::String(s.clone()),
        Avro::Uuid(u) => Value::String(u.to_string()),
        Avro::Enum(_, symbol) => Value::String(symbol.clone()),
        Avro::Decimal(d) => match Vec::<u8>::try_from(d) {
            Ok(b) => points(&b),
            Err(_) => Value::Null,
        },
        Avro::BigDecimal(d) => Value::String(d.to_string()),
        Avro::Duration(d) => {
            let b: [u8; 12] = (*d).into();
            points(&b)
        }
        // Without the schema (nested in a value whose schema did not match): the plain form.
        Avro::Union(_, inner) => scalar(inner),
        Avro::Array(items) => Value::Array(items.iter().map(scalar).collect()),
        Avro::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), scalar(v)))
                .collect(),
        ),
        Avro::Record(fields) => {
            Value::Object(fields.iter().map(|(k, v)| (k.clone(), scalar(v))).collect())
        }
    }
}

fn float(f: f64) -> Value {
    if f.is_nan() {
        Value::String("NaN".into())
    } else if f.is_infinite() {
        Value::String(if f > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests;
