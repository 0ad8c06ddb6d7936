//! This node's stable name in the HA pair, kept in its data dir so that it survives restarts
//! and belongs to the journal it names (the replication marker names nodes by it).

use std::path::Path;

use crate::error::ServerError;

/// File in the data dir holding the node name.
pub const NODE_NAME_FILE: &str = "NODE_NAME";

/// Reads the node name, creating `node-<random>` on first use (written atomically).
pub fn node_name(data_dir: &Path) -> Result<String, ServerError> {
    let path = data_dir.join(NODE_NAME_FILE);
    match std::fs::read_to_string(&path) {
        Ok(s) => {
            let name = s.trim().to_string();
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            {
                return Err(ServerError::Recovery(format!(
                    "{} holds {name:?}, not a node name ([A-Za-z0-9._-]+)",
                    path.display()
                )));
            }
            Ok(name)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let name = format!("node-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
            let tmp = data_dir.join(format!("{NODE_NAME_FILE}.tmp"));
            let write = || -> std::io::Result<()> {
                std::fs::write(&tmp, format!("{name}\n"))?;
                std::fs::File::open(&tmp)?.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                std::fs::File::open(data_dir)?.sync_all()
            };
            write().map_err(|e| {
                ServerError::Recovery(format!("cannot write {}: {e}", path.display()))
            })?;
            Ok(name)
        }
        Err(e) => Err(ServerError::Recovery(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_created_once_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let a = node_name(d.path()).unwrap();
        assert!(a.starts_with("node-") && a.len() == 17, "{a}");
        assert_eq!(node_name(d.path()).unwrap(), a);
        std::fs::write(d.path().join(NODE_NAME_FILE), "bad name!").unwrap();
        assert!(node_name(d.path()).is_err());
    }
}
