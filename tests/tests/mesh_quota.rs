//! A tenant's quota across the clusters of a mesh on real etcd (docs/tenants.md, "Policy
//! bootstrap"; docs/scale-out.md): two standalone clusters with the same `[[tenants]]` policy,
//! their objects on storage owners, 16 concurrent writers of `crescent --mesh M put` processes
//! (one process per put, keys spread over both clusters by rendezvous) until each was refused
//! QUOTA_EXCEEDED six times in a row, and a poller reading `tenant show` at each cluster: the
//! sum of the tenant's usage over the clusters never exceeds its limits, during the load and
//! across a kill -9 and restart of one cluster (the tenant's quota home, or the other: the home
//! is `RouteTable::route(RouteKey::quota_home(tenant))` of the membership), and at the end the
//! usage is exactly what the clusters list, every acknowledged object reads back through the
//! mesh with its bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crescent_client::MeshClient;
use crescent_mesh::{RouteKey, RouteTable};
use crescent_tests::binaries::crescent_command;
use crescent_tests::ha_pair::{etcd, Backend};
use crescent_tests::mesh::{Mesh, TENANT};
use crescent_tests::store_e2e::{crescent_cli, OwnerProcess};

const MAX_BYTES: u64 = 40_000;
const MAX_OBJECTS: u64 = 30;
const WRITERS: usize = 16;
/// A writer stops after this many QUOTA_EXCEEDED refusals in a row.
const REFUSALS_IN_A_ROW: usize = 6;
const PUTS_PER_WRITER: usize = 200;
const OWNER_SEGMENT: u64 = 16 << 20;
/// The kill tests kill a cluster once this many puts were acknowledged (about a third of
/// what the limits admit).
const KILL_AFTER_ACKED: usize = 10;

/// The policy every cluster bootstraps (docs/tenants.md, "Policy bootstrap").
fn policy() -> String {
    format!(
        "[[tenants]]\nname = {TENANT:?}\nmax_bytes = {MAX_BYTES}\nmax_objects = {MAX_OBJECTS}\n"
    )
}

/// 1000..=2000 bytes, varying with the writer and its put.
fn value_size(writer: usize, put: usize) -> usize {
    1000 + (writer * 7919 + put * 104_729) % 1001
}

/// `size` bytes that differ for every key: a read shows whose put it got.
fn value(key: &str, size: usize) -> Vec<u8> {
    format!("{key}/").bytes().cycle().take(size).collect()
}

/// Two standalone clusters of weight 1 in one mesh on etcd, each with the policy and one
/// storage owner (its objects outlive a kill -9 of its crescentd).
struct QuotaMesh {
    rt: tokio::runtime::Runtime,
    mesh: Mesh,
    _owners: Vec<OwnerProcess>,
    /// Each cluster's crescentd, as the poller reaches it (a restart changes it).
    addrs: Arc<Mutex<Vec<SocketAddr>>>,
    /// The index of the tenant's quota home.
    home: usize,
    /// Whether every cluster has the policy in its config (else only the home, set by
    /// command: the others admit against the home's allowance without limits of their own).
    policy_everywhere: bool,
    dir: tempfile::TempDir,
}

impl QuotaMesh {
    fn start() -> QuotaMesh {
        QuotaMesh::start_on(true)
    }

