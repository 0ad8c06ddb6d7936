//! [`domain_events!`]: an aggregate's event enum and its [`DomainEvent`] codec, defined once.
//!
//! Each line names a variant, its payload struct, the event kind (a constant and its stored
//! name) and the version this build writes, plus the older versions it upcasts from (the
//! payload struct that version wrote, converted with `From`). The macro writes the enum
//! (serialized as the variant's payload, for `World::event_json`), the kind constants, the
//! schema table and `kind`, `version`, `encode`, `encode_at`, `decode` and `schema`: what every
//! aggregate used to write by hand, so a new kind or version is one line.
//!
//! ```
//! use crescent_actors::{domain_events, DomainEvent};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! pub struct Opened { pub at_ms: i64 }
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! pub struct OpenedV1 {}
//! impl From<OpenedV1> for Opened {
//!     fn from(_: OpenedV1) -> Self { Opened { at_ms: 0 } }
//! }
//!
//! const DOOR: &str = "door";
//!
//! domain_events! {
//!     /// The events of a door.
//!     #[derive(Debug, Clone, PartialEq)]
//!     pub enum DoorEvent for DOOR {
//!         Opened(Opened): pub OPENED = "opened", version 2, upcast { 1 => OpenedV1 };
//!     }
//! }
//!
//! assert_eq!(DoorEvent::schema(), &[("opened", 2)]);
//! let v1 = crescent_actors::event_payload::to_msgpack(&OpenedV1 {});
//! assert_eq!(DoorEvent::decode(OPENED, 1, &v1).unwrap(), DoorEvent::Opened(Opened { at_ms: 0 }));
//! ```
//!
//! Two optional parts serve a kind that can be written at more than one version (docs/ha.md,
//! "Event versions in a mixed pair"): `write_floor FLOOR` after the aggregate names the
//! constant [`DomainEvent::write_floor`] returns, and `written_by f` on a kind names the
//! function `f(&payload, version) -> Option<Vec<u8>>` that writes it at every version this
//! build can write, `None` at any other: `encode` is `f` at the current version, `encode_at` is
//! `f` (a kind without it is written at its current version only). A kind's `version` is any
//! constant expression, and an `upcast` entry, which names the struct a version other than the
//! payload's own was stored as, may carry `#[cfg(...)]`: with the test feature
//! `upgrade-test-schema`, `segment_mounted` is at v3, stored as another struct, and still
//! written at v2 (segment_registry/event.rs; this file's unit tests cover both).
//!
//! ```
//! use crescent_actors::{domain_events, DomainEvent};
//! use serde::{Deserialize, Serialize};
//!
//! /// The extent as v2 stored it, and as this build keeps it.
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! pub struct Spanned { pub base: u64, pub size: u64 }
//! /// v3 stores `[start, end)`.
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! pub struct SpannedV3 { pub start: u64, pub end: u64 }
//! impl From<SpannedV3> for Spanned {
//!     fn from(v3: SpannedV3) -> Self { Spanned { base: v3.start, size: v3.end - v3.start } }
//! }
//!
//! const RULER: &str = "ruler";
//! const WRITE_FLOOR: &[(&str, u16)] = &[("spanned", 2)];
//!
//! fn write_spanned(e: &Spanned, version: u16) -> Option<Vec<u8>> {
//!     let v3 = SpannedV3 { start: e.base, end: e.base + e.size };
//!     match version {
//!         2 => Some(crescent_actors::event_payload::to_msgpack(e)),
//!         3 => Some(crescent_actors::event_payload::to_msgpack(&v3)),
//!         _ => None,
//!     }
//! }
//!
//! domain_events! {
//!     #[derive(Debug, Clone, PartialEq)]
//!     pub enum RulerEvent for RULER, write_floor WRITE_FLOOR {
//!         Spanned(Spanned): SPANNED = "spanned", version 3, written_by write_spanned,
//!             upcast { 3 => SpannedV3 };
//!     }
//! }
//!
//! let e = RulerEvent::Spanned(Spanned { base: 4, size: 2 });
//! assert_eq!((e.version(), RulerEvent::write_floor()), (3, WRITE_FLOOR));
//! for version in 2..=3 {
//!     let payload = e.encode_at(version).unwrap();
//!     assert_eq!(RulerEvent::decode(SPANNED, version, &payload).unwrap(), e);
//! }
//! assert_eq!(e.encode_at(3), Some(e.encode()));
//! assert_eq!(e.encode_at(1), None);
//! ```
//!
//! [`DomainEvent`]: crate::DomainEvent
//! [`DomainEvent::write_floor`]: crate::DomainEvent::write_floor

