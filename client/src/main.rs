//! `crescent`: the command-line client. Every command takes `--json` for scripts; errors print
//! their stable code and exit non-zero.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use crescent_client::{ClientError, CrescentClient};
use crescent_wire::segments::{MountSegmentRequest, SegmentList, TransportKind};

#[derive(Debug, Parser)]
#[command(name = "crescent", version, about = "Crescent client")]
struct Cli {
    /// crescentd address (HOST:PORT).
    #[arg(
        long,
        global = true,
        env = "CRESCENT_SERVER",
        default_value = "127.0.0.1:7480"
    )]
    server: String,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Storage segments (admin).
    Segments {
        #[command(subcommand)]
        command: SegmentsCommand,
    },
    /// The server's health.
    Health,
}

#[derive(Debug, Subcommand)]
enum SegmentsCommand {
    /// Mount a segment for an owner (registering the owner if it is new).
    Mount {
        #[arg(long)]
        owner: String,
        #[arg(long)]
        segment: String,
        /// Segment size in bytes.
        #[arg(long)]
        size: u64,
        /// Base address of the segment in the owner's memory.
        #[arg(long, default_value_t = 0)]
        base: u64,
        #[arg(long, value_enum, default_value = "tcp")]
        transport: TransportArg,
    },
    /// Unmount a segment.
    Unmount {
        #[arg(long)]
        segment: String,
    },
    /// List owners and mounted segments.
    Ls,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum TransportArg {
    Tcp,
    TransferEngine,
    Embedded,
}

impl From<TransportArg> for TransportKind {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Tcp => TransportKind::Tcp,
            TransportArg::TransferEngine => TransportKind::TransferEngine,
            TransportArg::Embedded => TransportKind::Embedded,
        }
    }
}

fn print_json(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string_pretty(v).expect("json output"));
}

fn print_segments(list: &SegmentList) {
    println!(
        "{:<24} {:<24} {:>14} {:>14}  TRANSPORT",
        "SEGMENT", "OWNER", "BASE", "SIZE"
    );
    for s in &list.segments {
        println!(
            "{:<24} {:<24} {:>14} {:>14}  {:?}",
            s.segment_id, s.owner_id, s.base, s.size, s.transport
        );
    }
    println!(
        "{} segment(s), {} owner(s)",
        list.segments.len(),
        list.owners.len()
    );
}

async fn run(cli: Cli) -> Result<(), ClientError> {
    let client = CrescentClient::new(&cli.server)?;
    match cli.command {
        Command::Health => {
            let h = client.health().await?;
            print_json(&h);
        }
        Command::Segments { command } => match command {
            SegmentsCommand::Mount {
                owner,
                segment,
                size,
                base,
                transport,
            } => {
                let reply = client
                    .mount_segment(&MountSegmentRequest {
                        owner_id: owner,
                        segment_id: segment.clone(),
                        base,
                        size,
                        transport: transport.into(),
                    })
                    .await?;
                if cli.json {
                    print_json(&reply);
                } else if reply.events.is_empty() {
                    println!("segment {segment} already mounted (no change)");
                } else {
                    println!("mounted {segment} (seq {:?})", reply.last_seq.unwrap_or(0));
                }
            }
            SegmentsCommand::Unmount { segment } => {
                let reply = client.unmount_segment(&segment).await?;
                if cli.json {
                    print_json(&reply);
                } else {
                    println!("unmounted {segment}");
                }
            }
            SegmentsCommand::Ls => {
                let list = client.list_segments().await?;
                if cli.json {
                    print_json(&list);
                } else {
                    print_segments(&list);
                }
            }
        },
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if json {
                let body =
                    serde_json::json!({"error": {"code": e.code_str(), "message": e.to_string()}});
                println!("{body}");
            }
            match &e {
                ClientError::Api(_) => eprintln!("crescent: {e}"),
                other => eprintln!("crescent: {}: {other}", other.code_str()),
            }
            ExitCode::from(match e {
                ClientError::InvalidArgument(_) => 2,
                ClientError::Connect { .. } => 3,
                _ => 1,
            })
        }
    }
}