    /// [`QuotaMesh::start`], with the policy in every cluster's config or in none.
    fn start_on(policy_everywhere: bool) -> QuotaMesh {
        let config = if policy_everywhere {
            policy()
        } else {
            String::new()
        };
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let backend = Backend::Etcd(etcd());
        let started = Instant::now();
        let mesh = rt.block_on(Mesh::start_with(
            dir.path(),
            backend,
            &[1.0, 1.0],
            &config,
            false,
        ));
        let owners = (0..mesh.clusters.len())
            .map(|i| mesh.start_owner(&mesh.clusters[i].0, &format!("owner-{i}"), OWNER_SEGMENT))
            .collect();
        let home = rt.block_on(async {
            let probe = mesh.admin_client().await.with_scope(Some("probe"), None);
            let probe = probe.unwrap();
            for (cluster, _) in &mesh.clusters {
                wait_writable(&probe, cluster).await;
            }
            let table = RouteTable::new(&probe.membership());
            let home = table.route(RouteKey::quota_home(TENANT)).unwrap();
            mesh.index(home)
        });
        eprintln!(
            "mesh {} serving after {:?}; clusters {:?}, quota home of {TENANT}: {}",
            mesh.name,
            started.elapsed(),
            mesh.clusters.iter().map(|c| &c.0).collect::<Vec<_>>(),
            mesh.clusters[home].0
        );
        let addrs = mesh.clusters.iter().map(|c| c.1.addr).collect();
        QuotaMesh {
            rt,
            mesh,
            _owners: owners,
            addrs: Arc::new(Mutex::new(addrs)),
            home,
            policy_everywhere,
            dir,
        }
    }

    /// The address of cluster `i`'s crescentd now.
    fn addr(&self, i: usize) -> String {
        self.addrs.lock().unwrap()[i].to_string()
    }
}

