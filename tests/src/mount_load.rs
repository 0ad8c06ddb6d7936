//! The HA tests' journaled load: concurrent clients mounting fresh segments until stopped,
//! keeping every mount crescentd acknowledged (each must survive what the test does next).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::crescentd::{Outcome, SegmentsClient};

/// `writers` tasks; writer `c` mounts `{prefix}-{c}-{i}` for owner `owner-{c}`, i = 0, 1, ...,
/// until stopped or until a mount is refused or goes unanswered.
pub struct MountLoad {
    acked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl MountLoad {
    /// Starts the writers (needs a tokio runtime).
    pub fn start(client: &SegmentsClient, writers: usize, prefix: &str) -> MountLoad {
        let acked: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..writers)
            .map(|c| {
                let (client, acked, stop) = (client.clone(), acked.clone(), stop.clone());
                let prefix = prefix.to_string();
                tokio::spawn(async move {
                    let mut i = 0;
                    while !stop.load(Ordering::Acquire) {
                        let seg = format!("{prefix}-{c}-{i}");
                        i += 1;
                        match client.mount(&format!("owner-{c}"), &seg, 1 << 20).await {
                            Outcome::Acked => acked.lock().unwrap().push(seg),
                            Outcome::Rejected { .. } | Outcome::Unknown(_) => break,
                        }
                    }
                })
            })
            .collect();
        MountLoad { acked, stop, tasks }
    }

    /// Mounts acknowledged so far.
    pub fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Stops the writers, waits for them, and returns every acknowledged mount.
    pub async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Release);
        for t in self.tasks {
            t.await.unwrap();
        }
        let acked = self.acked.lock().unwrap();
        acked.clone()
    }
}
