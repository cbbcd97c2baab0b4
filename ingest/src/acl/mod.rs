//! Kafka's ACLs and their authorizer: the bindings (resource pattern, principal, host,
//! operation, permission), the filters that describe and delete them, and the decision of
//! whether a principal may perform an operation on a resource, with Kafka's semantics
//! (`StandardAuthorizer`):
//!
//! - a `super.users` principal may do anything;
//! - a DENY binding that matches wins over any ALLOW;
//! - an ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, and one of ALTER_CONFIGS
//!   implies DESCRIBE_CONFIGS; ALL stands for every operation;
//! - a binding matches a resource by its literal name, the literal wildcard `*`, or a prefix;
//!   a principal by its own name or `User:*`; a host by its own address or `*`;
//! - a resource no binding names at all is open to everyone only with
//!   `allow.everyone.if.no.acl.found=true` (off by default).
//!
//! The bindings live in the metadata store (`store`), so that a change made through any node
//! is enforced by every node (each reloads them on its topics poll when their version moved).
//! Which request needs which operation is in `enforce`; CreateAcls, DescribeAcls and DeleteAcls
//! in `admin`. The authorizer is on when `authorizer.class.name` names Kafka's authorizer.
//! The Schema Registry's REST API (`registry`) and the HTTP APIs (`http`: the Iceberg REST
//! catalog, SQL, watermarks) are authorized by the same bindings.
//!
//! Invariant: with the authorizer off, [`Authorizer::allows`] allows everything, and every
//! request is answered as before ACLs existed.

pub(crate) mod admin;
pub(crate) mod enforce;
pub mod http;
pub mod registry;
pub(crate) mod store;

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::ResponseKind;
use parking_lot::RwLock;

/// The topic whose ACLs decide for a Schema Registry `subject`: `T` for TopicNameStrategy's
/// `T-key` and `T-value`, the subject itself otherwise (`registry`'s module doc).
pub fn subject_topic(subject: &str) -> &str {
    subject
        .strip_suffix("-value")
        .or_else(|| subject.strip_suffix("-key"))
        .filter(|t| !t.is_empty())
        .unwrap_or(subject)
}

/// The cluster resource's name in ACLs.
pub(crate) const CLUSTER: &str = "kafka-cluster";

/// What becomes of a request after its check.
pub(crate) enum Check<'a> {
    /// Answer this; the request is not handled.
    Refuse(Box<ResponseKind>),
    /// Handle the (possibly narrowed) request, then pass its response through this.
    Then(Box<dyn FnOnce(&mut ResponseKind) + Send + 'a>),
    /// Handle the request as it is.
    Pass,
}

/// Kafka's `ResourceType` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
    DelegationToken,
    User,
}

impl ResourceType {
    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
            ResourceType::DelegationToken => 6,
            ResourceType::User => 7,
        }
    }

    pub fn from_code(code: i8) -> Option<ResourceType> {
        Some(match code {
            2 => ResourceType::Topic,
            3 => ResourceType::Group,
            4 => ResourceType::Cluster,
            5 => ResourceType::TransactionalId,
            6 => ResourceType::DelegationToken,
            7 => ResourceType::User,
            _ => return None,
        })
    }
}

/// Kafka's ANY (1) in a filter's resource type, pattern type, operation or permission.
pub(crate) const ANY: i8 = 1;
/// A filter's pattern type MATCH (2): the bindings that would apply to the named resource.
pub(crate) const MATCH: i8 = 2;

/// How a binding names resources (Kafka's `PatternType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PatternType {
    /// The name itself, or `*` for every resource of the type.
    Literal,
    /// Every resource whose name starts with the name.
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }
}

/// Kafka's `AclOperation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
}

