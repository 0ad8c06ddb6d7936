//! The log setup every binary shares: one filter variable, `CRESCENT_LOG` (or the binary's
//! `--log` flag, which clap fills from it), falling back to `RUST_LOG`, then to the binary's
//! default; lines on stderr as text (ANSI colours only on a terminal) or JSON.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The variable every binary reads its log filter from.
pub const LOG_VARIABLE: &str = "CRESCENT_LOG";
/// The variable every binary reads its log format (`text` or `json`) from.
pub const LOG_FORMAT_VARIABLE: &str = "CRESCENT_LOG_FORMAT";

/// Log line format on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// `CRESCENT_LOG_FORMAT` when it says `json` or `text`; `Text` otherwise.
    pub fn from_env() -> Self {
        match std::env::var(LOG_FORMAT_VARIABLE).as_deref() {
            Ok("json") => LogFormat::Json,
            _ => LogFormat::Text,
        }
    }
}

/// The filter directive to use: `explicit` (a flag, or `CRESCENT_LOG` itself), else
/// `RUST_LOG`, else `default`.
pub fn filter_directive(explicit: Option<&str>, rust_log: Option<&str>, default: &str) -> String {
    explicit
        .or(rust_log)
        .filter(|d| !d.trim().is_empty())
        .unwrap_or(default)
        .to_string()
}

/// Installs the global subscriber. `explicit` is what the binary's `--log` flag holds (clap
/// fills it from `CRESCENT_LOG`); a binary without that flag passes `None` and the variable
/// is read here. A directive that does not parse falls back to `default`.
pub fn init(explicit: Option<&str>, default: &str, format: LogFormat) {
    let from_env = std::env::var(LOG_VARIABLE).ok();
    let rust_log = std::env::var("RUST_LOG").ok();
    let directive = filter_directive(
        explicit.or(from_env.as_deref()),
        rust_log.as_deref(),
        default,
    );
    let filter = EnvFilter::try_new(&directive).unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests that start a process's main twice) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crescent_log_wins_then_rust_log_then_the_default() {
        assert_eq!(
            filter_directive(Some("debug"), Some("trace"), "warn"),
            "debug"
        );
        assert_eq!(filter_directive(None, Some("trace"), "warn"), "trace");
        assert_eq!(filter_directive(None, None, "warn"), "warn");
        assert_eq!(filter_directive(Some(" "), None, "warn"), "warn");
    }
}
