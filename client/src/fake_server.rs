//! A scripted fake crescentd HTTP server, for tests of leader following here and of the
//! storage-owner role's calls in crescent-owner (feature `test-support`; never in a build
//! that serves anything).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// 200 with this JSON body.
    Ok(&'static str),
    /// NOT_LEADER, naming the leader in the `x-crescent-leader` header.
    NotLeader(Option<String>),
    /// UNAVAILABLE with this message.
    Unavailable(&'static str),
    /// UNAVAILABLE marked `not_run` (refused before running), with this message and state.
    Refused(&'static str, &'static str),
    /// Read the request, then close the connection without answering.
    Drop,
    /// NOT_FOUND (an answer, never retried).
    NotFound,
}

/// A fake crescentd: answers `/v1/rpc` with 404 (HTTP only) and every other request with the
/// next scripted answer (the last one repeats). Counts the requests it read.
pub struct FakeServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub async fn start(script: Vec<Answer>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    tokio::spawn(serve(stream, seen.clone(), script.clone()));
                }
            }
        });
        FakeServer { addr, seen, task }
    }

    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Requests read so far (paths), `/v1/rpc` discovery excluded.
    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(
    mut stream: TcpStream,
    seen: Arc<Mutex<Vec<String>>>,
    script: Arc<Mutex<VecDeque<Answer>>>,
) {
    let mut buf = Vec::new();
    loop {
        let Some(path) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let answer = if path == "/v1/rpc" {
            Answer::Unavailable("unused")
        } else {
            seen.lock().unwrap().push(path.clone());
            let mut s = script.lock().unwrap();
            if s.len() > 1 {
                s.pop_front().unwrap()
            } else {
                s.front().cloned().expect("a script")
            }
        };
        let (status, body, extra) = match (&answer, path == "/v1/rpc") {
            (_, true) => (
                "404 Not Found",
                r#"{"code":"NOT_FOUND","message":"no rpc","retryable":false}"#.to_string(),
                String::new(),
            ),
            (Answer::Ok(body), _) => ("200 OK", body.to_string(), String::new()),
            (Answer::NotLeader(leader), _) => (
                "421 Misdirected Request",
                r#"{"code":"NOT_LEADER","message":"standby","retryable":true}"#.to_string(),
                leader
                    .as_ref()
                    .map(|l| format!("x-crescent-leader: {l}\r\n"))
                    .unwrap_or_default(),
            ),
            (Answer::Unavailable(message), _) => (
                "503 Service Unavailable",
                format!(r#"{{"code":"UNAVAILABLE","message":"{message}","retryable":true}}"#),
                String::new(),
            ),
            (Answer::Refused(message, state), _) => (
                "503 Service Unavailable",
                format!(
                    r#"{{"code":"UNAVAILABLE","message":"{message}","retryable":true,"not_run":true,"state":"{state}"}}"#
                ),
                String::new(),
            ),
            (Answer::NotFound, _) => (
                "404 Not Found",
                r#"{"code":"NOT_FOUND","message":"unknown","retryable":false}"#.to_string(),
                String::new(),
            ),
            (Answer::Drop, _) => return,
        };
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
            body.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads one request (headers and a content-length body); returns its path.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let length = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..end + 4 + length);
            return head.split_whitespace().nth(1).map(str::to_string);
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
