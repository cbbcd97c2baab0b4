//! CreateAcls, DescribeAcls and DeleteAcls: Kafka's ACL administration, on the bindings in
//! the metadata store (`store`). With the authorizer off they answer SECURITY_DISABLED, as a
//! Kafka broker without an authorizer does. Whether the caller may administer ACLs at all
//! (ALTER or DESCRIBE on the cluster) is checked before, with every request (`enforce`).

use std::collections::BTreeMap;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use super::{store, AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType};
use crate::broker::{str, Broker};
use crate::error::KafkaError;

fn disabled() -> KafkaError {
    KafkaError::new(
        ResponseError::SecurityDisabled,
        "no authorizer is configured on this node: set authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    )
}

fn invalid(why: String) -> KafkaError {
    KafkaError::new(ResponseError::InvalidRequest, why)
}

/// A binding from CreateAcls' fields, checked.
fn binding(c: &create_acls_request::AclCreation) -> Result<AclBinding, KafkaError> {
    let b = AclBinding {
        resource_type: ResourceType::from_code(c.resource_type).ok_or_else(|| {
            invalid(format!(
                "resource type {} cannot be in an ACL",
                c.resource_type
            ))
        })?,
        resource_name: c.resource_name.to_string(),
        pattern_type: PatternType::from_code(c.resource_pattern_type).ok_or_else(|| {
            invalid(format!(
                "pattern type {} cannot be in an ACL (LITERAL or PREFIXED)",
                c.resource_pattern_type
            ))
        })?,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: Operation::from_code(c.operation)
            .ok_or_else(|| invalid(format!("operation {} cannot be in an ACL", c.operation)))?,
        permission: Permission::from_code(c.permission_type).ok_or_else(|| {
            invalid(format!(
                "permission type {} cannot be in an ACL (ALLOW or DENY)",
                c.permission_type
            ))
        })?,
    };
    b.check().map_err(invalid)?;
    Ok(b)
}

impl Broker {
    /// Reads the bindings again if their version in the metadata store moved.
    pub async fn reload_acls(&self) -> crate::error::Result<()> {
        if !self.authorizer.enabled() {
            return Ok(());
        }
        let meta = self.store.meta();
        if store::version(meta).await? != self.authorizer.version() {
            self.authorizer.install(store::load(meta).await?);
        }
        Ok(())
    }

    pub(crate) async fn create_acls(
        &self,
        r: CreateAclsRequest,
        _version: i16,
    ) -> CreateAclsResponse {
        let answer = |e: Option<KafkaError>| match e {
            None => AclCreationResult::default().with_error_message(None),
            Some(e) => AclCreationResult::default()
                .with_error_code(e.code())
                .with_error_message(Some(str(e.message))),
        };
        if !self.authorizer.enabled() {
            return CreateAclsResponse::default().with_results(
                r.creations
                    .iter()
                    .map(|_| answer(Some(disabled())))
                    .collect(),
            );
        }
        let checked: Vec<Result<AclBinding, KafkaError>> =
            r.creations.iter().map(binding).collect();
        let valid: Vec<AclBinding> = checked
            .iter()
            .filter_map(|c| c.as_ref().ok().cloned())
            .collect();
        let stored = if valid.is_empty() {
            Ok(())
        } else {
            match store::create(self.store.meta(), &valid).await {
                Ok(()) => self.reload_acls().await,
                Err(e) => Err(e),
            }
        };
        CreateAclsResponse::default().with_results(
            checked
                .into_iter()
                .map(|c| match (c, &stored) {
                    (Err(e), _) => answer(Some(e)),
                    (Ok(_), Err(e)) => answer(Some(KafkaError::new(
                        ResponseError::UnknownServerError,
                        format!("storing the ACL failed: {}", e.message),
                    ))),
                    (Ok(_), Ok(())) => answer(None),
                })
                .collect(),
        )
    }

    pub(crate) async fn describe_acls(
        &self,
        r: DescribeAclsRequest,
        _version: i16,
    ) -> DescribeAclsResponse {
        let refuse = |e: KafkaError| {
            DescribeAclsResponse::default()
                .with_error_code(e.code())
                .with_error_message(Some(str(e.message)))
        };
        if !self.authorizer.enabled() {
            return refuse(disabled());
        }
        let filter = AclFilter {
            resource_type: r.resource_type_filter,
            resource_name: r.resource_name_filter.map(|n| n.to_string()),
            pattern_type: r.pattern_type_filter,
            principal: r.principal_filter.map(|p| p.to_string()),
            host: r.host_filter.map(|h| h.to_string()),
            operation: r.operation,
            permission: r.permission_type,
        };
        if let Err(why) = filter.check() {
            return refuse(invalid(why));
        }
        // The store, not this node's copy: a binding just created through another node shows.
        let bindings = match store::load(self.store.meta()).await {
            Ok(b) => b,
            Err(e) => return refuse(e),
        };
        let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
        for b in bindings.list.iter().filter(|b| filter.matches(b)) {
            by_resource
                .entry((
                    b.resource_type.code(),
                    b.resource_name.clone(),
                    b.pattern_type.code(),
                ))
                .or_default()
                .push(
                    AclDescription::default()
                        .with_principal(str(b.principal.clone()))
                        .with_host(str(b.host.clone()))
                        .with_operation(b.operation.code())
                        .with_permission_type(b.permission.code()),
                );
        }
        DescribeAclsResponse::default()
            .with_error_message(None)
            .with_resources(
                by_resource
                    .into_iter()
                    .map(|((resource_type, name, pattern_type), acls)| {
                        DescribeAclsResource::default()
                            .with_resource_type(resource_type)
                            .with_resource_name(str(name))
                            .with_pattern_type(pattern_type)
                            .with_acls(acls)
                    })
                    .collect(),
            )
    }

    pub(crate) async fn delete_acls(
        &self,
        r: DeleteAclsRequest,
        _version: i16,
    ) -> DeleteAclsResponse {
        let refused = |e: &KafkaError| {
            DeleteAclsFilterResult::default()
                .with_error_code(e.code())
                .with_error_message(Some(str(e.message.clone())))
        };
        if !self.authorizer.enabled() {
            let e = disabled();
            return DeleteAclsResponse::default()
                .with_filter_results(r.filters.iter().map(|_| refused(&e)).collect());
        }
        let filters: Vec<Result<AclFilter, KafkaError>> = r
            .filters
            .iter()
            .map(|f| {
                let filter = AclFilter {
                    resource_type: f.resource_type_filter,
                    resource_name: f.resource_name_filter.as_ref().map(|n| n.to_string()),
                    pattern_type: f.pattern_type_filter,
                    principal: f.principal_filter.as_ref().map(|p| p.to_string()),
                    host: f.host_filter.as_ref().map(|h| h.to_string()),
                    operation: f.operation,
                    permission: f.permission_type,
                };
                filter.check().map(|()| filter).map_err(invalid)
            })
            .collect();
        let valid: Vec<AclFilter> = filters
            .iter()
            .filter_map(|f| f.as_ref().ok().cloned())
            .collect();
        let deleted = match store::delete(self.store.meta(), &valid).await {
            Ok(d) => {
                if let Err(e) = self.reload_acls().await {
                    tracing::warn!(error = %e, "reading the ACLs after a delete failed; the next poll reads them");
                }
                Ok(d)
            }
            Err(e) => Err(e),
        };
        let mut deleted_iter = match &deleted {
            Ok(d) => d.clone().into_iter(),
            Err(_) => Vec::new().into_iter(),
        };
        DeleteAclsResponse::default().with_filter_results(
            filters
                .iter()
                .map(|f| match (f, &deleted) {
                    (Err(e), _) => refused(e),
                    (Ok(_), Err(e)) => refused(e),
                    (Ok(_), Ok(_)) => DeleteAclsFilterResult::default()
                        .with_error_message(None)
                        .with_matching_acls(
                            deleted_iter
                                .next()
                                .unwrap_or_default()
                                .into_iter()
                                .map(|b| {
                                    DeleteAclsMatchingAcl::default()
                                        .with_error_message(None)
                                        .with_resource_type(b.resource_type.code())
                                        .with_resource_name(str(b.resource_name))
                                        .with_pattern_type(b.pattern_type.code())
                                        .with_principal(str(b.principal))
                                        .with_host(str(b.host))
                                        .with_operation(b.operation.code())
                                        .with_permission_type(b.permission.code())
                                })
                                .collect(),
                        ),
                })
                .collect(),
        )
    }
}
