//! MCP servers' tools (SPEC F12): `[[mcp_servers]]` entries connected over
//! stdio (a child process in the tool sandbox) or streamable HTTP (the
//! connector is the caller's: this crate knows no HTTP), their tools
//! listed page by page and offered as `server__tool`, with effect classes
//! from their annotations that are never looser than the user says.

mod client;
mod config;
mod runtime;
mod tool;

pub use client::{
    describe as describe_failure, CallFailure, CallReply, McpClientHandler, McpConnection,
    McpConnector, McpServer, McpService, NotificationTap, StdioConnector,
};
pub use config::{classify, Hints, McpConfigError, McpEndpoint, McpServerConfig};
pub use runtime::McpRuntime;
pub use tool::McpTool;

use attest_protocol::ToolSpec;
use std::sync::Arc;

/// Most characters of a tool name (the registry's and the providers' limit).
const NAME_LIMIT: usize = 64;

/// A connected server and the tools it offers.
#[derive(Debug)]
pub struct McpToolset {
    pub server: Arc<McpServer>,
    pub tools: Vec<Arc<McpTool>>,
    /// Tools not offered and why (an invalid schema, a name too long, an
    /// allow-list entry the server does not have), for notices.
    pub skipped: Vec<String>,
}

/// Why a server's tools could not be offered.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error(transparent)]
    Config(#[from] McpConfigError),
    #[error("MCP server `{name}`: {reason}")]
    Unavailable { name: String, reason: String },
}

impl McpToolset {
    /// Connect to the server of `cfg` through `connector` and list its
    /// tools; blocks the calling thread for at most the entry's timeout
    /// (twice: handshake, listing).
    pub fn start(
        cfg: &McpServerConfig,
        connector: Arc<dyn McpConnector>,
        runtime: &Arc<McpRuntime>,
    ) -> Result<McpToolset, McpError> {
        cfg.endpoint()?;
        let (server, listed) = McpServer::start(&cfg.name, connector, runtime, cfg.timeout())
            .map_err(|reason| McpError::Unavailable {
                name: cfg.name.clone(),
                reason,
            })?;
        let mut tools = Vec::new();
        let mut skipped = Vec::new();
        if let Some(allowed) = &cfg.tools {
            for name in allowed {
                if !listed.iter().any(|t| t.name == name.as_str()) {
                    skipped.push(format!(
                        "MCP server `{}` has no tool `{name}` (listed in its `tools`)",
                        cfg.name
                    ));
                }
            }
        }
        for remote in listed.iter().filter(|t| cfg.allows(&t.name)) {
            match tool_from(cfg, remote, &server) {
                Ok(tool) => tools.push(Arc::new(tool)),
                Err(why) => skipped.push(format!(
                    "MCP tool `{}` of server `{}` not offered: {why}",
                    remote.name, cfg.name
                )),
            }
        }
        Ok(McpToolset {
            server,
            tools,
            skipped,
        })
    }
}

/// `server__tool`, with the characters a tool name may not have replaced.
pub fn qualified_name(server: &str, tool: &str) -> String {
    let tool: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{server}__{tool}")
}

fn tool_from(
    cfg: &McpServerConfig,
    remote: &rmcp::model::Tool,
    server: &Arc<McpServer>,
) -> Result<McpTool, String> {
    let name = qualified_name(&cfg.name, &remote.name);
    if name.len() > NAME_LIMIT {
        return Err(format!("`{name}` is longer than {NAME_LIMIT} characters"));
    }
    let mut parameters = serde_json::Value::Object((*remote.input_schema).clone());
    if parameters.get("type").is_none() {
        parameters["type"] = serde_json::json!("object");
    }
    if parameters.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err("its inputSchema is not an object schema".to_string());
    }
    jsonschema::validator_for(&parameters).map_err(|e| format!("invalid inputSchema: {e}"))?;
    let output_schema = match &remote.output_schema {
        Some(schema) => Some(
            jsonschema::validator_for(&serde_json::Value::Object((**schema).clone()))
                .map_err(|e| format!("invalid outputSchema: {e}"))?,
        ),
        None => None,
    };
    let hints = remote
        .annotations
        .as_ref()
        .map(|a| Hints {
            read_only: a.read_only_hint,
            destructive: a.destructive_hint,
        })
        .unwrap_or_default();
    let (effect, permission) = classify(cfg, hints);
    let description = remote
        .description
        .as_deref()
        .or(remote.title.as_deref())
        .unwrap_or("")
        .to_string();
    Ok(McpTool {
        spec: ToolSpec::new(name, description, effect, parameters),
        remote: remote.name.to_string(),
        permission,
        server: Arc::clone(server),
        output_schema,
        destructive: hints.destructive == Some(true),
    })
}
