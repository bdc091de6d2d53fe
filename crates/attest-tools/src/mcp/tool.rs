//! An MCP server's tool as an attest [`Tool`]: `server__tool`, behind the
//! registry's middleware, policy, approvals and receipts like any other.

use super::client::{describe, CallFailure, CallReply, McpServer};
use crate::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use attest_core::text::truncate_str;
use attest_protocol::{DataSource, ErrorType, Evidence, Permission, ToolSpec};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of a result the model is shown.
const OUTPUT_LIMIT: usize = 32 * 1024;
/// Extra time the registry's own timeout allows, so the server's timeout
/// (which restarts a hung server) fires first.
const REGISTRY_GRACE: Duration = Duration::from_secs(5);

/// One tool of an MCP server.
pub struct McpTool {
    pub(super) spec: ToolSpec,
    /// Its name on the server.
    pub(super) remote: String,
    pub(super) permission: Permission,
    pub(super) server: Arc<McpServer>,
    /// The tool's `outputSchema`, when it declared one: structured
    /// content that does not match it is a failure, not evidence.
    pub(super) output_schema: Option<jsonschema::Validator>,
    /// The server marks it destructive (`destructiveHint`): each call it
    /// is allowed needs approval, whatever the permissions say.
    pub(super) destructive: bool,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .field("server", &self.server.name())
            .finish_non_exhaustive()
    }
}

impl McpTool {
    /// Its name on the server.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }

    /// Whether the server marks it destructive: the caller makes approval
    /// mandatory for it (a `[permissions]` allow cannot loosen that).
    pub fn destructive(&self) -> bool {
        self.destructive
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn default_permission(&self) -> Permission {
        self.permission
    }

    fn timeout(&self) -> Duration {
        // A restart after a hang needs a handshake's time too.
        self.server.timeout() * 2 + REGISTRY_GRACE
    }

    fn provider(&self) -> &str {
        self.server.name()
    }

    fn data_source(&self) -> DataSource {
        DataSource::Command
    }

    fn withdrawn(&self) -> bool {
        !self.server.offers(&self.remote)
    }

    async fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let serde_json::Value::Object(arguments) = args else {
            return ToolOutput::error("arguments must be a JSON object")
                .with_error_type(ErrorType::InvalidArguments);
        };
        let progress = ctx.progress.clone();
        match self.server.call(&self.remote, arguments, progress).await {
            Ok(reply) => self.output(reply),
            Err(failure) => {
                let reason = describe(&failure);
                match failure {
                    CallFailure::Hung(_) => ToolOutput::timeout(reason),
                    CallFailure::Rpc(_) | CallFailure::Broken(_) => {
                        ToolOutput::error(reason).with_error_type(ErrorType::ProviderError)
                    }
                    CallFailure::Unavailable(_) => {
                        ToolOutput::error(reason).with_error_type(ErrorType::SpawnFailed)
                    }
                    CallFailure::Withdrawn(_) => {
                        ToolOutput::error(reason).with_error_type(ErrorType::NotFound)
                    }
                }
            }
        }
    }
}

impl McpTool {
    fn output(&self, reply: CallReply) -> ToolOutput {
        let result = reply.result;
        let mut text = render_content(&result.content);
        if let Some(structured) = &result.structured_content {
            if let Some(validator) = &self.output_schema {
                if result.is_error != Some(true) {
                    if let Err(e) = validator.validate(structured) {
                        return ToolOutput::error(format!(
                            "the server's structured result does not match the tool's outputSchema: {e}"
                        ))
                        .with_error_type(ErrorType::ParseError);
                    }
                }
            }
            let json = serde_json::to_string(structured).unwrap_or_default();
            // Servers usually repeat it as text; show it once.
            if !text.contains(&json) {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str("structured content: ");
                text.push_str(&json);
            }
        }
        let (shown, cut) = truncate_str(text.trim(), OUTPUT_LIMIT);
        let shown = if cut {
            format!("{shown}\n[truncated: result was {} bytes]", text.len())
        } else {
            shown.to_string()
        };
        if result.is_error == Some(true) {
            return ToolOutput::error(shown).with_error_type(ErrorType::ToolError);
        }
        let evidence = Evidence {
            sha256: Some(hex::encode(Sha256::digest(text.as_bytes()))),
            size_bytes: Some(text.len() as u64),
            ..Evidence::default()
        };
        ToolOutput::ok(shown, evidence)
    }
}

/// Content blocks as text: text as is, everything else described (an
/// image's bytes are no use to a text model).
fn render_content(blocks: &[rmcp::model::ContentBlock]) -> String {
    let mut parts = Vec::new();
    for block in blocks {
        let value = serde_json::to_value(block).unwrap_or_default();
        let field = |k: &str| value.get(k).and_then(|v| v.as_str()).unwrap_or("");
        let part = match field("type") {
            "text" => field("text").to_string(),
            "image" | "audio" => format!(
                "[{} {}, {} bytes of base64]",
                field("type"),
                field("mimeType"),
                field("data").len()
            ),
            "resource" => {
                let resource = value.get("resource");
                let get = |k: &str| {
                    resource
                        .and_then(|r| r.get(k))
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                };
                if get("text").is_empty() {
                    format!("[resource {}]", get("uri"))
                } else {
                    format!("[resource {}]\n{}", get("uri"), get("text"))
                }
            }
            "resource_link" => format!("[resource link {}]", field("uri")),
            other => format!("[{other} content]"),
        };
        parts.push(part);
    }
    parts.join("\n")
}
