//! Property: for random sequences of object operations by random principals, over HTTP and
//! the RPC fast path, against crescentd's app with `[auth]` on, no principal ever reads,
//! lists, writes or removes an object outside its tenant (docs/security.md "Roles").
//!
//! A model holds what every tenant's objects should be. Each step's principal is a client of
//! tenant `a` or `b`, an owner, an admin, an anonymous caller or a caller with a token signed
//! by another key; each request names tenants at random (none, its own, another). The
//! expected answer follows from the roles table alone: UNAUTHENTICATED without a valid
//! token, PERMISSION_DENIED for a role or tenant it may not act as, otherwise the model's
//! answer in the tenant the request acts in. Refused writes must change nothing, and every
//! read must agree with the model, so an operation that leaked into another tenant shows up
//! as a wrong answer there, at the step or in the final per-tenant listing.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use common::rpc::{Rpc, MAX_BODY};
use common::*;
use crescent_server::node::Node;
use crescent_tests::auth::AuthKey;
use crescent_wire::rpc::RpcOp;
use crescent_wire::store::{
    Ack, BatchReply, BatchRequest, ExistReply, GetReply, ObjectId, ObjectRequest, PutEndRequest,
    PutStartReply, PutStartRequest, ReleaseReply, ReleaseRequest, RemoveRequest, SizeReply,
    DEFAULT_TENANT,
};
use crescent_wire::{ApiError, ErrorCode};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// Tenants a request may name; clients exist for the first two, `default` is where an admin's
/// unnamed requests act.
const TENANTS: [&str; 3] = ["a", "b", DEFAULT_TENANT];
const KEYS: [&str; 4] = ["k0", "k1", "p/k2", "p/k3"];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    Client(usize),
    Owner,
    Admin,
    Anonymous,
    /// A well-formed admin token signed by a key crescentd does not hold.
    Forged,
}

#[derive(Debug, Clone, Copy)]
enum Channel {
    Http,
    Rpc,
}

/// One object named by a request: which tenant it names (by index into [`TENANTS`]) and key.
type Named = (Option<usize>, usize);

#[derive(Debug, Clone)]
enum Op {
    Put(Named, u64),
    Get(Named),
    Exist(Named),
    Size(Named),
    Remove(Named),
    /// HTTP only (no RPC op): the keys of a tenant.
    List(Option<usize>),
    /// HTTP only: every key under `p/` (true) or `k` (false).
    RemovePrefix(Option<usize>, bool),
    BatchPut(Vec<Named>, u64),
    BatchExist(Vec<Named>),
    BatchRemove(Vec<Named>),
}

impl Op {
    fn named(&self) -> Vec<Option<usize>> {
        match self {
            Op::Put(n, _) | Op::Get(n) | Op::Exist(n) | Op::Size(n) | Op::Remove(n) => {
                vec![n.0]
            }
            Op::List(t) | Op::RemovePrefix(t, _) => vec![*t],
            Op::BatchPut(items, _) | Op::BatchExist(items) | Op::BatchRemove(items) => {
                items.iter().map(|n| n.0).collect()
            }
        }
    }
}