impl Operation {
    pub fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
            Operation::CreateTokens => 13,
            Operation::DescribeTokens => 14,
        }
    }

    pub fn from_code(code: i8) -> Option<Operation> {
        Some(match code {
            2 => Operation::All,
            3 => Operation::Read,
            4 => Operation::Write,
            5 => Operation::Create,
            6 => Operation::Delete,
            7 => Operation::Alter,
            8 => Operation::Describe,
            9 => Operation::ClusterAction,
            10 => Operation::DescribeConfigs,
            11 => Operation::AlterConfigs,
            12 => Operation::IdempotentWrite,
            13 => Operation::CreateTokens,
            14 => Operation::DescribeTokens,
            _ => return None,
        })
    }

    /// The operations Kafka defines on `resource` (what authorized-operations fields report).
    pub fn on(resource: ResourceType) -> &'static [Operation] {
        use Operation::*;
        match resource {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Delete,
                Alter,
                Describe,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Cluster => &[
                Create,
                Alter,
                Describe,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
            ],
            ResourceType::Group => &[Read, Delete, Describe],
            ResourceType::TransactionalId => &[Write, Describe],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
        }
    }

    /// The operations whose ALLOW also allows this one (itself and ALL included).
    fn allowed_by(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            Describe => &[All, Describe, Read, Write, Delete, Alter],
            DescribeConfigs => &[All, DescribeConfigs, AlterConfigs],
            Read => &[All, Read],
            Write => &[All, Write],
            Create => &[All, Create],
            Delete => &[All, Delete],
            Alter => &[All, Alter],
            ClusterAction => &[All, ClusterAction],
            AlterConfigs => &[All, AlterConfigs],
            IdempotentWrite => &[All, IdempotentWrite],
            CreateTokens => &[All, CreateTokens],
            DescribeTokens => &[All, DescribeTokens],
            All => &[All],
        }
    }
}

/// ALLOW or DENY (Kafka's `AclPermissionType` 3 and 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Permission> {
        match code {
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            _ => None,
        }
    }
}

/// One ACL: `principal` from `host` is allowed or denied `operation` on the resources the
/// pattern names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `Type:name`, e.g. `User:alice`; `User:*` is every user.
    pub principal: String,
    /// A client address, or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// The wildcard of literal resource names, principals' names and hosts.
pub const WILDCARD: &str = "*";

impl AclBinding {
    /// Checks a binding as Kafka's CreateAcls does; returns why it is refused.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.resource_name.is_empty() {
            return Err("the resource name is empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != "kafka-cluster" {
            return Err(format!(
                "the cluster resource is named kafka-cluster, not {:?}",
                self.resource_name
            ));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return Err(format!(
                    "principal {:?} is not of the form Type:name (e.g. User:alice)",
                    self.principal
                ))
            }
        }
        if self.host.is_empty() {
            return Err("the host is empty (use * for any host)".into());
        }
        if !Operation::on(self.resource_type).contains(&self.operation)
            && self.operation != Operation::All
        {
            return Err(format!(
                "{:?} is not an operation on a {:?} resource",
                self.operation, self.resource_type
            ));
        }
        Ok(())
    }

    /// Whether this binding's pattern names resource `name` of type `resource` (what the
    /// index finds, said plainly; its test compares the two).
    #[cfg(test)]
    fn names(&self, resource: ResourceType, name: &str) -> bool {
        self.resource_type == resource
            && match self.pattern_type {
                PatternType::Literal => {
                    self.resource_name == name || self.resource_name == WILDCARD
                }
                PatternType::Prefixed => name.starts_with(&self.resource_name),
            }
    }
}

/// A filter of bindings (DescribeAcls, DeleteAcls): each part either matches anything (ANY,
/// or `None` for the strings) or must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    /// Kafka's code; [`ANY`] matches every type.
    pub resource_type: i8,
    pub resource_name: Option<String>,
    /// Kafka's code: [`ANY`], [`MATCH`], or a pattern type's.
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    /// Kafka's code; [`ANY`] matches every operation.
    pub operation: i8,
    /// Kafka's code; [`ANY`] matches both.
    pub permission: i8,
}

