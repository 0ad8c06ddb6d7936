//! Progress bars of the long-running commands (`weights put` and `get`: bytes, rate, ETA;
//! `bench`: operations of each phase): drawn on stderr only when stdout is a terminal and
//! `--json` is off, so scripts and pipes see no bar (indicatif also draws nothing when stderr
//! is not a terminal).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A command's progress; a no-op when not drawn.
#[derive(Debug)]
pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar of `total` bytes, drawn when stdout is a terminal and `json_out` is off.
    pub fn new(what: &'static str, total: u64, json_out: bool) -> Self {
        Self::drawn(
            what,
            total,
            json_out,
            "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ETA {eta}",
        )
    }

    /// A bar of `total` operations, drawn when stdout is a terminal and `json_out` is off.
    pub fn ops(what: &'static str, total: u64, json_out: bool) -> Self {
        Self::drawn(
            what,
            total,
            json_out,
            "{msg} [{bar:30}] {human_pos}/{human_len} ops {per_sec} ETA {eta}",
        )
    }

    /// No bar (work that is not one of the command's figures).
    pub fn hidden() -> Self {
        Self(None)
    }

    fn drawn(what: &'static str, total: u64, json_out: bool, template: &str) -> Self {
        if json_out || !std::io::stdout().is_terminal() {
            return Self(None);
        }
        let style = ProgressStyle::with_template(template)
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
