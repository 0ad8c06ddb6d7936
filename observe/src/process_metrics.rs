//! The process's own metrics, in the names Prometheus clients use (`process_*`), and
//! `crescent_build_info` (docs/operations.md, "Metrics"). Read from `/proc/self` at scrape
//! time; on a system without it they stay 0.

use prometheus::core::{AtomicF64, GenericCounter};
use prometheus::{Gauge, IntGauge, IntGaugeVec, Opts, Registry};

#[derive(Clone)]
pub struct ProcessMetrics {
    cpu_seconds: GenericCounter<AtomicF64>,
    resident_bytes: IntGauge,
    virtual_bytes: IntGauge,
    open_fds: IntGauge,
    max_fds: IntGauge,
    threads: IntGauge,
}

/// What `/proc/self/stat` and `statm` say now.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    cpu_seconds: f64,
    resident_bytes: i64,
    virtual_bytes: i64,
    threads: i64,
    /// Seconds after boot.
    start_after_boot: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat` times (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_BYTES: i64 = 4096;

/// Parses `/proc/self/stat` (fields after the parenthesised command name, which may hold
/// spaces) and `/proc/self/statm`.
fn parse(stat: &str, statm: &str) -> Option<Sample> {
    let after_name = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after_name.split_whitespace().collect();
    // `f[i]` is field i + 3 of proc(5)'s `/proc/<pid>/stat` (`f[0]` is the state).
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    let (utime, stime) = (num(11)?, num(12)?);
    let resident_pages: i64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(Sample {
        cpu_seconds: (utime + stime) / TICKS_PER_SECOND,
        resident_bytes: resident_pages * PAGE_BYTES,
        virtual_bytes: num(20)? as i64,
        threads: num(17)? as i64,
        start_after_boot: num(19)? / TICKS_PER_SECOND,
    })
}

fn boot_time_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn max_fds() -> Option<i64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

impl ProcessMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let int = |name: &str, help: &str| -> prometheus::Result<IntGauge> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let cpu_seconds = GenericCounter::new(
            "process_cpu_seconds_total",
            "User and system CPU time spent, in seconds",
        )?;
        registry.register(Box::new(cpu_seconds.clone()))?;
        let start_time_seconds = Gauge::new(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds",
        )?;
        registry.register(Box::new(start_time_seconds.clone()))?;
        let build = IntGaugeVec::new(
            Opts::new(
                "crescent_build_info",
                "1, labelled with the release it runs",
            ),
            &["version"],
        )?;
        registry.register(Box::new(build.clone()))?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        // The start time never changes: read once.
        let sample = parse(
            &std::fs::read_to_string("/proc/self/stat").unwrap_or_default(),
            &std::fs::read_to_string("/proc/self/statm").unwrap_or_default(),
        );
        if let (Some(s), Some(boot)) = (sample, boot_time_seconds()) {
            start_time_seconds.set(boot + s.start_after_boot);
        }
        Ok(Self {
            cpu_seconds,
            resident_bytes: int("process_resident_memory_bytes", "Resident memory, in bytes")?,
            virtual_bytes: int("process_virtual_memory_bytes", "Virtual memory, in bytes")?,
            open_fds: int("process_open_fds", "Open file descriptors")?,
            max_fds: int("process_max_fds", "The open file descriptor limit")?,
            threads: int("process_threads", "Threads of the process")?,
        })
    }

    /// Reads `/proc/self` and sets every metric.
    pub fn refresh(&self) {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        if let Some(s) = parse(&stat, &statm) {
            // A counter only grows: add what was spent since the last scrape.
            let spent = s.cpu_seconds - self.cpu_seconds.get();
            if spent > 0.0 {
                self.cpu_seconds.inc_by(spent);
            }
            self.resident_bytes.set(s.resident_bytes);
            self.virtual_bytes.set(s.virtual_bytes);
            self.threads.set(s.threads);
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(fds.count() as i64);
        }
        if let Some(max) = max_fds() {
            self.max_fds.set(max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_in_the_name_parses() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize ...
        let stat = "42 (crescent d) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 7 0 \
                    12345 1048576 300 18446744073709551615";
        let s = parse(stat, "256 100 50 1 0 60 0").unwrap();
        assert_eq!(
            s,
            Sample {
                cpu_seconds: 3.0,
                resident_bytes: 100 * PAGE_BYTES,
                virtual_bytes: 1_048_576,
                threads: 7,
                start_after_boot: 123.45,
            }
        );
    }

    #[test]
    fn this_process_reports_itself() {
        let registry = Registry::new();
        let m = ProcessMetrics::register(&registry).unwrap();
        m.refresh();
        assert!(m.resident_bytes.get() > 0);
        assert!(m.open_fds.get() > 0);
        assert!(m.threads.get() >= 1);
        let families = registry.gather();
        let start = families
            .iter()
            .find(|f| f.name() == "process_start_time_seconds")
            .expect("registered");
        assert!(start.get_metric()[0].get_gauge().get_value() > 1.6e9);
    }
}
