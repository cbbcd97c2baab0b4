//! Confluent's Protobuf compatibility rules (`io.confluent.kafka.schemaregistry.protobuf.diff`:
//! `SchemaDiff`, `MessageSchemaDiff`, `FieldSchemaDiff`, `EnumSchemaDiff`), on compiled
//! descriptors instead of parsed source.
//!
//! [`diff`] lists every difference from an `original` (writer) to an `update` (reader) schema,
//! each with a Confluent difference type and path (`#/Message/Nested/3`); a pair is compatible
//! when every difference is of a compatible type ([`DiffKind::is_compatible`]).
//!
//! The walk, as Confluent's:
//! - the package of the main files (PACKAGE_CHANGED);
//! - the messages and enums of the main files by name, recursively through nested ones
//!   (MESSAGE_ADDED/REMOVED, MESSAGE_MOVED when a message's index among its scope's messages
//!   changes; ENUM_* are all compatible);
//! - in a message, fields by number: added/removed (REQUIRED_FIELD_* for proto2 `required`),
//!   renamed, and the type: kind (scalar incl. enum / message / map), scalar group (wire
//!   compatible: int32/int64/uint32/uint64/bool/enum; sint32/sint64; string/bytes;
//!   fixed32/sfixed32; fixed64/sfixed64; float; double), label changes of scalars (only
//!   between explicit labels: proto2 labels and proto3 `optional`/`repeated`; compatible for
//!   string/bytes, not for numbers), message types by name relative to their file's package;
//! - oneofs by name and membership: a oneof of the update may hold fields of at most one
//!   group of the original (one top-level field, or fields of one oneof), otherwise
//!   MULTIPLE_FIELDS_MOVED_TO_ONEOF / FIELD_MOVED_TO_EXISTING_ONEOF; a field removed from a
//!   oneof that still exists in part is ONEOF_FIELD_REMOVED; leaving a oneof is compatible;
//! - a message type defined in an imported file is compared field by field (its differences
//!   are reported at paths relative to its file, and any incompatible one also makes the field
//!   FIELD_NAMED_TYPE_CHANGED); types of the main files are compared by the walk itself.
//!   Messages on the comparison stack are not entered again, so recursive types terminate.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use prost_reflect::{
    Cardinality, EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, OneofDescriptor, Syntax,
};

use super::ProtoSchema;

/// How deep comparisons of imported message types may nest before giving up.
const MAX_TYPE_DEPTH: usize = 64;

/// Confluent's difference types (`Difference.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum DiffKind {
    PackageChanged,
    MessageAdded,
    MessageRemoved,
    MessageMoved,
    EnumAdded,
    EnumRemoved,
    EnumConstAdded,
    EnumConstChanged,
    EnumConstRemoved,
    FieldAdded,
    FieldRemoved,
    FieldNameChanged,
    FieldKindChanged,
    FieldScalarKindChanged,
    FieldNamedTypeChanged,
    FieldNumericLabelChanged,
    FieldStringOrBytesLabelChanged,
    RequiredFieldAdded,
    RequiredFieldRemoved,
    OneofAdded,
    OneofRemoved,
    OneofFieldAdded,
    OneofFieldRemoved,
    OneofFieldMovedToTopLevel,
    MultipleFieldsMovedToOneof,
    FieldMovedToExistingOneof,
}

