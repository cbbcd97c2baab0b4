//! The audit trail of the Kafka endpoint: every admin and DDL request (topics, partitions,
//! configs, ACLs, SCRAM credentials, groups, records) with who asked, from where, and what
//! became of each resource it named; and every failed authentication (`crate::sasl`,
//! `crate::acl::http`).
//!
//! Each entry is one `tracing` event with the target [`TARGET`] at INFO, with the fields
//! `interface`, `principal`, `client`, `action`, `resource`, `outcome` (`ok`, `denied` or
//! `failed`) and `detail`: it reaches the node's log, and the node's audit file
//! (`[audit] file`, JSON lines) when one is configured. The registry and the HTTP listener
//! write theirs with the same target and fields (`src/audit.rs`).
//!
//! Invariants: an audited request is recorded once per resource it named, after its answer is
//! known (refused by the authorizer or not); reads (Describe*, List*, Fetch, Metadata) are not
//! recorded; no entry holds a secret (a SCRAM upsertion names the user and mechanism only).

use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::ResponseError;

use crate::acl::{Operation, Permission, ResourceType, Session};

/// The `tracing` target of audit entries.
pub const TARGET: &str = "inlet_audit";

/// Records one audit entry.
pub fn record(
    interface: &str,
    principal: &str,
    client: &str,
    action: &str,
    resource: &str,
    outcome: &str,
    detail: &str,
) {
    tracing::info!(
        target: TARGET,
        interface,
        principal,
        client,
        action,
        resource,
        outcome,
        detail,
        "audit"
    );
}

/// Records a failed authentication on `interface` from `client` (the user it claimed, if
/// any).
pub fn authentication_failed(interface: &str, client: &str, user: &str, why: &str) {
    record(interface, user, client, "authenticate", "", "failed", why);
}

/// What an audited request asked, kept from before its handler takes it: its action and,
/// where the answer does not say, the resources it named.
#[derive(Debug)]
pub(crate) struct Pending {
    action: &'static str,
    /// The resources by their place in the request (ACL creations and deletion filters,
    /// whose answers are by place only).
    named: Vec<String>,
}

fn acl_text(rt: i8, name: &str, principal: &str, host: &str, op: i8, permission: i8) -> String {
    let rt = ResourceType::from_code(rt).map_or_else(|| rt.to_string(), |r| format!("{r:?}"));
    let op = Operation::from_code(op).map_or_else(|| op.to_string(), |o| format!("{o:?}"));
    let permission = Permission::from_code(permission)
        .map_or_else(|| permission.to_string(), |p| format!("{p:?}"));
    format!("ACL {permission} {principal} {op} on {rt}:{name} from {host}")
}

impl Pending {
    /// The pending entry of `request`, if its API is audited.
    pub(crate) fn of(request: &RequestKind) -> Option<Pending> {
        let (action, named) = match request {
            RequestKind::CreateTopics(_) => ("CreateTopics", Vec::new()),
            RequestKind::DeleteTopics(_) => ("DeleteTopics", Vec::new()),
            RequestKind::CreatePartitions(_) => ("CreatePartitions", Vec::new()),
            RequestKind::AlterConfigs(_) => ("AlterConfigs", Vec::new()),
            RequestKind::IncrementalAlterConfigs(_) => ("IncrementalAlterConfigs", Vec::new()),
            RequestKind::AlterUserScramCredentials(_) => ("AlterUserScramCredentials", Vec::new()),
            RequestKind::AlterClientQuotas(_) => ("AlterClientQuotas", Vec::new()),
            RequestKind::DeleteGroups(_) => ("DeleteGroups", Vec::new()),
            RequestKind::DeleteRecords(_) => ("DeleteRecords", Vec::new()),
            RequestKind::OffsetDelete(r) => (
                "OffsetDelete",
                vec![format!("GROUP:{}", r.group_id.as_str())],
            ),
            RequestKind::CreateAcls(r) => (
                "CreateAcls",
                r.creations
                    .iter()
                    .map(|c| {
                        acl_text(
                            c.resource_type,
                            &c.resource_name,
                            &c.principal,
                            &c.host,
                            c.operation,
                            c.permission_type,
                        )
                    })
                    .collect(),
            ),
            RequestKind::DeleteAcls(r) => (
                "DeleteAcls",
                r.filters
                    .iter()
                    .map(|f| {
                        acl_text(
                            f.resource_type_filter,
                            f.resource_name_filter.as_deref().unwrap_or("*"),
                            f.principal_filter.as_deref().unwrap_or("*"),
                            f.host_filter.as_deref().unwrap_or("*"),
                            f.operation,
                            f.permission_type,
                        )
                    })
                    .collect(),
            ),
            _ => return None,
        };
        Some(Pending { action, named })
    }

