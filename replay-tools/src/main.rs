//! `crescent-replay dump|verify|replay|diff|stats|quarantine ...`: reads a crescentd data dir
//! offline and never writes to it, except `quarantine clear`, which removes the journal's
//! quarantine once an operator has dealt with it. Exit codes: 0 ok, 1 a fault found or data invalid, 2 bad
//! usage or an unreadable data dir.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use crescent_replay_tools::cmd::{diff, dump, quarantine, replay, stats, verify};
use crescent_replay_tools::{ToolError, EXIT_OK, EXIT_USAGE};

#[derive(Debug, Parser)]
#[command(
    name = "crescent-replay",
    version,
    about = "Inspect a crescentd data dir offline (read only: no lock, no writes, except `quarantine clear`)",
    after_help = "Exit codes: 0 ok, 1 a fault found or data invalid, 2 bad usage or unreadable data dir.\n\
                  Logs go to stderr; set CRESCENT_LOG (or RUST_LOG; default: warn) for more,\n\
                  CRESCENT_LOG_FORMAT=json for JSON lines."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One line per journal record, optionally filtered and decoded.
    Dump(dump::DumpArgs),
    /// Check frames, CRCs, seq continuity, the chain digest and every snapshot.
    Verify(verify::VerifyArgs),
    /// The state of every aggregate at a seq, as JSON.
    Replay(replay::ReplayArgs),
    /// The first seq at which two journals diverge.
    Diff(diff::DiffArgs),
    /// Counts, sizes, ranges, segments, snapshots and the tail's state.
    Stats(stats::StatsArgs),
    /// The journal tails crescentd quarantined: `list`, or `clear` once dealt with.
    Quarantine(quarantine::QuarantineArgs),
}

/// CRESCENT_LOG, else RUST_LOG, else warnings only; CRESCENT_LOG_FORMAT=json for JSON lines.
fn init_tracing() {
    crescent_observe::logging::init(
        None,
        "warn",
        crescent_observe::logging::LogFormat::from_env(),
    );
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap's help and version requests are not errors.
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { EXIT_OK });
        }
    };
    init_tracing();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = match &cli.command {
        Command::Dump(a) => dump::run(a, &mut out),
        Command::Verify(a) => verify::run(a, &mut out),
        Command::Replay(a) => replay::run(a, &mut out),
        Command::Diff(a) => diff::run(a, &mut out),
        Command::Stats(a) => stats::run(a, &mut out),
        Command::Quarantine(a) => quarantine::run(a, &mut out),
    };
    let flushed = out.flush().map_err(ToolError::from);
    match result.and_then(|code| flushed.map(|()| code)) {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`| head`): what it wanted was printed.
        Err(ToolError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            eprintln!("crescent-replay: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
