//! The canonical printer: a compiled file descriptor to deterministic `.proto` text.
//!
//! Layout: `syntax`, `package`, imports sorted by name, file options in a fixed order, then
//! messages (declaration order), enums, top-level `extend` blocks and services. In a message:
//! options, fields in declaration order (a real oneof is printed where its first field is),
//! reserved ranges and names, extension ranges, nested enums, nested messages, `extend`
//! blocks. Type names are absolute (`.pkg.Msg`), so the text resolves the same wherever it is
//! read. Maps print as `map<K, V>` and proto3 `optional` as a label; their synthetic entry
//! messages and oneofs are not printed. Options, standard and custom, print in field-number
//! order with fully qualified custom option names (`(.pkg.opt)`); message-valued ones in
//! compact text format.

use std::collections::HashSet;
use std::fmt::Write as _;

use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
use prost_reflect::prost_types::FieldDescriptorProto;
use prost_reflect::text_format::FormatOptions;
use prost_reflect::{
    DynamicMessage, EnumDescriptor, ExtensionDescriptor, FieldDescriptor, FileDescriptor, Kind,
    MessageDescriptor, ServiceDescriptor, Syntax, Value,
};

/// The highest field number; `extensions 100 to max` is stored with this end, plus one.
const MAX_FIELD_NUMBER: i32 = 536_870_911;

/// Prints `file` as canonical `.proto` text.
pub(super) fn print_file(file: &FileDescriptor) -> String {
    let mut p = Printer {
        out: String::new(),
        depth: 0,
        proto3: file.syntax() == Syntax::Proto3,
    };
    p.file(file);
    p.out
}

struct Printer {
    out: String,
    depth: usize,
    proto3: bool,
}

impl Printer {
    fn line(&mut self, text: &str) {
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    fn open(&mut self, text: &str) {
        self.line(&format!("{text} {{"));
        self.depth += 1;
    }

    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.line("}");
    }

    fn options(&mut self, options: Vec<(String, String)>) {
        for (name, value) in options {
            self.line(&format!("option {name} = {value};"));
        }
    }

