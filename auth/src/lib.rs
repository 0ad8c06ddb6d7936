//! Crescent's credentials and who may do what (docs/security.md).
//!
//! - [`token`]: signed, expiring bearer tokens (JWT, HS256) carrying [`Claims`]: a role, the
//!   tenant of a `client`, the owner id of an `owner`, an expiry and a token id.
//! - [`keys`]: the signing key and the verification keys (more than one during a rotation),
//!   read from secret files that must not be readable by group or others.
//! - [`authz`]: the one authorization table, `authorize(principal, operation, target)`.
//! - [`revocation`]: the journaled list of revoked token ids (a pure aggregate).

pub mod authz;
pub mod claims;
pub mod error;
pub mod keys;
pub mod revocation;
pub mod token;

pub use authz::{authorize, Denied, Operation, Scope, Target};
pub use claims::{Claims, Role, TOKEN_FORMAT_VERSION};
pub use error::AuthError;
pub use keys::{KeySet, MIN_SECRET_BYTES};
pub use revocation::{RevocationCommand, RevocationError, RevocationEvent, RevocationList};
pub use token::{issue, read_unverified, verify};
