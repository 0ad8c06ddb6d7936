//! The progress bar of `crescent weights put` and `get` (bytes, rate, ETA): drawn on stderr
//! only when stdout is a terminal and `--json` is off, so scripts and pipes see no bar.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A transfer's progress; a no-op when not drawn.
#[derive(Debug)]
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar of `total` bytes, drawn when stdout is a terminal and `json_out` is off.
    pub fn new(what: &'static str, total: u64, json_out: bool) -> Self {
        if json_out || !std::io::stdout().is_terminal() {
            return Self(None);
        }
        let style = ProgressStyle::with_template(
            "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> ");
        let bar = ProgressBar::new(total).with_style(style).with_message(what);
        Self(Some(bar))
    }

    pub fn add(&self, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.inc(bytes);
        }
    }

    pub fn set(&self, bytes: u64) {
        if let Some(bar) = &self.0 {
            bar.set_position(bytes);
        }
    }

    /// Removes the bar (the command's own output follows).
    pub fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
