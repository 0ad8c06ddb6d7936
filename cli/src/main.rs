//! `crescent`: the command line on top of the client library (`crescent-client`) and the
//! storage-owner role. Every command takes `--json` for scripts; errors print their stable
//! code and exit non-zero (see [`crescent_client::ClientError::exit_code`]).

/// `println!` for the command's output: a closed or full stdout (EPIPE, ENOSPC) becomes an
/// IO_ERROR the command returns, where `println!` would panic.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_stdout_line(format_args!($($arg)*))
    };
}

mod admin;
mod bench;
mod bench_target;
mod cold;
mod cold_bench;
mod docs_out;
mod mesh;
mod mesh_bench;
mod mesh_drain;
mod objects;
mod progress;
mod run;
mod tenant;
mod tenant_mesh;
#[cfg(test)]
mod tests;
mod token;
mod weights;
mod weights_args;
mod weights_bench;
mod weights_get;
mod weights_mesh;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc, as in crescentd: the CLI's owner role and bench run the client library's hot
/// paths (docs/performance.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use crescent_client::size::parse_size;
use crescent_wire::segments::TransportKind;

/// The help heading of the options every command takes.
pub const GLOBAL_OPTIONS: &str = "Global options";

#[derive(Debug, Parser)]
#[command(name = "crescent", version, about = "Crescent client", after_help = EXIT_CODES)]
#[command(next_help_heading = GLOBAL_OPTIONS)]
pub struct Cli {
    /// crescentd address (HOST:PORT or an http:// or https:// URL), or a comma-separated list
    /// tried in order when one is unreachable [default: 127.0.0.1:7480 without --etcd].
    #[arg(long, global = true, env = "CRESCENT_SERVER")]
    pub server: Option<String>,
    /// etcd endpoints (URL[,URL]): find the HA pair's leader through its leader key and follow
    /// failovers. Needs --cluster.
    #[arg(long, global = true, env = "CRESCENT_ETCD", conflicts_with = "redis")]
    pub etcd: Option<String>,
    /// The Redis of an HA pair run with `crescentd --redis` (redis://HOST:PORT[/DB]): find
    /// and follow its leader there. Needs --cluster.
    #[arg(long, global = true, env = "CRESCENT_REDIS")]
    pub redis: Option<String>,
    /// A mesh of clusters (with --etcd or --redis; --cluster only in `mesh drain --cluster C`):
    /// each object request goes to its authority cluster's leader (docs/scale-out.md).
    #[arg(long, global = true, env = "CRESCENT_MESH")]
    pub mesh: Option<String>,
    /// The HA pair's cluster name (with --etcd or --redis).
    #[arg(long, global = true, env = "CRESCENT_CLUSTER")]
    pub cluster: Option<String>,
    /// How long one request follows a failover (retries included), in milliseconds.
    #[arg(
        long,
        global = true,
        env = "CRESCENT_FAILOVER_TIMEOUT_MS",
        default_value_t = 15_000
    )]
    pub failover_timeout_ms: u64,
    /// Tenant (default: `default`).
    #[arg(long, global = true, env = "CRESCENT_TENANT")]
    pub tenant: Option<String>,
    /// Domain within the tenant.
    #[arg(long, global = true, env = "CRESCENT_DOMAIN")]
    pub domain: Option<String>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// Never read cold-only objects from their device directory here: every restore goes
    /// through crescentd.
    #[arg(long, global = true, env = "CRESCENT_NO_LOCAL_COLD_RESTORE")]
    pub no_local_cold_restore: bool,
    /// The credential for a crescentd with [auth] on (see `crescent token issue`).
    #[arg(long, global = true, env = "CRESCENT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// PEM file of the CA that signed crescentd's certificate (crescentd `[tls]`): servers are
    /// verified against it, and a bare HOST:PORT is reached with https://.
    #[arg(long, global = true, env = "CRESCENT_CA_FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Store a file (or stdin with `-`) under KEY.
    Put {
        /// The object's key (in --tenant and --domain).
        key: String,
        /// File to read, `-` for stdin.
        file: String,
        /// Replace the key's content if it exists.
        #[arg(long)]
        upsert: bool,
        /// Replicas on distinct segments.
        #[arg(long, default_value_t = 1)]
        replicas: u32,
    },
    /// Fetch KEY to stdout or a file.
    Get {
        /// The object's key.
        key: String,
        /// Output file, `-` (default) for stdout.
        #[arg(short, long)]
        output: Option<String>,
    },
    /// Whether KEY exists (exit status 0 if it does, 1 if not).
    Exist {
        /// The object's key.
        key: String,
    },
    /// Remove KEY.
    Rm {
        /// The object's key.
        key: String,
        /// Remove even while read-leased.
        #[arg(long)]
        force: bool,
    },
    /// List keys (all pages), optionally under PREFIX.
    Ls {
        /// Only keys that start with PREFIX.
        prefix: Option<String>,
    },
    /// Storage segments (admin).
    Segments {
        #[command(subcommand)]
        command: SegmentsCommand,
    },
    /// Server health and statistics.
    Status,
    /// The server's health document.
    Health,
    /// Run a storage owner (mount a segment, serve transfers, heartbeat) until SIGINT/SIGTERM.
    Owner {
        /// Segment size (bytes; K, M, G suffixes are powers of 1024).
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// Transfer listener address.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Address peers should dial, if not the listener's.
        #[arg(long)]
        advertise: Option<String>,
        /// Owner id (stable across restarts); default `owner-<random>`.
        #[arg(long)]
        id: Option<String>,
        /// Commit the segment's memory at start instead of page by page on first write (no
        /// page faults on the write path; the whole size is resident from the start).
        #[arg(long)]
        resident: bool,
        /// A cold device this owner serves: `ID=DIR[,capacity=SIZE][,tags=a+b]` (repeatable).
        /// crescentd places and drives it; this process performs its IO.
        #[arg(long = "cold-device", value_parser = crescent_owner::cold_device::OwnerColdDeviceConfig::parse)]
        cold_device: Vec<crescent_owner::cold_device::OwnerColdDeviceConfig>,
        /// Bytes of the staging region remote restores of this owner's cold devices are
        /// read from (K, M, G suffixes; 0: none, the payload then goes through crescentd).
        #[arg(long, value_parser = parse_size, default_value = "128M")]
        cold_staging_bytes: u64,
        /// How long a remote reader may hold a staged payload (ms) before it is fenced.
        #[arg(long, default_value_t = crescent_owner::owner_staging::DEFAULT_OWNER_STAGING_TTL_MS)]
        cold_staging_ttl_ms: u64,
        /// Serve this owner's metrics (`GET /metrics`, Prometheus text) and `GET /healthz` on
        /// IP:PORT (port 0: any free one; the ready line names it). Off when not given.
        #[arg(long)]
        metrics_listen: Option<std::net::SocketAddr>,
        /// How peers reach the segment: `tcp` (this process's transfer listener), or
        /// `transfer-engine` (the library named by CRESCENT_TRANSFER_ENGINE_LIB).
        #[arg(long, value_enum, default_value = "tcp")]
        transport: TransportArg,
    },
    /// Cold tier devices.
    Cold {
        #[command(subcommand)]
        command: cold::ColdCommand,
    },
    /// Materialize KEY on a cold device now.
    Offload {
        /// The object's key.
        key: String,
    },
    /// Drop KEY's hot replicas (`--hot`); refused unless its cold copy is materialized.
    Evict {
        /// The object's key.
        key: String,
        /// Evict the hot (DRAM) replicas.
        #[arg(long)]
        hot: bool,
    },
    /// KEY's replicas and cold backing state.
    Stat {
        /// The object's key.
        key: String,
    },
    /// Tenant quota policy and usage (--tenant).
    Tenant {
        #[command(subcommand)]
        command: tenant::TenantCommand,
    },
    /// Credentials: issue (offline, with the key file) and revoke (admin).
    Token {
        #[command(subcommand)]
        command: token::TokenCommand,
    },
    /// Operations: snapshot now, back up the data dir (admin).
    Admin {
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell): for example
    /// `crescent completion bash > /etc/bash_completion.d/crescent`.
    Completion {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages (crescent.1 and one per subcommand) into a directory.
    Man {
        /// Where to write the pages (created if missing).
        #[arg(long, default_value = ".")]
        dir: std::path::PathBuf,
    },
    /// The mesh of clusters (with --mesh): `ls`, `drain`.
    Mesh {
        #[command(subcommand)]
        command: mesh::MeshCommand,
    },
    /// Managed weight revisions.
    Weights {
        #[command(subcommand)]
        command: weights::WeightsCommand,
    },
    /// The five reference figures (put, get, put_batch, get_batch, exist; ops/s); on a terminal
    /// each phase shows a progress bar on stderr. With --mesh, through the mesh: a storage
    /// owner in every serving cluster, each request to its key's authority.
    Bench {
        /// Keys per phase.
        #[arg(long, default_value_t = 20_000)]
        n: usize,
        /// Value size (bytes; K, M, G suffixes allowed).
        #[arg(long, default_value = "4096", value_parser = parse_size)]
        size: u64,
        /// Keys per batch.
        #[arg(long, default_value_t = 128)]
        batch: usize,
        /// Time only these phases (comma-separated: put, get, put_batch, get_batch, exist);
        /// the keys a selected read phase needs are written untimed first.
        #[arg(long, value_delimiter = ',')]
        only: Vec<crate::bench::Phase>,
        /// The bench's storage owner uses this credential (an `owner` token) and the objects
        /// `--token` (a `client` token); without it both use `--token`.
        #[arg(long, env = "CRESCENT_OWNER_TOKEN", hide_env_values = true)]
        owner_token: Option<String>,
        /// The bench's storage owner id (the one an `--owner-token` names); default: a fresh
        /// one.
        #[arg(long)]
        owner_id: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SegmentsCommand {
    /// Mount a segment for an owner (registering the owner if it is new).
    Mount {
        /// The storage owner's id.
        #[arg(long)]
        owner: String,
        /// The new segment's id (unique in the cluster).
        #[arg(long)]
        segment: String,
        /// Segment size in bytes.
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// Base address of the segment in the owner's memory.
        #[arg(long, default_value_t = 0)]
        base: u64,
        /// How clients reach the segment's bytes.
        #[arg(long, value_enum, default_value = "tcp")]
        transport: TransportArg,
    },
    /// Unmount a segment.
    Unmount {
        /// The segment's id.
        #[arg(long)]
        segment: String,
    },
    /// List owners and mounted segments.
    Ls,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportArg {
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

/// The server used when neither --server nor --etcd is given.
pub const DEFAULT_SERVER: &str = "127.0.0.1:7480";

impl Cli {
    /// Where the client finds crescentd: --server (or the default without --etcd), --etcd
    /// and --cluster, and the failover deadline.
    pub fn client_options(&self) -> crescent_client::ClientOptions {
        let follows = self.etcd.is_some() || self.redis.is_some();
        let servers = match (&self.server, follows) {
            (Some(list), _) => crescent_client::client_options::split_list(list),
            (None, false) => vec![DEFAULT_SERVER.to_string()],
            (None, true) => Vec::new(),
        };
        crescent_client::ClientOptions {
            servers,
            etcd_endpoints: self
                .etcd
                .as_deref()
                .map(crescent_client::client_options::split_list)
                .unwrap_or_default(),
            redis: self.redis.clone(),
            cluster: self.cluster.clone(),
            mesh: self.mesh.clone(),
            no_local_cold_restore: self.no_local_cold_restore,
            token: self.token.clone().map(crescent_client::BearerToken::new),
            ca_file: self.ca_file.clone(),
            ..crescent_client::ClientOptions::default()
        }
        .with_failover_timeout(std::time::Duration::from_millis(self.failover_timeout_ms))
    }
}

/// The exit statuses, shown by `--help` (docs/api.md, "CLI exit statuses", lists the same).
const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  `exist`: the key does not exist
  2  invalid argument or usage (INVALID_ARGUMENT); a refused mesh change
     (UNKNOWN_CLUSTER, ILLEGAL_TRANSITION, LAST_SERVING_CLUSTER)
  3  crescentd unreachable or not serving: connection refused, no leader, failover
     (UNAVAILABLE, NOT_LEADER, BUSY, NOT_READY, NO_LEADER, FAILOVER_INTERRUPTED,
     WRONG_CLUSTER)
  4  not found (NOT_FOUND, LEASE_EXPIRED)
  5  conflict (CONFLICT, STALE_GENERATION, FENCED)
  6  checksum mismatch (CHECKSUM_MISMATCH)
  7  local IO error, including a closed or full stdout (IO_ERROR)
  8  space, quota or durability (OUT_OF_SPACE, QUOTA_EXCEEDED, DURABILITY_FAILED,
     POLICY_UNSATISFIABLE)
  9  anything else (INTERNAL)";

/// Writes one line of command output to stdout (see `outln!`).
pub(crate) fn write_stdout_line(
    args: std::fmt::Arguments<'_>,
) -> Result<(), crescent_client::ClientError> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(stdout_err)
}

fn stdout_err(source: std::io::Error) -> crescent_client::ClientError {
    crescent_client::ClientError::Io {
        context: "cannot write to stdout".into(),
        source,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // CRESCENT_LOG, else RUST_LOG, else warnings only; CRESCENT_LOG_FORMAT=json for JSON lines.
    crescent_observe::logging::init(
        None,
        "warn",
        crescent_observe::logging::LogFormat::from_env(),
    );
    let json = cli.json;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("crescent: INTERNAL: cannot start the runtime: {e}");
            return ExitCode::from(9);
        }
    };
    // Output still buffered (a `print!` without newline) must reach stdout before success
    // is claimed.
    let result = rt.block_on(run::run(cli)).and_then(|status| {
        std::io::stdout()
            .flush()
            .map(|()| status)
            .map_err(stdout_err)
    });
    match result {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            if json {
                let body =
                    serde_json::json!({"error": {"code": e.code_str(), "message": e.to_string()}});
                // Best effort: stdout may be what failed; stderr carries the error anyway.
                let _ = outln!("{body}");
            }
            match &e {
                crescent_client::ClientError::Api(_) => eprintln!("crescent: {e}"),
                other => eprintln!("crescent: {}: {other}", other.code_str()),
            }
            ExitCode::from(e.exit_code())
        }
    }
}