impl AclFilter {
    /// Checks a filter as Kafka does; returns why it is refused.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.resource_type != ANY && ResourceType::from_code(self.resource_type).is_none() {
            return Err(format!("unknown resource type {}", self.resource_type));
        }
        if !matches!(self.pattern_type, ANY | MATCH)
            && PatternType::from_code(self.pattern_type).is_none()
        {
            return Err(format!("unknown pattern type {}", self.pattern_type));
        }
        if self.operation != ANY && Operation::from_code(self.operation).is_none() {
            return Err(format!("unknown operation {}", self.operation));
        }
        if self.permission != ANY && Permission::from_code(self.permission).is_none() {
            return Err(format!("unknown permission type {}", self.permission));
        }
        Ok(())
    }

    /// Whether `b` passes this filter.
    pub fn matches(&self, b: &AclBinding) -> bool {
        let resource = (self.resource_type == ANY || self.resource_type == b.resource_type.code())
            && match (self.pattern_type, &self.resource_name) {
                (MATCH, Some(name)) => match b.pattern_type {
                    PatternType::Literal => b.resource_name == *name || b.resource_name == WILDCARD,
                    PatternType::Prefixed => name.starts_with(&b.resource_name),
                },
                (ANY | MATCH, None) => true,
                (ANY, Some(name)) => b.resource_name == *name,
                (code, name) => {
                    code == b.pattern_type.code()
                        && name.as_ref().is_none_or(|n| *n == b.resource_name)
                }
            };
        resource
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == ANY || self.operation == b.operation.code())
            && (self.permission == ANY || self.permission == b.permission.code())
    }
}

/// The authorizer's settings: whether it is on, who is above it, and what a resource no
/// binding names allows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerSettings {
    /// `authorizer.class.name` names Kafka's authorizer.
    pub enabled: bool,
    /// `super.users`: principals allowed everything.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_if_no_acl: bool,
}

/// Who sends a request: the principal a connection authenticated as, its address, and the
/// listener it came in on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `Type:name`; `User:ANONYMOUS` on a listener without authentication.
    pub principal: String,
    /// The client's address, as bindings name hosts.
    pub host: String,
    /// The listener's name (`PLAINTEXT`, `SASL_PLAINTEXT`, …): the addresses a client is
    /// told of are those of its own listener.
    pub listener: String,
}

impl Session {
    /// A connection from `host` on `listener`, before any authentication.
    pub fn anonymous(host: &str, listener: &str) -> Session {
        Session {
            principal: "User:ANONYMOUS".into(),
            host: host.into(),
            listener: listener.into(),
        }
    }
}

/// The bindings in force and the metadata store's version of them.
#[derive(Debug, Default)]
pub(crate) struct Bindings {
    pub(crate) version: i64,
    pub(crate) list: Vec<AclBinding>,
}

/// [`Bindings`] indexed for [`Authorizer::allows`], so a check costs a few lookups, not a pass
/// over every binding: the literal ones (the wildcard `*` under its own name) by resource type
/// and name, the prefixed ones by type and prefix (with the lengths their prefixes have, so
/// only those are looked up), each entry an index into the list.
#[derive(Debug, Default)]
struct Indexed {
    bindings: Bindings,
    literal: HashMap<ResourceType, HashMap<String, Vec<usize>>>,
    prefixed: HashMap<ResourceType, Prefixes>,
}

/// The prefixed bindings of one resource type.
#[derive(Debug, Default)]
struct Prefixes {
    by_prefix: HashMap<String, Vec<usize>>,
    /// The byte lengths of the prefixes, ascending.
    lengths: Vec<usize>,
}

impl Indexed {
    fn new(bindings: Bindings) -> Self {
        let mut literal: HashMap<ResourceType, HashMap<String, Vec<usize>>> = HashMap::new();
        let mut prefixed: HashMap<ResourceType, Prefixes> = HashMap::new();
        for (i, b) in bindings.list.iter().enumerate() {
            match b.pattern_type {
                PatternType::Literal => literal
                    .entry(b.resource_type)
                    .or_default()
                    .entry(b.resource_name.clone())
                    .or_default()
                    .push(i),
                PatternType::Prefixed => {
                    let p = prefixed.entry(b.resource_type).or_default();
                    p.by_prefix
                        .entry(b.resource_name.clone())
                        .or_default()
                        .push(i);
                    p.lengths.push(b.resource_name.len());
                }
            }
        }
        for p in prefixed.values_mut() {
            p.lengths.sort_unstable();
            p.lengths.dedup();
        }
        Indexed {
            bindings,
            literal,
            prefixed,
        }
    }

