//! What a caller can choose: the namespace scope (tenant, domain) of a client handle and the
//! options of a put. Checked here, before anything goes on the wire, with the server's limits.

use std::sync::Arc;

use crescent_wire::store::{
    DataType, ObjectId, Placement, PutStartRequest, MAX_KEY_BYTES, MAX_SCOPE_BYTES,
};

use crate::error::ClientError;

/// The namespace a client handle works in: tenant (absent = `default`) and optional domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    tenant: Option<Arc<str>>,
    domain: Option<Arc<str>>,
}

/// Checks a tenant or domain name: 1..=64 bytes of `[A-Za-z0-9_.-]`.
pub fn check_scope_name(what: &str, name: &str) -> Result<(), ClientError> {
    if name.is_empty() || name.len() > MAX_SCOPE_BYTES {
        return Err(ClientError::InvalidArgument(format!(
            "{what} name must be 1..={MAX_SCOPE_BYTES} bytes, got {}",
            name.len()
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(ClientError::InvalidArgument(format!(
            "{what} name {name:?} has {bad:?}; only A-Z a-z 0-9 _ . - are allowed"
        )));
    }
    Ok(())
}

/// Checks a key: 1..=4096 bytes.
pub fn check_key(key: &str) -> Result<(), ClientError> {
    if key.is_empty() {
        return Err(ClientError::InvalidArgument("key must not be empty".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(ClientError::InvalidArgument(format!(
            "key of {} bytes, at most {MAX_KEY_BYTES} allowed",
            key.len()
        )));
    }
    Ok(())
}

impl Scope {
    /// A scope; `None` means the default tenant / no domain.
    pub fn new(tenant: Option<&str>, domain: Option<&str>) -> Result<Self, ClientError> {
        if let Some(t) = tenant {
            check_scope_name("tenant", t)?;
        }
        if let Some(d) = domain {
            check_scope_name("domain", d)?;
        }
        Ok(Self {
            tenant: tenant.map(Arc::from),
            domain: domain.map(Arc::from),
        })
    }

    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    pub fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// The wire identity of `key` in this scope (key checked).
    pub fn object_id(&self, key: &str) -> Result<ObjectId, ClientError> {
        check_key(key)?;
        Ok(ObjectId::scoped(self.tenant(), self.domain(), key))
    }
}

/// Options of a put. `Default` is: one replica, the client's default placement (local_first
/// on its own segment when it is a storage owner, else random), kvcache, CRC32C on, no upsert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOptions {
    /// Replicas on distinct segments (best effort; at least 1).
    pub replicas: u32,
    /// `None`: the client's default (see above).
    pub placement: Option<Placement>,
    /// `None`: the client's own segment when it is an owner.
    pub preferred_segment: Option<String>,
    pub data_type: DataType,
    /// Send the value's CRC32C; gets then verify it.
    pub checksum: bool,
    /// Replace an existing key's content instead of failing with CONFLICT.
    pub upsert: bool,
    pub soft_pin_secs: Option<u64>,
    pub hard_pin: bool,
}

impl Default for PutOptions {
    fn default() -> Self {
        Self {
            replicas: 1,
            placement: None,
            preferred_segment: None,
            data_type: DataType::Kvcache,
            checksum: true,
            upsert: false,
            soft_pin_secs: None,
            hard_pin: false,
        }
    }
}

impl PutOptions {
    pub fn upsert() -> Self {
        Self {
            upsert: true,
            ..Self::default()
        }
    }

    /// The put_start request for `id` holding `value_len` bytes. `own_segment` is the
    /// client's own segment, if it is a storage owner.
    pub(crate) fn request(
        &self,
        id: ObjectId,
        value_len: u64,
        checksum: Option<u32>,
        own_segment: Option<&str>,
    ) -> Result<PutStartRequest, ClientError> {
        if self.replicas == 0 {
            return Err(ClientError::InvalidArgument(
                "replicas must be at least 1".into(),
            ));
        }
        let preferred_segment = self
            .preferred_segment
            .clone()
            .or_else(|| own_segment.map(str::to_string));
        let placement = self.placement.unwrap_or(if preferred_segment.is_some() {
            Placement::LocalFirst
        } else {
            Placement::Random
        });
        Ok(PutStartRequest {
            id,
            size: value_len,
            replicas: self.replicas,
            placement,
            preferred_segment,
            data_type: self.data_type,
            checksum: if self.checksum { checksum } else { None },
            upsert: self.upsert,
            soft_pin_secs: self.soft_pin_secs,
            hard_pin: self.hard_pin,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_names_are_checked() {
        assert!(Scope::new(Some("team-a.prod_1"), Some("d")).is_ok());
        assert!(Scope::new(None, None).is_ok());
        for bad in ["", "has space", "slash/no", "é", &"x".repeat(65)] {
            let e = Scope::new(Some(bad), None).unwrap_err();
            assert_eq!(e.code_str(), "INVALID_ARGUMENT", "{bad:?}");
            assert!(Scope::new(None, Some(bad)).is_err());
        }
        assert!(Scope::new(Some(&"x".repeat(64)), None).is_ok());
    }

    #[test]
    fn keys_are_checked_and_scoped() {
        let s = Scope::new(Some("t"), Some("d")).unwrap();
        let id = s.object_id("k").unwrap();
        assert_eq!(id.tenant(), "t");
        assert_eq!(id.domain.as_deref(), Some("d"));
        assert!(s.object_id("").is_err());
        assert!(s.object_id(&"k".repeat(4097)).is_err());
        assert!(s.object_id(&"k".repeat(4096)).is_ok());
        assert_eq!(Scope::default().object_id("k").unwrap().tenant(), "default");
    }

    #[test]
    fn owners_default_to_local_first_on_their_own_segment() {
        let id = ObjectId::new("k");
        let r = PutOptions::default()
            .request(id.clone(), 10, Some(7), Some("own"))
            .unwrap();
        assert_eq!(r.placement, Placement::LocalFirst);
        assert_eq!(r.preferred_segment.as_deref(), Some("own"));
        assert_eq!(r.checksum, Some(7));
        assert_eq!(r.replicas, 1);

        let r = PutOptions::default()
            .request(id.clone(), 10, Some(7), None)
            .unwrap();
        assert_eq!(r.placement, Placement::Random);
        assert_eq!(r.preferred_segment, None);

        let opts = PutOptions {
            placement: Some(Placement::FreeRatioFirst),
            preferred_segment: Some("other".into()),
            checksum: false,
            upsert: true,
            replicas: 2,
            ..PutOptions::default()
        };
        let r = opts.request(id.clone(), 10, Some(7), Some("own")).unwrap();
        assert_eq!(r.placement, Placement::FreeRatioFirst);
        assert_eq!(r.preferred_segment.as_deref(), Some("other"));
        assert_eq!(r.checksum, None);
        assert!(r.upsert);
        assert_eq!(r.replicas, 2);

        let zero = PutOptions {
            replicas: 0,
            ..PutOptions::default()
        };
        assert!(zero.request(id, 1, None, None).is_err());
    }
}