impl DiffKind {
    /// Confluent's name of the difference type.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DiffKind::PackageChanged => "PACKAGE_CHANGED",
            DiffKind::MessageAdded => "MESSAGE_ADDED",
            DiffKind::MessageRemoved => "MESSAGE_REMOVED",
            DiffKind::MessageMoved => "MESSAGE_MOVED",
            DiffKind::EnumAdded => "ENUM_ADDED",
            DiffKind::EnumRemoved => "ENUM_REMOVED",
            DiffKind::EnumConstAdded => "ENUM_CONST_ADDED",
            DiffKind::EnumConstChanged => "ENUM_CONST_CHANGED",
            DiffKind::EnumConstRemoved => "ENUM_CONST_REMOVED",
            DiffKind::FieldAdded => "FIELD_ADDED",
            DiffKind::FieldRemoved => "FIELD_REMOVED",
            DiffKind::FieldNameChanged => "FIELD_NAME_CHANGED",
            DiffKind::FieldKindChanged => "FIELD_KIND_CHANGED",
            DiffKind::FieldScalarKindChanged => "FIELD_SCALAR_KIND_CHANGED",
            DiffKind::FieldNamedTypeChanged => "FIELD_NAMED_TYPE_CHANGED",
            DiffKind::FieldNumericLabelChanged => "FIELD_NUMERIC_LABEL_CHANGED",
            DiffKind::FieldStringOrBytesLabelChanged => "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
            DiffKind::RequiredFieldAdded => "REQUIRED_FIELD_ADDED",
            DiffKind::RequiredFieldRemoved => "REQUIRED_FIELD_REMOVED",
            DiffKind::OneofAdded => "ONEOF_ADDED",
            DiffKind::OneofRemoved => "ONEOF_REMOVED",
            DiffKind::OneofFieldAdded => "ONEOF_FIELD_ADDED",
            DiffKind::OneofFieldRemoved => "ONEOF_FIELD_REMOVED",
            DiffKind::OneofFieldMovedToTopLevel => "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
            DiffKind::MultipleFieldsMovedToOneof => "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
            DiffKind::FieldMovedToExistingOneof => "FIELD_MOVED_TO_EXISTING_ONEOF",
        }
    }

    /// Whether the difference keeps the schemas compatible (Confluent's
    /// `SchemaDiff.COMPATIBLE_CHANGES`).
    pub(crate) fn is_compatible(self) -> bool {
        matches!(
            self,
            DiffKind::MessageAdded
                | DiffKind::MessageMoved
                | DiffKind::EnumAdded
                | DiffKind::EnumRemoved
                | DiffKind::EnumConstAdded
                | DiffKind::EnumConstChanged
                | DiffKind::EnumConstRemoved
                | DiffKind::FieldAdded
                | DiffKind::FieldRemoved
                | DiffKind::FieldNameChanged
                | DiffKind::FieldStringOrBytesLabelChanged
                | DiffKind::OneofAdded
                | DiffKind::OneofRemoved
                | DiffKind::OneofFieldAdded
                | DiffKind::OneofFieldMovedToTopLevel
        )
    }
}

/// One difference from the original (writer) schema to the update (reader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Difference {
    pub(crate) kind: DiffKind,
    /// Confluent's path: `#/` then message names, oneof names and field numbers.
    pub(crate) path: String,
    /// What changed, in terms of the writer and the reader schema.
    pub(crate) detail: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.kind.name(), self.path, self.detail)
    }
}

/// Every difference from `original` (the writer's schema) to `update` (the reader's).
pub(crate) fn diff(original: &ProtoSchema, update: &ProtoSchema) -> Vec<Difference> {
    let mut ctx = Ctx {
        original_main: original.file.name().to_owned(),
        update_main: update.file.name().to_owned(),
        path: Vec::new(),
        diffs: Vec::new(),
        entered: HashSet::new(),
        compared_types: HashMap::new(),
        depth: 0,
    };
    let (o_pkg, u_pkg) = (original.file.package_name(), update.file.package_name());
    if o_pkg != u_pkg {
        ctx.add(
            DiffKind::PackageChanged,
            format!(
                "the package is '{o_pkg}' in the writer schema and '{u_pkg}' in the reader schema"
            ),
        );
    }
    ctx.compare_types(
        original.file.messages(),
        original.file.enums(),
        update.file.messages(),
        update.file.enums(),
    );
    ctx.diffs
}

struct Ctx {
    original_main: String,
    update_main: String,
    path: Vec<String>,
    diffs: Vec<Difference>,
    /// Original messages whose fields are being compared (the cycle guard).
    entered: HashSet<String>,
    /// Imported message type pairs already compared, and whether they were incompatible.
    compared_types: HashMap<(String, String), bool>,
    depth: usize,
}

