//! Object identity: validated (tenant, optional domain, key), with tenant and domain interned
//! into a compact [`ScopeId`] that is part of every map key. Lookups resolve the scope exactly;
//! nothing ever lists a global namespace and filters by tenant.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crescent_wire::store::{ObjectId, DEFAULT_TENANT, MAX_KEY_BYTES, MAX_SCOPE_BYTES};

use crate::error::StoreError;

/// An interned (tenant, optional domain) pair.
pub type ScopeId = u32;

/// Checks a tenant or domain name: 1..=64 bytes of `[A-Za-z0-9_.-]`.
pub fn validate_scope_name(field: &'static str, name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.len() > MAX_SCOPE_BYTES {
        return Err(StoreError::invalid(
            field,
            format!("must be 1..={MAX_SCOPE_BYTES} bytes, got {}", name.len()),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(StoreError::invalid(
            field,
            format!("{name:?} holds {c:?}; allowed are [A-Za-z0-9_.-]"),
        ));
    }
    Ok(())
}

/// Checks a key: 1..=4096 bytes, no NUL.
pub fn validate_key(field: &'static str, key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::invalid(field, "must not be empty"));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(StoreError::invalid(
            field,
            format!("{} bytes, longest allowed is {MAX_KEY_BYTES}", key.len()),
        ));
    }
    if key.as_bytes().contains(&0) {
        return Err(StoreError::invalid(field, "must not contain NUL"));
    }
    Ok(())
}

/// A scope as named on the wire, validated (absent tenant = `default`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeName<'a> {
    pub tenant: &'a str,
    pub domain: Option<&'a str>,
}

impl<'a> ScopeName<'a> {
    pub fn parse(tenant: Option<&'a str>, domain: Option<&'a str>) -> Result<Self, StoreError> {
        let tenant = tenant.unwrap_or(DEFAULT_TENANT);
        validate_scope_name("tenant", tenant)?;
        if let Some(d) = domain {
            validate_scope_name("domain", d)?;
        }
        Ok(Self { tenant, domain })
    }
}

/// A validated object identity borrowed from a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectName<'a> {
    pub scope: ScopeName<'a>,
    pub key: &'a str,
}

impl<'a> ObjectName<'a> {
    pub fn parse(id: &'a ObjectId) -> Result<Self, StoreError> {
        let scope = ScopeName::parse(id.tenant.as_deref(), id.domain.as_deref())?;
        validate_key("key", &id.key)?;
        Ok(Self {
            scope,
            key: &id.key,
        })
    }
}

#[derive(Debug, Default)]
struct TenantScopes {
    without_domain: Option<ScopeId>,
    domains: HashMap<Box<str>, ScopeId>,
}

#[derive(Debug, Default)]
struct InternerState {
    tenants: HashMap<Box<str>, TenantScopes>,
    names: Vec<(Arc<str>, Option<Arc<str>>)>,
}

/// Interns scopes. Reads (get, exist, list) only look up, so a stream of reads under made-up
/// tenants never grows the table; puts intern, up to a configured bound.
#[derive(Debug)]
pub struct ScopeInterner {
    state: RwLock<InternerState>,
    max: usize,
}

impl ScopeInterner {
    pub fn new(max: usize) -> Self {
        Self {
            state: RwLock::new(InternerState::default()),
            max,
        }
    }

    fn find(state: &InternerState, name: ScopeName<'_>) -> Option<ScopeId> {
        let t = state.tenants.get(name.tenant)?;
        match name.domain {
            None => t.without_domain,
            Some(d) => t.domains.get(d).copied(),
        }
    }

    /// The scope's id if any object was ever put in it.
    pub fn lookup(&self, name: ScopeName<'_>) -> Option<ScopeId> {
        Self::find(&self.state.read().expect("interner lock"), name)
    }

    /// The scope's id, interning it if new.
    pub fn intern(&self, name: ScopeName<'_>) -> Result<ScopeId, StoreError> {
        if let Some(id) = self.lookup(name) {
            return Ok(id);
        }
        let mut state = self.state.write().expect("interner lock");
        if let Some(id) = Self::find(&state, name) {
            return Ok(id);
        }
        if state.names.len() >= self.max {
            return Err(StoreError::LimitReached {
                reason: format!("at most {} tenant/domain scopes", self.max),
            });
        }
        let id = state.names.len() as ScopeId;
        state
            .names
            .push((Arc::from(name.tenant), name.domain.map(Arc::from)));
        let t = state.tenants.entry(Box::from(name.tenant)).or_default();
        match name.domain {
            None => t.without_domain = Some(id),
            Some(d) => {
                t.domains.insert(Box::from(d), id);
            }
        }
        Ok(id)
    }

    /// The (tenant, domain) of an interned id.
    pub fn name(&self, id: ScopeId) -> Option<(Arc<str>, Option<Arc<str>>)> {
        self.state
            .read()
            .expect("interner lock")
            .names
            .get(id as usize)
            .cloned()
    }

    pub fn len(&self) -> usize {
        self.state.read().expect("interner lock").names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_are_validated() {
        assert!(ScopeName::parse(None, None).is_ok());
        assert_eq!(ScopeName::parse(None, None).unwrap().tenant, "default");
        assert!(ScopeName::parse(Some("a.b-C_9"), Some("x")).is_ok());
        for bad in ["", "a/b", "a b", "é", &"x".repeat(65)] {
            let e = ScopeName::parse(Some(bad), None).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT", "{bad:?}");
            let e = ScopeName::parse(None, Some(bad)).unwrap_err();
            assert_eq!(e.code(), "INVALID_ARGUMENT", "{bad:?}");
        }
    }

    #[test]
    fn keys_are_validated() {
        assert!(validate_key("key", "k").is_ok());
        assert!(validate_key("key", &"k".repeat(4096)).is_ok());
        assert!(validate_key("key", "").is_err());
        assert!(validate_key("key", &"k".repeat(4097)).is_err());
        assert!(validate_key("key", "a\0b").is_err());
    }

    #[test]
    fn interning_is_exact_and_bounded() {
        let i = ScopeInterner::new(3);
        let a = i
            .intern(ScopeName::parse(Some("t"), None).unwrap())
            .unwrap();
        let b = i
            .intern(ScopeName::parse(Some("t"), Some("d")).unwrap())
            .unwrap();
        let c = i
            .intern(ScopeName::parse(Some("d"), None).unwrap())
            .unwrap();
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert_eq!(
            i.lookup(ScopeName::parse(Some("t"), None).unwrap()),
            Some(a)
        );
        assert_eq!(
            i.lookup(ScopeName::parse(Some("t"), Some("e")).unwrap()),
            None
        );
        let e = i
            .intern(ScopeName::parse(Some("u"), None).unwrap())
            .unwrap_err();
        assert_eq!(e.code(), "OUT_OF_SPACE");
        assert_eq!(i.name(b).unwrap().1.as_deref(), Some("d"));
    }
}