/// Waits until a put to `cluster` succeeds (its owner's segment is mounted), in the probe
/// tenant: the tenant under test holds nothing before the load.
async fn wait_writable(probe: &MeshClient, cluster: &str) {
    let key = (0..)
        .map(|i| format!("probe-{i}"))
        .find(|k| probe.authority(k).unwrap() == cluster)
        .unwrap();
    let started = Instant::now();
    while probe.put(&key, b"probe").await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{cluster} never took a put"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What one writer saw.
#[derive(Debug, Default)]
struct WriterLog {
    /// Acknowledged puts: key -> (size, the cluster the put named).
    acked: BTreeMap<String, (usize, String)>,
    refusals: usize,
    /// Puts that failed with a retryable code (exit 3) or a conflict (exit 5, a retry of a
    /// put that may have landed): key -> code. Each may or may not be stored.
    in_doubt: BTreeMap<String, String>,
}

/// What the writers share: the CLI's global arguments, where the value files go, and how many
/// puts were acknowledged so far.
struct Writers {
    globals: Vec<String>,
    values: PathBuf,
    acked: AtomicUsize,
}

impl Writers {
    fn new(mesh: &Mesh, dir: &Path) -> Writers {
        let values = dir.join("values");
        std::fs::create_dir_all(&values).unwrap();
        Writers {
            globals: mesh.cli_globals(&mesh.key.client(TENANT)),
            values,
            acked: AtomicUsize::new(0),
        }
    }

    /// Writer `w`: `crescent --mesh M --json put KEY FILE` processes of new keys
    /// `wNN-III` until REFUSALS_IN_A_ROW QUOTA_EXCEEDED refusals in a row.
    fn run(&self, w: usize) -> WriterLog {
        let globals: Vec<&str> = self.globals.iter().map(String::as_str).collect();
        let mut log = WriterLog::default();
        let mut in_a_row = 0;
        for i in 0..PUTS_PER_WRITER {
            let key = format!("w{w:02}-{i:03}");
            let size = value_size(w, i);
            let file = self.values.join(&key);
            std::fs::write(&file, value(&key, size)).unwrap();
            let out = crescent_command(&globals)
                .args(["put", &key, file.to_str().unwrap()])
                .output()
                .expect("running crescent");
            let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let code = body["error"]["code"].as_str().unwrap_or("").to_string();
            match (out.status.code(), code.as_str()) {
                (Some(0), _) => {
                    let cluster = body["cluster"].as_str().expect("the put's cluster");
                    log.acked.insert(key, (size, cluster.to_string()));
                    self.acked.fetch_add(1, Ordering::Relaxed);
                    in_a_row = 0;
                }
                (Some(8), "QUOTA_EXCEEDED") => {
                    log.refusals += 1;
                    in_a_row += 1;
                    if in_a_row == REFUSALS_IN_A_ROW {
                        return log;
                    }
                }
                (Some(3 | 5), _) => {
                    // A cluster down: its puts fail at once until it serves again. The
                    // writer goes on (a refusal only counts in a row when no put failed
                    // between), so it also writes after the restart.
                    log.in_doubt.insert(key, code);
                    in_a_row = 0;
                    std::thread::sleep(Duration::from_millis(200));
                }
                (status, _) => panic!(
                    "put {key} ({size} bytes): exit {status:?}: {body} {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
        panic!(
            "writer {w}: {PUTS_PER_WRITER} puts and never {REFUSALS_IN_A_ROW} refusals in a row"
        );
    }
}

/// What the poller saw: rounds with every cluster's usage known, rounds whose sum was over a
/// limit, and `tenant show` calls a cluster did not answer (while it restarts).
#[derive(Debug, Default)]
struct PollLog {
    rounds: usize,
    over: Vec<String>,
    unanswered: usize,
    /// The largest sums seen: (bytes, objects).
    peak: (u64, u64),
}

/// `POST /v1/tenants/show` of the tenant at `addr`: (used_bytes, used_objects), or `None` when
/// it does not answer (a restarting cluster). With `strict`, the limits it reports must be
/// the policy's.
async fn used_at(
    http: &reqwest::Client,
    addr: SocketAddr,
    token: &str,
    strict: bool,
) -> Option<(u64, u64)> {
    let resp = http
        .post(format!("http://{addr}/v1/tenants/show"))
        .bearer_auth(token)
        .json(&serde_json::json!({ "tenant": TENANT }))
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let q: serde_json::Value = resp.json().await.ok()?;
    assert!(
        !strict
            || (q["max_bytes"].as_u64(), q["max_objects"].as_u64())
                == (Some(MAX_BYTES), Some(MAX_OBJECTS)),
        "{q}"
    );
    Some((q["used_bytes"].as_u64()?, q["used_objects"].as_u64()?))
}

/// Reads every cluster's usage in turn until `done`, summing the latest figure of each: usage
/// only grows in these tests (no overwrite, no remove), so a sum of figures read one after the
/// other is at most the usage at the last read, and a cluster that does not answer counts
/// with its last figure.
async fn poll_sums(
    addrs: Arc<Mutex<Vec<SocketAddr>>>,
    token: String,
    strict: bool,
    done: Arc<AtomicBool>,
) -> PollLog {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .no_proxy()
        .build()
        .unwrap();
    let mut log = PollLog::default();
    let mut last: Vec<Option<(u64, u64)>> = vec![None; addrs.lock().unwrap().len()];
    while !done.load(Ordering::Acquire) {
        let now = addrs.lock().unwrap().clone();
        for (i, addr) in now.into_iter().enumerate() {
            match used_at(&http, addr, &token, strict).await {
                Some(used) => last[i] = Some(used),
                None => log.unanswered += 1,
            }
        }
        if let Some(each) = last.iter().copied().collect::<Option<Vec<_>>>() {
            log.rounds += 1;
            let sum = each
                .iter()
                .fold((0, 0), |(b, o), (ub, uo)| (b + ub, o + uo));
            log.peak = (log.peak.0.max(sum.0), log.peak.1.max(sum.1));
            if sum.0 > MAX_BYTES || sum.1 > MAX_OBJECTS {
                log.over
                    .push(format!("round {}: {each:?} sums to {sum:?}", log.rounds));
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    log
}

/// Kills cluster `victim`'s crescentd once KILL_AFTER_ACKED puts were acknowledged, and
/// starts it again; returns how many puts were acknowledged when it served again.
fn kill_and_restart(
    q: &mut QuotaMesh,
    victim: usize,
    writers: &Writers,
    started: Instant,
) -> usize {
    while writers.acked.load(Ordering::Relaxed) < KILL_AFTER_ACKED {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "too few puts acknowledged"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let acked = writers.acked.load(Ordering::Relaxed);
    let cluster = q.mesh.clusters[victim].0.clone();
    q.mesh.kill(victim);
    eprintln!(
        "killed {cluster} after {acked} acknowledged puts, {:?}",
        started.elapsed()
    );
    q.rt.block_on(q.mesh.restart(q.dir.path(), victim));
    q.addrs.lock().unwrap()[victim] = q.mesh.clusters[victim].1.addr;
    eprintln!("{cluster} serving again after {:?}", started.elapsed());
    writers.acked.load(Ordering::Relaxed)
}

/// Runs the writers and the poller to the end; with `kill`, kills that cluster's crescentd
/// once KILL_AFTER_ACKED puts were acknowledged and starts it again.
fn run_load(q: &mut QuotaMesh, kill: Option<usize>) -> (Vec<WriterLog>, PollLog) {
    let writers = Writers::new(&q.mesh, q.dir.path());
    let done = Arc::new(AtomicBool::new(false));
    let token = q.mesh.key.client(TENANT);
    let strict = q.policy_everywhere;
    let poller =
        q.rt.spawn(poll_sums(q.addrs.clone(), token, strict, done.clone()));
    let started = Instant::now();
    let logs = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WRITERS)
            .map(|w| {
                let writers = &writers;
                s.spawn(move || writers.run(w))
            })
            .collect();
        let restarted = kill.map(|victim| kill_and_restart(q, victim, &writers, started));
        let logs: Vec<WriterLog> = handles
            .into_iter()
            .map(|h| h.join().expect("a writer failed"))
            .collect();
        if let Some(at_restart) = restarted {
            let after = writers.acked.load(Ordering::Relaxed) - at_restart;
            eprintln!("{after} puts acknowledged after the restart");
        }
        logs
    });
    done.store(true, Ordering::Release);
    let polls = q.rt.block_on(poller).expect("the poller failed");
    let mut in_doubt: BTreeMap<&str, usize> = BTreeMap::new();
    for code in logs.iter().flat_map(|l| l.in_doubt.values()) {
        *in_doubt.entry(code).or_default() += 1;
    }
    eprintln!(
        "writers done after {:?}: {} acknowledged, {} refused QUOTA_EXCEEDED, in doubt (by \
         code) {in_doubt:?}; {} poll rounds (peak sum {:?}), {} unanswered calls",
        started.elapsed(),
        logs.iter().map(|l| l.acked.len()).sum::<usize>(),
        logs.iter().map(|l| l.refusals).sum::<usize>(),
        polls.rounds,
        polls.peak,
        polls.unanswered
    );
    (logs, polls)
}

/// Cluster `i`'s objects of the tenant as its crescentd lists them, once its usage is exactly
/// that listing with nothing pending: key -> size.
fn listing_is_usage(q: &QuotaMesh, i: usize) -> (BTreeMap<String, u64>, (u64, u64)) {
    let token = q.mesh.key.client(TENANT);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let addr = q.addr(i);
        let (code, out, err) = crescent_cli(&addr, Some(&token), &["--json", "ls"]);
        assert_eq!(code, 0, "ls at {addr}: {err}");
        let listing: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let objects: BTreeMap<String, u64> = listing["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|k| {
                (
                    k["key"].as_str().unwrap().to_string(),
                    k["size"].as_u64().unwrap(),
                )
            })
            .collect();
        let (code, out, err) = crescent_cli(
            &addr,
            Some(&token),
            &["--json", "tenant", "show", "--tenant", TENANT],
        );
        assert_eq!(code, 0, "tenant show at {addr}: {err}");
        let show: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let want = (objects.values().sum::<u64>(), objects.len() as u64, 0, 0);
        let got = (
            show["used_bytes"].as_u64().unwrap(),
            show["used_objects"].as_u64().unwrap(),
            show["pending_bytes"].as_u64().unwrap(),
            show["in_doubt_operations"].as_u64().unwrap(),
        );
        if got == want {
            return (objects, (got.0, got.1));
        }
        assert!(
            Instant::now() < deadline,
            "cluster {i}: usage {got:?}, its listing wants {want:?}: {show}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The end state: the usage over the clusters within the limits and exactly what they list,
/// every acknowledged put listed where its put said with its size, nothing listed that no put
/// may have stored, every listed object readable through the mesh with its bytes. Returns the
/// total (bytes, objects).
fn assert_exact(q: &QuotaMesh, logs: &[WriterLog]) -> (u64, u64) {
    let mut listed: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut total = (0, 0);
    for i in 0..q.mesh.clusters.len() {
        let cluster = &q.mesh.clusters[i].0;
        let (objects, used) = listing_is_usage(q, i);
        eprintln!("{cluster}: {} objects, used {used:?}", objects.len());
        total = (total.0 + used.0, total.1 + used.1);
        for (key, size) in objects {
            let before = listed.insert(key.clone(), (size, cluster.clone()));
            assert!(before.is_none(), "{key} listed on two clusters");
        }
    }
    for log in logs {
        for (key, (size, cluster)) in &log.acked {
            let got = listed
                .get(key)
                .unwrap_or_else(|| panic!("acknowledged {key} not listed"));
            assert_eq!(got, &(*size as u64, cluster.clone()), "{key}");
        }
    }
    let may_be_stored = |k: &String| {
        logs.iter()
            .any(|l| l.acked.contains_key(k) || l.in_doubt.contains_key(k))
    };
    let strays: Vec<&String> = listed.keys().filter(|k| !may_be_stored(k)).collect();
    assert!(
        strays.is_empty(),
        "listed, never acknowledged nor in doubt: {strays:?}"
    );
    let landed: Vec<&String> = listed
        .keys()
        .filter(|k| !logs.iter().any(|l| l.acked.contains_key(*k)))
        .collect();
    eprintln!("in-doubt puts that landed: {landed:?}");
    let keys: Vec<String> = listed.keys().cloned().collect();
    let read = q.rt.block_on(async {
        q.mesh
            .client()
            .await
            .get_batch(&keys)
            .await
            .expect("batch get")
    });
    for (key, got) in keys.iter().zip(read) {
        let got = got.unwrap_or_else(|e| panic!("{key} not readable through the mesh: {e}"));
        assert!(
            got == value(key, listed[key].0 as usize),
            "{key}: other bytes than its put"
        );
    }
    total
}

/// The checks every test makes after its load: first what holds with or without a quota
/// across clusters (exactness, refusals, both clusters written), then the limits over the
/// clusters, during the load and at the end.
/// What the clusters report of their shares (docs/tenants.md, "Quota across a mesh"): the home
/// counts at least what the other cluster uses as held there, and that cluster's cap covers
/// what it uses.
fn assert_shares(q: &QuotaMesh) {
    let token = q.mesh.key.client(TENANT);
    let show = |i: usize| -> serde_json::Value {
        let args = ["--json", "tenant", "show", "--tenant", TENANT];
        let (code, out, err) = crescent_cli(&q.addr(i), Some(&token), &args);
        assert_eq!(code, 0, "tenant show at cluster {i}: {err}");
        serde_json::from_slice(&out).unwrap()
    };
    let (home, other) = (show(q.home), show(1 - q.home));
    let field = |v: &serde_json::Value, f: &str| v["mesh"][f].as_u64();
    for (used, granted, cap) in [
        ("used_bytes", "granted_bytes", "cap_bytes"),
        ("used_objects", "granted_objects", "cap_objects"),
    ] {
        let used = other[used].as_u64().unwrap();
        assert!(
            field(&home, granted).unwrap_or(0) >= used,
            "the home counts less than the other cluster uses: {home} / {other}"
        );
        assert!(
            field(&other, cap).is_some_and(|c| c >= used),
            "the other cluster's cap does not cover its usage: {other}"
        );
    }
}

fn assert_quota_held(q: &QuotaMesh, logs: &[WriterLog], polls: &PollLog) {
    let total = assert_exact(q, logs);
    assert_shares(q);
    let refusals: usize = logs.iter().map(|l| l.refusals).sum();
    assert!(refusals > 0, "no put was refused");
    let clusters: BTreeSet<&String> = logs
        .iter()
        .flat_map(|l| l.acked.values().map(|v| &v.1))
        .collect();
    assert_eq!(
        clusters.len(),
        q.mesh.clusters.len(),
        "acknowledged puts on {clusters:?}"
    );
    assert!(
        total.0 >= MAX_BYTES / 2,
        "the writers stopped at {total:?} (bytes, objects)"
    );
    assert!(polls.rounds > 0, "no poll round saw every cluster");
    assert!(
        polls.over.is_empty(),
        "the sum of the usage over the clusters went over the limits ({MAX_BYTES} bytes, \
         {MAX_OBJECTS} objects) in {} of {} poll rounds; first: {}; peak {:?}",
        polls.over.len(),
        polls.rounds,
        polls.over[0],
        polls.peak
    );
    assert!(
        total.0 <= MAX_BYTES && total.1 <= MAX_OBJECTS,
        "the final usage over the clusters, {total:?} (bytes, objects), is over the limits \
         ({MAX_BYTES}, {MAX_OBJECTS})"
    );
}

/// The tests run one at a time: each loads the machine with 16 writers, and a slow poller or
/// writer would change what the test sees.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn quota_holds_across_two_clusters_on_etcd() {
    let _one = one_at_a_time();
    let mut q = QuotaMesh::start();
    let (logs, polls) = run_load(&mut q, None);
    assert_quota_held(&q, &logs, &polls);
}

#[test]
fn quota_holds_across_a_kill_9_of_a_cluster_other_than_the_home() {
    let _one = one_at_a_time();
    let mut q = QuotaMesh::start();
    let victim = 1 - q.home;
    let (logs, polls) = run_load(&mut q, Some(victim));
    assert_quota_held(&q, &logs, &polls);
}

#[test]
fn quota_holds_across_a_kill_9_of_the_home() {
    let _one = one_at_a_time();
    let mut q = QuotaMesh::start();
    let victim = q.home;
    let (logs, polls) = run_load(&mut q, Some(victim));
    assert_quota_held(&q, &logs, &polls);
}

/// The policy set by command at the home only: the other cluster learns from the home's
/// exchange that the tenant has limits, caps it, and the limits hold across the mesh; `tenant
/// show` through the mesh sums what the clusters hold.
#[test]
fn a_policy_set_at_the_home_only_holds_across_the_mesh() {
    let _one = one_at_a_time();
    let mut q = QuotaMesh::start_on(false);
    let admin = q.mesh.key.admin();
    let (bytes, objects) = (MAX_BYTES.to_string(), MAX_OBJECTS.to_string());
    let set = [
        "--json",
        "tenant",
        "quota",
        "set",
        "--tenant",
        TENANT,
        "--max-bytes",
        &bytes,
        "--max-objects",
        &objects,
    ];
    let (code, _, err) = crescent_cli(&q.addr(q.home), Some(&admin), &set);
    assert_eq!(code, 0, "quota set at the home: {err}");
    let other = q.mesh.clusters[1 - q.home].0.clone();
    let deadline = Instant::now() + Duration::from_secs(10);
    while mesh_show(&q, &admin)["clusters"][1]["quota"]["mesh"]["cap_bytes"].is_null() {
        assert!(Instant::now() < deadline, "{other} never capped the tenant");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (logs, polls) = run_load(&mut q, None);
    assert_quota_held(&q, &logs, &polls);
    let shown = mesh_show(&q, &admin);
    assert_eq!(shown["home"], q.mesh.clusters[q.home].0.as_str(), "{shown}");
    assert_eq!(shown["max_bytes"].as_u64(), Some(MAX_BYTES), "{shown}");
    let rows = shown["clusters"].as_array().expect("clusters");
    let sum = |f: &str| {
        rows.iter()
            .map(|r| r["quota"][f].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!(
        shown["used_bytes"].as_u64(),
        Some(sum("used_bytes")),
        "{shown}"
    );
    assert_eq!(
        shown["used_objects"].as_u64(),
        Some(sum("used_objects")),
        "{shown}"
    );
}

/// `crescent --mesh M tenant show --tenant meshy --json` with `token`.
fn mesh_show(q: &QuotaMesh, token: &str) -> serde_json::Value {
    let globals = q.mesh.cli_globals(token);
    let globals: Vec<&str> = globals.iter().map(String::as_str).collect();
    let out = crescent_command(&globals)
        .args(["tenant", "show", "--tenant", TENANT])
        .output()
        .expect("running crescent");
    assert!(
        out.status.success(),
        "tenant show through the mesh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}
