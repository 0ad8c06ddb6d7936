//! The registry of crash points: every point a process can be stopped at is declared here,
//! and code can only reach a point through these declarations ([`Point`] and
//! [`CommandPoints`] have no public constructor). docs/testing.md lists the same names in its
//! "Crash points" table; a test below keeps the two equal.

/// A crash point at one fixed place, named `subsystem.place`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point(&'static str);

impl Point {
    /// The name `CRESCENT_CRASH_AT` arms it by.
    pub const fn name(self) -> &'static str {
        self.0
    }
}

/// The crash points around every command of one journaled aggregate, named
/// `<family>.before_<command>` (the command is about to be executed) and
/// `<family>.after_<command>` (its events are durable), where `<command>` is the command's
/// snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandPoints(&'static str);

/// Which side of a command a [`CommandPoints`] point is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Before,
    After,
}

impl Stage {
    /// The name's prefix for this stage.
    pub const fn prefix(self) -> &'static str {
        match self {
            Self::Before => "before_",
            Self::After => "after_",
        }
    }
}

impl CommandPoints {
    /// Whether `name` is this family's point for `command` at `stage`, compared without
    /// building the name (the points sit on every command of the aggregate).
    pub fn names(self, name: &str, stage: Stage, command: &str) -> bool {
        self.command_in(name, stage) == Some(command)
    }

    /// The `<command>` of `name` when it is this family's point at `stage`.
    fn command_in(self, name: &str, stage: Stage) -> Option<&str> {
        name.strip_prefix(self.0)?
            .strip_prefix('.')?
            .strip_prefix(stage.prefix())
    }

    /// The name patterns docs/testing.md lists for this family.
    fn patterns(self) -> [String; 2] {
        [Stage::Before, Stage::After].map(|s| format!("{}.{}<command>", self.0, s.prefix()))
    }

    /// Whether `name` is of the form of a point of this family.
    fn matches_form(self, name: &str) -> bool {
        [Stage::Before, Stage::After]
            .into_iter()
            .any(|stage| self.command_in(name, stage).is_some_and(|c| !c.is_empty()))
    }
}

/// crescentd: a put_start admitted (quota reserved, space allocated), before its answer.
pub const PUT_START_AFTER_RESERVE: Point = Point("put_start.after_reserve");
/// crescentd: a put_end received, before the directory commits it.
pub const PUT_END_BEFORE_COMMIT: Point = Point("put_end.before_commit");
/// crescentd: a put_end committed, before its answer.
pub const PUT_END_AFTER_COMMIT: Point = Point("put_end.after_commit");
/// crescentd: removed put ids taken for the journal, before the journal write.
pub const REMOVE_BEFORE_JOURNAL: Point = Point("remove.before_journal");
/// crescentd: the journal write of removed put ids done, before quota is given back.
pub const REMOVE_AFTER_JOURNAL: Point = Point("remove.after_journal");
/// `crescent owner`: a cold payload written to the owner's device, before it is reported.
pub const OWNER_COLD_AFTER_WRITE: Point = Point("owner_cold.after_write");
/// `crescent owner`: a cold payload deleted from the owner's device, before it is reported.
pub const OWNER_COLD_AFTER_DELETE: Point = Point("owner_cold.after_delete");
/// crescentd (active): a reseeding standby was sent a chunk of the snapshot, more follow.
pub const RESEED_SERVE_AFTER_CHUNK: Point = Point("reseed.serve_after_chunk");
/// crescentd (standby): a received snapshot chunk written aside, more follow.
pub const RESEED_AFTER_CHUNK: Point = Point("reseed.after_chunk");
/// crescentd (standby): the reseed dir complete and durable, before the restart installs it.
pub const RESEED_AFTER_STAGE: Point = Point("reseed.after_stage");
/// crescentd (standby, at start): the reseed dir swapped in, the old data dir not yet removed.
pub const RESEED_AFTER_EXCHANGE: Point = Point("reseed.after_exchange");

/// crescentd: around each command of a weight revision or a lineage claim.
pub const WEIGHTS: CommandPoints = CommandPoints("weights");
/// crescentd: around each command of a cold device's ledger.
pub const COLD: CommandPoints = CommandPoints("cold");

/// Every fixed point.
pub const FIXED: [Point; 11] = [
    PUT_START_AFTER_RESERVE,
    PUT_END_BEFORE_COMMIT,
    PUT_END_AFTER_COMMIT,
    REMOVE_BEFORE_JOURNAL,
    REMOVE_AFTER_JOURNAL,
    OWNER_COLD_AFTER_WRITE,
    OWNER_COLD_AFTER_DELETE,
    RESEED_SERVE_AFTER_CHUNK,
    RESEED_AFTER_CHUNK,
    RESEED_AFTER_STAGE,
    RESEED_AFTER_EXCHANGE,
];

/// Every command family.
pub const FAMILIES: [CommandPoints; 2] = [WEIGHTS, COLD];

/// Whether `name` names a declared point (a fixed one, or one of a family's form).
pub fn is_declared(name: &str) -> bool {
    FIXED.iter().any(|p| p.0 == name) || FAMILIES.iter().any(|f| f.matches_form(name))
}

/// The names as docs/testing.md lists them: each fixed point, and each family's two
/// patterns (`weights.before_<command>`, `weights.after_<command>`).
pub fn documented_names() -> Vec<String> {
    let fixed = FIXED.iter().map(|p| p.0.to_string());
    let families = FAMILIES.iter().flat_map(|f| f.patterns());
    fixed.chain(families).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The first column of the table under "## Crash points" in docs/testing.md.
    fn doc_table_names(doc: &str) -> Vec<String> {
        let section = doc
            .split("\n## ")
            .find(|s| s.starts_with("Crash points"))
            .expect("docs/testing.md has a \"Crash points\" section");
        section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| {
                let cell = l.split('|').nth(1).unwrap().trim();
                cell.trim_matches('`').to_string()
            })
            .collect()
    }

    #[test]
    fn the_doc_table_names_exactly_the_declared_points() {
        let doc = include_str!("../../docs/testing.md");
        let listed = doc_table_names(doc);
        let unique: BTreeSet<_> = listed.iter().cloned().collect();
        assert_eq!(
            unique.len(),
            listed.len(),
            "a point listed twice: {listed:?}"
        );
        let declared: BTreeSet<_> = documented_names().into_iter().collect();
        assert_eq!(
            unique, declared,
            "docs/testing.md's crash point table vs crash::points"
        );
    }

    #[test]
    fn family_names_compare_by_stage_and_command() {
        let name = "weights.after_record_round_copied";
        assert!(WEIGHTS.names(name, Stage::After, "record_round_copied"));
        assert!(!WEIGHTS.names(name, Stage::Before, "record_round_copied"));
        assert!(!WEIGHTS.names(name, Stage::After, "record_round"));
        assert!(!COLD.names(name, Stage::After, "record_round_copied"));
        assert!(!WEIGHTS.names("weightsafter_x", Stage::After, "x"));
    }

    #[test]
    fn declared_names() {
        for ok in [
            "put_end.after_commit",
            "cold.before_reserve",
            "weights.after_remove",
        ] {
            assert!(is_declared(ok), "{ok}");
        }
        for bad in [
            "put_end",
            "cold.after_",
            "cold.during_x",
            "weights.remove",
            "x.after_y",
        ] {
            assert!(!is_declared(bad), "{bad}");
        }
    }
}