/// What the roles table says a request gets.
#[derive(Debug, PartialEq)]
enum Expect {
    Unauthenticated,
    Denied,
    /// Allowed, acting in this tenant where a selector names none.
    Acts(&'static str),
}

fn expect(who: Who, named: &[Option<usize>]) -> Expect {
    match who {
        Who::Anonymous | Who::Forged => Expect::Unauthenticated,
        Who::Owner => Expect::Denied,
        Who::Admin => Expect::Acts(DEFAULT_TENANT),
        Who::Client(t) => {
            if named.iter().flatten().all(|&n| n == t) {
                Expect::Acts(TENANTS[t])
            } else {
                Expect::Denied
            }
        }
    }
}

fn any_who() -> impl Strategy<Value = Who> {
    prop_oneof![
        4 => (0..2usize).prop_map(Who::Client),
        1 => Just(Who::Owner),
        2 => Just(Who::Admin),
        1 => Just(Who::Anonymous),
        1 => Just(Who::Forged),
    ]
}

fn any_named() -> impl Strategy<Value = Named> {
    (proptest::option::weighted(0.6, 0..3usize), 0..KEYS.len())
}

/// Up to three objects with distinct keys, each naming a tenant at random.
fn any_batch() -> impl Strategy<Value = Vec<Named>> {
    proptest::sample::subsequence((0..KEYS.len()).collect::<Vec<_>>(), 1..=3).prop_flat_map(
        |keys| {
            let n = keys.len();
            proptest::collection::vec(proptest::option::weighted(0.6, 0..3usize), n)
                .prop_map(move |ts| ts.into_iter().zip(keys.clone()).collect())
        },
    )
}

fn any_op() -> impl Strategy<Value = Op> {
    let t = proptest::option::weighted(0.6, 0..3usize);
    prop_oneof![
        3 => (any_named(), 1..4096u64).prop_map(|(n, s)| Op::Put(n, s)),
        2 => any_named().prop_map(Op::Get),
        2 => any_named().prop_map(Op::Exist),
        1 => any_named().prop_map(Op::Size),
        2 => any_named().prop_map(Op::Remove),
        2 => t.clone().prop_map(Op::List),
        1 => (t, any::<bool>()).prop_map(|(t, p)| Op::RemovePrefix(t, p)),
        2 => (any_batch(), 1..4096u64).prop_map(|(b, s)| Op::BatchPut(b, s)),
        1 => any_batch().prop_map(Op::BatchExist),
        1 => any_batch().prop_map(Op::BatchRemove),
    ]
}

fn any_channel() -> impl Strategy<Value = Channel> {
    prop_oneof![Just(Channel::Http), Just(Channel::Rpc)]
}

/// The objects every tenant should hold: (tenant, key) -> size.
type Model = BTreeMap<(String, String), u64>;

fn object_id(n: Named) -> ObjectId {
    ObjectId::scoped(n.0.map(|t| TENANTS[t]), None, KEYS[n.1])
}

/// The (tenant, key) a named object is in the model, for a request acting in `acts`.
fn model_key(n: Named, acts: &str) -> (String, String) {
    let tenant = n.0.map_or(acts, |t| TENANTS[t]);
    (tenant.to_string(), KEYS[n.1].to_string())
}

/// An answer: the JSON body of a success, or the stable code of a refusal.
type Answer = Result<Value, ErrorCode>;

/// The node under test, its app, and where its RPC fast path listens.
struct Harness<S> {
    node: TestNode,
    app: TestApp<S>,
    rpc: SocketAddr,
    forged: AuthKey,
}

impl<S: TestService> Harness<S> {
    fn token(&self, who: Who) -> Option<String> {
        match who {
            Who::Client(t) => self.node.client_token(TENANTS[t]),
            Who::Owner => self.node.owner_token("o1"),
            Who::Admin => self.node.admin_token(),
            Who::Anonymous => None,
            Who::Forged => Some(self.forged.admin()),
        }
    }

    async fn http(&self, who: Who, path: &str, body: Value) -> Answer {
        let (status, answer) = post_as(&self.app, path, body, self.token(who)).await;
        if status == 200 {
            return Ok(answer);
        }
        let code: ErrorCode = serde_json::from_value(answer["code"].clone())
            .unwrap_or_else(|e| panic!("{path}: refusal without a code ({e}): {answer}"));
        let expected_status = match code {
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            _ => status,
        };
        assert_eq!(status, expected_status, "{path}: {answer}");
        Err(code)
    }

