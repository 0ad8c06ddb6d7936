//! Running one parsed `crescent` command. Returns the exit status on success (0, or 1 for a
//! "no" answer such as `exist` of an absent key).

use std::io::{Read, Write};

use crescent_wire::segments::{MountSegmentRequest, SegmentList};
use serde_json::{json, Value};

use super::{Cli, Command, SegmentsCommand};
use crate::bench::{self, BenchConfig};
use crate::objects;
use crescent_client::ClientError;
use crescent_client::CrescentClient;
use crescent_owner::{Owner, OwnerConfig};

pub(crate) fn print_json(v: &impl serde::Serialize) -> Result<(), ClientError> {
    outln!("{}", serde_json::to_string(v).expect("json output"))
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClientError {
    let context = context.into();
    move |source| ClientError::Io { context, source }
}

pub(crate) fn read_input(file: &str) -> Result<Vec<u8>, ClientError> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(io_err("reading stdin"))?;
        Ok(buf)
    } else {
        std::fs::read(file).map_err(io_err(format!("reading {file}")))
    }
}

fn print_segments(list: &SegmentList) -> Result<(), ClientError> {
    outln!(
        "{:<24} {:<24} {:>14} {:>14}  TRANSPORT",
        "SEGMENT",
        "OWNER",
        "BASE",
        "SIZE"
    )?;
    for s in &list.segments {
        outln!(
            "{:<24} {:<24} {:>14} {:>14}  {:?}",
            s.segment_id,
            s.owner_id,
            s.base,
            s.size,
            s.transport
        )?;
    }
    outln!(
        "{} segment(s), {} owner(s)",
        list.segments.len(),
        list.owners.len()
    )?;
    Ok(())
}

