//! Protobuf schemas: parsing, the canonical text, Confluent's compatibility rules and decoding
//! of Confluent-framed Protobuf payloads.
//!
//! What this module owns:
//! - [`parse`] turns a schema as a client registers it (either `.proto` source, or a base64
//!   serialized `FileDescriptorProto`, which is what Python's `ProtobufSerializer` sends) plus
//!   its references into a [`ProtoSchema`]: a compiled [`DescriptorPool`] (protox, pure Rust),
//!   the main file's descriptor and its canonical text.
//! - The canonical printer ([`print`]): the identity of a Protobuf schema is its canonical
//!   text, never the text a client sent. Both input forms of one schema, and any two sources
//!   differing only in whitespace, comments, import order, how type names are qualified or
//!   whether default `json_name`s are spelled out, print to the same text. A printer (rather than storing the
//!   source) is needed because a descriptor has no source to store, and so that identity does
//!   not depend on formatting. Invariants: the text is deterministic, valid `.proto` that
//!   protox re-parses to an equivalent descriptor, and printing is a fixpoint:
//!   `parse(canonical).canonical == canonical`. Message order is kept, so Confluent message
//!   indexes mean the same thing in the source and in the canonical text.
//! - [`can_read`]: Confluent's Protobuf compatibility rules (its `SchemaDiff`), see [`compat`].
//! - [`decode_payload`]: the message-index prefix and the message bytes of a framed record.
//!
//! Message indexes count only a scope's declared messages: the synthetic `XxxEntry` messages
//! of map fields are skipped (as Confluent's own registry does for schemas registered as
//! text), so an index path names the same message before and after canonical printing.
//!
//! Only `google/protobuf/*.proto` resolve without references; every other import
//! (including `google/type/*.proto` and `confluent/*.proto`) must be passed as a reference.

mod compat;
mod print;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use base64::Engine as _;
use prost_reflect::prost::Message as _;
use prost_reflect::prost_types::FileDescriptorProto;
use prost_reflect::{DescriptorPool, DynamicMessage, FileDescriptor, MessageDescriptor};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use crate::error::{Error, Result};

/// A parsed Protobuf schema (one .proto file and the files it imports).
#[derive(Debug, Clone)]
pub struct ProtoSchema {
    pub pool: DescriptorPool,
    pub file: FileDescriptor,
    /// Canonical .proto text: decides schema identity and is what the REST API serves.
    pub canonical: String,
}

/// The name the main file is compiled under (unless a reference already uses it).
const MAIN_FILE_NAME: &str = "schema.proto";
/// The most message indexes a payload's prefix may hold.
const MAX_MESSAGE_INDEXES: u64 = 64;

/// `text` is either .proto source, or a base64-encoded serialized FileDescriptorProto (that is
/// what Python confluent-kafka's ProtobufSerializer registers). `refs` maps import names (e.g.
/// "other.proto") to the schema text (either form) of each referenced schema, flattened: it
/// also holds the references of references. google/protobuf/*.proto well-known types resolve
/// without refs.
pub fn parse(text: &str, refs: &[(String, String)]) -> Result<ProtoSchema> {
    let main_name = main_file_name(refs);
    let mut files: HashMap<String, String> = HashMap::with_capacity(refs.len() + 1);
    for (name, ref_text) in refs {
        files.insert(name.clone(), ref_text.clone());
    }
    files.insert(main_name.clone(), text.to_owned());
    let ref_names: Vec<String> = refs.iter().map(|(name, _)| name.clone()).collect();

    let mut resolver = ChainFileResolver::new();
    resolver.add(MemoryResolver { files });
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true).include_source_info(false);
    compiler
        .open_file(&main_name)
        .map_err(|e| Error::InvalidSchema(describe_compile_error(&e, &ref_names)))?;

    // Rebuild the pool without source info: it is only needed for error positions, and the
    // parsed schema lives in a byte-budgeted cache.
    let encoded = compiler.encode_file_descriptor_set();
    let pool = DescriptorPool::decode(encoded.as_slice())
        .map_err(|e| Error::InvalidSchema(format!("{e:?}")))?;
    let file = pool
        .get_file_by_name(&main_name)
        .ok_or_else(|| Error::InvalidSchema("the compiled schema lost its main file".into()))?;
    let canonical = print::print_file(&file);
    Ok(ProtoSchema {
        pool,
        file,
        canonical,
    })
}

impl ProtoSchema {
    /// base64 of the main file's serialized FileDescriptorProto
    /// (`GET /schemas/ids/{id}?format=serialized`).
    pub fn serialized(&self) -> String {
        // Encoded from the pool's raw descriptor, which keeps custom options (the pool was
        // built without source info).
        base64::engine::general_purpose::STANDARD.encode(self.file.encode_to_vec())
    }

    /// The message a Confluent message-index path names: [0] first top-level message, [1,0]
    /// first nested message of the second, etc. An empty path means [0]. Synthetic map-entry
    /// messages are not counted.
    pub fn message_by_indexes(&self, indexes: &[i32]) -> Option<MessageDescriptor> {
        let (first, rest) = match indexes.split_first() {
            Some((first, rest)) => (*first, rest),
            None => (0, &[][..]),
        };
        let mut message = nth_message(self.file.messages(), first)?;
        for &index in rest {
            message = nth_message(message.child_messages(), index)?;
        }
        Some(message)
    }

    /// Estimated memory of the parsed schema in bytes (for a byte-budgeted cache).
    pub fn estimated_bytes(&self) -> usize {
        // The pool keeps every file's decoded descriptor plus its own indexes (names, fields
        // by number and by name); both are several times the encoded size.
        let encoded: usize = self
            .pool
            .file_descriptor_protos()
            .map(|f| f.encoded_len())
            .sum();
        std::mem::size_of::<Self>() + encoded * 8 + self.canonical.len()
    }
}