    /// The bindings whose pattern names resource `name` of type `resource`.
    fn naming<'a>(
        &'a self,
        resource: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let literal = self.literal.get(&resource);
        let exact = literal.and_then(|m| m.get(name)).into_iter().flatten();
        let wildcard = literal
            .filter(|_| name != WILDCARD)
            .and_then(|m| m.get(WILDCARD))
            .into_iter()
            .flatten();
        let by_prefix = self.prefixed.get(&resource).into_iter().flat_map(move |p| {
            p.lengths
                .iter()
                .take_while(move |&&len| len <= name.len())
                .filter_map(move |&len| name.get(..len))
                .filter_map(move |prefix| p.by_prefix.get(prefix))
                .flatten()
        });
        exact
            .chain(wildcard)
            .chain(by_prefix)
            .map(|&i| &self.bindings.list[i])
    }
}

/// The authorizer of one node: its settings and the cluster's bindings as last loaded.
#[derive(Debug, Default)]
pub struct Authorizer {
    settings: AuthorizerSettings,
    bindings: RwLock<Arc<Indexed>>,
}

impl Authorizer {
    pub fn new(settings: AuthorizerSettings) -> Self {
        Authorizer {
            settings,
            bindings: RwLock::default(),
        }
    }

    /// An authorizer with `list` in force (for benchmarks and tests; a node loads its
    /// bindings from the metadata store).
    pub fn with_bindings(settings: AuthorizerSettings, list: Vec<AclBinding>) -> Self {
        let a = Authorizer::new(settings);
        a.install(Bindings { version: 1, list });
        a
    }

    pub fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// The version of the bindings in force.
    pub(crate) fn version(&self) -> i64 {
        self.bindings.read().bindings.version
    }

    pub(crate) fn install(&self, bindings: Bindings) {
        *self.bindings.write() = Arc::new(Indexed::new(bindings));
    }

    /// Whether `session` may perform `op` on resource `name` of type `resource` (see the
    /// module doc).
    pub fn allows(
        &self,
        session: &Session,
        op: Operation,
        resource: ResourceType,
        name: &str,
    ) -> bool {
        if !self.settings.enabled || self.settings.super_users.contains(&session.principal) {
            return true;
        }
        let indexed = self.bindings.read().clone();
        let mut named = false;
        let mut allowed = false;
        for b in indexed.naming(resource, name) {
            named = true;
            let principal = b.principal == session.principal
                || b.principal.strip_suffix(":*").is_some_and(|kind| {
                    session.principal.split_once(':').map(|(k, _)| k) == Some(kind)
                });
            let host = b.host == WILDCARD || b.host == session.host;
            if !principal || !host {
                continue;
            }
            match b.permission {
                Permission::Deny if b.operation == op || b.operation == Operation::All => {
                    return false
                }
                Permission::Deny => {}
                Permission::Allow => allowed |= op.allowed_by().contains(&b.operation),
            }
        }
        allowed || (!named && self.settings.allow_if_no_acl)
    }

    /// Whether some binding could allow `session` to perform `op` on some resource of type
    /// `resource` (Kafka's `authorizeByResourceType`: an idempotent producer without
    /// IDEMPOTENT_WRITE on the cluster needs WRITE on some topic).
    pub(crate) fn allows_some(
        &self,
        session: &Session,
        op: Operation,
        resource: ResourceType,
    ) -> bool {
        if !self.settings.enabled || self.settings.super_users.contains(&session.principal) {
            return true;
        }
        let indexed = self.bindings.read().clone();
        let of_type = || {
            indexed
                .bindings
                .list
                .iter()
                .filter(|b| b.resource_type == resource)
        };
        if of_type().next().is_none() {
            return self.settings.allow_if_no_acl;
        }
        of_type().any(|b| {
            b.permission == Permission::Allow
                && op.allowed_by().contains(&b.operation)
                && self.allows(session, op, resource, &b.resource_name)
        })
    }