    /// One RPC on a fresh connection as `who`; a refused handshake is UNAUTHENTICATED.
    async fn rpc<B: Serialize, T: DeserializeOwned + Serialize>(
        &self,
        who: Who,
        op: RpcOp,
        body: &B,
    ) -> Answer {
        let token = self.token(who);
        let mut conn = match Rpc::try_connect(self.rpc, token.as_deref()).await {
            Ok(conn) => conn,
            Err((_, error)) => {
                return Err(error.map_or(ErrorCode::Unauthenticated, |e| e.code));
            }
        };
        conn.call::<_, T>(op, body)
            .await
            .map(|reply| serde_json::to_value(reply).expect("replies serialize"))
            .map_err(|e: ApiError| e.code)
    }
}

/// Runs one step and checks its answer against the roles table and the model.
async fn step<S: TestService>(
    h: &Harness<S>,
    model: &mut Model,
    who: Who,
    channel: Channel,
    op: &Op,
) -> Result<(), TestCaseError> {
    let verdict = expect(who, &op.named());
    let first = first_answer(h, who, channel, op).await;
    let acts = match verdict {
        Expect::Unauthenticated => {
            prop_assert_eq!(first.err(), Some(ErrorCode::Unauthenticated), "{:?}", op);
            return Ok(());
        }
        Expect::Denied => {
            prop_assert_eq!(first.err(), Some(ErrorCode::PermissionDenied), "{:?}", op);
            return Ok(());
        }
        Expect::Acts(tenant) => tenant,
    };
    finish(h, model, who, channel, op, acts, first).await
}

/// The first request of `op` (the only one unless it is allowed).
async fn first_answer<S: TestService>(
    h: &Harness<S>,
    who: Who,
    channel: Channel,
    op: &Op,
) -> Answer {
    use crescent_wire::store::routes::*;
    match (op, channel) {
        (Op::Put(n, size), Channel::Http) => {
            h.http(
                who,
                PUT_START,
                json!({"id": object_id(*n), "size": size, "upsert": true}),
            )
            .await
        }
        (Op::Put(n, size), Channel::Rpc) => {
            h.rpc::<_, PutStartReply>(who, RpcOp::PutStart, &put_start(*n, *size))
                .await
        }
        (Op::Get(n), Channel::Http) => h.http(who, GET, json!({"id": object_id(*n)})).await,
        (Op::Get(n), Channel::Rpc) => {
            h.rpc::<_, GetReply>(who, RpcOp::Get, &ObjectRequest { id: object_id(*n) })
                .await
        }
        (Op::Exist(n), Channel::Http) => h.http(who, EXIST, json!({"id": object_id(*n)})).await,
        (Op::Exist(n), Channel::Rpc) => {
            h.rpc::<_, ExistReply>(who, RpcOp::Exist, &ObjectRequest { id: object_id(*n) })
                .await
        }
        (Op::Size(n), Channel::Http) => h.http(who, SIZE, json!({"id": object_id(*n)})).await,
        (Op::Size(n), Channel::Rpc) => {
            h.rpc::<_, SizeReply>(who, RpcOp::Size, &ObjectRequest { id: object_id(*n) })
                .await
        }
        (Op::Remove(n), Channel::Http) => h.http(who, REMOVE, json!({"id": object_id(*n)})).await,
        (Op::Remove(n), Channel::Rpc) => {
            let body = RemoveRequest {
                id: object_id(*n),
                force: false,
            };
            h.rpc::<_, Ack>(who, RpcOp::Remove, &body).await
        }
        (Op::List(t), _) => {
            h.http(who, LIST, json!({"tenant": t.map(|t| TENANTS[t])}))
                .await
        }
        (Op::RemovePrefix(t, under_p), _) => {
            let prefix = prefix_of(*under_p);
            let body = json!({"tenant": t.map(|t| TENANTS[t]), "prefix": prefix});
            h.http(who, REMOVE_PREFIX, body).await
        }
        (Op::BatchPut(items, size), Channel::Http) => {
            let items: Vec<_> = items.iter().map(|n| put_start(*n, *size)).collect();
            h.http(who, BATCH_PUT_START, json!({ "items": items }))
                .await
        }
        (Op::BatchPut(items, size), Channel::Rpc) => {
            let items = items.iter().map(|n| put_start(*n, *size)).collect();
            h.rpc::<_, BatchReply<PutStartReply>>(
                who,
                RpcOp::BatchPutStart,
                &BatchRequest { items },
            )
            .await
        }
        (Op::BatchExist(items), Channel::Http) => {
            let items: Vec<_> = items.iter().map(|n| json!({"id": object_id(*n)})).collect();
            h.http(who, BATCH_EXIST, json!({ "items": items })).await
        }
        (Op::BatchExist(items), Channel::Rpc) => {
            let items = items
                .iter()
                .map(|n| ObjectRequest { id: object_id(*n) })
                .collect();
            h.rpc::<_, BatchReply<ExistReply>>(who, RpcOp::BatchExist, &BatchRequest { items })
                .await
        }
        (Op::BatchRemove(items), _) => {
            let items: Vec<_> = items.iter().map(|n| json!({"id": object_id(*n)})).collect();
            h.http(who, BATCH_REMOVE, json!({ "items": items })).await
        }
    }
}

fn prefix_of(under_p: bool) -> &'static str {
    if under_p {
        "p/"
    } else {
        "k"
    }
}

fn put_start(n: Named, size: u64) -> PutStartRequest {
    let mut req: PutStartRequest =
        serde_json::from_value(json!({"id": object_id(n), "size": size})).unwrap();
    req.upsert = true;
    req
}