    fn file(&mut self, file: &FileDescriptor) {
        let proto = file.file_descriptor_proto();
        let syntax = if self.proto3 { "proto3" } else { "proto2" };
        self.line(&format!("syntax = \"{syntax}\";"));
        if !file.package_name().is_empty() {
            self.line(&format!("package {};", file.package_name()));
        }

        let mut imports: Vec<(String, &str)> = proto
            .dependency
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let i = i as i32;
                let modifier = if proto.public_dependency.contains(&i) {
                    "public "
                } else if proto.weak_dependency.contains(&i) {
                    "weak "
                } else {
                    ""
                };
                (name.clone(), modifier)
            })
            .collect();
        imports.sort();
        if !imports.is_empty() {
            self.out.push('\n');
        }
        for (name, modifier) in imports {
            self.line(&format!("import {modifier}{};", quote(&name)));
        }

        let options = option_list(&file.options(), &[]);
        if !options.is_empty() {
            self.out.push('\n');
        }
        self.options(options);

        let extensions: Vec<ExtensionDescriptor> = file.extensions().collect();
        let groups = group_types(&[], &extensions);
        for message in file.messages() {
            if !groups.contains(message.full_name()) {
                self.out.push('\n');
                self.message(&message, None);
            }
        }
        for en in file.enums() {
            self.out.push('\n');
            self.enumeration(&en);
        }
        if !extensions.is_empty() {
            self.out.push('\n');
            self.extend_blocks(&extensions);
        }
        for service in file.services() {
            self.out.push('\n');
            self.service(&service);
        }
    }

    /// Prints a message; `group` is the group field whose body this message is, if any.
    fn message(&mut self, message: &MessageDescriptor, group: Option<&FieldHead>) {
        match group {
            Some(head) => self.open(&head.text),
            None => self.open(&format!("message {}", message.name())),
        }
        let proto = message.descriptor_proto();
        self.options(option_list(&message.options(), &["map_entry"]));

        let mut printed_oneofs = HashSet::new();
        for field in message.fields() {
            match field.containing_oneof().filter(|o| !o.is_synthetic()) {
                Some(oneof) => {
                    if printed_oneofs.insert(oneof.name().to_owned()) {
                        self.open(&format!("oneof {}", oneof.name()));
                        self.options(option_list(&oneof.options(), &[]));
                        for member in oneof.fields() {
                            self.field(&member, true);
                        }
                        self.close();
                    }
                }
                None => self.field(&field, false),
            }
        }

        if !proto.reserved_range.is_empty() {
            let ranges: Vec<String> = proto
                .reserved_range
                .iter()
                .map(|r| range_text(r.start(), r.end().saturating_sub(1)))
                .collect();
            self.line(&format!("reserved {};", ranges.join(", ")));
        }
        if !proto.reserved_name.is_empty() {
            let names: Vec<String> = proto.reserved_name.iter().map(|n| quote(n)).collect();
            self.line(&format!("reserved {};", names.join(", ")));
        }
        for range in &proto.extension_range {
            let text = range_text(range.start(), range.end().saturating_sub(1));
            self.line(&format!("extensions {text};"));
        }

        for en in message.child_enums() {
            self.enumeration(&en);
        }
        let fields: Vec<FieldDescriptor> = message.fields().collect();
        let extensions: Vec<ExtensionDescriptor> = message.child_extensions().collect();
        let groups = group_types(&fields, &extensions);
        for child in message.child_messages() {
            if !child.is_map_entry() && !groups.contains(child.full_name()) {
                self.message(&child, None);
            }
        }
        self.extend_blocks(&extensions);
        self.close();
    }

    fn field(&mut self, field: &FieldDescriptor, in_oneof: bool) {
        let proto = field.field_descriptor_proto();
        let label = if in_oneof || field.is_map() {
            ""
        } else {
            self.label(proto)
        };
        let type_name = if field.is_map() {
            match field.kind() {
                Kind::Message(entry) => format!(
                    "map<{}, {}>",
                    type_text(&entry.map_entry_key_field().kind()),
                    type_text(&entry.map_entry_value_field().kind())
                ),
                _ => type_text(&field.kind()),
            }
        } else {
            type_text(&field.kind())
        };
        let json_name = proto
            .json_name
            .as_deref()
            .filter(|j| *j != default_json_name(proto.name()));
        let options = field_options(proto, &field.kind(), json_name, &field.options());
        self.field_line(label, &type_name, proto, &options, &field.kind());
    }

    fn extension(&mut self, ext: &ExtensionDescriptor) {
        let proto = ext.field_descriptor_proto();
        // proto3 extensions (custom options) take no `optional` label.
        let label = if self.proto3 && proto.label() != Label::Repeated {
            ""
        } else {
            self.label(proto)
        };
        let options = field_options(proto, &ext.kind(), None, &ext.options());
        self.field_line(label, &type_text(&ext.kind()), proto, &options, &ext.kind());
    }

    /// Prints `label type name = number [options];`, or a group field with its body.
    fn field_line(
        &mut self,
        label: &str,
        type_name: &str,
        proto: &FieldDescriptorProto,
        options: &[String],
        kind: &Kind,
    ) {
        let options = if options.is_empty() {
            String::new()
        } else {
            format!(" [{}]", options.join(", "))
        };
        match (proto.r#type(), kind) {
            (Type::Group, Kind::Message(body)) => {
                let head = FieldHead {
                    text: format!("{label}group {} = {}{options}", body.name(), proto.number()),
                };
                self.message(body, Some(&head));
            }
            _ => self.line(&format!(
                "{label}{type_name} {} = {}{options};",
                proto.name(),
                proto.number()
            )),
        }
    }

    fn label(&self, proto: &FieldDescriptorProto) -> &'static str {
        match proto.label() {
            Label::Repeated => "repeated ",
            Label::Required => "required ",
            Label::Optional if !self.proto3 || proto.proto3_optional() => "optional ",
            Label::Optional => "",
        }
    }

    /// Prints extensions as `extend` blocks, one per extended message in first-seen order.
    fn extend_blocks(&mut self, extensions: &[ExtensionDescriptor]) {
        let mut extendees: Vec<String> = Vec::new();
        for ext in extensions {
            let name = ext.containing_message().full_name().to_owned();
            if !extendees.contains(&name) {
                extendees.push(name);
            }
        }
        for extendee in extendees {
            self.open(&format!("extend .{extendee}"));
            for ext in extensions
                .iter()
                .filter(|e| e.containing_message().full_name() == extendee)
            {
                self.extension(ext);
            }
            self.close();
        }
    }

    fn enumeration(&mut self, en: &EnumDescriptor) {
        self.open(&format!("enum {}", en.name()));
        let proto = en.enum_descriptor_proto();
        self.options(option_list(&en.options(), &[]));
        // In declaration order (`values()` is by number, aliases in no fixed order).
        let mut values: Vec<_> = en.values().collect();
        values.sort_by_key(|v| v.path().last().copied());
        for value in values {
            let options: Vec<String> = option_list(&value.options(), &[])
                .into_iter()
                .map(|(name, value)| format!("{name} = {value}"))
                .collect();
            let options = if options.is_empty() {
                String::new()
            } else {
                format!(" [{}]", options.join(", "))
            };
            self.line(&format!("{} = {}{options};", value.name(), value.number()));
        }
        if !proto.reserved_range.is_empty() {
            let ranges: Vec<String> = proto
                .reserved_range
                .iter()
                .map(|r| range_text(r.start(), r.end()))
                .collect();
            self.line(&format!("reserved {};", ranges.join(", ")));
        }
        if !proto.reserved_name.is_empty() {
            let names: Vec<String> = proto.reserved_name.iter().map(|n| quote(n)).collect();
            self.line(&format!("reserved {};", names.join(", ")));
        }
        self.close();
    }

    fn service(&mut self, service: &ServiceDescriptor) {
        self.open(&format!("service {}", service.name()));
        self.options(option_list(&service.options(), &[]));
        for method in service.methods() {
            let stream = |yes: bool| if yes { "stream " } else { "" };
            let head = format!(
                "rpc {}({}.{}) returns ({}.{})",
                method.name(),
                stream(method.is_client_streaming()),
                method.input().full_name(),
                stream(method.is_server_streaming()),
                method.output().full_name()
            );
            let options = option_list(&method.options(), &[]);
            if options.is_empty() {
                self.line(&format!("{head};"));
            } else {
                self.open(&head);
                self.options(options);
                self.close();
            }
        }
        self.close();
    }
}

