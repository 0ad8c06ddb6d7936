//! The chaos soak's writers and checks (tests/tests/chaos_soak.rs drives the rounds).
//!
//! Four writers work on disjoint key ranges, one operation per key at a time:
//! - two run `crescent put KEY FILE [--upsert]` and `crescent rm KEY` processes, each of which
//!   exits right after its answer;
//! - two start library writer children (`chaos-writer`, tests/src/bin/chaos_writer.rs), give
//!   each a batch of operations, and SIGKILL it right after a randomly chosen acknowledgement.
//!
//! Every answer goes into the [`Model`]. An operation that failed or was cut taints its key
//! for the rest of the round: its request may still be running in crescentd, so nothing else
//! writes the key until the round's crash ends every request in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::binaries::crescent_command;
use crate::chaos_model::{Model, ReadBack};
use crate::chaos_ops::{choose_kind, cli_error_code, value_len, Op, OpKind, Reply};
use crate::process::{kill_with_parent, ChildGuard};

/// Keys per writer.
pub const KEYS_PER_WRITER: u32 = 16;
/// Writers 0 and 1 run CLI processes; 2 and 3 library writer children.
pub const WRITERS: u32 = 4;
const CLI_WRITERS: u32 = 2;

/// What happened to the writers' operations, beyond the model's counts.
#[derive(Debug, Default)]
pub struct Stats {
    pub cli_ops: u64,
    pub cli_acked: u64,
    pub lib_ops: u64,
    pub lib_acked: u64,
    pub lib_children: u64,
    /// Children SIGKILLed right after an acknowledgement.
    pub lib_kills: u64,
    /// Failed operations by error code.
    pub failures: BTreeMap<String, u64>,
}

/// The model, the keys tainted this round and the stats, shared by the writer threads.
#[derive(Debug, Default)]
pub struct Shared {
    pub model: Model,
    tainted: BTreeSet<u32>,
    pub stats: Stats,
    round: u32,
}

impl Shared {
    /// An operation that failed (`code`) or was cut: its outcome becomes acceptable and its
    /// key is left alone for the rest of the round.
    fn uncertain(&mut self, op: &Op, code: &str) {
        self.note(op, code);
        self.model.uncertain(op.key, op.outcome());
        self.tainted.insert(op.key);
        *self.stats.failures.entry(code.to_string()).or_default() += 1;
    }

    /// Notes how `op` ended in its key's history: `r3 cli upsert v4 (120 bytes) acknowledged`.
    fn note(&mut self, op: &Op, how: &str) {
        let by = match op.key / KEYS_PER_WRITER < CLI_WRITERS {
            true => "cli",
            false => "library",
        };
        let event = format!("r{} {by} {} {how}", self.round, op.describe());
        self.model.note(op.key, event);
    }

    fn acked(&mut self, op: &Op) {
        self.note(op, "acknowledged");
        self.model
            .acked(op.key, op.outcome(), op.kind == OpKind::Upsert);
    }

    /// Plans up to `n` operations on distinct untainted keys of `writer`.
    fn plan(&mut self, writer: u32, n: usize, rng: &mut StdRng) -> Vec<Op> {
        let first = writer * KEYS_PER_WRITER;
        let mut free: Vec<u32> = (first..first + KEYS_PER_WRITER)
            .filter(|k| !self.tainted.contains(k))
            .collect();
        let mut ops = Vec::new();
        while ops.len() < n && !free.is_empty() {
            let key = free.swap_remove(rng.gen_range(0..free.len()));
            let kind = choose_kind(self.model.states(key), rng);
            let len = match kind {
                OpKind::Remove => 0,
                _ => value_len(rng),
            };
            ops.push(Op {
                seq: ops.len() as u64,
                kind,
                key,
                version: self.model.new_version(key),
                len,
            });
        }
        ops
    }
}

/// The soak's fixed setting: where crescentd is, the child binary, a scratch dir.
#[derive(Debug, Clone)]
pub struct Soak {
    pub shared: Arc<Mutex<Shared>>,
    /// `crescent` global arguments naming crescentd (`--server ADDR` or `--etcd .. --cluster
    /// ..`); the library writer child takes the same.
    pub globals: Vec<String>,
    /// The writers' and readers' `client` token (`CRESCENT_TOKEN`; `None` in open mode).
    pub token: Option<String>,
    pub child_bin: PathBuf,
    pub dir: PathBuf,
    pub seed: u64,
}

