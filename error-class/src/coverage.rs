//! A check that every variant of a domain error enum maps to a deliberate wire code: each
//! crate's tests list one value of every variant with [`every_variant!`](crate::every_variant)
//! (which fails to compile when a variant is missing) and hand them to [`assert_wire_map`].

use crate::{ErrorCode, WireCoded};

/// One value of every variant of an error enum, each named by its variant, as
/// `Vec<(&'static str, Enum)>`:
///
/// ```
/// # #[derive(Debug)] enum E { A(u8), B { x: u8 }, C }
/// use crescent_error_class::every_variant;
/// let all = every_variant!(E { A => E::A(1), B => E::B { x: 2 }, C => E::C });
/// assert_eq!(all.len(), 3);
/// ```
///
/// The macro also writes an exhaustive `match` over the named variants, so an enum that gains
/// a variant fails to compile here until the variant is listed; each value is checked to be of
/// the variant it is listed under.
#[macro_export]
macro_rules! every_variant {
    ($ty:ident { $($variant:ident => $value:expr),+ $(,)? }) => {{
        #[allow(dead_code)]
        fn listed(e: &$ty) {
            match e {
                $($ty::$variant { .. } => {})+
            }
        }
        vec![$({
            let value: $ty = $value;
            assert!(
                matches!(value, $ty::$variant { .. }),
                "{} is listed under {}", stringify!($value), stringify!($variant)
            );
            (stringify!($variant), value)
        }),+]
    }};
}

/// Asserts that every listed variant maps to a code other than `INTERNAL`, except exactly the
/// variants named in `internal` (failures of the node itself, not of the request), which must
/// map to `INTERNAL`.
pub fn assert_wire_map<E: std::fmt::Debug>(
    all: &[(&'static str, E)],
    code: impl Fn(&E) -> ErrorCode,
    internal: &[&str],
) {
    for name in internal {
        assert!(
            all.iter().any(|(variant, _)| variant == name),
            "{name} is listed as internal but is no variant"
        );
    }
    for (variant, value) in all {
        let got = code(value);
        if internal.contains(variant) {
            assert_eq!(got, ErrorCode::Internal, "{variant} ({value:?})");
        } else {
            assert_ne!(
                got,
                ErrorCode::Internal,
                "{variant} ({value:?}) maps to INTERNAL"
            );
        }
    }
}

/// [`assert_wire_map`] for an enum that implements [`WireCoded`].
pub fn assert_wire_coded<E: WireCoded + std::fmt::Debug>(
    all: &[(&'static str, E)],
    internal: &[&str],
) {
    assert_wire_map(all, E::wire_code, internal);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The fields only give the variants the shapes domain errors have.
    #[allow(dead_code)]
    #[derive(Debug)]
    enum Sample {
        Bad(u8),
        Gone { id: u8 },
        Broken,
    }

    impl WireCoded for Sample {
        fn wire_code(&self) -> ErrorCode {
            match self {
                Sample::Bad(_) => ErrorCode::InvalidArgument,
                Sample::Gone { .. } => ErrorCode::NotFound,
                Sample::Broken => ErrorCode::Internal,
            }
        }
    }

    fn all() -> Vec<(&'static str, Sample)> {
        crate::every_variant!(Sample {
            Bad => Sample::Bad(1),
            Gone => Sample::Gone { id: 2 },
            Broken => Sample::Broken,
        })
    }

    #[test]
    fn listed_internal_variants_pass() {
        assert_wire_coded(&all(), &["Broken"]);
    }

    #[test]
    #[should_panic(expected = "Broken (Broken) maps to INTERNAL")]
    fn an_unlisted_internal_variant_fails() {
        assert_wire_coded(&all(), &[]);
    }

    #[test]
    #[should_panic(expected = "Nope is listed as internal but is no variant")]
    fn an_unknown_internal_name_fails() {
        assert_wire_coded(&all(), &["Broken", "Nope"]);
    }

    #[test]
    #[should_panic(expected = "is listed under Bad")]
    fn a_value_under_the_wrong_variant_fails() {
        let _ = crate::every_variant!(Sample {
            Bad => Sample::Broken,
            Gone => Sample::Gone { id: 2 },
            Broken => Sample::Broken,
        });
    }
}