/// The head of a group field (`optional group Name = 1 [...]`), printed before its body.
struct FieldHead {
    text: String,
}

/// The full names of the messages that are group bodies of `fields` or `extensions`: they are
/// printed inline, not as nested messages.
fn group_types(fields: &[FieldDescriptor], extensions: &[ExtensionDescriptor]) -> HashSet<String> {
    let mut groups = HashSet::new();
    for (proto, kind) in fields
        .iter()
        .map(|f| (f.field_descriptor_proto(), f.kind()))
        .chain(
            extensions
                .iter()
                .map(|e| (e.field_descriptor_proto(), e.kind())),
        )
    {
        if let (Type::Group, Kind::Message(body)) = (proto.r#type(), kind) {
            groups.insert(body.full_name().to_owned());
        }
    }
    groups
}

/// The type of a field as .proto text: a scalar name or an absolute message/enum name.
fn type_text(kind: &Kind) -> String {
    let scalar = match kind {
        Kind::Double => "double",
        Kind::Float => "float",
        Kind::Int32 => "int32",
        Kind::Int64 => "int64",
        Kind::Uint32 => "uint32",
        Kind::Uint64 => "uint64",
        Kind::Sint32 => "sint32",
        Kind::Sint64 => "sint64",
        Kind::Fixed32 => "fixed32",
        Kind::Fixed64 => "fixed64",
        Kind::Sfixed32 => "sfixed32",
        Kind::Sfixed64 => "sfixed64",
        Kind::Bool => "bool",
        Kind::String => "string",
        Kind::Bytes => "bytes",
        Kind::Message(m) => return format!(".{}", m.full_name()),
        Kind::Enum(e) => return format!(".{}", e.full_name()),
    };
    scalar.to_owned()
}

