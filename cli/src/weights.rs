//! `crescent weights ...`: managed weight revisions (docs/weights.md). `put` takes a
//! .safetensors file or a directory of them; `get -o DIR` writes them back byte-identical.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use crescent_wire::weights as w;
use serde_json::json;

use super::progress::Progress;
use super::weights_args::weight_id;
use super::weights_args::{parse_policy, RevisionArgs, WeightIdArgs};
use crescent_client::weights::{WeightStore, WeightWriter};
use crescent_client::ClientError;
use crescent_client::CrescentClient;

/// How often `rm`, `migrate` and `upsert` poll a running operation.
const POLL: Duration = Duration::from_millis(200);

/// The values of `--mode` (`crescent_wire::weights::MigrationMode`), listed in `--help` and
/// completion scripts.
const MIGRATION_MODES: [&str; 3] = ["pinned", "manual", "auto"];

#[derive(Debug, Subcommand)]
pub enum WeightsCommand {
    /// Model-shaped round trip (put, MIXED, COLD, HOT, upsert, remove; byte-identical reads)
    /// and the weight_get benchmark against plain gets of the same bytes.
    Bench(super::weights_bench::WeightsBenchArgs),
    /// Import a .safetensors file (or a directory of them) as a READY revision.
    Put {
        #[command(flatten)]
        id: WeightIdArgs,
        /// hot, cold, mixed or mixed:RATIO (default: the cluster's).
        #[arg(long)]
        policy: Option<String>,
        /// The migration mode (whether and how the revision may move between tiers).
        #[arg(long, value_parser = MIGRATION_MODES)]
        mode: Option<String>,
        /// A .safetensors file, or a directory of them.
        path: PathBuf,
    },
    /// Read a revision (under a lease) and write its files into DIR byte-identical, or with
    /// --tp-size/--tp-rank only one tensor-parallel rank's shards (NAME.tp-R-of-N.safetensors).
    Get {
        #[command(flatten)]
        id: WeightIdArgs,
        /// The directory to write the revision's files into (created if missing).
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        tp: super::weights_get::TpArgs,
    },
    /// A revision's metadata (availability, residency, generation, observed HOT ratio).
    Meta {
        #[command(flatten)]
        id: WeightIdArgs,
    },
    /// List revisions (metadata only, every page).
    Ls {
        /// Only revisions in this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Only revisions of this resource (with --namespace).
        #[arg(long)]
        resource: Option<String>,
    },
    /// Change a revision's storage policy.
    Policy {
        #[command(flatten)]
        id: WeightIdArgs,
        /// The new residency: hot, cold, mixed or mixed:RATIO (unchanged when left out).
        #[arg(long)]
        policy: Option<String>,
        /// The new migration mode (unchanged when left out).
        #[arg(long, value_parser = MIGRATION_MODES)]
        mode: Option<String>,
        /// Refuse (CONFLICT) unless the revision's metadata generation is this one.
        #[arg(long)]
        expected_generation: Option<u64>,
    },
    /// Migrate a revision's residency and wait for the migration to finish.
    Migrate {
        #[command(flatten)]
        id: WeightIdArgs,
        /// hot, cold, mixed or mixed:RATIO.
        #[arg(long)]
        to: String,
        /// Refuse (CONFLICT) unless the revision's metadata generation is this one.
        #[arg(long)]
        expected_generation: Option<u64>,
        /// Give up waiting after this many seconds (the migration goes on in crescentd).
        #[arg(long, default_value_t = 600)]
        wait_secs: u64,
    },
    /// Replace generation OLD of a revision by NEW imported from PATH; waits for the claim.
    Upsert {
        #[command(flatten)]
        id: RevisionArgs,
        /// The new generation.
        #[arg(long)]
        generation: u64,
        /// The generation being replaced.
        #[arg(long)]
        replacing: u64,
        /// Whether the new generation is imported before the old one is deleted, or after.
        #[arg(long, default_value = "put-first", value_parser = ["put-first", "delete-first"])]
        upsert_mode: String,
        /// The new generation's residency: hot, cold, mixed or mixed:RATIO (default: the
        /// cluster's).
        #[arg(long)]
        policy: Option<String>,
        /// The new generation's migration mode.
        #[arg(long, value_parser = MIGRATION_MODES)]
        mode: Option<String>,
        /// Give up waiting after this many seconds (the claim goes on in crescentd).
        #[arg(long, default_value_t = 600)]
        wait_secs: u64,
        /// The new generation's .safetensors file, or a directory of them.
        path: PathBuf,
    },
    /// Show an operation (migration, repair, deletion).
    Op {
        /// The operation's id (as `weights meta` and the mutating commands print it).
        operation_id: String,
    },
    /// Delete a revision and wait for the deletion to finish.
    Rm {
        #[command(flatten)]
        id: WeightIdArgs,
        /// Give up waiting after this many seconds (the deletion goes on in crescentd).
        #[arg(long, default_value_t = 120)]
        wait_secs: u64,
    },
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> ClientError {
    move |source| ClientError::Io { context, source }
}

/// The .safetensors files of PATH (a file, or a directory's files in name order).
fn safetensors_files(path: &Path) -> Result<Vec<PathBuf>, ClientError> {
    let meta = std::fs::metadata(path).map_err(io_err(format!("reading {}", path.display())))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io_err(format!("listing {}", path.display())))? {
        let p = entry
            .map_err(io_err(format!("listing {}", path.display())))?
            .path();
        if p.is_file() && p.extension().is_some_and(|e| e == "safetensors") {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ClientError::InvalidArgument(format!(
            "{} holds no .safetensors file",
            path.display()
        )));
    }
    Ok(files)
}