/// The label of a field as Confluent sees it in source: none for proto3 fields without one,
/// for oneof members and for maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Optional,
    Required,
    Repeated,
}

impl Label {
    fn of(field: &FieldDescriptor) -> Option<Label> {
        if real_oneof(field).is_some() || field.is_map() {
            return None;
        }
        match field.cardinality() {
            Cardinality::Repeated => Some(Label::Repeated),
            Cardinality::Required => Some(Label::Required),
            Cardinality::Optional
                if field.parent_file().syntax() == Syntax::Proto2
                    || field.field_descriptor_proto().proto3_optional() =>
            {
                Some(Label::Optional)
            }
            Cardinality::Optional => None,
        }
    }

    fn text(label: Option<Label>) -> &'static str {
        match label {
            Some(Label::Optional) => "optional",
            Some(Label::Required) => "required",
            Some(Label::Repeated) => "repeated",
            None => "no label",
        }
    }
}

/// Confluent's groups of wire-compatible scalar types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScalarKind {
    GeneralNumber,
    SignedNumber,
    StringOrBytes,
    Fixed32,
    Fixed64,
    Float,
    Double,
}

/// The type of a field, as the rules see it.
enum FieldType {
    Scalar(ScalarKind, String),
    Map(Box<FieldDescriptor>, Box<FieldDescriptor>),
    Message(MessageDescriptor),
}

impl FieldType {
    fn of(field: &FieldDescriptor) -> FieldType {
        match field.kind() {
            Kind::Message(entry) if field.is_map() => FieldType::Map(
                Box::new(entry.map_entry_key_field()),
                Box::new(entry.map_entry_value_field()),
            ),
            kind => FieldType::of_kind(kind),
        }
    }

    fn of_kind(kind: Kind) -> FieldType {
        let (group, name) = match kind {
            Kind::Message(m) => return FieldType::Message(m),
            Kind::Enum(e) => {
                return FieldType::Scalar(ScalarKind::GeneralNumber, format!(".{}", e.full_name()))
            }
            Kind::Int32 => (ScalarKind::GeneralNumber, "int32"),
            Kind::Int64 => (ScalarKind::GeneralNumber, "int64"),
            Kind::Uint32 => (ScalarKind::GeneralNumber, "uint32"),
            Kind::Uint64 => (ScalarKind::GeneralNumber, "uint64"),
            Kind::Bool => (ScalarKind::GeneralNumber, "bool"),
            Kind::Sint32 => (ScalarKind::SignedNumber, "sint32"),
            Kind::Sint64 => (ScalarKind::SignedNumber, "sint64"),
            Kind::String => (ScalarKind::StringOrBytes, "string"),
            Kind::Bytes => (ScalarKind::StringOrBytes, "bytes"),
            Kind::Fixed32 => (ScalarKind::Fixed32, "fixed32"),
            Kind::Sfixed32 => (ScalarKind::Fixed32, "sfixed32"),
            Kind::Fixed64 => (ScalarKind::Fixed64, "fixed64"),
            Kind::Sfixed64 => (ScalarKind::Fixed64, "sfixed64"),
            Kind::Float => (ScalarKind::Float, "float"),
            Kind::Double => (ScalarKind::Double, "double"),
        };
        FieldType::Scalar(group, name.to_owned())
    }

    fn kind_name(&self) -> &'static str {
        match self {
            FieldType::Scalar(..) => "scalar",
            FieldType::Map(..) => "map",
            FieldType::Message(_) => "message",
        }
    }

    fn text(&self) -> String {
        match self {
            FieldType::Scalar(_, name) => name.clone(),
            FieldType::Map(k, v) => format!(
                "map<{}, {}>",
                FieldType::of_kind(k.kind()).text(),
                FieldType::of_kind(v.kind()).text()
            ),
            FieldType::Message(m) => format!(".{}", m.full_name()),
        }
    }
}

