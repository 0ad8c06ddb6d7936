//! The journal crash test's victim: appends deterministic records from several threads and
//! prints an acknowledgement line for each record only once it is durable, until it is killed.
//!
//! Usage: `journal-crash-child <file|sled> <DIR> <ROUND> <THREADS>`
//!
//! Output on stdout (one line each, flushed): `READY <first_seq> <last_seq>` once the journal
//! is recovered, then `ACK ...` lines (see `crescent_tests::crash_payload::AckLine`). Every
//! appended record is written with term `ROUND`. Errors go to stderr with exit code 2. The
//! child gives up by itself after [`MAX_RUN`] so an orphan never runs forever.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crescent_journal::Journal;
use crescent_tests::crash_journal::CrashBackend;
use crescent_tests::crash_payload::{AckLine, PayloadKey};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_RUN: Duration = Duration::from_secs(60);

struct Args {
    backend: CrashBackend,
    dir: PathBuf,
    round: u32,
    threads: u32,
}

fn parse_args() -> Result<Args, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 4 {
        return Err("usage: journal-crash-child <file|sled> <DIR> <ROUND> <THREADS>".into());
    }
    let round: u32 = args[2]
        .parse()
        .map_err(|_| format!("ROUND {:?} is not a number", args[2]))?;
    let threads: u32 = args[3]
        .parse()
        .ok()
        .filter(|t| (1..=64).contains(t))
        .ok_or_else(|| format!("THREADS {:?} is not in 1..=64", args[3]))?;
    Ok(Args {
        backend: CrashBackend::parse(&args[0])?,
        dir: PathBuf::from(&args[1]),
        round,
        threads,
    })
}

fn fail(msg: &str) -> ! {
    eprintln!("journal-crash-child: {msg}");
    std::process::exit(2);
}

/// Writes `text` (whole lines) to stdout in one write and flushes it; exits if stdout is gone
/// (the parent died, so there is no-one left to acknowledge to).
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        std::process::exit(3);
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One appender: submit 1..=6 records, wait until durable, acknowledge, repeat.
fn appender(journal: Arc<Journal>, round: u32, thread: u32, deadline: Instant) {
    let mut rng = StdRng::seed_from_u64((u64::from(round) << 32) | u64::from(thread));
    let mut counter = 0u64;
    while Instant::now() < deadline {
        let count = if rng.gen_ratio(1, 4) {
            rng.gen_range(2..=6)
        } else {
            1
        };
        let ts = now_ms();
        let records: Vec<_> = (0..count)
            .map(|index| {
                PayloadKey {
                    round,
                    thread,
                    counter,
                    index,
                }
                .new_record(ts)
            })
            .collect();
        counter += 1;
        let ticket = journal
            .submit(u64::from(round), records.clone())
            .unwrap_or_else(|e| fail(&format!("thread {thread}: submit failed: {e}")));
        let ack = ticket
            .wait_blocking()
            .unwrap_or_else(|e| fail(&format!("thread {thread}: durability wait failed: {e}")));
        if ack.last_seq - ack.first_seq + 1 != records.len() as u64 {
            fail(&format!(
                "thread {thread}: {} records acknowledged as seqs {}..={}",
                records.len(),
                ack.first_seq,
                ack.last_seq
            ));
        }
        let mut lines = String::new();
        for (seq, record) in (ack.first_seq..=ack.last_seq).zip(&records) {
            lines.push_str(&AckLine::for_record(seq, record).format());
            lines.push('\n');
        }
        emit(&lines);
    }
}

fn main() {
    let args = parse_args().unwrap_or_else(|e| fail(&e));
    let deadline = Instant::now() + MAX_RUN;
    let journal = Arc::new(
        args.backend
            .open_journal(&args.dir)
            .unwrap_or_else(|e| fail(&e)),
    );
    emit(&format!(
        "READY {} {}\n",
        journal.first_seq(),
        journal.last_seq()
    ));
    let workers: Vec<_> = (0..args.threads)
        .map(|thread| {
            let journal = journal.clone();
            std::thread::spawn(move || appender(journal, args.round, thread, deadline))
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    fail("ran for its whole time limit without being killed");
}
