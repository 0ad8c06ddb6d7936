//! Named crash points: the crash tests' way to stop a process at an exact place, as a power
//! cut or `kill -9` would.
//!
//! A process started with `CRESCENT_CRASH_AT=NAME` (or `NAME:N`) sends itself SIGKILL the
//! first (or N-th) time it reaches the point `NAME`. Every point is declared in [`points`]
//! and listed in docs/testing.md. Points are compiled into debug builds only (the ones tests
//! run); in a release build [`point`] and [`command`] are empty and the variable is ignored.
//!
//! ```
//! use crescent_crash::points::{self, Stage};
//! // Nothing is armed unless the variable names the point, so these return.
//! crescent_crash::point(points::PUT_END_AFTER_COMMIT);
//! crescent_crash::command(points::COLD, Stage::After, "reserve");
//! ```

pub mod points;

use points::{CommandPoints, Point, Stage};

/// The variable that arms a crash point.
pub const CRASH_AT_ENV: &str = "CRESCENT_CRASH_AT";

/// Kills this process if [`CRASH_AT_ENV`] names `point` and this is the armed hit.
#[inline]
pub fn point(point: Point) {
    #[cfg(debug_assertions)]
    armed::hit(|armed| armed == point.name());
    #[cfg(not(debug_assertions))]
    let _ = point;
}

/// Kills this process if [`CRASH_AT_ENV`] names `family`'s point for `command` at `stage`
/// (`<family>.before_<command>`, `<family>.after_<command>`) and this is the armed hit.
#[inline]
pub fn command(family: CommandPoints, stage: Stage, command: &str) {
    #[cfg(debug_assertions)]
    armed::hit(|armed| family.names(armed, stage, command));
    #[cfg(not(debug_assertions))]
    let _ = (family, stage, command);
}

#[cfg(debug_assertions)]
mod armed {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    pub struct Armed {
        pub name: String,
        pub nth: u64,
        seen: AtomicU64,
    }

    pub fn get() -> Option<&'static Armed> {
        static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
        ARMED
            .get_or_init(|| {
                let value = std::env::var(super::CRASH_AT_ENV).ok()?;
                let armed = parse(&value);
                match &armed {
                    Some(a) if !super::points::is_declared(&a.name) => tracing::warn!(
                        point = %a.name, nth = a.nth,
                        "crash point armed, but no such point is declared (docs/testing.md)"
                    ),
                    Some(a) => tracing::warn!(point = %a.name, nth = a.nth, "crash point armed"),
                    None => tracing::warn!(%value, "{} ignored: not NAME or NAME:N", super::CRASH_AT_ENV),
                }
                armed
            })
            .as_ref()
    }

    pub fn parse(value: &str) -> Option<Armed> {
        let (name, nth) = match value.rsplit_once(':') {
            Some((name, n)) => (name, n.parse::<u64>().ok().filter(|n| *n > 0)?),
            None => (value, 1),
        };
        (!name.is_empty()).then(|| Armed {
            name: name.to_string(),
            nth,
            seen: AtomicU64::new(0),
        })
    }

    impl Armed {
        /// Counts a pass through a point `is_armed` says is the armed one; true on the
        /// armed pass.
        pub fn counts(&self, is_armed: impl FnOnce(&str) -> bool) -> bool {
            is_armed(&self.name) && self.seen.fetch_add(1, Ordering::SeqCst) + 1 == self.nth
        }
    }

    pub fn hit(is_armed: impl FnOnce(&str) -> bool) {
        let Some(armed) = get() else { return };
        if armed.counts(is_armed) {
            tracing::error!(point = %armed.name, "crash point reached: SIGKILL");
            // SAFETY: raise(2) has no memory-safety preconditions.
            #[allow(unsafe_code)]
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn names_and_counts() {
            let a = parse("put_end.after_commit:2").unwrap();
            assert_eq!((a.name.as_str(), a.nth), ("put_end.after_commit", 2));
            let at = |name: &'static str| move |armed: &str| armed == name;
            assert!(!a.counts(at("other")));
            assert!(!a.counts(at("put_end.after_commit")));
            assert!(a.counts(at("put_end.after_commit")));
            assert!(!a.counts(at("put_end.after_commit")), "once");
            assert_eq!(parse("x").unwrap().nth, 1);
            assert!(parse("x:0").is_none() && parse(":2").is_none() && parse("x:y").is_none());
        }
    }
}
