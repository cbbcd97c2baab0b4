//! What an ACL check costs the broker with 10,000 ACLs in force, against none
//! (`acl::Authorizer::allows`, which every request runs once per resource it names).
//!
//! ```text
//! cargo bench -p inlet-ingest --bench authorizer
//! ```
//!
//! The 10,000 bindings: 8,000 literal topic ACLs (4,000 topics, an ALLOW and a DENY of other
//! principals each), 1,000 prefixed topic ACLs, 990 group ACLs, 10 wildcard ones. The checks:
//! a principal's WRITE on a topic it is allowed (the produce path), on a topic no binding
//! names, and with the authorizer off. A summary line gives nanoseconds per check, the median
//! of 5 passes of 100,000 checks.
#![allow(clippy::unwrap_used, clippy::panic, clippy::disallowed_methods)] // a benchmark: its deadlines are real time

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use inlet_ingest::acl::{
    AclBinding, Authorizer, AuthorizerSettings, Operation, PatternType, Permission, ResourceType,
    Session,
};

fn binding(
    resource_type: ResourceType,
    name: String,
    pattern_type: PatternType,
    principal: &str,
    operation: Operation,
    permission: Permission,
) -> AclBinding {
    AclBinding {
        resource_type,
        resource_name: name,
        pattern_type,
        principal: principal.into(),
        host: "*".into(),
        operation,
        permission,
    }
}

fn ten_thousand() -> Vec<AclBinding> {
    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;
    let mut list = Vec::new();
    for i in 0..4_000 {
        let topic = format!("team-{}-events-{i}", i % 40);
        list.push(binding(
            Topic,
            topic.clone(),
            Literal,
            &format!("User:svc-{i}"),
            Write,
            Allow,
        ));
        list.push(binding(
            Topic,
            topic,
            Literal,
            &format!("User:old-{i}"),
            All,
            Deny,
        ));
    }
    for i in 0..1_000 {
        list.push(binding(
            Topic,
            format!("team-{i}-"),
            Prefixed,
            &format!("User:team-{i}"),
            Read,
            Allow,
        ));
    }
    for i in 0..990 {
        list.push(binding(
            Group,
            format!("group-{i}"),
            Literal,
            &format!("User:svc-{i}"),
            Read,
            Allow,
        ));
    }
    for i in 0..10 {
        list.push(binding(
            Topic,
            "*".into(),
            Literal,
            &format!("User:auditor-{i}"),
            Describe,
            Allow,
        ));
    }
    list
}

fn settings(enabled: bool) -> AuthorizerSettings {
    AuthorizerSettings {
        enabled,
        super_users: vec!["User:admin".into()],
        allow_if_no_acl: false,
    }
}

fn bench(c: &mut Criterion) {
    let full = Authorizer::with_bindings(settings(true), ten_thousand());
    let empty = Authorizer::with_bindings(settings(true), Vec::new());
    let off = Authorizer::with_bindings(settings(false), Vec::new());
    let session = Session {
        principal: "User:svc-1234".into(),
        host: "10.0.0.7".into(),
        listener: "SASL_SSL".into(),
    };
    let allowed_topic = "team-34-events-1234";
    assert!(full.allows(
        &session,
        Operation::Write,
        ResourceType::Topic,
        allowed_topic
    ));
    assert!(!full.allows(&session, Operation::Write, ResourceType::Topic, "unnamed"));
    let cases: [(&str, &Authorizer, &str); 4] = [
        ("10k ACLs, allowed topic", &full, allowed_topic),
        ("10k ACLs, unnamed topic", &full, "unnamed"),
        ("no ACLs", &empty, allowed_topic),
        ("authorizer off", &off, allowed_topic),
    ];
    let mut group = c.benchmark_group("authorizer");
    for (name, a, topic) in cases {
        group.bench_function(name, |b| {
            b.iter(|| {
                a.allows(
                    black_box(&session),
                    Operation::Write,
                    ResourceType::Topic,
                    black_box(topic),
                )
            })
        });
    }
    group.finish();
    for (name, a, topic) in cases {
        let mut passes: Vec<f64> = (0..5)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..100_000 {
                    black_box(a.allows(
                        black_box(&session),
                        Operation::Write,
                        ResourceType::Topic,
                        black_box(topic),
                    ));
                }
                start.elapsed().as_nanos() as f64 / 100_000.0
            })
            .collect();
        passes.sort_by(f64::total_cmp);
        println!(
            "authorizer summary: {name}: {:.0} ns per check (median of 5)",
            passes[2]
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
