//! Crash test of the journal: a child process appends from several threads and acknowledges
//! each record on stdout only once it is durable; the parent SIGKILLs it at a random moment,
//! reopens the journal itself and checks that nothing acknowledged was lost or changed, that
//! seqs are contiguous from 1, that the chain digest verifies over the whole journal and that
//! the journal takes appends again. Every round continues the previous round's journal.
//!
//! `CRESCENT_CRASH_ROUNDS` sets the file-backend rounds (default 50),
//! `CRESCENT_CRASH_SLED_ROUNDS` the sled rounds (default 20).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crescent_journal::{Digest, GENESIS_DIGEST};
use crescent_tests::crash_journal::CrashBackend;
use crescent_tests::crash_payload::{
    check_record_self_consistent, AckLine, PayloadKey, PARENT_THREAD,
};
use crescent_tests::process::{kill_with_parent, killed_by_sigkill, ChildGuard};
use crescent_tests::{crash_rounds, env_count};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const APPENDER_THREADS: u32 = 4;
/// How long a child may take to recover its journal and print READY.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What one child run produced before it was killed.
struct ChildRun {
    acks: Vec<AckLine>,
    /// False when the kill landed before the child had recovered its journal.
    reached_ready: bool,
}

/// Spawns the child for `round`, kills it at a random moment and collects its acknowledgements.
fn run_child(backend: CrashBackend, dir: &Path, round: u32, rng: &mut StdRng) -> ChildRun {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_journal-crash-child"));
    cmd.arg(backend.as_str())
        .arg(dir)
        .arg(round.to_string())
        .arg(APPENDER_THREADS.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    kill_with_parent(&mut cmd);
    let spawned = Instant::now();
    let child = cmd.spawn().expect("spawn journal-crash-child");
    let mut guard = ChildGuard::new(format!("journal-crash-child round {round}"), child);
    let stdout = guard.child_mut().stdout.take().expect("child stdout");
    let mut stderr = guard.child_mut().stderr.take().expect("child stderr");
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let (ready_tx, ready_rx) = mpsc::channel();
    let stdout_reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut lines = Vec::new();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // A line cut short by the kill was never fully acknowledged: ignore it.
            if buf.last() != Some(&b'\n') {
                break;
            }
            let line = String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned();
            if line.starts_with("READY ") {
                let _ = ready_tx.send(());
            } else {
                lines.push(line);
            }
        }
        lines
    });

    // One round in five is killed early (often during recovery, before READY); the others a
    // random 5-150 ms after it is ready.
    let early = round % 5 == 4;
    let mut reached_ready = false;
    if early {
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..30)));
    } else {
        match ready_rx.recv_timeout(READY_TIMEOUT) {
            Ok(()) => reached_ready = true,
            Err(e) => {
                let status = guard.sigkill();
                let stderr = stderr_reader.join().unwrap_or_default();
                panic!(
                    "round {round}: child never became ready ({e:?}) after {:?}; exit {status}; \
                     stderr:\n{stderr}",
                    spawned.elapsed()
                );
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(5..=150)));
    }
    let status = guard.sigkill();
    let lines = stdout_reader.join().expect("stdout reader");
    let stderr = stderr_reader.join().unwrap_or_default();
    assert!(
        killed_by_sigkill(&status),
        "round {round}: the child exited on its own ({status}) instead of being killed; \
         stderr:\n{stderr}"
    );
    reached_ready |= ready_rx.try_recv().is_ok();
    let acks = lines
        .iter()
        .map(|l| AckLine::parse(l).unwrap_or_else(|e| panic!("round {round}: {e}")))
        .collect();
    ChildRun {
        acks,
        reached_ready,
    }
}

/// What the parent proved about the journal after one round.
struct Checkpoint {
    /// The last seq of the journal after the parent's own append.
    seq: u64,
    /// The chain digest at `seq`.
    digest: Digest,
}

struct Reopened {
    checkpoint: Checkpoint,
    records: u64,
    bytes: u64,
    tail_truncated: bool,
}

