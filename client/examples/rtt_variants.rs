//! Which reqwest settings cost what per request (a measurement aid for the latency report).
use std::time::{Duration, Instant};

fn main() {
    let server = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7480".into());
    let n = 5000;
    let url = reqwest::Url::parse(&format!("http://{server}/v1/objects/exist")).unwrap();
    let body = rmp_serde::to_vec_named(&crescent_wire::store::ObjectRequest {
        id: crescent_wire::store::ObjectId::new("rtt-probe"),
    })
    .unwrap();
    for (name, timeout, multi) in [
        ("timeout,current", true, false),
        ("no-timeout,current", false, false),
        ("no-timeout,multi", false, true),
    ] {
        let rt = if multi {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        }
        .unwrap();
        let mut b = reqwest::Client::builder().tcp_nodelay(true);
        if timeout {
            b = b.timeout(Duration::from_secs(30));
        }
        let c = b.build().unwrap();
        let us = rt.block_on(async {
            let (c, url, body) = (c.clone(), url.clone(), body.clone());
            let run = async move {
                let t = Instant::now();
                for _ in 0..n {
                    let r = c
                        .post(url.clone())
                        .header("content-type", "application/msgpack")
                        .header("accept", "application/msgpack")
                        .body(body.clone())
                        .send()
                        .await
                        .unwrap();
                    r.bytes().await.unwrap();
                }
                t.elapsed().as_secs_f64() * 1e6 / n as f64
            };
            if multi {
                tokio::spawn(run).await.unwrap()
            } else {
                run.await
            }
        });
        println!("{name}: {us:.1} us");
    }
}