/// Completes an allowed `op` whose first request answered `first`, acting in `acts`, and
/// checks every answer against the model (which it then updates).
async fn finish<S: TestService>(
    h: &Harness<S>,
    model: &mut Model,
    who: Who,
    channel: Channel,
    op: &Op,
    acts: &str,
    first: Answer,
) -> Result<(), TestCaseError> {
    use crescent_wire::store::routes::*;
    match op {
        Op::Put(n, size) => {
            let reply = first.map_err(|c| fail(op, c))?;
            let end = PutEndRequest {
                id: object_id(*n),
                put_id: reply["put_id"].as_u64().unwrap(),
            };
            let ended = match channel {
                Channel::Http => {
                    h.http(who, PUT_END, serde_json::to_value(&end).unwrap())
                        .await
                }
                Channel::Rpc => h.rpc::<_, Ack>(who, RpcOp::PutEnd, &end).await,
            };
            ended.map_err(|c| fail(op, c))?;
            model.insert(model_key(*n, acts), *size);
        }
        Op::Get(n) => match (model.get(&model_key(*n, acts)), first) {
            (Some(size), Ok(reply)) => {
                prop_assert_eq!(reply["size"].as_u64(), Some(*size), "{:?}", op);
                let release = ReleaseRequest {
                    id: object_id(*n),
                    put_id: reply["put_id"].as_u64().unwrap(),
                    lease_until_ms: reply["lease_until_ms"].as_i64().unwrap(),
                    staged_token: None,
                };
                let released = h.http(who, RELEASE, serde_json::to_value(&release).unwrap());
                let released: ReleaseReply =
                    serde_json::from_value(released.await.map_err(|c| fail(op, c))?).unwrap();
                prop_assert!(released.released, "{:?}", op);
            }
            (None, answer) => prop_assert_eq!(answer.err(), Some(ErrorCode::NotFound), "{:?}", op),
            (Some(_), Err(c)) => return Err(fail(op, c)),
        },
        Op::Exist(n) => {
            let reply = first.map_err(|c| fail(op, c))?;
            let held = model.contains_key(&model_key(*n, acts));
            prop_assert_eq!(reply["exists"].as_bool(), Some(held), "{:?}", op);
        }
        Op::Size(n) => match model.get(&model_key(*n, acts)) {
            Some(size) => {
                prop_assert_eq!(
                    first.map_err(|c| fail(op, c))?["size"].as_u64(),
                    Some(*size)
                )
            }
            None => prop_assert_eq!(first.err(), Some(ErrorCode::NotFound), "{:?}", op),
        },
        Op::Remove(n) => match model.remove(&model_key(*n, acts)) {
            Some(_) => drop(first.map_err(|c| fail(op, c))?),
            None => prop_assert_eq!(first.err(), Some(ErrorCode::NotFound), "{:?}", op),
        },
        Op::List(t) => {
            let tenant = t.map_or(acts, |t| TENANTS[t]);
            let listed = listing(&first.map_err(|c| fail(op, c))?);
            prop_assert_eq!(listed, held_by(model, tenant), "{:?}", op);
        }
        Op::RemovePrefix(t, under_p) => {
            let tenant = t.map_or(acts, |t| TENANTS[t]).to_string();
            let gone: Vec<_> = model
                .keys()
                .filter(|(t, k)| *t == tenant && k.starts_with(prefix_of(*under_p)))
                .cloned()
                .collect();
            let reply = first.map_err(|c| fail(op, c))?;
            prop_assert_eq!(
                reply["removed"].as_u64(),
                Some(gone.len() as u64),
                "{:?}",
                op
            );
            for k in gone {
                model.remove(&k);
            }
        }
        Op::BatchPut(items, size) => {
            let started = items_of(first.map_err(|c| fail(op, c))?);
            let mut ends = Vec::new();
            for (n, item) in items.iter().zip(started) {
                let put_id = item.map_err(|c| fail(op, c))?["put_id"].as_u64().unwrap();
                ends.push(PutEndRequest {
                    id: object_id(*n),
                    put_id,
                });
            }
            let ended = match channel {
                Channel::Http => h.http(who, BATCH_PUT_END, json!({ "items": ends })).await,
                Channel::Rpc => {
                    let body = BatchRequest { items: ends };
                    h.rpc::<_, BatchReply<Ack>>(who, RpcOp::BatchPutEnd, &body)
                        .await
                }
            };
            for item in items_of(ended.map_err(|c| fail(op, c))?) {
                item.map_err(|c| fail(op, c))?;
            }
            for n in items {
                model.insert(model_key(*n, acts), *size);
            }
        }
        Op::BatchExist(items) => {
            let answers = items_of(first.map_err(|c| fail(op, c))?);
            for (n, item) in items.iter().zip(answers) {
                let held = model.contains_key(&model_key(*n, acts));
                let exists = item.map_err(|c| fail(op, c))?["exists"].as_bool();
                prop_assert_eq!(exists, Some(held), "{:?}", op);
            }
        }
        Op::BatchRemove(items) => {
            let answers = items_of(first.map_err(|c| fail(op, c))?);
            for (n, item) in items.iter().zip(answers) {
                match model.remove(&model_key(*n, acts)) {
                    Some(_) => drop(item.map_err(|c| fail(op, c))?),
                    None => prop_assert_eq!(item.err(), Some(ErrorCode::NotFound), "{:?}", op),
                }
            }
        }
    }
    Ok(())
}

