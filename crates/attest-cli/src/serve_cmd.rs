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
    /// A PostgreSQL database shared with other servers
    /// (`postgres://user@host:5432/db`), instead of the embedded store.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

/// Where `attest token` finds the server's store.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The server's config file.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The server's PostgreSQL database, when it uses one.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
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
        #[command(flatten)]
        store: StoreArgs,
        /// A name for people (`attest token list` shows it).
        #[arg(long)]
        name: String,
        /// Comma-separated: runs:read, runs:write, approvals:read, approvals:write.
        #[arg(long)]
        scope: String,
    },
    /// List tokens (never the tokens themselves).
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke the tokens with this name or id.
    Revoke {
        #[command(flatten)]
        store: StoreArgs,
        name_or_id: String,
    },
}

fn open_store(args: &StoreArgs) -> Result<Box<dyn attest::store::ServerStore>> {
    let default_dir = user_data_dir().map(|d| d.join("server"));
    let cfg = ServerConfig::load(args.config.as_deref(), default_dir)?
        .0
        .with_database_url(args.database_url.clone())?;
    Ok(attest_server::state::open_store(&cfg)?)
}

pub async fn serve(args: ServeArgs) -> Result<()> {
    let default_dir = user_data_dir().map(|d| d.join("server"));
    let (cfg, file) = ServerConfig::load(args.config.as_deref(), default_dir)?;
    let cfg = cfg.with_database_url(args.database_url)?;
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
        attest_server::state::store_label(&cfg)
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
        TokenCommand::Create { store, name, scope } => {
            let scopes = attest_server::auth::parse_scopes(&scope).map_err(anyhow::Error::msg)?;
            if name.trim().is_empty() {
                bail!("--name is empty");
            }
            let mut store = open_store(&store)?;
            let token = attest_server::auth::create_token(store.as_mut(), &name, scopes)?;
            println!("{token}");
        }
        TokenCommand::List { store } => {
            let store = open_store(&store)?;
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
        TokenCommand::Revoke { store, name_or_id } => {
            let mut store = open_store(&store)?;
            match store.revoke_token(&name_or_id)? {
                0 => bail!("no active token is named or has the id `{name_or_id}`"),
                n => println!("revoked {n} token(s)"),
            }
        }
    }
    Ok(())
}
