//! A tenant's quota through crescentd crashes at each point of a put and of a remove
//! (docs/tenants.md, "Crash windows"): crescentd kills itself (SIGKILL) at a crash point while
//! a `crescent` CLI process puts or removes, restarts, and takes the objects back from a
//! separate `crescent owner` process. Whatever the crash left, the tenant's usage is then
//! exactly that of the objects it holds, nothing stays pending, the limit still holds, and
//! removing everything gives every byte back once.

mod common;

use common::{crescent, start_owner, tenant, wait_readable, Server};

const TENANT: &str = "acme";
const MAX_BYTES: u64 = 3000;
const MAX_OBJECTS: u64 = 3;

fn cli(server: &str, args: &[&str], stdin: Option<&[u8]>) -> (i32, String) {
    let mut all = vec!["--tenant", TENANT];
    all.extend_from_slice(args);
    let (code, out, err) = crescent(server, &all, stdin);
    (code, format!("{}{err}", String::from_utf8_lossy(&out)))
}

fn put(server: &str, key: &str, bytes: usize) -> (i32, String) {
    cli(server, &["put", key, "-"], Some(&vec![3u8; bytes]))
}

/// The step that meets the crash: a CLI process that gives up on the dead server after 1 s
/// (it would otherwise follow the failover for its default 15 s per request).
fn dying(server: &str, args: &[&str], stdin: Option<&[u8]>) -> (i32, String) {
    let mut all = vec!["--failover-timeout-ms", "1000"];
    all.extend_from_slice(args);
    cli(server, &all, stdin)
}

/// `tenant show`: (used bytes, used objects, pending bytes, in doubt, removing bytes).
fn usage(server: &str) -> (u64, u64, u64, u64, u64) {
    let q = tenant::show(server, TENANT);
    let n = |f: &str| tenant::figure(&q, f);
    (
        n("used_bytes"),
        n("used_objects"),
        n("pending_bytes"),
        n("in_doubt_operations"),
        n("removing_bytes"),
    )
}

/// The tenant's objects as listed: (key, size), all complete.
fn listed(server: &str) -> Vec<(String, u64)> {
    tenant::listed(server, TENANT)
}

/// Usage equals the listing, with nothing pending or held, once the restarted node settled
/// (a remove's held quota is given back by its journal write, which housekeeping makes).
fn assert_usage_is_the_listing(server: &str) {
    tenant::wait_usage_is_the_listing(server, TENANT);
}

/// The limit holds after the crash (puts until refused never pass it), and removing every
/// object gives all of it back, once.
fn assert_quota_still_holds(server: &str) {
    for key in ["f1", "f2", "f3"] {
        let (code, out) = put(server, key, 1000);
        assert!(
            code == 0 || out.contains("QUOTA_EXCEEDED"),
            "{key}: exit {code}: {out}"
        );
        let (bytes, objects, ..) = usage(server);
        assert!(
            bytes <= MAX_BYTES && objects <= MAX_OBJECTS,
            "{bytes} bytes, {objects} objects"
        );
    }
    assert_eq!(
        usage(server).0,
        MAX_BYTES,
        "three 1000-byte objects fit exactly"
    );
    assert_eq!(
        put(server, "over", 1).0,
        8,
        "a full tenant is refused (exit 8)"
    );
    for (key, _) in listed(server) {
        let (code, out) = cli(server, &["rm", &key], None);
        assert_eq!(code, 0, "rm {key}: {out}");
    }
    assert_eq!(usage(server), (0, 0, 0, 0, 0));
}

/// Puts `a` (1000 bytes), then runs `step` against a crescentd armed at `point`, which must
/// crash during it; restarts, and checks the tenant as the module says. Returns the keys
/// that came back.
fn crash_during(point: &str, step: impl FnOnce(&str) -> (i32, String)) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crescentd.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nembedded_segment_bytes = 0\n\n[[tenants]]\nname = \"{TENANT}\"\n\
             max_bytes = {MAX_BYTES}\nmax_objects = {MAX_OBJECTS}\n"
        ),
    )
    .unwrap();
    let server = Server::start_crashing_at(&["--config", config.to_str().unwrap()], point);
    let s = server.server();
    let _owner = start_owner(&s, "quota-crash-owner", "16M");
    let (code, out) = put(&s, "a", 1000);
    assert_eq!(code, 0, "{out}");
    let (code, out) = step(&s);
    assert_ne!(code, 0, "crescentd died at {point} before answering: {out}");
    let server = server.restart_after_crash();
    let s = server.server();
    // Whatever came back from the owner came back whole, and is what the usage counts.
    server.wait_serving();
    let back: Vec<String> = listed(&s).into_iter().map(|(k, _)| k).collect();
    for key in &back {
        wait_readable(&s, TENANT, key);
    }
    assert_usage_is_the_listing(&s);
    assert_quota_still_holds(&s);
    back
}

#[test]
fn a_crash_after_the_reservation_leaves_nothing_charged() {
    let back = crash_during("put_start.after_reserve:2", |s| {
        dying(s, &["put", "b", "-"], Some(&[3u8; 1000]))
    });
    assert_eq!(
        back,
        ["a"],
        "the acknowledged object survives; b was never written"
    );
}

#[test]
fn a_crash_after_the_owner_took_the_bytes_but_before_commit_counts_what_replays() {
    let back = crash_during("put_end.before_commit:2", |s| {
        dying(s, &["put", "b", "-"], Some(&[3u8; 1000]))
    });
    // The owner recorded b with its bytes (before put_end): its replay brings b back.
    assert_eq!(back, ["a", "b"]);
}

#[test]
fn a_crash_after_commit_but_before_the_reply_counts_the_object_once() {
    let back = crash_during("put_end.after_commit:2", |s| {
        dying(s, &["put", "b", "-"], Some(&[3u8; 1000]))
    });
    assert_eq!(back, ["a", "b"]);
}

#[test]
fn a_crash_before_a_remove_is_journaled_charges_the_object_if_it_replays_back() {
    // The remove was not acknowledged: the object replays back (and is charged again) unless
    // its owner already dropped it on a heartbeat's release. Either way the usage is the
    // listing's (checked inside).
    crash_during("remove.before_journal", |s| dying(s, &["rm", "a"], None));
}

#[test]
fn a_crash_after_a_remove_is_journaled_keeps_it_removed_and_refunded() {
    let back = crash_during("remove.after_journal", |s| dying(s, &["rm", "a"], None));
    assert!(
        back.is_empty(),
        "a journaled remove stays removed: {back:?}"
    );
}