fn nth_message(
    messages: impl Iterator<Item = MessageDescriptor>,
    index: i32,
) -> Option<MessageDescriptor> {
    let index = usize::try_from(index).ok()?;
    messages.filter(|m| !m.is_map_entry()).nth(index)
}

/// Reasons a consumer using `reader` cannot read data written with `writer` per Confluent's
/// Protobuf compatibility rules; empty when compatible. BACKWARD for new schema N over old O
/// is `can_read(N, O)`; FORWARD is `can_read(O, N)`. (In Confluent's terms:
/// SchemaDiff.compare(original = writer, update = reader) and every difference must be a
/// compatible one.)
pub fn can_read(reader: &ProtoSchema, writer: &ProtoSchema) -> Vec<String> {
    compat::diff(writer, reader)
        .into_iter()
        .filter(|d| !d.kind.is_compatible())
        .map(|d| d.to_string())
        .collect()
}

/// Decodes a Confluent Protobuf payload (the bytes after the 5-byte magic+id header): the
/// message-index prefix (zig-zag varint count, then that many zig-zag varints; a single 0 byte
/// means [0]), then the message bytes. Returns the message; errors are short human-readable
/// strings. Never panics; the index count is bounded, unknown index paths and malformed
/// message bytes (including trailing garbage) are errors.
pub fn decode_payload(
    schema: &ProtoSchema,
    payload: &[u8],
) -> std::result::Result<DynamicMessage, String> {
    let mut rest = payload;
    let count = read_zigzag(&mut rest).ok_or("truncated or invalid message-index count")?;
    if count < 0 {
        return Err(format!("negative message-index count {count}"));
    }
    if count.unsigned_abs() > MAX_MESSAGE_INDEXES {
        return Err(format!(
            "message-index count {count} exceeds the limit of {MAX_MESSAGE_INDEXES}"
        ));
    }
    let mut indexes = Vec::with_capacity(count.unsigned_abs() as usize);
    for _ in 0..count {
        let index = read_zigzag(&mut rest).ok_or("truncated or invalid message index")?;
        let index =
            i32::try_from(index).map_err(|_| format!("message index {index} is out of range"))?;
        indexes.push(index);
    }
    let shown = if indexes.is_empty() { vec![0] } else { indexes };
    let desc = schema
        .message_by_indexes(&shown)
        .ok_or_else(|| format!("message indexes {shown:?} name no message of the schema"))?;
    DynamicMessage::decode(desc.clone(), rest)
        .map_err(|e| format!("invalid {} message: {e}", desc.full_name()))
}

/// Reads one zig-zag varint (at most 10 bytes) from the front of `buf`.
fn read_zigzag(buf: &mut &[u8]) -> Option<i64> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let magnitude = (value >> 1) as i64;
            return Some(if value & 1 == 0 {
                magnitude
            } else {
                !magnitude
            });
        }
    }
    None
}

/// A file name for the main schema that no reference uses.
fn main_file_name(refs: &[(String, String)]) -> String {
    let taken = |name: &str| refs.iter().any(|(n, _)| n == name);
    if !taken(MAIN_FILE_NAME) {
        return MAIN_FILE_NAME.to_owned();
    }
    (1..)
        .map(|i| format!("schema_{i}.proto"))
        .find(|name| !taken(name))
        .unwrap_or_else(|| MAIN_FILE_NAME.to_owned())
}

/// Resolves the main schema and its references from memory; each is parsed when imported.
struct MemoryResolver {
    files: HashMap<String, String>,
}

impl FileResolver for MemoryResolver {
    fn open_file(&self, name: &str) -> std::result::Result<File, protox::Error> {
        match self.files.get(name) {
            Some(text) => load_file(name, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// Parses one schema text, .proto source or base64 descriptor, as file `name`.
fn load_file(name: &str, text: &str) -> std::result::Result<File, protox::Error> {
    let Some(mut bytes) = decode_base64_descriptor(text) else {
        return File::from_source(name, text);
    };
    // Registered under the name it is imported by, whatever name its descriptor has: append a
    // `name` field (1), as for any singular field the last value wins. The bytes are kept
    // rather than re-encoded from prost types, which would drop custom options.
    bytes.push(0x0a);
    prost_reflect::prost::encoding::encode_varint(name.len() as u64, &mut bytes);
    bytes.extend_from_slice(name.as_bytes());
    File::decode_file_descriptor_proto(bytes.as_slice())
        .map_err(|e| protox::Error::new(format!("{name}: invalid FileDescriptorProto: {e}")))
}

/// The bytes `text` encodes, if it is base64 of a serialized `FileDescriptorProto`. Source
/// text never is: every non-empty .proto file has characters outside the base64 alphabet
/// (spaces, `;`, `{`), except a lone comment, which does not decode as a descriptor.
fn decode_base64_descriptor(text: &str) -> Option<Vec<u8>> {
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if compact.is_empty()
        || !compact
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
    {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(compact.as_bytes()))
        .ok()?;
    FileDescriptorProto::decode(bytes.as_slice()).ok()?;
    Some(bytes)
}

/// A message for a failed compilation: protox's text with `file:line:column`, plus what to do
/// about a missing import.
fn describe_compile_error(err: &protox::Error, ref_names: &[String]) -> String {
    let mut message = format!("{err:?}");
    if err.is_file_not_found() {
        message.push_str(
            "; every import other than google/protobuf/*.proto must be passed as a schema \
             reference whose name is the import path",
        );
        if ref_names.is_empty() {
            message.push_str(" (no references were given)");
        } else {
            message.push_str(&format!(" (references given: {})", ref_names.join(", ")));
        }
    }
    message
}
