//! A minimal HTTP listener for processes without an HTTP API of their own (`crescent owner
//! --metrics-listen`): `GET /metrics` answers the registry in Prometheus text (process metrics
//! refreshed first), `GET /healthz` answers `ok`, anything else 404. Bounded like crescentd's
//! listeners (docs/configuration.md, "Network bounds"): at most [`MAX_CONNECTIONS`] at once,
//! a request head of at most [`MAX_HEAD_BYTES`] that must arrive within [`HEAD_TIMEOUT`], one
//! request per connection.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{Encoder, Registry, TextEncoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::ProcessMetrics;

pub const MAX_CONNECTIONS: usize = 16;
pub const MAX_HEAD_BYTES: usize = 8 << 10;
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// What a scrape reads.
#[derive(Clone)]
pub struct MetricsSource {
    pub registry: Registry,
    pub process: ProcessMetrics,
}

impl MetricsSource {
    /// Registers the process metrics on `registry` and serves both.
    pub fn new(registry: Registry) -> prometheus::Result<Self> {
        let process = ProcessMetrics::register(&registry)?;
        Ok(Self { registry, process })
    }

    /// The Prometheus text of every family now.
    pub fn render(&self) -> String {
        self.process.refresh();
        let mut out = Vec::new();
        // Encoding gathered families into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Serves `listener` until the task is dropped or aborted.
pub async fn serve(listener: TcpListener, source: MetricsSource) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Over the cap the connection is closed at once: a scraper retries.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let source = source.clone();
        tokio::spawn(async move {
            let _ = answer(stream, &source).await;
            drop(slot);
        });
    }
}

async fn answer(mut stream: TcpStream, source: &MetricsSource) -> std::io::Result<()> {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(Some(head))) => head,
        _ => return Ok(()),
    };
    let (status, content_type, body) = match request_target(&head) {
        Some(("GET", "/metrics")) => (
            "200 OK",
            TextEncoder::new().format_type().to_string(),
            source.render(),
        ),
        Some(("GET", "/healthz")) => ("200 OK", "text/plain".to_string(), "ok\n".to_string()),
        _ => (
            "404 Not Found",
            "text/plain".to_string(),
            "not found\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// Reads until the end of the request head; `None` when the peer closed first or the head is
/// over [`MAX_HEAD_BYTES`].
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_HEAD_BYTES {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

/// The method and path of a request head's first line (a query string is ignored).
fn request_target(head: &str) -> Option<(&str, &str)> {
    let mut parts = head.lines().next()?.split_whitespace();
    let method = parts.next()?;
    let target = parts.next()?;
    Some((method, target.split('?').next().unwrap_or(target)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_line_names_method_and_path() {
        assert_eq!(
            request_target("GET /metrics?x=1 HTTP/1.1\r\nhost: a\r\n\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(request_target(""), None);
    }

    #[tokio::test]
    async fn a_scrape_answers_the_registry_and_a_silent_peer_is_dropped() {
        let registry = Registry::new();
        let source = MetricsSource::new(registry).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, source));
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(reply.contains("process_resident_memory_bytes"), "{reply}");
        assert!(reply.contains("crescent_build_info"), "{reply}");
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /nope HTTP/1.1\r\n\r\n").await.unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 404"), "{reply}");
        // A head over the limit is closed without an answer.
        let mut c = TcpStream::connect(addr).await.unwrap();
        let _ = c.write_all(&vec![b'a'; MAX_HEAD_BYTES + 1024]).await;
        let mut reply = Vec::new();
        let _ = c.read_to_end(&mut reply).await;
        assert!(reply.is_empty());
        server.abort();
    }
}
