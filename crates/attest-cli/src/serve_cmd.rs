//! `attest serve` and `attest token`: the HTTP server of `attest-server`,
//! given this process's environment, and its bearer tokens.

use crate::setup::{process_env, user_data_dir};
use anyhow::{bail, Context, Result};
use attest_server::{AppState, ServerConfig, ServerEnv};
use clap::{Args, Subcommand};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The server's config file (trusted: its provider, permissions,
    /// sandbox, tools and `[server]` settings are used as written).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on; anything but loopback requires tokens.
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub listen: String,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; it is printed once, alone on stdout, and stored hashed.
    Create {
        #[arg(long)]
        config: Option<PathBuf>,
        /// A name for people (`attest token list` shows it).
        #[arg(long)]
        name: String,
        /// Comma-separated: runs:read, runs:write, approvals:read, approvals:write.
        #[arg(long)]
        scope: String,
    },
    /// List tokens (never the tokens themselves).
    List {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Revoke the tokens with this name or id.
    Revoke {
        #[arg(long)]
        config: Option<PathBuf>,
        name_or_id: String,
    },
}

fn load(config: Option<&std::path::Path>) -> Result<ServerConfig> {
    let default_dir = user_data_dir().map(|d| d.join("server"));
    Ok(ServerConfig::load(config, default_dir)?.0)
}

pub async fn serve(args: ServeArgs) -> Result<()> {
    let default_dir = user_data_dir().map(|d| d.join("server"));
    let (cfg, file) = ServerConfig::load(args.config.as_deref(), default_dir)?;
    std::fs::create_dir_all(&cfg.workspaces_root).with_context(|| {
        format!(
            "cannot create the workspaces root {}",
            cfg.workspaces_root.display()
        )
    })?;
    let env = process_env();
    let provider = attest::build_provider(
        &attest::ProviderSpec::default(),
        &file,
        &cfg.workspaces_root,
        &env,
        None,
    )
    .map_err(|e| anyhow::anyhow!("{e}{}", cfg.note()))?;
    eprintln!(
        "attest serve: model {}, store {}",
        provider.label,
        cfg.store_path().display()
    );
    let notices: attest::Notices = Arc::new(|msg: &str| eprintln!("attest serve: {msg}"));
    let state = AppState::open(
        cfg,
        provider,
        ServerEnv {
            env,
            tool_env: std::env::vars_os().collect(),
            notices,
        },
    )?;
    let stop = CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let sigterm = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = sigterm => {}
            }
            stop.cancel();
        });
    }
    attest_server::serve(state, &args.listen, stop, |addr| {
        // Scripts and tests read the address from this line.
        println!("attest serve: listening on http://{addr}");
        let _ = std::io::stdout().flush();
    })
    .await?;
    Ok(())
}

pub fn token(args: TokenArgs) -> Result<()> {
    match args.command {
        TokenCommand::Create {
            config,
            name,
            scope,
        } => {
            let cfg = load(config.as_deref())?;
            let scopes = attest_server::auth::parse_scopes(&scope).map_err(anyhow::Error::msg)?;
            if name.trim().is_empty() {
                bail!("--name is empty");
            }
            let mut store = attest_server::state::open_store(&cfg)?;
            let token = attest_server::auth::create_token(&mut store, &name, scopes)?;
            println!("{token}");
        }
        TokenCommand::List { config } => {
            use attest::store::ServerStore as _;
            let cfg = load(config.as_deref())?;
            let store = attest_server::state::open_store(&cfg)?;
            let tokens = store.tokens()?;
            if tokens.is_empty() {
                println!("no tokens");
            }
            for t in tokens {
                let state = match &t.revoked_at {
                    Some(at) => format!("revoked {at}"),
                    None => "active".to_string(),
                };
                println!(
                    "{}  {}  {}  created {}  {state}",
                    t.id,
                    t.name,
                    t.scopes.join(","),
                    t.created_at
                );
            }
        }
        TokenCommand::Revoke { config, name_or_id } => {
            use attest::store::ServerStore as _;
            let cfg = load(config.as_deref())?;
            let mut store = attest_server::state::open_store(&cfg)?;
            match store.revoke_token(&name_or_id)? {
                0 => bail!("no active token is named or has the id `{name_or_id}`"),
                n => println!("revoked {n} token(s)"),
            }
        }
    }
    Ok(())
}