fn real_oneof(field: &FieldDescriptor) -> Option<OneofDescriptor> {
    field.containing_oneof().filter(|o| !o.is_synthetic())
}

/// A message's name relative to the package of its file (`Outer.Inner`).
fn local_name(message: &MessageDescriptor) -> &str {
    let full = message.full_name();
    let package = message.package_name();
    if package.is_empty() {
        full
    } else {
        full.strip_prefix(package)
            .and_then(|rest| rest.strip_prefix('.'))
            .unwrap_or(full)
    }
}

/// The fields of a message by number, and the real oneof each belongs to.
struct Fields {
    by_tag: BTreeMap<u32, FieldDescriptor>,
    oneof_of: HashMap<u32, String>,
    oneofs: BTreeMap<String, OneofDescriptor>,
}

impl Fields {
    fn of(message: &MessageDescriptor) -> Fields {
        let mut fields = Fields {
            by_tag: BTreeMap::new(),
            oneof_of: HashMap::new(),
            oneofs: BTreeMap::new(),
        };
        for field in message.fields() {
            if let Some(oneof) = real_oneof(&field) {
                fields
                    .oneof_of
                    .insert(field.number(), oneof.name().to_owned());
                fields.oneofs.insert(oneof.name().to_owned(), oneof);
            }
            fields.by_tag.insert(field.number(), field);
        }
        fields
    }
}

impl Ctx {
    fn add(&mut self, kind: DiffKind, detail: String) {
        let path = format!("#/{}", self.path.join("/"));
        self.diffs.push(Difference { kind, path, detail });
    }

    /// Like [`Ctx::add`], at `segments` below the current path.
    fn add_at(&mut self, segments: &[&str], kind: DiffKind, detail: String) {
        let saved = self.path.len();
        self.path.extend(segments.iter().map(|s| s.to_string()));
        self.add(kind, detail);
        self.path.truncate(saved);
    }

    /// Compares the messages and enums of one scope (a file or a message) by name.
    fn compare_types(
        &mut self,
        o_messages: impl Iterator<Item = MessageDescriptor>,
        o_enums: impl Iterator<Item = EnumDescriptor>,
        u_messages: impl Iterator<Item = MessageDescriptor>,
        u_enums: impl Iterator<Item = EnumDescriptor>,
    ) {
        let index = |messages: Box<dyn Iterator<Item = MessageDescriptor> + '_>| {
            messages
                .filter(|m| !m.is_map_entry())
                .enumerate()
                .map(|(i, m)| (m.name().to_owned(), (i, m)))
                .collect::<BTreeMap<_, _>>()
        };
        let o_messages = index(Box::new(o_messages));
        let u_messages = index(Box::new(u_messages));
        let names: BTreeSet<&String> = o_messages.keys().chain(u_messages.keys()).collect();
        for name in names {
            self.path.push(name.clone());
            match (o_messages.get(name), u_messages.get(name)) {
                (Some(_), None) => self.add(
                    DiffKind::MessageRemoved,
                    format!(
                        "message '{name}' of the writer schema is missing from the reader schema"
                    ),
                ),
                (None, Some(_)) => self.add(
                    DiffKind::MessageAdded,
                    format!("message '{name}' exists only in the reader schema"),
                ),
                (Some((o_index, o)), Some((u_index, u))) => {
                    self.compare_message(o, u);
                    if o_index != u_index {
                        self.add(
                            DiffKind::MessageMoved,
                            format!("message '{name}' moved from index {o_index} to {u_index}"),
                        );
                    }
                }
                (None, None) => {}
            }
            self.path.pop();
        }

