//! [`domain_events!`]: an aggregate's event enum and its [`DomainEvent`] codec, defined once.
//!
//! Each line names a variant, its payload struct, the event kind (a constant and its stored
//! name) and the version this build writes, plus the older versions it upcasts from (the
//! payload struct that version wrote, converted with `From`). The macro writes the enum
//! (serialized as the variant's payload, for `World::event_json`), the kind constants, the
//! schema table and `kind`, `version`, `encode`, `decode` and `schema`: what every aggregate
//! used to write by hand, so a new kind or version is one line.
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
//! [`DomainEvent`]: crate::DomainEvent

/// Defines an event enum and its [`DomainEvent`](crate::DomainEvent) impl (see the module
/// documentation of `event_macro`).
#[macro_export]
macro_rules! domain_events {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident for $aggregate:tt {
            $(
                $(#[$vmeta:meta])*
                $variant:ident($payload:ty): $kvis:vis $kconst:ident = $kind:literal,
                version $version:literal
                $(, upcast { $($from:literal => $old:ty),* $(,)? })?
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
                    $( Self::$variant(e) => $crate::event_payload::to_msgpack(e), )*
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