/// Writes the files of PATH into the revision, one tensor at a time (resident memory: the
/// largest tensor, not the file), with a progress bar on a terminal.
async fn write_files(
    writer: &mut WeightWriter,
    path: &Path,
    json_out: bool,
) -> Result<(), ClientError> {
    let files = safetensors_files(path)?;
    let mut total = 0;
    for file in &files {
        total += std::fs::metadata(file)
            .map_err(io_err(format!("reading {}", file.display())))?
            .len();
    }
    let progress = Progress::new("put", total, json_out);
    let mut done = 0;
    for file in files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| {
                ClientError::InvalidArgument(format!("{} has no UTF-8 file name", file.display()))
            })?
            .to_string();
        writer
            .add_safetensors_file(&name, &file, |n| progress.add(n))
            .await?;
        done += std::fs::metadata(&file)
            .map_err(io_err(format!("reading {}", file.display())))?
            .len();
        progress.set(done);
    }
    progress.finish();
    Ok(())
}

pub(crate) fn print_meta(m: &w::WeightMetadata, json_out: bool) -> Result<(), ClientError> {
    if json_out {
        outln!("{}", serde_json::to_string(m).expect("json output"))?;
    } else {
        outln!(
            "{}/{}/{} generation {}: {} {} (hot ratio {:.3}), metadata generation {}, {} bytes",
            m.id.namespace,
            m.id.resource_id,
            m.id.revision,
            m.id.generation,
            m.availability,
            m.residency,
            m.observed_hot_ratio,
            m.metadata_generation,
            m.logical_bytes.unwrap_or(0)
        )?;
    }
    Ok(())
}

fn print_op(op: &w::OperationReply, json_out: bool) -> Result<(), ClientError> {
    if json_out {
        outln!("{}", serde_json::to_string(op).expect("json output"))?;
    } else {
        outln!(
            "{} {} {} ({} of {} members, {} bytes done)",
            op.operation_id,
            op.kind,
            op.status,
            op.members_done,
            op.members_total.map_or("?".into(), |n| n.to_string()),
            op.bytes_done
        )?;
    }
    Ok(())
}

/// Polls an operation until it is no longer RUNNING (or `wait` passes).
async fn wait_op(
    store: &WeightStore,
    mut op: w::OperationReply,
    wait: Duration,
) -> Result<w::OperationReply, ClientError> {
    let deadline = tokio::time::Instant::now() + wait;
    while op.status == "RUNNING" && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        op = store.weight_get_operation(&op.operation_id).await?;
    }
    Ok(op)
}

