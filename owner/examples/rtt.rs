//! Per-request latency breakdown against a running crescentd: the HTTP floor measured with a
//! hand-written blocking keep-alive request (no client library), then the same exist request
//! through `CrescentClient`, then `/healthz`. Usage: `rtt HOST:PORT [N]`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use crescent_client::CrescentClient;
use crescent_owner::{Owner, OwnerConfig};
use crescent_wire::store::{ObjectId, ObjectRequest};
use prometheus::Registry;

fn raw_post(stream: &mut BufReader<TcpStream>, host: &str, path: &str, body: &[u8]) -> usize {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/msgpack\r\n\
         Accept: application/msgpack\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let s = stream.get_mut();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut len = 0;
    let mut line = String::new();
    loop {
        line.clear();
        stream.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut buf = vec![0u8; len];
    stream.read_exact(&mut buf).unwrap();
    len
}

fn main() {
    let mut args = std::env::args().skip(1);
    let server = args.next().unwrap_or_else(|| "127.0.0.1:7480".into());
    let n: usize = args.next().map_or(5000, |s| s.parse().unwrap());
    let body = rmp_serde::to_vec_named(&ObjectRequest {
        id: ObjectId::new("rtt-probe"),
    })
    .unwrap();
    let stream = TcpStream::connect(&server).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut stream = BufReader::new(stream);
    let t = Instant::now();
    for _ in 0..n {
        raw_post(&mut stream, &server, "/v1/objects/exist", &body);
    }
    let raw = t.elapsed().as_secs_f64() * 1e6 / n as f64;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = CrescentClient::new(&server).unwrap();
    let (exist, health) = rt.block_on(async {
        client.is_exist("rtt-probe").await.unwrap();
        let t = Instant::now();
        for _ in 0..n {
            client.is_exist("rtt-probe").await.unwrap();
        }
        let exist = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let t = Instant::now();
        for _ in 0..n {
            client.health().await.unwrap();
        }
        (exist, t.elapsed().as_secs_f64() * 1e6 / n as f64)
    });
    println!(
        "{{\"raw_exist_us\":{raw:.1},\"client_exist_us\":{exist:.1},\"client_healthz_us\":{health:.1}}}"
    );
    println!("{}", rt.block_on(breakdown(&server, n)));
}

/// Mean latency (us) of a histogram family's series whose labels include `label`.
fn mean_us(registry: &Registry, family: &str, label: &str) -> f64 {
    let (mut sum, mut count) = (0.0, 0u64);
    for f in registry.gather().iter().filter(|f| f.name() == family) {
        for m in f.get_metric() {
            if m.get_label().iter().any(|l| l.value() == label) {
                let h = m.get_histogram();
                sum += h.get_sample_sum();
                count += h.get_sample_count();
            }
        }
    }
    sum * 1e6 / count.max(1) as f64
}

/// Puts and gets of 4 KiB values as the only owner of the data, with the client's and the
/// transport's histograms: whole operation vs the transfer inside it.
async fn breakdown(server: &str, n: usize) -> String {
    let registry = Registry::new();
    let client = CrescentClient::with_registry(server, &registry).unwrap();
    let owner = Owner::start(
        &client,
        OwnerConfig {
            size: 64 << 20,
            ..OwnerConfig::default()
        },
    )
    .await
    .unwrap();
    let value = vec![7u8; 4096];
    let n = n.min(5000);
    for i in 0..n {
        client
            .put(&format!("rtt/{}/{i}", owner.owner_id()), &value)
            .await
            .unwrap();
    }
    for i in 0..n {
        client
            .get(&format!("rtt/{}/{i}", owner.owner_id()))
            .await
            .unwrap();
    }
    let out = format!(
        "{{\"put_us\":{:.1},\"put_transfer_us\":{:.1},\"get_us\":{:.1},\"get_transfer_us\":{:.1}}}",
        mean_us(&registry, "crescent_client_op_seconds", "put"),
        mean_us(&registry, "crescent_transport_batch_seconds", "write"),
        mean_us(&registry, "crescent_client_op_seconds", "get"),
        mean_us(&registry, "crescent_transport_batch_seconds", "read"),
    );
    client
        .remove_prefix(&format!("rtt/{}/", owner.owner_id()))
        .await
        .unwrap();
    owner.shutdown().await.unwrap();

    // Batches of 128, on a fresh registry so the transfer histogram holds only batch transfers.
    let registry = Registry::new();
    let client = CrescentClient::with_registry(server, &registry).unwrap();
    let owner = Owner::start(
        &client,
        OwnerConfig {
            size: 64 << 20,
            ..OwnerConfig::default()
        },
    )
    .await
    .unwrap();
    let values = vec![value.as_slice(); 128];
    for b in 0..(n / 128).max(1) {
        let keys: Vec<String> = (0..128)
            .map(|i| format!("rttb/{}/{b}/{i}", owner.owner_id()))
            .collect();
        client.put_batch(&keys, &values).await.unwrap();
        client.get_batch(&keys).await.unwrap();
    }
    let batch = format!(
        "{{\"put_batch128_us\":{:.1},\"put_batch_transfer_us\":{:.1},\"get_batch128_us\":{:.1},\"get_batch_transfer_us\":{:.1}}}",
        mean_us(&registry, "crescent_client_op_seconds", "put_batch"),
        mean_us(&registry, "crescent_transport_batch_seconds", "write"),
        mean_us(&registry, "crescent_client_op_seconds", "get_batch"),
        mean_us(&registry, "crescent_transport_batch_seconds", "read"),
    );
    client
        .remove_prefix(&format!("rttb/{}/", owner.owner_id()))
        .await
        .unwrap();
    owner.shutdown().await.unwrap();
    format!("{out}\n{batch}")
}