    /// Records the entries of the request from `session` that `answer` answered.
    pub(crate) fn finish(self, session: &Session, answer: Option<&ResponseKind>) {
        let Some(answer) = answer else {
            return;
        };
        for (resource, code, message) in outcomes(answer, &self.named) {
            let (outcome, detail) = match ResponseError::try_from_code(code) {
                None => ("ok", String::new()),
                Some(e) => {
                    let denied = matches!(
                        e,
                        ResponseError::TopicAuthorizationFailed
                            | ResponseError::GroupAuthorizationFailed
                            | ResponseError::ClusterAuthorizationFailed
                            | ResponseError::TransactionalIdAuthorizationFailed
                            | ResponseError::DelegationTokenAuthorizationFailed
                    );
                    let detail = match message {
                        Some(m) if !m.is_empty() => format!("{e:?}: {m}"),
                        _ => format!("{e:?}"),
                    };
                    (if denied { "denied" } else { "failed" }, detail)
                }
            };
            record(
                "kafka",
                &session.principal,
                &session.host,
                self.action,
                &resource,
                outcome,
                &detail,
            );
        }
    }
}

/// Each resource an answer reports on: its name, error code and message.
fn outcomes(answer: &ResponseKind, named: &[String]) -> Vec<(String, i16, Option<String>)> {
    let msg = |m: &Option<kafka_protocol::protocol::StrBytes>| m.as_ref().map(|s| s.to_string());
    match answer {
        ResponseKind::CreateTopics(r) => r
            .topics
            .iter()
            .map(|t| {
                (
                    format!("TOPIC:{}", t.name.as_str()),
                    t.error_code,
                    msg(&t.error_message),
                )
            })
            .collect(),
        ResponseKind::DeleteTopics(r) => r
            .responses
            .iter()
            .map(|t| {
                let name = t
                    .name
                    .as_ref()
                    .map_or_else(|| t.topic_id.to_string(), |n| n.as_str().to_string());
                (format!("TOPIC:{name}"), t.error_code, msg(&t.error_message))
            })
            .collect(),
        ResponseKind::CreatePartitions(r) => r
            .results
            .iter()
            .map(|t| {
                (
                    format!("TOPIC:{}", t.name.as_str()),
                    t.error_code,
                    msg(&t.error_message),
                )
            })
            .collect(),
        ResponseKind::AlterConfigs(r) => r
            .responses
            .iter()
            .map(|c| {
                (
                    config_resource(c.resource_type, &c.resource_name),
                    c.error_code,
                    msg(&c.error_message),
                )
            })
            .collect(),
        ResponseKind::IncrementalAlterConfigs(r) => r
            .responses
            .iter()
            .map(|c| {
                (
                    config_resource(c.resource_type, &c.resource_name),
                    c.error_code,
                    msg(&c.error_message),
                )
            })
            .collect(),
        ResponseKind::AlterUserScramCredentials(r) => r
            .results
            .iter()
            .map(|u| {
                (
                    format!("USER:{}", u.user.as_str()),
                    u.error_code,
                    msg(&u.error_message),
                )
            })
            .collect(),
        ResponseKind::AlterClientQuotas(r) => r
            .entries
            .iter()
            .map(|e| {
                let entity: Vec<String> = e
                    .entity
                    .iter()
                    .map(|p| {
                        let name = p.entity_name.as_deref().unwrap_or("<default>");
                        format!("{}={name}", p.entity_type.as_str())
                    })
                    .collect();
                (
                    format!("QUOTA:{}", entity.join(",")),
                    e.error_code,
                    msg(&e.error_message),
                )
            })
            .collect(),
        ResponseKind::DeleteGroups(r) => r
            .results
            .iter()
            .map(|g| (format!("GROUP:{}", g.group_id.as_str()), g.error_code, None))
            .collect(),
        ResponseKind::DeleteRecords(r) => r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    (
                        format!("TOPIC:{}-{}", t.name.as_str(), p.partition_index),
                        p.error_code,
                        Some(format!("low watermark {}", p.low_watermark)),
                    )
                })
            })
            .collect(),
        ResponseKind::OffsetDelete(r) => {
            let group = named.first().cloned().unwrap_or_default();
            if r.error_code != 0 {
                return vec![(group, r.error_code, None)];
            }
            r.topics
                .iter()
                .flat_map(|t| {
                    let group = group.clone();
                    t.partitions.iter().map(move |p| {
                        (
                            format!("{group} TOPIC:{}-{}", t.name.as_str(), p.partition_index),
                            p.error_code,
                            None,
                        )
                    })
                })
                .collect()
        }
        ResponseKind::CreateAcls(r) => r
            .results
            .iter()
            .enumerate()
            .map(|(i, a)| {
                (
                    named.get(i).cloned().unwrap_or_default(),
                    a.error_code,
                    msg(&a.error_message),
                )
            })
            .collect(),
        ResponseKind::DeleteAcls(r) => r
            .filter_results
            .iter()
            .enumerate()
            .map(|(i, f)| {
                (
                    named.get(i).cloned().unwrap_or_default(),
                    f.error_code,
                    msg(&f.error_message)
                        .or_else(|| Some(format!("{} deleted", f.matching_acls.len()))),
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A config resource as `TOPIC:orders`, `BROKER:1` or `BROKER_LOGGER:…`.
fn config_resource(resource_type: i8, name: &str) -> String {
    let kind = match resource_type {
        2 => "TOPIC",
        4 => "BROKER",
        8 => "BROKER_LOGGER",
        16 => "CLIENT_METRICS",
        32 => "GROUP",
        _ => "UNKNOWN",
    };
    format!("{kind}:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::{CreateAclsRequest, CreateTopicsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    #[test]
    fn audited_requests_name_each_resource_with_its_outcome() {
        assert!(Pending::of(&RequestKind::Metadata(Default::default())).is_none());
        let pending = Pending::of(&RequestKind::CreateTopics(Default::default())).unwrap();
        let answer = ResponseKind::CreateTopics(CreateTopicsResponse::default().with_topics(vec![
                CreatableTopicResult::default()
                    .with_name(TopicName(StrBytes::from_static_str("orders"))),
                CreatableTopicResult::default()
                    .with_name(TopicName(StrBytes::from_static_str("secret")))
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code()),
            ]));
        let got = outcomes(&answer, &pending.named);
        assert_eq!((got[0].0.as_str(), got[0].1), ("TOPIC:orders", 0));
        assert_eq!(got[1].0, "TOPIC:secret");
        assert_eq!(got[1].1, ResponseError::TopicAuthorizationFailed.code());

        let creation = kafka_protocol::messages::create_acls_request::AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("orders"))
            .with_principal(StrBytes::from_static_str("User:alice"))
            .with_host(StrBytes::from_static_str("*"))
            .with_operation(4)
            .with_permission_type(3);
        let pending = Pending::of(&RequestKind::CreateAcls(
            CreateAclsRequest::default().with_creations(vec![creation]),
        ))
        .unwrap();
        assert_eq!(pending.action, "CreateAcls");
        assert!(
            pending.named[0].contains("User:alice") && pending.named[0].contains("orders"),
            "{:?}",
            pending.named
        );
    }
}