/// Drives a replacement claim: imports the target when the claim asks for it, then polls the
/// claim until it is done, failed, or `wait` passes.
async fn upsert(
    store: &WeightStore,
    req: &w::UpsertRequest,
    path: &Path,
    wait: Duration,
    json_out: bool,
) -> Result<w::UpsertReply, ClientError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut reply = store.weight_upsert(req).await?;
    let status = w::UpsertStatusRequest {
        tenant: req.base.tenant.clone(),
        namespace: req.base.namespace.clone(),
        resource_id: req.base.resource_id.clone(),
        revision: req.base.revision.clone(),
        request_id: reply.request_id.clone(),
    };
    let mut imported = false;
    while reply.next_step != "done" && reply.failure.is_none() {
        if reply.next_step == "import_target" && !imported {
            let mut writer = store
                .weight_put_with(w::PutBeginRequest {
                    id: reply.target.clone(),
                    policy: req.policy,
                    request_id: Some(reply.request_id.clone()),
                })
                .await?;
            write_files(&mut writer, path, json_out).await?;
            writer.close().await?;
            imported = true;
        } else if tokio::time::Instant::now() >= deadline {
            break;
        } else {
            tokio::time::sleep(POLL).await;
        }
        reply = store.weight_upsert_status(&status).await?;
    }
    Ok(reply)
}

pub(super) async fn run(
    client: &CrescentClient,
    tenant: Option<&str>,
    json_out: bool,
    command: WeightsCommand,
) -> Result<u8, ClientError> {
    let store = WeightStore::new(client);
    match command {
        WeightsCommand::Bench(args) => return bench(client, &store, tenant, &args, json_out).await,
        WeightsCommand::Put {
            id,
            policy,
            mode,
            path,
        } => {
            let policy = parse_policy(policy.as_deref(), mode.as_deref())?;
            let mut writer = store.weight_put(id.id(tenant), policy).await?;
            write_files(&mut writer, &path, json_out).await?;
            print_meta(&writer.close().await?, json_out)?;
        }
        WeightsCommand::Get { id, output, tp } => {
            let wid = id.id(tenant);
            super::weights_get::get(client, &store, &wid, &output, &tp, json_out).await?;
        }
        WeightsCommand::Meta { id } => {
            print_meta(&store.weight_get_metadata(&id.id(tenant)).await?, json_out)?;
        }
        WeightsCommand::Ls {
            namespace,
            resource,
        } => {
            list(&store, tenant, namespace, resource, json_out).await?;
        }
        WeightsCommand::Policy {
            id,
            policy,
            mode,
            expected_generation,
        } => {
            let policy = parse_policy(policy.as_deref(), mode.as_deref())?.ok_or_else(|| {
                ClientError::InvalidArgument("give --policy and/or --mode".into())
            })?;
            let req = w::UpdatePolicyRequest {
                id: id.id(tenant),
                policy,
                expected_metadata_generation: expected_generation,
            };
            print_meta(&store.weight_update_policy(&req).await?, json_out)?;
        }
        WeightsCommand::Migrate {
            id,
            to,
            expected_generation,
            wait_secs,
        } => {
            let req = migrate_request(id.id(tenant), &to, expected_generation)?;
            let op = store.weight_migrate(&req).await?;
            return finish_op(&store, op, wait_secs, json_out).await;
        }
        WeightsCommand::Upsert {
            id,
            generation,
            replacing,
            upsert_mode,
            policy,
            mode,
            wait_secs,
            path,
        } => {
            let req = w::UpsertRequest {
                base: weight_id(tenant, &id, replacing),
                target_generation: generation,
                mode: parse_upsert_mode(&upsert_mode)?,
                expected_base_metadata_generation: None,
                request_id: None,
                policy: parse_policy(policy.as_deref(), mode.as_deref())?,
            };
            let wait = Duration::from_secs(wait_secs);
            let reply = upsert(&store, &req, &path, wait, json_out).await?;
            return print_upsert(&reply, json_out);
        }
        WeightsCommand::Op { operation_id } => {
            print_op(&store.weight_get_operation(&operation_id).await?, json_out)?;
        }
        WeightsCommand::Rm { id, wait_secs } => {
            let op = store
                .weight_remove(&w::RemoveWeightRequest {
                    id: id.id(tenant),
                    expected_metadata_generation: None,
                })
                .await?;
            return finish_op(&store, op, wait_secs, json_out).await;
        }
    }
    Ok(0)
}

