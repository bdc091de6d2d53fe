//! Trusted workspaces (SPEC F13): which workspaces' own `attest.toml` the
//! user has vouched for, keyed by the workspace's canonical path and the
//! sha256 of the file. A changed file is untrusted again until re-trusted.
//!
//! One small file per workspace under the trust directory (the front end
//! names it; the CLI uses `~/.config/attest/trusted/`), written atomically,
//! so concurrent `attest` processes never lose each other's records.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The name of a workspace's own config file.
pub const WORKSPACE_CONFIG: &str = "attest.toml";

/// What the user trusted: a workspace and the exact config file it had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustRecord {
    /// The workspace's canonical path.
    pub path: PathBuf,
    /// sha256 (hex) of its `attest.toml` when it was trusted.
    pub config_sha256: String,
    /// When, RFC 3339.
    pub trusted_at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} has no attest.toml to trust")]
    NoConfig(PathBuf),
    #[error("trust store {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The trusted workspaces of one user.
#[derive(Debug, Clone)]
pub struct TrustStore {
    dir: PathBuf,
}

/// sha256 (hex) of `bytes`.
pub fn config_digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl TrustStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        TrustStore { dir: dir.into() }
    }

    fn record_path(&self, canonical: &Path) -> PathBuf {
        let key = config_digest(canonical.as_os_str().as_encoded_bytes());
        self.dir.join(format!("{}.toml", &key[..32]))
    }

    fn canonical(workspace: &Path) -> Result<PathBuf, TrustError> {
        workspace
            .canonicalize()
            .map_err(|source| TrustError::Workspace {
                path: workspace.to_path_buf(),
                source,
            })
    }

    /// Whether `workspace`'s config, whose bytes hash to `sha256`, is trusted.
    pub fn is_trusted(&self, workspace: &Path, sha256: &str) -> bool {
        let Ok(canonical) = Self::canonical(workspace) else {
            return false;
        };
        match self.read(&self.record_path(&canonical)) {
            Some(record) => record.path == canonical && record.config_sha256 == sha256,
            None => false,
        }
    }

    /// Trust `workspace` with its `attest.toml` as it is now.
    pub fn trust(&self, workspace: &Path) -> Result<TrustRecord, TrustError> {
        let canonical = Self::canonical(workspace)?;
        let config = canonical.join(WORKSPACE_CONFIG);
        let bytes = match std::fs::read(&config) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(TrustError::NoConfig(canonical))
            }
            Err(source) => {
                return Err(TrustError::Io {
                    path: config,
                    source,
                })
            }
        };
        let record = TrustRecord {
            path: canonical.clone(),
            config_sha256: config_digest(&bytes),
            trusted_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        let io = |source| TrustError::Io {
            path: self.dir.clone(),
            source,
        };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let text = toml::to_string(&record).expect("a trust record serializes");
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(io)?;
        tmp.write_all(text.as_bytes()).map_err(io)?;
        tmp.persist(self.record_path(&canonical))
            .map_err(|e| io(e.error))?;
        Ok(record)
    }

    /// Stop trusting `workspace`; `false` when it was not trusted.
    pub fn revoke(&self, workspace: &Path) -> Result<bool, TrustError> {
        let canonical = Self::canonical(workspace)?;
        match std::fs::remove_file(self.record_path(&canonical)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(TrustError::Io {
                path: self.dir.clone(),
                source,
            }),
        }
    }

    /// Every trusted workspace, by path.
    pub fn list(&self) -> Result<Vec<TrustRecord>, TrustError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(TrustError::Io {
                    path: self.dir.clone(),
                    source,
                })
            }
        };
        let mut records: Vec<TrustRecord> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "toml"))
            .filter_map(|e| self.read(&e.path()))
            .collect();
        records.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(records)
    }

    fn read(&self, path: &Path) -> Option<TrustRecord> {
        let text = std::fs::read_to_string(path).ok()?;
        toml::from_str(&text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_config_is_untrusted_until_trusted_again() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let store = TrustStore::new(home.path().join("trusted"));
        assert!(matches!(
            store.trust(ws.path()),
            Err(TrustError::NoConfig(_))
        ));
        std::fs::write(ws.path().join(WORKSPACE_CONFIG), "[run]\n").unwrap();
        let record = store.trust(ws.path()).unwrap();
        assert!(store.is_trusted(ws.path(), &record.config_sha256));
        assert!(!store.is_trusted(ws.path(), &config_digest(b"[provider]\n")));
        assert_eq!(store.list().unwrap(), vec![record.clone()]);
        assert!(store.revoke(ws.path()).unwrap());
        assert!(!store.revoke(ws.path()).unwrap());
        assert!(!store.is_trusted(ws.path(), &record.config_sha256));
        assert!(store.list().unwrap().is_empty());
    }
}