/// Reopens the journal, verifies it completely against `acked` and `prev`, appends one record
/// of its own (added to `acked`) and closes it again. Errors name the exact seq.
fn reopen_and_verify(
    backend: CrashBackend,
    dir: &Path,
    round: u32,
    acked: &mut BTreeMap<u64, AckLine>,
    prev: Option<&Checkpoint>,
) -> Result<Reopened, String> {
    let journal = backend.open_journal(dir)?;
    let tail_truncated = journal.truncation().is_some();
    if journal.first_seq() != 1 {
        return Err(format!(
            "journal starts at seq {} after reopen, expected 1 (nothing was truncated)",
            journal.first_seq()
        ));
    }
    let (last_seq, _, head_digest) = journal.head();
    let mut expected_seq = 1u64;
    let mut digest = GENESIS_DIGEST;
    let mut bytes = 0u64;
    let records = journal
        .read_from(1)
        .map_err(|e| format!("read_from(1): {e}"))?;
    for record in records {
        let record = record.map_err(|e| format!("reading seq {expected_seq}: {e}"))?;
        if record.seq != expected_seq {
            return Err(format!(
                "seq gap: expected seq {expected_seq}, read seq {}",
                record.seq
            ));
        }
        let recomputed = record.expected_digest(&digest);
        if recomputed != record.digest {
            return Err(format!(
                "chain digest does not verify at seq {}",
                record.seq
            ));
        }
        digest = recomputed;
        let key = check_record_self_consistent(&record)?;
        if u64::from(key.round) != record.term {
            return Err(format!(
                "seq {}: term {} but it was appended in round {}",
                record.seq, record.term, key.round
            ));
        }
        if let Some(ack) = acked.get(&record.seq) {
            ack.check(&record)?;
        }
        if let Some(cp) = prev.filter(|cp| cp.seq == record.seq) {
            if cp.digest != record.digest {
                return Err(format!(
                    "chain digest at seq {} changed since the previous round verified it",
                    record.seq
                ));
            }
        }
        bytes += record.event.payload.len() as u64;
        expected_seq += 1;
    }
    let read_last = expected_seq - 1;
    if read_last != last_seq || digest != head_digest {
        return Err(format!(
            "journal head says seq {last_seq} but reading ended at seq {read_last} (or the head \
             digest differs)"
        ));
    }
    if let Some((&missing, ack)) = acked.range(last_seq + 1..).next() {
        return Err(format!(
            "acknowledged seq {missing} is missing: the journal ends at seq {last_seq} \
             (ack: {ack:?}; {} acknowledged seqs lost in all)",
            acked.range(last_seq + 1..).count()
        ));
    }
    if let Some(cp) = prev.filter(|cp| cp.seq > last_seq) {
        return Err(format!(
            "the journal ends at seq {last_seq}, before seq {} that the previous round verified",
            cp.seq
        ));
    }

    // The journal must take appends again right away.
    let key = PayloadKey {
        round,
        thread: PARENT_THREAD,
        counter: u64::from(round),
        index: 0,
    };
    let record = key.new_record(0);
    let ack = journal
        .append_blocking(u64::from(round), vec![record.clone()])
        .map_err(|e| format!("append after reopen failed: {e}"))?;
    if ack.first_seq != last_seq + 1 || ack.last_seq != last_seq + 1 {
        return Err(format!(
            "append after reopen got seqs {}..={}, expected {}",
            ack.first_seq,
            ack.last_seq,
            last_seq + 1
        ));
    }
    acked.insert(ack.last_seq, AckLine::for_record(ack.last_seq, &record));
    let (seq, _, digest) = journal.head();
    journal
        .shutdown()
        .map_err(|e| format!("shutdown after the parent's append: {e}"))?;
    Ok(Reopened {
        checkpoint: Checkpoint { seq, digest },
        records: read_last,
        bytes,
        tail_truncated,
    })
}

