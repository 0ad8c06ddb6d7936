//! `[transport]`: how crescentd itself reaches storage owners' segments (the cold tier's
//! offloads and promotions). TCP always; a transfer engine beside it for segments mounted with
//! transport `transfer_engine` (docs/configuration.md, "[transport]").

use crescent_transport::ffi::FfiConfig;
use serde::{Deserialize, Serialize};

use super::{invalid, ConfigError};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportSettings {
    /// The transfer-engine library to load; empty: the one `CRESCENT_TRANSFER_ENGINE_LIB`
    /// names, if any (none: transfer-engine segments are out of crescentd's reach).
    pub transfer_engine_lib: String,
    /// Its `metadata_conn_string`; empty: `CRESCENT_TRANSFER_ENGINE_METADATA`, else
    /// `P2PHANDSHAKE`.
    pub transfer_engine_metadata: String,
}

impl TransportSettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.transfer_engine_metadata.is_empty() && self.transfer_engine_lib.is_empty() {
            return Err(invalid(
                "transport.transfer_engine_metadata",
                "needs transport.transfer_engine_lib",
            ));
        }
        Ok(())
    }

    /// The engine crescentd loads beside TCP: this section's, else the environment's.
    pub fn transfer_engine(&self) -> Option<FfiConfig> {
        if self.transfer_engine_lib.is_empty() {
            return FfiConfig::from_env().map(named);
        }
        let from_env = FfiConfig::from_env().unwrap_or_default();
        let metadata = match self.transfer_engine_metadata.as_str() {
            "" => from_env.metadata_conn_string.clone(),
            set => set.to_string(),
        };
        Some(named(FfiConfig {
            library: self.transfer_engine_lib.clone(),
            metadata_conn_string: metadata,
            ..from_env
        }))
    }
}

fn named(config: FfiConfig) -> FfiConfig {
    FfiConfig {
        local_server_name: format!("crescentd-{}", std::process::id()),
        ..config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_names_the_library_and_metadata_needs_it() {
        let s: TransportSettings = toml::from_str(
            "transfer_engine_lib = \"/x/libte.so\"\ntransfer_engine_metadata = \"file:///m\"",
        )
        .unwrap();
        s.validate().unwrap();
        let engine = s.transfer_engine().unwrap();
        assert_eq!(
            (
                engine.library.as_str(),
                engine.metadata_conn_string.as_str()
            ),
            ("/x/libte.so", "file:///m")
        );
        let orphan = TransportSettings {
            transfer_engine_metadata: "file:///m".into(),
            ..TransportSettings::default()
        };
        assert!(orphan.validate().is_err());
        assert!(toml::from_str::<TransportSettings>("kind = \"ffi\"").is_err());
    }
}