/// `crescent weights bench`: the lifecycle steps and the weight_get ratio; 1 unless every
/// read was byte-identical.
async fn bench(
    client: &CrescentClient,
    store: &WeightStore,
    tenant: Option<&str>,
    args: &super::weights_bench::WeightsBenchArgs,
    json_out: bool,
) -> Result<u8, ClientError> {
    let report = super::weights_bench::run(client, store, tenant, args).await?;
    if json_out {
        outln!("{}", serde_json::to_string(&report).expect("json output"))?;
    } else {
        for s in &report.lifecycle {
            outln!(
                "{:<14} {:<6} hot {:.3}  byte-identical {}  {:.2}s",
                s.step,
                s.residency,
                s.observed_hot_ratio,
                s.byte_identical,
                s.seconds
            )?;
        }
        outln!(
            "weight_get {:.3} GiB/s, plain get {:.3} GiB/s, ratio {:.3}; first of each \
             {:.3} / {:.3} GiB/s ({} objects, {} bytes)",
            report.weight_get_gib_s,
            report.plain_get_gib_s,
            report.ratio,
            report.first_weight_get_gib_s,
            report.first_plain_get_gib_s,
            report.payload_objects,
            report.payload_bytes
        )?;
    }
    Ok(if report.all_byte_identical { 0 } else { 1 })
}

/// `crescent weights ls`: every page of the listing.
/// Every revision of `tenant` (and of `namespace` and `resource_id` when named), from the
/// first page on.
pub(crate) fn list_request(
    tenant: Option<&str>,
    namespace: Option<String>,
    resource_id: Option<String>,
) -> w::WeightListRequest {
    w::WeightListRequest {
        tenant: tenant.map(str::to_string),
        namespace,
        resource_id,
        after: None,
        limit: None,
    }
}

async fn list(
    store: &WeightStore,
    tenant: Option<&str>,
    namespace: Option<String>,
    resource_id: Option<String>,
    json_out: bool,
) -> Result<(), ClientError> {
    let req = list_request(tenant, namespace, resource_id);
    let all = store.weight_list_all(&req).await?;
    if json_out {
        return outln!("{}", json!({"revisions": all}));
    }
    for m in &all {
        print_meta(m, false)?;
    }
    outln!("{} revision(s)", all.len())
}

/// Waits up to `wait_secs` for `op` to finish and shows it; 1 unless it succeeded.
async fn finish_op(
    store: &WeightStore,
    op: w::OperationReply,
    wait_secs: u64,
    json_out: bool,
) -> Result<u8, ClientError> {
    let op = wait_op(store, op, Duration::from_secs(wait_secs)).await?;
    print_op(&op, json_out)?;
    Ok(if op.status == "SUCCEEDED" { 0 } else { 1 })
}

/// The request of `crescent weights migrate --to TARGET` (hot, cold, mixed or mixed:RATIO).
fn migrate_request(
    id: w::WeightId,
    to: &str,
    expected_generation: Option<u64>,
) -> Result<w::MigrateRequest, ClientError> {
    let target = parse_policy(Some(to), None)?.unwrap_or_default();
    let to = target
        .preferred_residency
        .ok_or_else(|| ClientError::InvalidArgument("--to needs hot, cold or mixed".into()))?;
    Ok(w::MigrateRequest {
        id,
        to,
        hot_ratio: target.mixed_hot_ratio,
        expected_metadata_generation: expected_generation,
    })
}

fn parse_upsert_mode(text: &str) -> Result<w::UpsertMode, ClientError> {
    match text.to_ascii_lowercase().as_str() {
        "put-first" | "put_first" => Ok(w::UpsertMode::PutFirst),
        "delete-first" | "delete_first" => Ok(w::UpsertMode::DeleteFirst),
        other => Err(ClientError::InvalidArgument(format!(
            "upsert mode {other:?}: expected put-first or delete-first"
        ))),
    }
}

/// Shows an upsert's reply; 1 unless the claim is done without a failure.
fn print_upsert(reply: &w::UpsertReply, json_out: bool) -> Result<u8, ClientError> {
    if json_out {
        outln!("{}", serde_json::to_string(reply).expect("json output"))?;
    } else {
        outln!(
            "upsert {}: phase {}, next {}",
            reply.request_id,
            reply.phase,
            reply.next_step
        )?;
    }
    Ok(if reply.next_step != "done" || reply.failure.is_some() {
        1
    } else {
        0
    })
}