/// SIGINT and SIGTERM handlers, installed before a long-running command reports that it is
/// ready: a signal that arrives after the ready line must stop it cleanly, not kill it with the
/// default disposition.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> Result<Self, ClientError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())
                .map_err(io_err("installing the SIGINT handler"))?,
            terminate: signal(SignalKind::terminate())
                .map_err(io_err("installing the SIGTERM handler"))?,
        })
    }

    /// Waits for the first of SIGINT or SIGTERM.
    async fn wait(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// The commands answered without crescentd (completion, man pages, offline tokens) or by the
/// mesh client; the rest get their `Cli` back.
async fn run_unconnected(cli: Cli) -> Result<Result<u8, ClientError>, Cli> {
    match &cli.command {
        Command::Completion { shell } => return Ok(super::docs_out::completion(*shell)),
        Command::Man { dir } => return Ok(super::docs_out::man_pages(dir, cli.json)),
        Command::Token { command } => {
            if let Some(done) = super::token::run_offline(command, cli.tenant.as_deref(), cli.json)
            {
                return Ok(done);
            }
        }
        _ => {}
    }
    if cli.mesh.is_some() || matches!(cli.command, Command::Mesh { .. }) {
        return Ok(super::mesh::run(cli).await);
    }
    Err(cli)
}

/// The client of crescentd, in the CLI's tenant and domain, and the registry its metrics go to
/// (only for an owner with a metrics listener: it exports the client's families, its
/// heartbeats, replays and transfers, on the registry it serves).
async fn connect(cli: &Cli) -> Result<(CrescentClient, Option<prometheus::Registry>), ClientError> {
    let registry = matches!(
        cli.command,
        Command::Owner {
            metrics_listen: Some(_),
            ..
        }
    )
    .then(prometheus::Registry::new);
    let client = match &registry {
        Some(registry) => {
            CrescentClient::connect_with_registry(cli.client_options(), registry).await?
        }
        None => CrescentClient::connect(cli.client_options()).await?,
    }
    .with_scope(cli.tenant.as_deref(), cli.domain.as_deref())?;
    Ok((client, registry))
}

pub(super) async fn run(cli: Cli) -> Result<u8, ClientError> {
    let cli = match run_unconnected(cli).await {
        Ok(done) => return done,
        Err(cli) => cli,
    };
    let (client, registry) = connect(&cli).await?;
    let json = cli.json;
    match cli.command {
        // Answered before connecting, above.
        Command::Completion { .. } | Command::Man { .. } | Command::Mesh { .. } => {}
        Command::Weights { command } => {
            let done = super::weights::run(&client, cli.tenant.as_deref(), json, command).await;
            // Reads release their leases without waiting: make sure they ran before exiting.
            client.settle().await;
            return done;
        }
        Command::Put {
            key,
            file,
            upsert,
            replicas,
        } => {
            objects::put(&client, &key, &file, upsert, replicas, json).await?;
        }
        Command::Get { key, output } => {
            objects::get(&client, &key, output.as_deref(), json).await?;
        }
        Command::Exist { key } => return objects::exist(&client, &key, json).await,
        Command::Rm { key, force } => objects::rm(&client, &key, force, json).await?,
        Command::Ls { prefix } => {
            objects::ls(&client, prefix.as_deref().unwrap_or(""), json).await?
        }
        Command::Segments { command } => segments(&client, command, json).await?,
        Command::Admin { command } => return super::admin::run(&client, command, json).await,
        Command::Token { command } => return super::token::run(&client, command, json).await,
        Command::Tenant { command } => {
            return super::tenant::run(&client, cli.tenant.as_deref(), command, json).await
        }
        Command::Status => status(&client, json).await?,
        Command::Cold { command } => return super::cold::cold(&client, command, json).await,
        Command::Offload { key } => super::cold::print_object(&client.offload(&key).await?, json)?,
        Command::Evict { key, hot } => objects::evict(&client, &key, hot, json).await?,
        Command::Stat { key } => super::cold::print_object(&client.stat(&key).await?, json)?,
        Command::Health => print_json(&client.health().await?)?,
        Command::Owner {
            size,
            listen,
            advertise,
            id,
            resident,
            cold_device,
            cold_staging_bytes,
            cold_staging_ttl_ms,
            metrics_listen,
            transport,
        } => {
            let config = OwnerConfig {
                owner_id: id,
                size,
                listen,
                advertise,
                resident,
                cold_devices: cold_device,
                cold_staging_bytes,
                cold_staging_ttl_ms,
                transport: transport.into(),
                ..OwnerConfig::default()
            };
            let metrics = match (metrics_listen, registry) {
                (Some(addr), Some(registry)) => Some(start_metrics_listener(addr, registry).await?),
                _ => None,
            };
            serve_owner(&client, config, metrics, json).await?;
        }
        Command::Bench {
            n,
            size,
            batch,
            only,
            owner_token,
            owner_id,
        } => {
            let config =
                BenchConfig::from_args(n, size, batch, &only, owner_token, owner_id, json)?;
            run_bench(&client, &config, json).await?;
        }
    }
    Ok(0)
}

/// `crescent bench`: runs the phases and shows the report.
async fn run_bench(
    client: &CrescentClient,
    config: &BenchConfig,
    json: bool,
) -> Result<(), ClientError> {
    print_bench(&bench::run(client, config).await?, json)
}

/// A bench report as JSON or its one line of text.
pub(crate) fn print_bench(r: &bench::BenchReport, json: bool) -> Result<(), ClientError> {
    if json {
        print_json(r)
    } else {
        outln!("{}", r.text())
    }
}

/// `crescent status`: the node's role, term, gate, rebuild, replication and journal health.
/// `status` in text: the journal and store figures of `/stats`, sizes for people.
fn print_stats_text(stats: &Value) -> Result<(), ClientError> {
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or_default();
    let size = |v: &Value, k: &str| crescent_client::size::format_size(num(v, k));
    if let Some(j) = stats.get("journal") {
        outln!(
            "journal: seqs {}..{}, durable {}, term {}",
            num(j, "first_seq"),
            num(j, "last_seq"),
            num(j, "durable_seq"),
            num(j, "term")
        )?;
    }
    if let Some(s) = stats.get("store") {
        outln!(
            "store: {} objects, {} used of {}, {} segments, {} owners, {} puts in progress",
            num(s, "objects"),
            size(s, "bytes_used"),
            size(s, "bytes_capacity"),
            num(s, "segments"),
            num(s, "owners"),
            num(s, "puts_in_progress")
        )?;
    }
    Ok(())
}

async fn status(client: &CrescentClient, json: bool) -> Result<(), ClientError> {
    let health = client.health().await?;
    // A standby answers /stats with NOT_LEADER: its status is in /healthz alone.
    let stats = client.stats().await.ok();
    let field = |k: &str| health.get(k).cloned().unwrap_or_default();
    let replication = health
        .get("ha")
        .or_else(|| health.get("replication"))
        .cloned()
        .unwrap_or_default();
    if json {
        return print_json(&json!({
            "role": field("role"),
            "term": field("term"),
            "commit_seq": field("commit_seq"),
            "gate": field("gate"),
            "rebuild": field("rebuild"),
            "replication": replication,
            "journal": field("journal"),
            "health": health,
            "stats": stats,
        }));
    }
    let text = |v: Value| match v {
        Value::String(s) => s,
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    outln!(
        "server {}: {} (role {}, term {}, commit seq {}, gate {})",
        client.server(),
        text(field("status")),
        text(field("role")),
        text(field("term")),
        text(field("commit_seq")),
        text(field("gate")),
    )?;
    if let Some(r) = health.get("rebuild") {
        outln!(
            "rebuild: owners {}/{} completed",
            text(r.get("owners_completed").cloned().unwrap_or_default()),
            text(r.get("owners_expected").cloned().unwrap_or_default()),
        )?;
    }
    if let Value::Object(fields) = &replication {
        let pairs: Vec<String> = fields
            .iter()
            .filter(|(_, v)| !v.is_object() && !v.is_array())
            .map(|(k, v)| format!("{k} {}", text(v.clone())))
            .collect();
        outln!("replication: {}", pairs.join(", "))?;
    }
    if let Some(j) = health.get("journal").filter(|j| !j.is_null()) {
        outln!("WARNING journal quarantine (see crescent-replay verify): {j}")?;
    }
    if let Some(stats) = stats {
        print_stats_text(&stats)?;
    }
    Ok(())
}

/// `crescent owner`: serves a segment as a storage owner until SIGINT or SIGTERM, then
/// unmounts it.
/// Binds the owner's metrics listener (before the owner starts, so a bad address fails at
/// once) and serves it in the background; the bound address.
async fn start_metrics_listener(
    addr: std::net::SocketAddr,
    registry: prometheus::Registry,
) -> Result<std::net::SocketAddr, ClientError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(io_err("binding --metrics-listen"))?;
    let bound = listener
        .local_addr()
        .map_err(io_err("reading the metrics listener's address"))?;
    let source = crescent_observe::metrics_http::MetricsSource::new(registry)
        .map_err(|e| ClientError::InvalidArgument(format!("cannot register metrics: {e}")))?;
    tokio::spawn(crescent_observe::metrics_http::serve(listener, source));
    Ok(bound)
}

async fn serve_owner(
    client: &CrescentClient,
    config: OwnerConfig,
    metrics: Option<std::net::SocketAddr>,
    json: bool,
) -> Result<(), ClientError> {
    let stop = StopSignals::install()?;
    let owner = Owner::start(client, config).await?;
    if json {
        print_json(
            &json!({"owner_id": owner.owner_id(), "segment_id": owner.segment_id(),
            "endpoint": owner.endpoint(), "size": owner.size(),
            "incarnation": owner.incarnation(), "transport": owner.transport(),
            "cold_devices": owner.cold_device_ids(),
            "metrics": metrics.map(|a| a.to_string())}),
        )?;
    } else {
        outln!(
            "owner {} serving segment {} ({} bytes) at {}{}",
            owner.owner_id(),
            owner.segment_id(),
            owner.size(),
            owner.endpoint(),
            metrics
                .map(|a| format!(", metrics at http://{a}/metrics"))
                .unwrap_or_default()
        )?;
    }
    std::io::stdout()
        .flush()
        .map_err(io_err("writing stdout"))?;
    stop.wait().await;
    let dropped = owner.shutdown().await?;
    if json {
        print_json(&json!({"stopped": true, "dropped_replicas": dropped}))
    } else {
        outln!("unmounted; {dropped} owned replica(s) dropped")
    }
}

async fn segments(
    client: &CrescentClient,
    command: SegmentsCommand,
    json: bool,
) -> Result<(), ClientError> {
    match command {
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
            if json {
                print_json(&reply)?;
            } else if reply.events.is_empty() {
                outln!("segment {segment} already mounted (no change)")?;
            } else {
                outln!("mounted {segment} (seq {:?})", reply.last_seq.unwrap_or(0))?;
            }
        }
        SegmentsCommand::Unmount { segment } => {
            let reply = client.unmount_segment(&segment).await?;
            if json {
                print_json(&reply)?;
            } else {
                outln!("unmounted {segment}")?;
            }
        }
        SegmentsCommand::Ls => {
            let list = client.list_segments().await?;
            if json {
                print_json(&list)?;
            } else {
                print_segments(&list)?;
            }
        }
    }
    Ok(())
}