fn fail(op: &Op, code: ErrorCode) -> TestCaseError {
    TestCaseError::fail(format!("{op:?}: refused with {code:?}"))
}

/// A batch reply's items: each `{"ok": ...}` or `{"err": {"code": ...}}`.
fn items_of(reply: Value) -> Vec<Answer> {
    let items = reply["items"].as_array().expect("a batch reply").clone();
    items
        .into_iter()
        .map(|item| match item.get("ok") {
            Some(ok) => Ok(ok.clone()),
            None => Err(serde_json::from_value(item["err"]["code"].clone()).expect("a code")),
        })
        .collect()
}

/// A list reply as (key, size), every entry complete.
fn listing(reply: &Value) -> BTreeMap<String, u64> {
    let entries = reply["keys"].as_array().expect("a list reply");
    entries
        .iter()
        .map(|e| {
            assert_eq!(e["complete"], true, "{e}");
            (
                e["key"].as_str().unwrap().to_string(),
                e["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn held_by(model: &Model, tenant: &str) -> BTreeMap<String, u64> {
    model
        .iter()
        .filter(|((t, _), _)| t == tenant)
        .map(|((_, k), size)| (k.clone(), *size))
        .collect()
}

/// One case: a fresh node with `[auth]` on, `steps` against it, then every tenant's listing
/// by an admin against the model.
async fn run(steps: Vec<(Who, Channel, Op)>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let node = start(&config(dir.path()));
    let rpc = node
        .start_rpc("127.0.0.1:0".parse().unwrap(), MAX_BODY, None)
        .unwrap();
    let app = app_for(&node).await;
    owner_with_segment(&app, "o1", "seg1", 1 << 20).await;
    let h = Harness {
        node,
        app,
        rpc,
        forged: AuthKey::new(),
    };
    let mut model = Model::new();
    for (who, channel, op) in &steps {
        step(&h, &mut model, *who, *channel, op).await?;
    }
    for tenant in TENANTS {
        let listed = h.http(
            Who::Admin,
            crescent_wire::store::routes::LIST,
            json!({"tenant": tenant}),
        );
        let listed = listing(&listed.await.expect("an admin lists any tenant"));
        prop_assert_eq!(listed, held_by(&model, tenant), "tenant {}", tenant);
    }
    Node::stop(&h.node);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_principal_acts_outside_its_tenant(
        steps in proptest::collection::vec((any_who(), any_channel(), any_op()), 1..40)
    ) {
        actix_web::rt::System::new().block_on(run(steps))?;
    }
}

/// The roles table as this test reads it, on fixed cases (so a change to the table cannot
/// pass the property by making everything refused).
#[test]
fn the_expectations_allow_what_the_roles_table_allows() {
    assert_eq!(expect(Who::Client(0), &[None, Some(0)]), Expect::Acts("a"));
    assert_eq!(expect(Who::Client(1), &[Some(0)]), Expect::Denied);
    assert_eq!(expect(Who::Client(0), &[Some(2)]), Expect::Denied);
    assert_eq!(expect(Who::Admin, &[Some(1)]), Expect::Acts(DEFAULT_TENANT));
    assert_eq!(expect(Who::Owner, &[None]), Expect::Denied);
    assert_eq!(expect(Who::Forged, &[None]), Expect::Unauthenticated);
}