fn crash_rounds_over(backend: CrashBackend, rounds: u32) {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("journal");
    let seed: u64 = rand::random();
    eprintln!(
        "{} journal crash test: {rounds} rounds, rng seed {seed}",
        backend.as_str()
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let mut acked: BTreeMap<u64, AckLine> = BTreeMap::new();
    let mut checkpoint: Option<Checkpoint> = None;
    let mut child_acks = 0usize;
    let mut killed_before_ready = 0u32;
    let mut tail_truncations = 0u32;
    let mut last = None;
    let mut verify_time = Duration::ZERO;
    for round in 1..=rounds {
        let run = run_child(backend, &dir, round, &mut rng);
        killed_before_ready += u32::from(!run.reached_ready);
        child_acks += run.acks.len();
        for ack in run.acks {
            if let Some(before) = acked.insert(ack.seq, ack.clone()) {
                panic!(
                    "round {round}: seq {} acknowledged twice ({before:?}, then {ack:?})",
                    ack.seq
                );
            }
        }
        let verify_started = Instant::now();
        let reopened = reopen_and_verify(backend, &dir, round, &mut acked, checkpoint.as_ref())
            .unwrap_or_else(|e| {
                panic!(
                    "{} journal, round {round} (seed {seed}): {e}",
                    backend.as_str()
                )
            });
        verify_time += verify_started.elapsed();
        tail_truncations += u32::from(reopened.tail_truncated);
        checkpoint = Some(reopened.checkpoint);
        last = Some((reopened.records, reopened.bytes));
    }
    let (records, bytes) = last.unwrap_or_default();
    let segment_files = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
                .count()
        })
        .unwrap_or(0);
    println!(
        "SUMMARY crash_journal backend={} rounds={rounds} acked_by_child={child_acks} \
         killed_before_ready={killed_before_ready} tail_truncations={tail_truncations} \
         journal_records={records} payload_bytes={bytes} segment_files={segment_files} verify={:.1}s elapsed={:.1}s",
        backend.as_str(),
        verify_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        child_acks > 0,
        "no round acknowledged anything: the crash test proved nothing"
    );
}

#[test]
fn file_journal_keeps_every_acknowledged_record_across_sigkills() {
    crash_rounds_over(CrashBackend::File, crash_rounds(50));
}

#[test]
fn sled_journal_keeps_every_acknowledged_record_across_sigkills() {
    crash_rounds_over(
        CrashBackend::Sled,
        env_count("CRESCENT_CRASH_SLED_ROUNDS", 20),
    );
}

/// The verification itself must catch a lost or altered acknowledged record and a rewritten
/// chain, naming the seq; otherwise the crash rounds above would prove nothing.
#[test]
fn the_verification_names_lost_or_changed_acknowledged_seqs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("journal");
    let journal = CrashBackend::File.open_journal(&dir).expect("open");
    let mut acked = BTreeMap::new();
    for counter in 0..5 {
        let record = PayloadKey {
            round: 1,
            thread: 0,
            counter,
            index: 0,
        }
        .new_record(0);
        let ack = journal
            .append_blocking(1, vec![record.clone()])
            .expect("append");
        acked.insert(ack.last_seq, AckLine::for_record(ack.last_seq, &record));
    }
    journal.shutdown().expect("shutdown");

    // A record acknowledged beyond the end of the journal.
    let mut lost = acked.clone();
    let mut beyond = lost[&5].clone();
    beyond.seq = 9;
    lost.insert(9, beyond);
    let err = reopen_and_verify(CrashBackend::File, &dir, 2, &mut lost, None)
        .err()
        .expect("a lost acknowledged seq must be reported");
    assert!(err.contains("acknowledged seq 9 is missing"), "{err}");

    // An acknowledged record whose payload differs from what was acknowledged.
    let mut changed = acked.clone();
    changed.get_mut(&3).unwrap().payload_crc ^= 1;
    let err = reopen_and_verify(CrashBackend::File, &dir, 3, &mut changed, None)
        .err()
        .expect("a changed acknowledged record must be reported");
    assert!(err.contains("seq 3 changed"), "{err}");

    // A chain that no longer matches what an earlier round verified.
    let forged = Checkpoint {
        seq: 4,
        digest: [7; 32],
    };
    let err = reopen_and_verify(CrashBackend::File, &dir, 4, &mut acked, Some(&forged))
        .err()
        .expect("a changed chain digest must be reported");
    assert!(err.contains("at seq 4 changed"), "{err}");

    // The failed checks appended nothing; an intact journal passes and takes an append.
    let ok = reopen_and_verify(CrashBackend::File, &dir, 5, &mut acked, None).expect("intact");
    assert_eq!(ok.checkpoint.seq, 6);
    assert_eq!(ok.records, 5);
}
