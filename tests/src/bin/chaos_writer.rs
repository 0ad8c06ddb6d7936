//! The chaos soak's library writer: runs the operations on its stdin through the Rust client
//! and prints one line per answer, until its parent kills it (right after some
//! acknowledgement: tests/src/chaos.rs).
//!
//! Usage: `chaos-writer --server ADDR` or `chaos-writer --etcd URL --cluster NAME`, with the
//! operation lines (`crescent_tests::chaos_ops::Op::line`) on stdin, which the parent closes
//! after writing them. Output: `ACK SEQ` once an operation is acknowledged, `ERR SEQ CODE`
//! when it failed (flushed line by line). Exits 0 after the last operation; 2 on bad input;
//! 3 when stdout is gone (no parent left to tell) or after [`MAX_RUN`], so an orphan never
//! runs forever.

use std::io::{Read, Write};
use std::time::Duration;

use crescent_client::{ClientOptions, CrescentClient, PutOptions};
use crescent_tests::chaos_ops::{Op, OpKind, Reply};

const MAX_RUN: Duration = Duration::from_secs(120);

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("chaos-writer: {msg}");
    std::process::exit(code);
}

fn options() -> ClientOptions {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--server", server] => with_env_token(ClientOptions::servers(server)),
        ["--etcd", etcd, "--cluster", cluster] => {
            with_env_token(ClientOptions::etcd(etcd, cluster))
        }
        _ => fail(
            2,
            "usage: chaos-writer --server ADDR | --etcd URL --cluster NAME",
        ),
    }
}

/// The credential in `CRESCENT_TOKEN`, as the `crescent` CLI takes it.
fn with_env_token(options: ClientOptions) -> ClientOptions {
    match std::env::var("CRESCENT_TOKEN") {
        Ok(t) => options.with_token(crescent_client::BearerToken::new(t)),
        Err(_) => options,
    }
}

fn emit(reply: Reply) {
    let mut out = std::io::stdout().lock();
    let line = reply.line() + "\n";
    if out
        .write_all(line.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        std::process::exit(3);
    }
}

async fn run(client: &CrescentClient, op: &Op) -> Result<(), String> {
    let key = op.key_name();
    let done = match op.kind {
        OpKind::Put => client.put(&key, &op.value()).await.map(drop),
        OpKind::Upsert => client
            .put_with(&key, &op.value(), &PutOptions::upsert())
            .await
            .map(drop),
        OpKind::Remove => client.remove(&key).await,
    };
    done.map_err(|e| e.code_str().to_string())
}

fn main() {
    let options = options();
    let mut input = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut input) {
        fail(2, &format!("reading stdin: {e}"));
    }
    let ops: Vec<Op> = input
        .lines()
        .map(|l| Op::parse(l).unwrap_or_else(|e| fail(2, &e)))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(2, &format!("runtime: {e}")));
    let all = async {
        let client = match CrescentClient::connect(options).await {
            Ok(c) => c,
            Err(e) => {
                for op in &ops {
                    emit(Reply::Err(op.seq, e.code_str().to_string()));
                }
                return;
            }
        };
        for op in &ops {
            match run(&client, op).await {
                Ok(()) => emit(Reply::Ack(op.seq)),
                Err(code) => emit(Reply::Err(op.seq, code)),
            }
        }
    };
    if rt
        .block_on(async { tokio::time::timeout(MAX_RUN, all).await })
        .is_err()
    {
        fail(3, "ran for its whole time limit");
    }
}
