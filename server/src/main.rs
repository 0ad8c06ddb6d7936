//! crescentd entry point: parse flags, resolve the configuration, run the node.

use std::path::Path;

use clap::Parser;
use crescent_server::cli::Args;
use crescent_server::config::LogFormat;
use crescent_server::Node;

/// mimalloc instead of the system allocator: the object directory's small, short-lived
/// allocations (keys, replies, batch vectors) spent a quarter of crescentd's batch put time in
/// glibc's malloc and free (docs/performance.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `--log` / `CRESCENT_LOG`, else `RUST_LOG`, else the config file's `log.level`
/// (docs/configuration.md).
fn init_tracing(explicit: Option<&str>, level: &str, format: LogFormat) {
    let format = match format {
        LogFormat::Text => crescent_observe::logging::LogFormat::Text,
        LogFormat::Json => crescent_observe::logging::LogFormat::Json,
    };
    crescent_observe::logging::init(explicit, level, format);
}

/// Restores the data dir from `backup`, or exits 1 naming the refusal's stable code.
fn restore(backup: &Path, data_dir: &Path) {
    match crescent_replay_tools::backup::restore(backup, data_dir) {
        Ok(m) => {
            tracing::info!(backup = %backup.display(), data_dir = %data_dir.display(),
                seq = m.seq, term = m.term, "data dir restored from a backup");
            eprintln!(
                "crescentd: restored {} from {} (seq {}, term {})",
                data_dir.display(),
                backup.display(),
                m.seq,
                m.term
            );
        }
        Err(e) => {
            tracing::error!(code = e.code(), error = %e, "restore refused");
            eprintln!("crescentd: restore refused: {}: {e}", e.code());
            std::process::exit(1);
        }
    }
}

fn main() {
    let args = Args::parse();
    let config = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crescentd: configuration error: {e}");
            std::process::exit(2);
        }
    };
    if args.print_config {
        print!("{}", config.to_toml());
        return;
    }
    init_tracing(args.log.as_deref(), &config.log.level, config.log.format);
    if let Some(backup) = &args.restore_from {
        restore(backup, &config.data_dir);
        if args.restore_only {
            return;
        }
    }
    let result = actix_rt::System::new().block_on(async move { Node::run(config).await });
    if let Err(e) = result {
        tracing::error!(error = %e, "crescentd stopped");
        eprintln!("crescentd: {e}");
        std::process::exit(e.exit_code());
    }
}