    /// The bit field of the operations on a resource that `session` may perform (KIP-430's
    /// authorized operations: bit `1 << code` per operation).
    pub(crate) fn operations(&self, session: &Session, resource: ResourceType, name: &str) -> i32 {
        Operation::on(resource)
            .iter()
            .filter(|op| self.allows(session, **op, resource, name))
            .fold(0, |field, op| field | 1 << op.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        operation: Operation,
        permission: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            resource_name: name.into(),
            pattern_type,
            principal: principal.into(),
            host: WILDCARD.into(),
            operation,
            permission,
        }
    }

    fn authorizer(allow_if_no_acl: bool, list: Vec<AclBinding>) -> Authorizer {
        let a = Authorizer::new(AuthorizerSettings {
            enabled: true,
            super_users: vec!["User:admin".into()],
            allow_if_no_acl,
        });
        a.install(Bindings { version: 1, list });
        a
    }

    fn user(name: &str) -> Session {
        Session {
            principal: format!("User:{name}"),
            host: "10.0.0.1".into(),
            listener: "PLAINTEXT".into(),
        }
    }

    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn kafkas_rules_decide() {
        let a = authorizer(
            false,
            vec![
                binding(Topic, "orders", Literal, "User:alice", Read, Allow),
                binding(Topic, "logs-", Prefixed, "User:*", Write, Allow),
                binding(Topic, "logs-secret", Literal, "User:bob", All, Deny),
                binding(Group, WILDCARD, Literal, "User:alice", Read, Allow),
                binding(
                    Cluster,
                    "kafka-cluster",
                    Literal,
                    "User:ops",
                    AlterConfigs,
                    Allow,
                ),
            ],
        );
        assert!(a.allows(&user("alice"), Read, Topic, "orders"));
        // READ implies DESCRIBE; it does not imply WRITE.
        assert!(a.allows(&user("alice"), Describe, Topic, "orders"));
        assert!(!a.allows(&user("alice"), Write, Topic, "orders"));
        assert!(!a.allows(&user("bob"), Read, Topic, "orders"));
        // Prefixes and the User:* wildcard.
        assert!(a.allows(&user("bob"), Write, Topic, "logs-app"));
        assert!(a.allows(&user("carol"), Write, Topic, "logs-secret"));
        // DENY wins.
        assert!(!a.allows(&user("bob"), Write, Topic, "logs-secret"));
        assert!(a.allows(&user("alice"), Read, Group, "any-group"));
        assert!(a.allows(&user("ops"), DescribeConfigs, Cluster, "kafka-cluster"));
        assert!(!a.allows(&user("ops"), Alter, Cluster, "kafka-cluster"));
        // No binding names the topic: closed, unless allow.everyone.if.no.acl.found.
        assert!(!a.allows(&user("alice"), Read, Topic, "unnamed"));
        assert!(
            authorizer(true, a.bindings.read().bindings.list.clone()).allows(
                &user("alice"),
                Read,
                Topic,
                "unnamed"
            )
        );
        // ...which does not open a topic some binding names.
        assert!(
            !authorizer(true, a.bindings.read().bindings.list.clone()).allows(
                &user("bob"),
                Read,
                Topic,
                "orders"
            )
        );
        // Super users and an authorizer that is off allow everything.
        assert!(a.allows(&user("admin"), Delete, Topic, "orders"));
        assert!(Authorizer::default().allows(&user("x"), Delete, Topic, "orders"));
        assert_eq!(
            a.operations(&user("alice"), Topic, "orders"),
            1 << Read.code() | 1 << Describe.code()
        );
    }