impl Soak {
    pub fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn globals(&self) -> Vec<&str> {
        self.globals.iter().map(String::as_str).collect()
    }

    /// `crescent GLOBALS` with the soak's token.
    fn crescent(&self) -> Command {
        let mut cmd = crescent_command(&self.globals());
        crate::store_e2e::with_token(&mut cmd, self.token.as_deref());
        cmd
    }

    /// Starts the writers of round `round` (their keys untainted again: the crash that ended
    /// the previous round ended every request in flight).
    pub fn start_writers(&self, round: u32) -> Writers {
        let mut shared = self.lock();
        shared.tainted.clear();
        shared.round = round;
        drop(shared);
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..WRITERS)
            .map(|w| {
                let (soak, stop) = (self.clone(), stop.clone());
                let seed = self.seed ^ (u64::from(round) << 8) ^ u64::from(w);
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed);
                    while !stop.load(Ordering::Acquire) {
                        if w < CLI_WRITERS {
                            soak.cli_op(w, &mut rng);
                        } else {
                            soak.library_batch(w, &mut rng, &stop);
                        }
                    }
                })
            })
            .collect();
        Writers { stop, threads }
    }

    /// One `crescent` process running one operation.
    fn cli_op(&self, writer: u32, rng: &mut StdRng) {
        let Some(op) = self.lock().plan(writer, 1, rng).pop() else {
            std::thread::sleep(Duration::from_millis(50));
            return;
        };
        let mut cmd = self.crescent();
        match op.kind {
            OpKind::Put | OpKind::Upsert => {
                let file = self.dir.join(format!("cli-writer-{writer}"));
                std::fs::write(&file, op.value()).expect("writing a value file");
                cmd.args(["put", &op.key_name()]).arg(&file);
                if op.kind == OpKind::Upsert {
                    cmd.arg("--upsert");
                }
            }
            OpKind::Remove => {
                cmd.args(["rm", &op.key_name()]);
            }
        }
        let out = cmd.output().expect("running crescent");
        let mut shared = self.lock();
        shared.stats.cli_ops += 1;
        if out.status.success() {
            shared.stats.cli_acked += 1;
            shared.acked(&op);
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            shared.uncertain(&op, &cli_error_code(&stderr, out.status.code()));
        }
    }

    /// One library writer child: a batch of operations, SIGKILLed right after the
    /// acknowledgement of a randomly chosen one (or when the round stops).
    fn library_batch(&self, writer: u32, rng: &mut StdRng, stop: &AtomicBool) {
        let n = rng.gen_range(2..=10);
        let ops = self.lock().plan(writer, n, rng);
        if ops.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
            return;
        }
        let kill_after = rng.gen_range(1..=ops.len());
        let mut cmd = Command::new(&self.child_bin);
        crate::store_e2e::with_token(&mut cmd, self.token.as_deref());
        cmd.args(&self.globals)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        kill_with_parent(&mut cmd);
        let mut child = ChildGuard::new(
            format!("chaos-writer {writer}"),
            cmd.spawn().expect("spawning chaos-writer"),
        );
        let mut stdin = child.child_mut().stdin.take().expect("child stdin");
        let lines: String = ops.iter().map(|op| op.line() + "\n").collect();
        stdin
            .write_all(lines.as_bytes())
            .expect("writing operations");
        drop(stdin);
        let stdout = child.child_mut().stdout.take().expect("child stdout");
        let mut answered = BTreeSet::new();
        let (mut acks, mut killed, mut sent_kill) = (0, false, false);
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("reading the child's stdout");
            let reply = Reply::parse(&line).unwrap_or_else(|e| panic!("chaos-writer: {e}"));
            let mut shared = self.lock();
            match reply {
                Reply::Ack(seq) => {
                    shared.acked(&ops[seq as usize]);
                    shared.stats.lib_acked += 1;
                    acks += 1;
                    answered.insert(seq);
                }
                Reply::Err(seq, code) => {
                    shared.uncertain(&ops[seq as usize], &code);
                    answered.insert(seq);
                }
            }
            drop(shared);
            if acks == kill_after || stop.load(Ordering::Acquire) {
                // Right after the ack: the child is already on its next operation.
                child.sigkill();
                killed = acks == kill_after;
                sent_kill = true;
                break;
            }
        }
        let status = child.wait();
        assert!(
            sent_kill || (status.success() && answered.len() == ops.len()),
            "chaos-writer {writer} exited by itself ({status}) after answering {} of {} \
             operations",
            answered.len(),
            ops.len()
        );
        let mut shared = self.lock();
        shared.stats.lib_children += 1;
        shared.stats.lib_kills += u64::from(killed);
        shared.stats.lib_ops += ops.len() as u64;
        for op in ops.iter().filter(|op| !answered.contains(&op.seq)) {
            shared.uncertain(op, "CUT");
        }
    }

    /// Reads every key back through a fresh `crescent get` process and through `lib_read`
    /// (the library), and checks both against the model. Returns the violations.
    pub fn verify(
        &self,
        what: &str,
        mut lib_read: impl FnMut(&str) -> Result<ReadBack, String>,
    ) -> Vec<String> {
        let mut found = Vec::new();
        for k in 0..WRITERS * KEYS_PER_WRITER {
            let key = crate::chaos_model::key_name(k);
            let cli = self.cli_read(&key);
            let lib = retry(|| lib_read(&key));
            let shared = self.lock();
            for (how, read) in [("crescent get", cli), ("library get", lib)] {
                let result = read
                    .map_err(|e| format!("{key}: unreadable: {e}"))
                    .and_then(|r| shared.model.check(k, &r).map_err(|v| v.to_string()));
                if let Err(e) = result {
                    found.push(format!("{what}, {how}: {e}"));
                }
            }
        }
        found
    }

    /// `crescent get KEY -o FILE`, or its error after retries.
    fn cli_read(&self, key: &str) -> Result<ReadBack, String> {
        let file = self.dir.join("cli-read");
        retry(|| {
            let out = self
                .crescent()
                .args(["get", key, "-o"])
                .arg(&file)
                .output()
                .expect("running crescent get");
            if out.status.success() {
                let bytes = std::fs::read(&file).expect("reading crescent get's file");
                return Ok(ReadBack::Value(bytes));
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            read_error(&cli_error_code(&stderr, out.status.code()), stderr.trim())
        })
    }

    /// The summary line of a soak of `kind`.
    pub fn summary(&self, kind: &str, rounds: u32, losses: usize) -> String {
        let s = self.lock();
        let (m, st) = (&s.model, &s.stats);
        format!(
            "chaos soak {kind}: rounds={rounds} objects_acknowledged={} upserts={} \
             removes_acknowledged={} losses={losses} | crescent processes {} ({} acknowledged), \
             library ops {} ({} acknowledged) in {} writer children ({} SIGKILLed right after \
             an ack), uncertain outcomes {}, failures {:?}",
            m.objects_acked,
            m.upserts_acked,
            m.removes_acked,
            st.cli_ops,
            st.cli_acked,
            st.lib_ops,
            st.lib_acked,
            st.lib_children,
            st.lib_kills,
            m.uncertain,
            st.failures
        )
    }
}

/// A read's error: NOT_FOUND and NOT_READY are answers ([`ReadBack`]), anything else is not.
pub fn read_error(code: &str, message: &str) -> Result<ReadBack, String> {
    match code {
        "NOT_FOUND" => Ok(ReadBack::Absent),
        "NOT_READY" => Ok(ReadBack::Pending),
        _ => Err(message.to_string()),
    }
}

/// `f` until it answers, at most 10 times 300 ms apart (a read right after a restart may meet
/// a connection that is still being made).
fn retry<T>(mut f: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let mut last = String::new();
    for _ in 0..10 {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Err(last)
}

/// The writer threads of one round.
pub struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Writers {
    /// Stops the writers and waits for them: a CLI writer finishes its process, a library
    /// writer kills its child.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            t.join().expect("a writer thread panicked");
        }
    }
}

/// A scratch directory kept when the soak fails (its logs are the evidence).
pub fn keep_on_failure(dir: tempfile::TempDir, failed: bool) -> Option<PathBuf> {
    failed.then(|| dir.keep())
}

/// `dir/name`, created.
pub fn subdir(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(&p).expect("creating a scratch dir");
    p
}