/// `n`, `n to m` or `n to max` for an inclusive range.
fn range_text(start: i32, end: i32) -> String {
    if start == end {
        start.to_string()
    } else if end >= MAX_FIELD_NUMBER {
        format!("{start} to max")
    } else {
        format!("{start} to {end}")
    }
}

/// protoc's default JSON name: underscores removed, the letter after each one upper-cased.
pub(super) fn default_json_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper_next = false;
    for c in name.chars() {
        if c == '_' {
            upper_next = true;
        } else if upper_next {
            out.push(c.to_ascii_uppercase());
            upper_next = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// A .proto string literal for `s`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\{:03o}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The bracketed options of a field, in a fixed order: default, json_name (when not the
/// default one), then its `FieldOptions`.
fn field_options(
    proto: &FieldDescriptorProto,
    kind: &Kind,
    json_name: Option<&str>,
    options: &DynamicMessage,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(default) = &proto.default_value {
        let value = match kind {
            Kind::String => quote(default),
            // Stored C-escaped already, as it would appear between the quotes.
            Kind::Bytes => format!("\"{default}\""),
            _ => default.clone(),
        };
        out.push(format!("default = {value}"));
    }
    if let Some(json_name) = json_name {
        out.push(format!("json_name = {}", quote(json_name)));
    }
    out.extend(
        option_list(options, &[])
            .into_iter()
            .map(|(name, value)| format!("{name} = {value}")),
    );
    out
}

/// `(name, value)` for every option set in `options`: the standard ones by field number, then
/// custom (extension) options by number, a repeated option once per element. `skip` names
/// standard options that are implied by the rest of the text.
fn option_list(options: &DynamicMessage, skip: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut fields: Vec<(FieldDescriptor, &Value)> = options.fields().collect();
    fields.sort_by_key(|(field, _)| field.number());
    for (field, value) in fields {
        if field.name() != "uninterpreted_option" && !skip.contains(&field.name()) {
            push_option(&mut out, field.name().to_owned(), &field.kind(), value);
        }
    }
    let mut extensions: Vec<(ExtensionDescriptor, &Value)> = options.extensions().collect();
    extensions.sort_by_key(|(ext, _)| ext.number());
    for (ext, value) in extensions {
        push_option(
            &mut out,
            format!("(.{})", ext.full_name()),
            &ext.kind(),
            value,
        );
    }
    out
}

fn push_option(out: &mut Vec<(String, String)>, name: String, kind: &Kind, value: &Value) {
    match value {
        Value::List(items) => {
            for item in items {
                out.push((name.clone(), value_text(kind, item)));
            }
        }
        value => out.push((name, value_text(kind, value))),
    }
}

/// An option value as .proto text.
fn value_text(kind: &Kind, value: &Value) -> String {
    match value {
        Value::Bool(v) => v.to_string(),
        Value::I32(v) => v.to_string(),
        Value::I64(v) => v.to_string(),
        Value::U32(v) => v.to_string(),
        Value::U64(v) => v.to_string(),
        Value::F32(v) => float_text(f64::from(*v)),
        Value::F64(v) => float_text(*v),
        Value::String(v) => quote(v),
        Value::Bytes(v) => quote_bytes(v),
        Value::EnumNumber(n) => match kind {
            Kind::Enum(en) => en
                .get_value(*n)
                .map(|v| v.name().to_owned())
                .unwrap_or_else(|| n.to_string()),
            _ => n.to_string(),
        },
        Value::Message(m) => {
            let format = FormatOptions::new().skip_unknown_fields(true);
            format!("{{{}}}", m.to_text_format_with_options(&format))
        }
        // Lists are split by the caller; options are never maps.
        Value::List(_) | Value::Map(_) => String::new(),
    }
}

fn float_text(v: f64) -> String {
    if v.is_nan() {
        "nan".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        format!("{v:?}")
    }
}

/// A .proto string literal for arbitrary bytes: printable ASCII as is, the rest octal.
fn quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for &b in bytes {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out.push('"');
    out
}
