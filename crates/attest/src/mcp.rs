//! `[[mcp_servers]]` turned into tools: the stdio connector is
//! attest-tools' (a child process in the tool sandbox); the streamable-HTTP
//! one lives here, since the tools crate knows no HTTP.

use crate::provider::EnvLookup;
use attest_core::tool::{Tool, ToolContext};
use attest_tools::mcp::{
    McpClientHandler, McpConnection, McpConnector, McpEndpoint, McpRuntime, McpServerConfig,
    McpToolset, StdioConnector,
};
use attest_tools::Sandbox;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use std::path::Path;
use std::sync::Arc;

/// A streamable-HTTP server.
pub struct HttpConnector {
    url: String,
    token: Option<String>,
}

impl std::fmt::Debug for HttpConnector {
    // Never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConnector")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "[set]"))
            .finish()
    }
}

#[async_trait::async_trait]
impl McpConnector for HttpConnector {
    async fn connect(&self, handler: McpClientHandler) -> Result<McpConnection, String> {
        install_crypto_provider();
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.url.clone());
        if let Some(token) = &self.token {
            config = config.auth_header(token.clone());
        }
        let transport = handler.tap(StreamableHttpClientTransport::from_config(config));
        let service = handler
            .serve(transport)
            .await
            .map_err(|e| format!("the MCP handshake with {} failed: {e}", self.url))?;
        Ok(McpConnection {
            service,
            guard: None,
        })
    }
}

/// The HTTP client's TLS is rustls with the ring provider (the one the
/// model providers' client already uses), installed once per process.
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Already installed by someone else is fine too.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The servers' tools, and the secrets (bearer tokens) every text of a run
/// must be scrubbed of. A server that cannot be reached is a notice, not
/// an error: the run goes on without its tools (a contract that requires
/// one of them then fails to build).
pub(crate) struct McpTools {
    pub tools: Vec<Arc<dyn Tool>>,
    pub secrets: Vec<String>,
    /// Tools the servers mark destructive: approval is mandatory for them.
    pub destructive: Vec<String>,
}

pub(crate) fn connect_all(
    servers: &[McpServerConfig],
    workspace_root: &Path,
    sandbox: Option<Arc<Sandbox>>,
    ctx: &ToolContext,
    env: &EnvLookup,
    notice: &dyn Fn(&str),
) -> Result<McpTools, crate::Error> {
    let mut out = McpTools {
        tools: Vec::new(),
        secrets: Vec::new(),
        destructive: Vec::new(),
    };
    if servers.is_empty() {
        return Ok(out);
    }
    let runtime = McpRuntime::start()
        .map_err(|e| crate::Error::config(format!("cannot start the MCP runtime: {e}")))?;
    for cfg in servers {
        let endpoint = cfg
            .endpoint()
            .map_err(|e| crate::Error::config(format!("[[mcp_servers]]: {e}")))?;
        let connector: Arc<dyn McpConnector> = match endpoint {
            McpEndpoint::Stdio { command, args, env } => {
                // `./bin/server` is the workspace's; a bare name is on PATH.
                let program = if command.contains('/') && Path::new(&command).is_relative() {
                    workspace_root.join(&command)
                } else {
                    command.into()
                };
                Arc::new(StdioConnector::new(
                    program,
                    args,
                    env,
                    sandbox.clone(),
                    ctx.clone(),
                ))
            }
            McpEndpoint::Http {
                url,
                bearer_token_env,
            } => {
                let token = match &bearer_token_env {
                    Some(var) => match env(var).filter(|t| !t.is_empty()) {
                        Some(token) => Some(token),
                        None => {
                            notice(&format!(
                                "MCP server `{}`: {var} is not set; its tools are not offered",
                                cfg.name
                            ));
                            continue;
                        }
                    },
                    None => None,
                };
                out.secrets.extend(token.clone());
                Arc::new(HttpConnector { url, token })
            }
        };
        match McpToolset::start(cfg, connector, &runtime) {
            Ok(set) => {
                for skipped in &set.skipped {
                    notice(skipped);
                }
                out.destructive.extend(
                    set.tools
                        .iter()
                        .filter(|t| t.destructive())
                        .map(|t| t.spec().name.clone()),
                );
                out.tools
                    .extend(set.tools.into_iter().map(|t| t as Arc<dyn Tool>));
            }
            Err(e) => notice(&format!("{e}; its tools are not offered")),
        }
    }
    Ok(out)
}
