//! Issuing and verifying tokens: JWT (RFC 7519), HS256, the key id in the header.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};

use crate::claims::{Claims, TOKEN_FORMAT_VERSION};
use crate::error::AuthError;
use crate::keys::KeySet;

/// Signs `claims` with the set's signing key.
pub fn issue(keys: &KeySet, claims: &Claims) -> Result<String, AuthError> {
    claims.check()?;
    let key = keys.signing();
    let header = Header {
        kid: Some(key.kid.clone()),
        ..Header::new(Algorithm::HS256)
    };
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(key.secret()))
        .map_err(|e| AuthError::InvalidClaims(e.to_string()))
}

/// The claims a token states, read WITHOUT checking its signature or expiry: for a client to
/// learn the tenant its own credential binds it to (its object ids then name it, as crescentd
/// will). Never a basis for granting anything: `None` for anything that does not decode.
pub fn read_unverified(token: &str) -> Option<Claims> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.insecure_disable_signature_validation();
    validation.validate_exp = false;
    validation.required_spec_claims.clear();
    jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(&[]), &validation)
        .ok()
        .map(|d| d.claims)
}

/// Checks a token's signature (by the key its header names), format version and expiry at
/// `now_secs`. Revocation is the caller's (it holds the journaled list).
pub fn verify(keys: &KeySet, token: &str, now_secs: u64) -> Result<Claims, AuthError> {
    let header = jsonwebtoken::decode_header(token)
        .map_err(|e| AuthError::Invalid(format!("not a token: {e}")))?;
    let kid = header
        .kid
        .ok_or_else(|| AuthError::Invalid("no key id".into()))?;
    let key = keys
        .verifying(&kid)
        .ok_or_else(|| AuthError::Invalid("signed by an unknown key".into()))?;
    let mut validation = Validation::new(Algorithm::HS256);
    // Expiry is checked below against the caller's clock, so tests need no sleeps.
    validation.validate_exp = false;
    validation.required_spec_claims.clear();
    let data =
        jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(key.secret()), &validation)
            .map_err(|e| AuthError::Invalid(e.to_string()))?;
    let claims = data.claims;
    if claims.v > TOKEN_FORMAT_VERSION {
        return Err(AuthError::Invalid(format!(
            "claims version {} is newer than this build's {TOKEN_FORMAT_VERSION}",
            claims.v
        )));
    }
    claims
        .check()
        .map_err(|e| AuthError::Invalid(e.to_string()))?;
    if now_secs >= claims.exp {
        return Err(AuthError::Expired);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claims::Role;
    use crate::keys::Key;

    fn key(byte: u8) -> Key {
        Key::from_bytes(vec![byte; 32]).unwrap()
    }

    fn client(exp_in: u64) -> Claims {
        Claims::new(
            Role::Client,
            Some("t1".into()),
            None,
            1000,
            exp_in,
            "tok-1".into(),
        )
        .unwrap()
    }

    #[test]
    fn a_token_verifies_until_it_expires() {
        let keys = KeySet::new(key(1), vec![]);
        let token = issue(&keys, &client(60)).unwrap();
        assert!(!token.contains('\n'));
        assert_eq!(verify(&keys, &token, 1000).unwrap(), client(60));
        assert_eq!(
            verify(&keys, &token, 1059).unwrap().tenant.as_deref(),
            Some("t1")
        );
        assert_eq!(verify(&keys, &token, 1060), Err(AuthError::Expired));
    }

    #[test]
    fn tampered_foreign_and_garbage_tokens_are_invalid() {
        let keys = KeySet::new(key(1), vec![]);
        let token = issue(&keys, &client(60)).unwrap();
        let other = KeySet::new(key(2), vec![]);
        assert!(matches!(
            verify(&other, &token, 1000),
            Err(AuthError::Invalid(_))
        ));
        // Same kid, other secret: the signature fails.
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        parts[2] = issue(&other, &client(60))
            .unwrap()
            .split('.')
            .nth(2)
            .unwrap()
            .into();
        assert!(matches!(
            verify(&keys, &parts.join("."), 1000),
            Err(AuthError::Invalid(_))
        ));
        // A payload swapped for an admin one keeps the old signature: refused.
        let admin = Claims::new(Role::Admin, None, None, 1000, 60, "x".into()).unwrap();
        let forged = issue(&other, &admin).unwrap();
        parts[1] = forged.split('.').nth(1).unwrap().into();
        assert!(matches!(
            verify(&keys, &parts.join("."), 1000),
            Err(AuthError::Invalid(_))
        ));
        assert!(matches!(
            verify(&keys, "nope", 1000),
            Err(AuthError::Invalid(_))
        ));
        assert!(matches!(
            verify(&keys, "", 1000),
            Err(AuthError::Invalid(_))
        ));
    }

    #[test]
    fn rotation_verifies_old_and_new_tokens_and_signs_with_the_new_key() {
        let old = KeySet::new(key(1), vec![]);
        let old_token = issue(&old, &client(60)).unwrap();
        let rotated = KeySet::new(key(2), vec![key(1)]);
        let new_token = issue(&rotated, &client(60)).unwrap();
        assert!(verify(&rotated, &old_token, 1000).is_ok());
        assert!(verify(&rotated, &new_token, 1000).is_ok());
        assert!(verify(&old, &new_token, 1000).is_err());
        // Once the old key is dropped, its tokens stop working.
        let after = KeySet::new(key(2), vec![]);
        assert!(verify(&after, &old_token, 1000).is_err());
    }

    #[test]
    fn claims_the_role_needs_are_required_to_issue() {
        let keys = KeySet::new(key(1), vec![]);
        let mut bad = client(60);
        bad.tenant = None;
        assert!(matches!(
            issue(&keys, &bad),
            Err(AuthError::InvalidClaims(_))
        ));
    }
}
