//! `attest trust`: vouch for a workspace's own `attest.toml` (SPEC F13), so
//! its security settings (provider endpoint and key source, permissions,
//! sandbox, command tools, MCP servers) are used. A trust is for the file as
//! it is now: a changed `attest.toml` is untrusted again.

use crate::setup::trust_store;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The workspace (default: the current directory).
    pub dir: Option<PathBuf>,
    /// List the trusted workspaces.
    #[arg(long, conflicts_with_all = ["dir", "revoke"])]
    pub list: bool,
    /// Stop trusting the workspace.
    #[arg(long)]
    pub revoke: bool,
}

pub fn run(args: TrustArgs) -> Result<()> {
    let store = trust_store().context("cannot locate the user config dir (set HOME)")?;
    if args.list {
        let records = store.list()?;
        if records.is_empty() {
            println!("no trusted workspaces");
        }
        for r in records {
            let current = std::fs::read(r.path.join(attest::trust::WORKSPACE_CONFIG))
                .map(|b| attest::trust::config_digest(&b) == r.config_sha256)
                .unwrap_or(false);
            let note = if current {
                ""
            } else {
                "  (attest.toml changed since: untrusted)"
            };
            println!(
                "{}  {}  {}{note}",
                r.path.display(),
                &r.config_sha256[..12],
                r.trusted_at
            );
        }
        return Ok(());
    }
    let dir = args.dir.unwrap_or_else(|| PathBuf::from("."));
    if args.revoke {
        if store.revoke(&dir)? {
            println!("{} is no longer trusted", dir.display());
        } else {
            bail!("{} was not trusted", dir.display());
        }
        return Ok(());
    }
    let record = store.trust(&dir)?;
    println!(
        "trusted {} (attest.toml sha256 {})",
        record.path.display(),
        &record.config_sha256[..12]
    );
    Ok(())
}
