use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

fn principal(role: Role, tenant: Option<&str>, owner: Option<&str>) -> Claims {
    Claims {
        v: 1,
        role,
        tenant: tenant.map(Into::into),
        owner: owner.map(Into::into),
        exp: u64::MAX,
        iat: 0,
        jti: "t".into(),
    }
}

fn target<'a>(tenant: Option<&'a str>, owner: Option<&'a str>) -> Target<'a> {
    Target { tenant, owner }
}

#[test]
fn a_client_acts_only_in_its_tenant() {
    let c = principal(Role::Client, Some("a"), None);
    let none = target(None, None);
    assert_eq!(
        authorize(&c, Operation::ObjectRead, none),
        Ok(Scope::Tenant("a".into()))
    );
    assert_eq!(
        authorize(&c, Operation::ObjectWrite, target(Some("a"), None)),
        Ok(Scope::Tenant("a".into()))
    );
    assert_eq!(
        authorize(&c, Operation::ObjectRead, target(Some("b"), None)),
        Err(Denied::OtherTenant)
    );
    assert_eq!(
        authorize(&c, Operation::TenantRead, none),
        Ok(Scope::Tenant("a".into()))
    );
    assert_eq!(
        authorize(&c, Operation::TenantRead, target(Some("b"), None)),
        Err(Denied::OtherTenant)
    );
    for op in [
        Operation::TenantQuotaSet,
        Operation::SegmentUnmount,
        Operation::RebuildComplete,
        Operation::RebuildReplay,
        Operation::Replication,
        Operation::TokenRevoke,
        Operation::Snapshot,
    ] {
        assert_eq!(
            authorize(&c, op, none),
            Err(Denied::Role {
                role: Role::Client,
                op
            })
        );
    }
}

#[test]
fn an_owner_touches_only_its_own_segments_and_a_peer_only_replicates() {
    let o = principal(Role::Owner, None, Some("o1"));
    assert_eq!(
        authorize(&o, Operation::SegmentMount, target(None, Some("o1"))),
        Ok(Scope::Owner("o1".into()))
    );
    assert_eq!(
        authorize(&o, Operation::SegmentUnmount, target(None, Some("o2"))),
        Err(Denied::OtherOwner)
    );
    assert!(authorize(&o, Operation::ObjectRead, target(None, None)).is_err());
    let p = principal(Role::Peer, None, None);
    assert_eq!(
        authorize(&p, Operation::Replication, Target::default()),
        Ok(Scope::All)
    );
    assert_eq!(
        authorize(&p, Operation::MeshQuota, Target::default()),
        Ok(Scope::All)
    );
    assert!(authorize(&p, Operation::ObjectWrite, Target::default()).is_err());
    let a = principal(Role::Admin, None, None);
    for op in Operation::ALL {
        assert_eq!(
            authorize(&a, op, target(Some("x"), Some("y"))),
            Ok(Scope::All)
        );
    }
    assert_eq!(Denied::OtherTenant.reason(), "tenant");
}

#[test]
fn docs_carry_the_table() {
    let doc = include_str!("../../../docs/security.md");
    assert!(
        doc.contains(&table_markdown()),
        "docs/security.md must contain:\n{}",
        table_markdown()
    );
}

const TENANTS: [&str; 3] = ["a", "b", "c"];
const OWNERS: [&str; 3] = ["o1", "o2", "o3"];

fn any_principal() -> impl Strategy<Value = Claims> {
    (0..4usize, 0..3usize, 0..3usize).prop_map(|(r, t, o)| {
        let role = Role::ALL[r];
        principal(
            role,
            (role == Role::Client).then_some(TENANTS[t]),
            (role == Role::Owner).then_some(OWNERS[o]),
        )
    })
}

/// One request: an operation, the tenant it names (or none), the owner it names (or none).
fn any_request() -> impl Strategy<Value = (Operation, Option<usize>, Option<usize>)> {
    (
        0..Operation::ALL.len(),
        proptest::option::of(0..3usize),
        proptest::option::of(0..3usize),
    )
        .prop_map(|(op, t, o)| (Operation::ALL[op], t, o))
}

/// A model of what requests touch: objects by tenant, segments by owner. Each allowed
/// request is applied where its scope says it acts.
#[derive(Default)]
struct Model {
    objects_touched_by: BTreeMap<String, BTreeSet<String>>,
    segments_touched_by: BTreeMap<String, BTreeSet<String>>,
}

proptest! {
    #[test]
    fn no_sequence_crosses_a_tenant_or_another_owners_segments(
        steps in proptest::collection::vec((any_principal(), any_request()), 1..64)
    ) {
        let mut model = Model::default();
        for (who, (op, t, o)) in steps {
            let named_tenant = t.map(|i| TENANTS[i]);
            let named_owner = o.map(|i| OWNERS[i]);
            let Ok(scope) = authorize(&who, op, target(named_tenant, named_owner)) else {
                continue;
            };
            // Where the request acts: the scope's tenant or owner when scoped, else as named.
            let (tenant, owner) = match &scope {
                Scope::Tenant(t) => (Some(t.as_str()), None),
                Scope::Owner(o) => (None, Some(o.as_str())),
                Scope::All => (named_tenant, named_owner),
            };
            let actor = format!("{:?}:{:?}:{:?}", who.role, who.tenant, who.owner);
            if op.scoping() == Scoping::Tenant {
                let t = tenant.unwrap_or("default").to_string();
                model.objects_touched_by.entry(t).or_default().insert(actor.clone());
            }
            if op.scoping() == Scoping::Owner {
                if let Some(o) = owner {
                    model.segments_touched_by.entry(o.into()).or_default().insert(actor.clone());
                }
            }
            // Scoped principals never act anywhere but their own tenant or owner id.
            match who.role {
                Role::Client => {
                    prop_assert_eq!(scope, Scope::Tenant(who.tenant.clone().unwrap()));
                    prop_assert!(named_tenant.is_none() || named_tenant == who.tenant.as_deref());
                }
                Role::Owner => {
                    prop_assert!(matches!(op.scoping(), Scoping::Owner | Scoping::Node));
                    if op.scoping() == Scoping::Owner {
                        prop_assert_eq!(scope, Scope::Owner(who.owner.clone().unwrap()));
                        prop_assert!(named_owner.is_none() || named_owner == who.owner.as_deref());
                    }
                }
                Role::Peer => prop_assert!(matches!(
                    op,
                    Operation::Replication | Operation::Status | Operation::MeshQuota
                )),
                Role::Admin => {}
            }
        }
        for (tenant, actors) in &model.objects_touched_by {
            for a in actors {
                prop_assert!(
                    a.starts_with("Admin") || a == &format!("Client:Some({tenant:?}):None"),
                    "{} touched objects of tenant {}", a, tenant
                );
            }
        }
        for (owner, actors) in &model.segments_touched_by {
            for a in actors {
                prop_assert!(
                    a.starts_with("Admin") || a == &format!("Owner:None:Some({owner:?})"),
                    "{} touched segments of owner {}", a, owner
                );
            }
        }
    }
}
