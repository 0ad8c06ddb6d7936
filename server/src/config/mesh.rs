//! The `[mesh]` section: this cluster as one of a mesh of clusters (docs/scale-out.md). The
//! membership record lives in the HA coordination backend (`ha.etcd` or `ha.redis`), under
//! the cluster's name `ha.cluster`.

use serde::{Deserialize, Serialize};

use crate::config::ha::HaSettings;
use crate::config::{invalid, ConfigError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeshSettings {
    /// The mesh's name (`--mesh`); unset: not in a mesh.
    pub name: Option<String>,
    /// This cluster's relative share of the mesh's objects (`--mesh-weight`).
    pub weight: f64,
}

impl Default for MeshSettings {
    fn default() -> Self {
        Self {
            name: None,
            weight: 1.0,
        }
    }
}

impl MeshSettings {
    pub fn validate(&self, ha: &HaSettings) -> Result<(), ConfigError> {
        let Some(name) = &self.name else {
            return Ok(());
        };
        crescent_mesh::validate_name("mesh", name)
            .map_err(|e| invalid("mesh.name", e.to_string()))?;
        if !ha.enabled() {
            return Err(invalid(
                "mesh.name",
                "a mesh needs a coordination backend: set ha.etcd or ha.redis (--etcd, --redis)",
            ));
        }
        let w = self.weight;
        if !(w.is_finite() && w > 0.0 && w <= crescent_mesh::MAX_WEIGHT) {
            return Err(invalid(
                "mesh.weight",
                format!(
                    "{w} must be finite, > 0 and <= {}",
                    crescent_mesh::MAX_WEIGHT
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mesh_needs_a_backend_a_name_and_a_weight() {
        let ha = HaSettings {
            etcd: vec!["http://127.0.0.1:2379".into()],
            advertise: "127.0.0.1:7480".into(),
            ..HaSettings::default()
        };
        let mesh = |name: &str, weight| MeshSettings {
            name: Some(name.into()),
            weight,
        };
        assert!(MeshSettings::default()
            .validate(&HaSettings::default())
            .is_ok());
        assert!(mesh("m", 2.5).validate(&ha).is_ok());
        assert!(mesh("m", 1.0).validate(&HaSettings::default()).is_err());
        for bad in [
            mesh("a/b", 1.0),
            mesh("m", 0.0),
            mesh("m", f64::NAN),
            mesh("m", 2e9),
        ] {
            assert!(bad.validate(&ha).is_err(), "{bad:?}");
        }
    }
}
