//! The object commands of `crescent` against one cluster: put, get, exist, rm, ls and evict
//! (docs/api.md, "Objects"). Through a mesh they run in cli/src/mesh.rs.

use std::io::Write;

use crescent_client::{ClientError, CrescentClient, PutOptions};
use serde_json::json;

use crate::run::{io_err, print_json, read_input};

/// `crescent put KEY FILE`: stores the file (or stdin) under `key`.
pub(crate) async fn put(
    client: &CrescentClient,
    key: &str,
    file: &str,
    upsert: bool,
    replicas: u32,
    json: bool,
) -> Result<(), ClientError> {
    let value = read_input(file)?;
    let opts = PutOptions {
        upsert,
        replicas,
        ..PutOptions::default()
    };
    let out = client.put_with(key, &value, &opts).await?;
    if json {
        print_json(
            &json!({"key": key, "size": value.len(), "put_id": out.put_id,
            "already_existed": out.already_existed, "replicas": out.replicas}),
        )
    } else if out.already_existed {
        outln!("{key}: already holds this content ({} bytes)", value.len())
    } else {
        outln!("{key}: stored {} bytes", value.len())
    }
}

/// `crescent get KEY [-o FILE]`: the value to a file, as JSON, or raw to stdout.
pub(crate) async fn get(
    client: &CrescentClient,
    key: &str,
    output: Option<&str>,
    json: bool,
) -> Result<(), ClientError> {
    let value = client.get(key).await?;
    // The get released its lease without waiting for the answer: wait for it before
    // this process exits, so `crescent get K; crescent rm K` finds K unleased.
    client.settle().await;
    write_value(key, &value, output, json)
}

/// A fetched value to `output` (a file, or `-`/none for stdout), raw or as JSON.
pub(crate) fn write_value(
    key: &str,
    value: &[u8],
    output: Option<&str>,
    json: bool,
) -> Result<(), ClientError> {
    match output {
        Some(path) if path != "-" => {
            std::fs::write(path, value).map_err(io_err(format!("writing {path}")))?;
            if json {
                print_json(&json!({"key": key, "size": value.len(), "file": path}))?;
            }
            Ok(())
        }
        _ if json => {
            let body = match std::str::from_utf8(value) {
                Ok(text) => json!({"key": key, "size": value.len(), "value_utf8": text}),
                Err(_) => json!({"key": key, "size": value.len(),
                    "value_hex": value.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
            };
            print_json(&body)
        }
        _ => {
            let mut out = std::io::stdout().lock();
            out.write_all(value)
                .and_then(|()| out.flush())
                .map_err(io_err("writing stdout"))
        }
    }
}

/// `crescent exist KEY`: exit status 0 when it exists, 1 when not.
pub(crate) async fn exist(
    client: &CrescentClient,
    key: &str,
    json: bool,
) -> Result<u8, ClientError> {
    print_exists(key, client.is_exist(key).await?, json)
}

/// `exist`'s answer: printed, and the exit status (0 when it exists, 1 when not).
pub(crate) fn print_exists(key: &str, exists: bool, json: bool) -> Result<u8, ClientError> {
    if json {
        print_json(&json!({"key": key, "exists": exists}))?;
    } else {
        outln!("{exists}")?;
    }
    Ok(if exists { 0 } else { 1 })
}

/// `crescent rm KEY [--force]`.
pub(crate) async fn rm(
    client: &CrescentClient,
    key: &str,
    force: bool,
    json: bool,
) -> Result<(), ClientError> {
    match force {
        true => client.remove_forced(key).await?,
        false => client.remove(key).await?,
    }
    print_removed(key, json)
}

/// `rm`'s answer.
pub(crate) fn print_removed(key: &str, json: bool) -> Result<(), ClientError> {
    if json {
        print_json(&json!({"key": key, "removed": true}))
    } else {
        outln!("removed {key}")
    }
}

/// `crescent ls [PREFIX]`: every key, with its size and whether its put is still running.
pub(crate) async fn ls(
    client: &CrescentClient,
    prefix: &str,
    json: bool,
) -> Result<(), ClientError> {
    let keys = client.list_all(prefix).await?;
    if json {
        return print_json(&json!({"count": keys.len(), "keys": keys}));
    }
    for k in &keys {
        let state = if k.complete { "" } else { "  (in progress)" };
        outln!("{:>12}  {}{state}", k.size, k.key)?;
    }
    Ok(())
}

/// `crescent evict KEY --hot`: drops the hot replicas of an object whose cold copy is
/// materialized.
pub(crate) async fn evict(
    client: &CrescentClient,
    key: &str,
    hot: bool,
    json: bool,
) -> Result<(), ClientError> {
    if !hot {
        return Err(ClientError::InvalidArgument(
            "evict needs --hot (the only tier that can be evicted)".into(),
        ));
    }
    crate::cold::print_object(&client.evict_hot(key).await?, json)
}
