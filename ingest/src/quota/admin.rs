//! DescribeClientQuotas and AlterClientQuotas (KIP-546), as `kafka-configs --entity-type
//! users|clients` and the Admin client's `describeClientQuotas` / `alterClientQuotas` use
//! them, over the quotas in the metadata store (`store`). Whether the caller may (DESCRIBE_CONFIGS
//! or ALTER_CONFIGS on the cluster) is checked before, with every request (`acl::enforce`).

use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{store, Entity, Kind, Part};
use crate::broker::{str, Broker};

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
const IP: &str = "ip";

/// The longest user or client id name a quota may be set for.
const MAX_NAME: usize = 500;

// DescribeClientQuotas' match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// The entity an AlterClientQuotas entry names, or why it cannot have quotas here.
fn entity_of(parts: &[alter_client_quotas_request::EntityData]) -> Result<Entity, String> {
    let mut entity = Entity {
        user: Part::Absent,
        client: Part::Absent,
    };
    if parts.is_empty() {
        return Err("the entity names no user and no client id".into());
    }
    for p in parts {
        let part = match &p.entity_name {
            None => Part::Default,
            Some(n) if n.len() > MAX_NAME => {
                return Err(format!("entity names are at most {MAX_NAME} bytes long"))
            }
            Some(n) => Part::Named(n.to_string()),
        };
        let slot = match p.entity_type.as_str() {
            USER => &mut entity.user,
            CLIENT_ID => &mut entity.client,
            IP => {
                return Err(
                    "ip quotas (connection_creation_rate, KIP-612) are not supported by Inlet; max.connections.per.ip bounds connections per address".into(),
                )
            }
            other => return Err(format!("unknown entity type '{other}' (user or client-id)")),
        };
        if *slot != Part::Absent {
            return Err(format!(
                "entity type '{}' is given twice",
                p.entity_type.as_str()
            ));
        }
        *slot = part;
    }
    Ok(entity)
}

/// An AlterClientQuotas entry's changes, checked.
fn changes_of(e: &alter_client_quotas_request::EntryData) -> Result<Vec<store::Change>, String> {
    let entity = entity_of(&e.entity)?;
    let mut changes = Vec::with_capacity(e.ops.len());
    for op in &e.ops {
        let kind = match Kind::from_key(op.key.as_str()) {
            Some(k) => k,
            None if op.key.as_str() == "controller_mutation_rate" => {
                return Err("controller_mutation_rate (KIP-599) is not enforced by Inlet".into())
            }
            None => {
                return Err(format!(
                "unknown quota '{}' (producer_byte_rate, consumer_byte_rate or request_percentage)",
                op.key.as_str()
            ))
            }
        };
        if changes.iter().any(|(_, k, _): &store::Change| *k == kind) {
            return Err(format!("quota '{}' is changed twice", kind.key()));
        }
        if op.remove {
            changes.push((entity.clone(), kind, None));
        } else {
            kind.check(op.value)?;
            changes.push((entity.clone(), kind, Some(op.value)));
        }
    }
    Ok(changes)
}

fn name_of(part: &Part) -> Option<StrBytes> {
    match part {
        Part::Named(n) => Some(str(n.clone())),
        _ => None,
    }
}

/// Whether `part` passes a DescribeClientQuotas component.
fn passes(part: &Part, c: &describe_client_quotas_request::ComponentData) -> bool {
    match (c.match_type, part) {
        (_, Part::Absent) => false,
        (MATCH_EXACT, Part::Named(n)) => c._match.as_deref() == Some(n.as_str()),
        (MATCH_DEFAULT, Part::Default) => true,
        (MATCH_SPECIFIED, Part::Named(_)) => true,
        _ => false,
    }
}

/// An AlterClientQuotas entry's entity, as its answer names it.
pub(crate) fn echo(
    entity: &[alter_client_quotas_request::EntityData],
) -> Vec<alter_client_quotas_response::EntityData> {
    entity
        .iter()
        .map(|p| {
            alter_client_quotas_response::EntityData::default()
                .with_entity_type(p.entity_type.clone())
                .with_entity_name(p.entity_name.clone())
        })
        .collect()
}

impl Broker {
    /// Reads the quotas again if their version in the metadata store moved.
    pub async fn reload_quotas(&self) -> crate::error::Result<()> {
        let meta = self.store.meta();
        if store::version(meta).await? != self.quotas.configured().version {
            self.quotas.install(store::load(meta).await?);
        }
        Ok(())
    }