/// Defines an event enum and its [`DomainEvent`](crate::DomainEvent) impl (see the module
/// documentation of `event_macro`).
#[macro_export]
macro_rules! domain_events {
    // One kind's payload at its current version, and at `$at`.
    (@encode $e:ident, $version:expr) => {
        $crate::event_payload::to_msgpack($e)
    };
    (@encode $e:ident, $version:expr, $writer:path) => {
        $writer($e, $version).expect("a kind's current version is always written")
    };
    (@encode_at $e:ident, $at:ident, $version:expr) => {
        ($at == $version).then(|| $crate::event_payload::to_msgpack($e))
    };
    (@encode_at $e:ident, $at:ident, $version:expr, $writer:path) => {
        $writer($e, $at)
    };
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident for $aggregate:tt $(, write_floor $floor:path)? {
            $(
                $(#[$vmeta:meta])*
                $variant:ident($payload:ty): $kvis:vis $kconst:ident = $kind:literal,
                version $version:expr
                $(, written_by $writer:path)?
                $(, upcast { $($(#[$umeta:meta])* $from:literal => $old:ty),* $(,)? })?
            );* $(;)?
        }
    ) => {
        $(#[$meta])*
        #[derive(::serde::Serialize)]
        // Serialized as the variant's payload: what tools show as the event's data.
        #[serde(untagged)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant($payload), )*
        }

        $( $kvis const $kconst: &str = $kind; )*

        impl $crate::DomainEvent for $name {
            fn kind(&self) -> &'static str {
                match self {
                    $( Self::$variant(_) => $kconst, )*
                }
            }

            fn version(&self) -> u16 {
                match self {
                    $( Self::$variant(_) => $version, )*
                }
            }

            fn encode(&self) -> Vec<u8> {
                match self {
                    $(
                        Self::$variant(e) => {
                            $crate::domain_events!(@encode e, $version $(, $writer)?)
                        }
                    )*
                }
            }

            $(
                fn write_floor() -> &'static [(&'static str, u16)] {
                    $floor
                }
            )?

            fn encode_at(&self, version: u16) -> Option<Vec<u8>> {
                match self {
                    $(
                        Self::$variant(e) => {
                            $crate::domain_events!(@encode_at e, version, $version $(, $writer)?)
                        }
                    )*
                }
            }

            fn decode(
                kind: &str,
                version: u16,
                payload: &[u8],
            ) -> Result<Self, $crate::DecodeError> {
                $crate::event_payload::check_version($aggregate, Self::schema(), kind, version)?;
                $(
                    if kind == $kconst {
                        $($(
                            $(#[$umeta])*
                            if version == $from {
                                let old: $old =
                                    $crate::event_payload::from_msgpack(kind, version, payload)?;
                                return Ok(Self::$variant(old.into()));
                            }
                        )*)?
                        return $crate::event_payload::from_msgpack(kind, version, payload)
                            .map(Self::$variant);
                    }
                )*
                Err($crate::DecodeError::UnknownKind {
                    aggregate: $aggregate,
                    kind: kind.to_string(),
                })
            }

            fn schema() -> &'static [(&'static str, u16)] {
                &[ $( ($kconst, $version), )* ]
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use crate::event_payload::to_msgpack;
    use crate::{DecodeError, DomainEvent};

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Marked {
        pub at: u64,
    }

    /// v3, in a build where a `cfg` turns it on.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct MarkedV3 {
        pub at: u64,
        pub by: String,
    }

    impl From<MarkedV3> for Marked {
        fn from(v3: MarkedV3) -> Self {
            Marked { at: v3.at }
        }
    }

    const AGGREGATE: &str = "marker";
    /// A version chosen by a `cfg`, as `segment_mounted`'s under `upgrade-test-schema`.
    const MARKED_VERSION: u16 = if cfg!(all()) { 3 } else { 2 };
    const WRITE_FLOOR: &[(&str, u16)] = &[("marked", 2)];

    fn write_marked(e: &Marked, version: u16) -> Option<Vec<u8>> {
        match version {
            2 => Some(to_msgpack(e)),
            3 => Some(to_msgpack(&MarkedV3 {
                at: e.at,
                by: String::new(),
            })),
            _ => None,
        }
    }

    crate::domain_events! {
        #[derive(Debug, Clone, PartialEq)]
        pub enum MarkerEvent for AGGREGATE, write_floor WRITE_FLOOR {
            Marked(Marked): MARKED = "marked", version MARKED_VERSION, written_by write_marked,
                upcast {
                    #[cfg(all())] 3 => MarkedV3,
                    // Compiled out, so the type need not exist.
                    #[cfg(any())] 4 => NoSuchType,
                };
            Cleared(Marked): CLEARED = "cleared", version 1;
        }
    }

    #[test]
    fn a_cfg_version_and_writer_give_the_version_schema_and_write_range() {
        let e = MarkerEvent::Marked(Marked { at: 7 });
        assert_eq!(e.version(), 3);
        assert_eq!(MarkerEvent::schema(), &[("marked", 3), ("cleared", 1)]);
        assert_eq!(MarkerEvent::write_floor(), WRITE_FLOOR);
        assert_eq!(e.encode(), write_marked(&Marked { at: 7 }, 3).unwrap());
        for version in 2..=3 {
            let payload = e.encode_at(version).unwrap();
            assert_eq!(
                MarkerEvent::decode(MARKED, version, &payload),
                Ok(e.clone())
            );
        }
        assert_eq!(e.encode_at(1), None);
        assert_eq!(e.encode_at(4), None);
        let cleared = MarkerEvent::Cleared(Marked { at: 1 });
        assert_eq!(cleared.encode_at(1), Some(cleared.encode()));
        assert_eq!(cleared.encode_at(2), None);
    }

    #[test]
    fn cfg_upcasts_are_in_or_out_with_their_cfg() {
        // v3 is read through its own struct; the entry compiled out (v4) is not there to read,
        // and its missing type did not stop the build.
        let v3 = to_msgpack(&MarkedV3 {
            at: 5,
            by: "x".into(),
        });
        let e = MarkerEvent::decode(MARKED, 3, &v3);
        assert_eq!(e, Ok(MarkerEvent::Marked(Marked { at: 5 })));
        assert!(matches!(
            MarkerEvent::decode(MARKED, 4, &v3),
            Err(DecodeError::UnsupportedVersion { supported: 3, .. })
        ));
    }
}