        let o_enums: BTreeMap<String, EnumDescriptor> =
            o_enums.map(|e| (e.name().to_owned(), e)).collect();
        let u_enums: BTreeMap<String, EnumDescriptor> =
            u_enums.map(|e| (e.name().to_owned(), e)).collect();
        let names: BTreeSet<&String> = o_enums.keys().chain(u_enums.keys()).collect();
        for name in names {
            self.path.push(name.clone());
            match (o_enums.get(name), u_enums.get(name)) {
                (Some(_), None) => self.add(
                    DiffKind::EnumRemoved,
                    format!("enum '{name}' of the writer schema is missing from the reader schema"),
                ),
                (None, Some(_)) => self.add(
                    DiffKind::EnumAdded,
                    format!("enum '{name}' exists only in the reader schema"),
                ),
                (Some(o), Some(u)) => self.compare_enum(o, u),
                (None, None) => {}
            }
            self.path.pop();
        }
    }

    fn compare_enum(&mut self, original: &EnumDescriptor, update: &EnumDescriptor) {
        let o: BTreeMap<i32, String> = original
            .values()
            .map(|v| (v.number(), v.name().to_owned()))
            .collect();
        let u: BTreeMap<i32, String> = update
            .values()
            .map(|v| (v.number(), v.name().to_owned()))
            .collect();
        let numbers: BTreeSet<i32> = o.keys().chain(u.keys()).copied().collect();
        for number in numbers {
            let at = number.to_string();
            match (o.get(&number), u.get(&number)) {
                (Some(name), None) => self.add_at(
                    &[&at],
                    DiffKind::EnumConstRemoved,
                    format!("enum value {name} = {number} is missing from the reader schema"),
                ),
                (None, Some(name)) => self.add_at(
                    &[&at],
                    DiffKind::EnumConstAdded,
                    format!("enum value {name} = {number} exists only in the reader schema"),
                ),
                (Some(o_name), Some(u_name)) if o_name != u_name => self.add_at(
                    &[&at],
                    DiffKind::EnumConstChanged,
                    format!("enum value {number} is {o_name} in the writer schema and {u_name} in the reader schema"),
                ),
                _ => {}
            }
        }
    }

    /// Compares two messages of the same name: their fields (unless the original is already
    /// being compared further up), then their nested types.
    fn compare_message(&mut self, original: &MessageDescriptor, update: &MessageDescriptor) {
        let entered = self.entered.insert(original.full_name().to_owned());
        if entered {
            self.compare_fields(original, update);
        }
        self.compare_types(
            original.child_messages(),
            original.child_enums(),
            update.child_messages(),
            update.child_enums(),
        );
        if entered {
            self.entered.remove(original.full_name());
        }
    }

    fn compare_fields(&mut self, original: &MessageDescriptor, update: &MessageDescriptor) {
        let o = Fields::of(original);
        let u = Fields::of(update);

        // A oneof removed with none of its fields left anywhere is deleted as a whole, which
        // is compatible; the fields of a oneof that survives in part are removed one by one.
        let deleted_oneofs: HashSet<&String> = o
            .oneofs
            .iter()
            .filter(|(name, oneof)| {
                !u.oneofs.contains_key(*name)
                    && oneof.fields().all(|f| !u.by_tag.contains_key(&f.number()))
            })
            .map(|(name, _)| name)
            .collect();

        // A oneof of the update may take fields from at most one group of the original: one
        // top-level field, or fields of one oneof (those were exclusive already).
        for oneof in update.oneofs().filter(|o| !o.is_synthetic()) {
            let mut groups: BTreeSet<String> = BTreeSet::new();
            let mut moved_in = 0;
            for field in oneof.fields() {
                let tag = field.number();
                if let Some(name) = o.oneof_of.get(&tag) {
                    groups.insert(format!("oneof {name}"));
                } else if o.by_tag.contains_key(&tag) {
                    groups.insert(format!("field {tag}"));
                    moved_in += 1;
                }
            }
            if groups.len() > 1 {
                let kind = if moved_in > 1 {
                    DiffKind::MultipleFieldsMovedToOneof
                } else {
                    DiffKind::FieldMovedToExistingOneof
                };
                let groups: Vec<String> = groups.into_iter().collect();
                self.add_at(
                    &[oneof.name()],
                    kind,
                    format!(
                        "oneof '{}' of the reader schema makes fields exclusive that are independent in the writer schema ({})",
                        oneof.name(),
                        groups.join(", ")
                    ),
                );
            }
        }

        let names: BTreeSet<&String> = o.oneofs.keys().chain(u.oneofs.keys()).collect();
        for name in names {
            match (o.oneofs.contains_key(name), u.oneofs.contains_key(name)) {
                (true, false) => self.add_at(
                    &[name],
                    DiffKind::OneofRemoved,
                    format!("oneof '{name}' is missing from the reader schema"),
                ),
                (false, true) => self.add_at(
                    &[name],
                    DiffKind::OneofAdded,
                    format!("oneof '{name}' exists only in the reader schema"),
                ),
                _ => {}
            }
        }

        let tags: BTreeSet<u32> = o.by_tag.keys().chain(u.by_tag.keys()).copied().collect();
        for tag in tags {
            let at = tag.to_string();
            let o_oneof = o.oneof_of.get(&tag);
            let u_oneof = u.oneof_of.get(&tag);
            match (o.by_tag.get(&tag), u.by_tag.get(&tag)) {
                (Some(field), None) => match o_oneof {
                    Some(oneof) if deleted_oneofs.contains(oneof) => {}
                    Some(oneof) => self.add_at(
                        &[oneof, &at],
                        DiffKind::OneofFieldRemoved,
                        format!("field {tag} ('{}') of oneof '{oneof}' is missing from the reader schema", field.name()),
                    ),
                    None if field.is_required() => self.add_at(
                        &[&at],
                        DiffKind::RequiredFieldRemoved,
                        format!("required field {tag} ('{}') is missing from the reader schema", field.name()),
                    ),
                    None => self.add_at(
                        &[&at],
                        DiffKind::FieldRemoved,
                        format!("field {tag} ('{}') is missing from the reader schema", field.name()),
                    ),
                },
                (None, Some(field)) => match u_oneof {
                    Some(oneof) => self.add_at(
                        &[oneof, &at],
                        DiffKind::OneofFieldAdded,
                        format!("field {tag} ('{}') of oneof '{oneof}' exists only in the reader schema", field.name()),
                    ),
                    None if field.is_required() => self.add_at(
                        &[&at],
                        DiffKind::RequiredFieldAdded,
                        format!("required field {tag} ('{}') exists only in the reader schema", field.name()),
                    ),
                    None => self.add_at(
                        &[&at],
                        DiffKind::FieldAdded,
                        format!("field {tag} ('{}') exists only in the reader schema", field.name()),
                    ),
                },
                (Some(o_field), Some(u_field)) => {
                    if let (Some(oneof), None) = (o_oneof, u_oneof) {
                        self.add_at(
                            &[&at],
                            DiffKind::OneofFieldMovedToTopLevel,
                            format!("field {tag} left oneof '{oneof}'"),
                        );
                    }
                    let saved = self.path.len();
                    if let Some(oneof) = u_oneof {
                        self.path.push(oneof.clone());
                    }
                    self.path.push(at);
                    self.compare_field(o_field, u_field);
                    self.path.truncate(saved);
                }
                (None, None) => {}
            }
        }
    }

    fn compare_field(&mut self, original: &FieldDescriptor, update: &FieldDescriptor) {
        if original.name() != update.name() {
            self.add(
                DiffKind::FieldNameChanged,
                format!(
                    "field {} is '{}' in the writer schema and '{}' in the reader schema",
                    original.number(),
                    original.name(),
                    update.name()
                ),
            );
        }
        self.compare_labels_and_types(
            original.number(),
            Label::of(original),
            Label::of(update),
            FieldType::of(original),
            FieldType::of(update),
        );
    }

    fn compare_labels_and_types(
        &mut self,
        number: u32,
        o_label: Option<Label>,
        u_label: Option<Label>,
        o_type: FieldType,
        u_type: FieldType,
    ) {
        match (&o_type, &u_type) {
            (FieldType::Scalar(o_kind, o_name), FieldType::Scalar(u_kind, u_name)) => {
                if o_kind != u_kind {
                    self.add(
                        DiffKind::FieldScalarKindChanged,
                        format!("field {number} is {o_name} in the writer schema and {u_name} in the reader schema, which is not wire-compatible"),
                    );
                } else if let (Some(o), Some(u)) = (o_label, u_label) {
                    if o != u {
                        let kind = if *o_kind == ScalarKind::StringOrBytes {
                            DiffKind::FieldStringOrBytesLabelChanged
                        } else {
                            DiffKind::FieldNumericLabelChanged
                        };
                        self.add(
                            kind,
                            format!(
                                "field {number} is {} in the writer schema and {} in the reader schema",
                                Label::text(o_label),
                                Label::text(u_label)
                            ),
                        );
                    }
                }
            }
            (FieldType::Message(o), FieldType::Message(u)) => {
                self.compare_message_types(number, o, u)
            }
            (FieldType::Map(o_key, o_value), FieldType::Map(u_key, u_value)) => {
                self.compare_labels_and_types(
                    number,
                    None,
                    None,
                    FieldType::of_kind(o_key.kind()),
                    FieldType::of_kind(u_key.kind()),
                );
                self.compare_labels_and_types(
                    number,
                    None,
                    None,
                    FieldType::of_kind(o_value.kind()),
                    FieldType::of_kind(u_value.kind()),
                );
            }
            _ => self.add(
                DiffKind::FieldKindChanged,
                format!(
                    "field {number} is a {} ({}) in the writer schema and a {} ({}) in the reader schema",
                    o_type.kind_name(),
                    o_type.text(),
                    u_type.kind_name(),
                    u_type.text()
                ),
            ),
        }
    }

    /// Message-typed fields: the types must have the same name relative to their packages;
    /// a type from an imported file is compared field by field.
    fn compare_message_types(
        &mut self,
        number: u32,
        original: &MessageDescriptor,
        update: &MessageDescriptor,
    ) {
        let (o_local, u_local) = (local_name(original), local_name(update));
        if o_local != u_local {
            self.add(
                DiffKind::FieldNamedTypeChanged,
                format!(
                    "field {number} is of type .{} in the writer schema and .{} in the reader schema",
                    original.full_name(),
                    update.full_name()
                ),
            );
            return;
        }
        let o_is_main = original.parent_file().name() == self.original_main;
        let u_is_main = update.parent_file().name() == self.update_main;
        if o_is_main && u_is_main {
            return; // Compared by the walk over the main files.
        }
        if self.depth >= MAX_TYPE_DEPTH {
            self.add(
                DiffKind::FieldNamedTypeChanged,
                format!("field {number}: imported message types nest more than {MAX_TYPE_DEPTH} levels deep, too deep to compare"),
            );
            return;
        }
        let key = (
            original.full_name().to_owned(),
            update.full_name().to_owned(),
        );
        let incompatible = match self.compared_types.get(&key) {
            Some(&incompatible) => incompatible,
            None => {
                let sub_path = o_local.split('.').map(str::to_owned).collect();
                let saved_path = std::mem::replace(&mut self.path, sub_path);
                let saved_diffs = std::mem::take(&mut self.diffs);
                self.depth += 1;
                self.compare_message(original, update);
                self.depth -= 1;
                let sub = std::mem::replace(&mut self.diffs, saved_diffs);
                self.path = saved_path;
                let incompatible = sub.iter().any(|d| !d.kind.is_compatible());
                self.diffs.extend(sub);
                self.compared_types.insert(key, incompatible);
                incompatible
            }
        };
        if incompatible {
            self.add(
                DiffKind::FieldNamedTypeChanged,
                format!(
                    "field {number} is of type .{}, which changed incompatibly",
                    update.full_name()
                ),
            );
        }
    }
}