    pub(crate) async fn describe_client_quotas(
        &self,
        r: DescribeClientQuotasRequest,
        _version: i16,
    ) -> DescribeClientQuotasResponse {
        let refuse = |code: ResponseError, why: String| {
            DescribeClientQuotasResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(str(why)))
                .with_entries(None)
        };
        let mut seen = std::collections::HashSet::new();
        for c in &r.components {
            if !seen.insert(c.entity_type.as_str()) {
                return refuse(
                    ResponseError::InvalidRequest,
                    format!("entity type '{}' is filtered twice", c.entity_type.as_str()),
                );
            }
            if ![USER, CLIENT_ID, IP].contains(&c.entity_type.as_str()) {
                return refuse(
                    ResponseError::InvalidRequest,
                    format!("unknown entity type '{}'", c.entity_type.as_str()),
                );
            }
            let named = c._match.is_some();
            if !matches!(c.match_type, MATCH_EXACT | MATCH_DEFAULT | MATCH_SPECIFIED)
                || (c.match_type == MATCH_EXACT) != named
            {
                return refuse(
                    ResponseError::InvalidRequest,
                    format!(
                        "match type {} with {} name",
                        c.match_type,
                        if named { "a" } else { "no" }
                    ),
                );
            }
        }
        // Answer from the store, not this node's copy: a change made through another node is
        // described at once.
        if let Err(e) = self.reload_quotas().await {
            return refuse(
                ResponseError::UnknownServerError,
                format!("reading the quotas failed: {}", e.message),
            );
        }
        let configured = self.quotas.configured();
        let entries = configured
            .values
            .iter()
            .filter(|(entity, _)| {
                let part = |t: &str| match t {
                    USER => &entity.user,
                    CLIENT_ID => &entity.client,
                    _ => &Part::Absent,
                };
                let each = r
                    .components
                    .iter()
                    .all(|c| passes(part(c.entity_type.as_str()), c));
                let only = !r.strict
                    || [(USER, &entity.user), (CLIENT_ID, &entity.client)]
                        .iter()
                        .all(|(t, p)| *p == &Part::Absent || seen.contains(t));
                each && only
            })
            .map(|(entity, values)| {
                let mut parts = Vec::new();
                for (t, p) in [(USER, &entity.user), (CLIENT_ID, &entity.client)] {
                    if *p != Part::Absent {
                        parts.push(
                            describe_client_quotas_response::EntityData::default()
                                .with_entity_type(str(t))
                                .with_entity_name(name_of(p)),
                        );
                    }
                }
                describe_client_quotas_response::EntryData::default()
                    .with_entity(parts)
                    .with_values(
                        values
                            .iter()
                            .map(|(k, v)| {
                                describe_client_quotas_response::ValueData::default()
                                    .with_key(str(k.key()))
                                    .with_value(*v)
                            })
                            .collect(),
                    )
            })
            .collect();
        DescribeClientQuotasResponse::default()
            .with_error_message(None)
            .with_entries(Some(entries))
    }

    pub(crate) async fn alter_client_quotas(
        &self,
        r: AlterClientQuotasRequest,
        _version: i16,
    ) -> AlterClientQuotasResponse {
        let checked: Vec<Result<Vec<store::Change>, String>> =
            r.entries.iter().map(changes_of).collect();
        let valid: Vec<store::Change> = checked
            .iter()
            .filter_map(|c| c.as_ref().ok())
            .flatten()
            .cloned()
            .collect();
        let stored = if r.validate_only || valid.is_empty() {
            Ok(())
        } else {
            match store::apply(self.store.meta(), &valid).await {
                Ok(()) => self.reload_quotas().await,
                Err(e) => Err(e),
            }
        };
        let entries = r
            .entries
            .iter()
            .zip(checked)
            .map(|(e, c)| {
                let (code, message) = match (c, &stored) {
                    (Err(why), _) => (ResponseError::InvalidRequest.code(), Some(why)),
                    (Ok(_), Err(e)) => (
                        ResponseError::UnknownServerError.code(),
                        Some(format!("storing the quotas failed: {}", e.message)),
                    ),
                    (Ok(_), Ok(())) => (0, None),
                };
                alter_client_quotas_response::EntryData::default()
                    .with_error_code(code)
                    .with_error_message(message.map(str))
                    .with_entity(echo(&e.entity))
            })
            .collect();
        AlterClientQuotasResponse::default().with_entries(entries)
    }
}