    proptest::proptest! {
        /// The index finds exactly the bindings whose pattern names the resource.
        #[test]
        fn the_index_finds_what_a_pass_over_every_binding_finds(
            patterns in proptest::collection::vec(("[ab*]{1,3}", proptest::bool::ANY, proptest::bool::ANY), 0..30),
            name in "[ab*]{1,4}",
        ) {
            let list: Vec<AclBinding> = patterns
                .iter()
                .map(|(n, prefixed, group)| AclBinding {
                    resource_type: if *group { Group } else { Topic },
                    resource_name: n.clone(),
                    pattern_type: if *prefixed { Prefixed } else { Literal },
                    principal: "User:a".into(),
                    host: WILDCARD.into(),
                    operation: Read,
                    permission: Allow,
                })
                .collect();
            let indexed = Indexed::new(Bindings { version: 1, list: list.clone() });
            let mut found: Vec<&AclBinding> = indexed.naming(Topic, &name).collect();
            let mut expected: Vec<&AclBinding> = list.iter().filter(|b| b.names(Topic, &name)).collect();
            found.sort();
            expected.sort();
            proptest::prop_assert_eq!(found, expected);
        }
    }

    #[test]
    fn a_host_binding_applies_to_that_host_only() {
        let mut b = binding(Topic, "t", Literal, "User:alice", Read, Allow);
        b.host = "10.0.0.1".into();
        let a = authorizer(false, vec![b]);
        assert!(a.allows(&user("alice"), Read, Topic, "t"));
        let elsewhere = Session {
            host: "10.0.0.2".into(),
            ..user("alice")
        };
        assert!(!a.allows(&elsewhere, Read, Topic, "t"));
    }

    #[test]
    fn filters_match_as_kafkas_do() {
        let literal = binding(Topic, "orders", Literal, "User:alice", Read, Allow);
        let wildcard = binding(Topic, WILDCARD, Literal, "User:bob", Write, Allow);
        let prefixed = binding(Topic, "ord", Prefixed, "User:carol", Read, Deny);
        let any = AclFilter {
            resource_type: ANY,
            resource_name: None,
            pattern_type: ANY,
            principal: None,
            host: None,
            operation: ANY,
            permission: ANY,
        };
        for b in [&literal, &wildcard, &prefixed] {
            assert!(any.matches(b));
        }
        let matching = AclFilter {
            resource_type: Topic.code(),
            resource_name: Some("orders".into()),
            pattern_type: MATCH,
            ..any.clone()
        };
        for b in [&literal, &wildcard, &prefixed] {
            assert!(matching.matches(b), "{b:?}");
        }
        let exact = AclFilter {
            pattern_type: Literal.code(),
            ..matching.clone()
        };
        assert!(exact.matches(&literal) && !exact.matches(&wildcard) && !exact.matches(&prefixed));
        let by_name_any_pattern = AclFilter {
            pattern_type: ANY,
            resource_name: Some("ord".into()),
            ..matching.clone()
        };
        assert!(by_name_any_pattern.matches(&prefixed) && !by_name_any_pattern.matches(&literal));
        let denies = AclFilter {
            permission: Deny.code(),
            ..any.clone()
        };
        assert!(denies.matches(&prefixed) && !denies.matches(&literal));
    }

    #[test]
    fn bad_bindings_are_refused_with_the_reason() {
        let ok = binding(Topic, "t", Literal, "User:alice", Read, Allow);
        assert!(ok.check().is_ok());
        let no_kind = AclBinding {
            principal: "alice".into(),
            ..ok.clone()
        };
        assert!(no_kind.check().is_err_and(|e| e.contains("Type:name")));
        let bad_op = AclBinding {
            resource_type: Group,
            operation: Write,
            ..ok.clone()
        };
        assert!(bad_op.check().is_err());
        let cluster = AclBinding {
            resource_type: Cluster,
            resource_name: "other".into(),
            operation: Alter,
            ..ok
        };
        assert!(cluster.check().is_err_and(|e| e.contains("kafka-cluster")));
    }
}
