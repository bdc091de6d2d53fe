//! The server's settings: its own config file (trusted, SPEC F13: nobody
//! else's file is laid over it) and where its store and workspaces live.

use attest::config::ConfigFile;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// The store file under the data directory.
pub const STORE_FILE: &str = "server.db";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    File(#[from] attest::config::ConfigError),
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no data directory: give --config FILE with [server] data_dir, or set HOME")]
    NoDataDir,
    #[error("`database_url` must be a PostgreSQL URL (postgres://user@host:port/database)")]
    DatabaseUrl,
}

/// What `attest serve` and `attest token` need to know.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The config file, when one was given.
    pub path: Option<PathBuf>,
    /// Its text: each run's engine is built from it.
    pub text: String,
    pub data_dir: PathBuf,
    pub workspaces_root: PathBuf,
    pub approval_timeout: Duration,
    pub max_concurrent_runs: usize,
    pub heartbeat: Duration,
    /// The shared PostgreSQL store, when one is named (`--database-url`
    /// or `[server] database_url`); the embedded SQLite store otherwise.
    pub database_url: Option<String>,
    /// How long a lease on a run lasts without renewal.
    pub lease: Duration,
}

impl ServerConfig {
    /// Read `path` (or use the defaults without one). `default_data_dir`
    /// is where the store goes when the file names no `[server] data_dir`
    /// (the CLI passes the user's data directory).
    pub fn load(
        path: Option<&Path>,
        default_data_dir: Option<PathBuf>,
    ) -> Result<(ServerConfig, ConfigFile), ConfigError> {
        let (file, text) = match path {
            Some(p) => {
                let file = attest::config::read(p)?;
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?;
                (file, text)
            }
            None => (ConfigFile::default(), String::new()),
        };
        let base = path
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let relative = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let server = &file.server;
        let data_dir = match &server.data_dir {
            Some(d) => relative(d),
            None => default_data_dir.ok_or(ConfigError::NoDataDir)?,
        };
        let workspaces_root = server
            .workspaces_root
            .as_deref()
            .map(relative)
            .unwrap_or_else(|| data_dir.join("workspaces"));
        let cfg = ServerConfig {
            path: path.map(Path::to_path_buf),
            text,
            data_dir,
            workspaces_root,
            approval_timeout: Duration::from_secs(server.approval_timeout_secs.unwrap_or(300)),
            max_concurrent_runs: server.max_concurrent_runs.unwrap_or(1024).max(1),
            heartbeat: Duration::from_secs(server.heartbeat_secs.unwrap_or(15).max(1)),
            database_url: server.database_url.clone(),
            lease: Duration::from_secs(server.lease_secs.unwrap_or(30).max(1)),
        };
        if let Some(url) = &cfg.database_url {
            check_database_url(url)?;
        }
        Ok((cfg, file))
    }

    /// Use this database instead of the file (`--database-url`).
    pub fn with_database_url(mut self, url: Option<String>) -> Result<Self, ConfigError> {
        if let Some(url) = url {
            check_database_url(&url)?;
            self.database_url = Some(url);
        }
        Ok(self)
    }

    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join(STORE_FILE)
    }

    /// The config as parsed for one run's engine.
    pub fn file(&self) -> Result<ConfigFile, String> {
        toml::from_str(&self.text).map_err(|e| format!("the server's config: {e}"))
    }

    /// ` (config PATH)` for error messages.
    pub fn note(&self) -> String {
        self.path
            .as_ref()
            .map(|p| format!(" (config {})", p.display()))
            .unwrap_or_default()
    }
}

fn check_database_url(url: &str) -> Result<(), ConfigError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(())
    } else {
        Err(ConfigError::DatabaseUrl)
    }
}

/// The directory a run works in: `name` under `root` (relative, no `..`),
/// or a fresh one named after the run.
pub fn workspace_dir(root: &Path, name: Option<&str>, run_id: &str) -> Result<PathBuf, String> {
    let Some(name) = name else {
        return Ok(root.join(run_id));
    };
    let path = Path::new(name);
    if name.trim().is_empty() || name.contains('\0') {
        return Err("`workspace` is empty".into());
    }
    if path.is_absolute() {
        return Err(format!(
            "`workspace` {name:?} is absolute; name a directory under the server's workspaces_root"
        ));
    }
    for part in path.components() {
        match part {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => {
                return Err(format!(
                    "`workspace` {name:?} leaves workspaces_root (`..`)"
                ))
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("`workspace` {name:?} is absolute"))
            }
        }
    }
    Ok(root.join(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_stays_under_the_root() {
        let root = Path::new("/srv/ws");
        assert_eq!(
            workspace_dir(root, Some("team/a"), "r1").unwrap(),
            root.join("team/a")
        );
        assert_eq!(workspace_dir(root, None, "r1").unwrap(), root.join("r1"));
        assert!(workspace_dir(root, Some("../etc"), "r1").is_err());
        assert!(workspace_dir(root, Some("a/../../b"), "r1").is_err());
        assert!(workspace_dir(root, Some("/etc"), "r1").is_err());
        assert!(workspace_dir(root, Some(""), "r1").is_err());
    }

    #[test]
    fn paths_in_the_file_are_relative_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("server.toml");
        std::fs::write(
            &file,
            "[server]\ndata_dir = \"data\"\napproval_timeout_secs = 7\n",
        )
        .unwrap();
        let (cfg, _) = ServerConfig::load(Some(&file), None).unwrap();
        assert_eq!(cfg.data_dir, dir.path().join("data"));
        assert_eq!(cfg.workspaces_root, dir.path().join("data/workspaces"));
        assert_eq!(cfg.approval_timeout, Duration::from_secs(7));
        assert!(cfg.file().is_ok());
    }
}
