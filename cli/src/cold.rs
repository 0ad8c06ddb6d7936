//! `crescent cold ls`, `crescent offload KEY`, `crescent evict KEY --hot`, `crescent stat KEY`.

use clap::Subcommand;
use crescent_wire::cold::{ColdDeviceInfo, ObjectStat};

use crescent_client::ClientError;
use crescent_client::CrescentClient;

#[derive(Debug, Subcommand)]
pub enum ColdCommand {
    /// List cold devices (id, kind, capacity, used, reserved, health).
    Ls,
    /// Restore throughput through the server against a sequential read of the same cold
    /// files (run on the device's host).
    BenchRestore(super::cold_bench::BenchRestoreArgs),
}

fn print_json(v: &impl serde::Serialize) -> Result<(), ClientError> {
    outln!("{}", serde_json::to_string(v).expect("json output"))
}

fn print_devices(devices: &[ColdDeviceInfo]) -> Result<(), ClientError> {
    outln!(
        "{:<16} {:<10} {:>14} {:>14} {:>14}  HEALTH",
        "DEVICE",
        "KIND",
        "CAPACITY",
        "USED",
        "RESERVED"
    )?;
    for d in devices {
        outln!(
            "{:<16} {:<10} {:>14} {:>14} {:>14}  {}{}{}{}",
            d.id,
            d.kind,
            d.capacity,
            d.used,
            d.reserved,
            d.health,
            if d.schedulable { "" } else { " (draining)" },
            d.owner_id
                .as_ref()
                .map(|o| format!(" (on owner {o})"))
                .unwrap_or_default(),
            if d.busy {
                " (busy: figures of its last completed operation)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

fn print_stat(s: &ObjectStat) -> Result<(), ClientError> {
    outln!(
        "{}: {} bytes, checksum {:08x}, route version {}",
        s.key,
        s.size,
        s.checksum,
        s.route_version
    )?;
    for r in &s.replicas {
        outln!("  hot   {}@{}", r.segment_id, r.offset)?;
    }
    match &s.cold {
        Some(c) => outln!(
            "  cold  {} on {} (operation {}{})",
            c.state,
            c.device_id,
            c.op_id,
            c.op_state
                .as_deref()
                .map(|s| format!(", {s}"))
                .unwrap_or_default()
        )?,
        None => outln!("  cold  none")?,
    }
    Ok(())
}

pub(super) async fn cold(
    client: &CrescentClient,
    command: ColdCommand,
    json: bool,
) -> Result<u8, ClientError> {
    match command {
        ColdCommand::Ls => {
            let reply = client.cold_devices().await?;
            if json {
                // An object with named fields, as every command's JSON (docs/api.md, "CLI JSON").
                print_json(&reply)?;
            } else {
                print_devices(&reply.devices)?;
            }
        }
        ColdCommand::BenchRestore(args) => {
            let report = super::cold_bench::bench_restore(client, &args).await?;
            if json {
                print_json(&report)?;
            } else {
                outln!(
                    "{} x {} B: restore {:.3} GiB/s ({:.0} obj/s), cat {:.3} GiB/s ({:.0} obj/s), \
                     ratio {:.2} (median of {} interleaved rounds; {} local restores, {} fallbacks)",
                    report.objects_per_round,
                    report.object_bytes,
                    report.restore_gib_s,
                    report.restore_objects_s,
                    report.cat_gib_s,
                    report.cat_objects_s,
                    report.ratio,
                    report.rounds.len(),
                    report.local_restores,
                    report.local_fallbacks
                )?;
            }
        }
    }
    Ok(0)
}

/// `offload`, `evict --hot` and `stat` print the object's state afterwards.
pub(super) fn print_object(stat: &ObjectStat, json: bool) -> Result<(), ClientError> {
    if json {
        print_json(stat)
    } else {
        print_stat(stat)
    }
}
