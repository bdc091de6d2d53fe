//! `attest mcp-serve`: attest as an MCP server on stdio (SPEC J5), with one
//! tool, `attest_run {prompt, expect, required_tools}`, whose result is
//! the run's terminal state, reason, receipts and answer, so that another
//! agent can delegate a task and get back what was verified, not a claim.
//!
//! Each call is one `attest run` with the command's engine options; stdout
//! carries the protocol only (notices go to stderr). A client's
//! cancellation of the call cancels the run.

use crate::setup::{prepare, EngineArgs};
use crate::EXIT_USAGE;
use attest::RunRequest;
use attest_protocol::ContractKind;
use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;

/// The one tool's name.
pub const TOOL_NAME: &str = "attest_run";

#[derive(Debug, Args)]
pub struct McpServeArgs {
    /// Provider, model, workspace and limits for every run; a call's
    /// `expect` and `required_tools` override `--expect` / `--require-tool`.
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Serve until the client closes stdin; returns the exit code.
pub async fn serve(args: McpServeArgs) -> u8 {
    let server = AttestServer {
        engine: args.engine,
    };
    let running = match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("attest: mcp-serve: the MCP handshake failed: {e}");
            return EXIT_USAGE;
        }
    };
    match running.waiting().await {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("attest: mcp-serve: {e}");
            EXIT_USAGE
        }
    }
}

struct AttestServer {
    engine: EngineArgs,
}

/// The arguments of `attest_run`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RunCall {
    prompt: String,
    #[serde(default)]
    expect: Option<String>,
    #[serde(default)]
    required_tools: Vec<String>,
}

fn attest_run_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "prompt": {"type": "string", "description": "The task."},
            "expect": {
                "type": "string",
                "enum": ["answer", "observe", "mutate", "deliver"],
                "description": "What evidence a `completed` run needs (default: the server's --expect)."
            },
            "required_tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tools that must have a successful receipt."
            }
        },
        "required": ["prompt"],
        "additionalProperties": false
    });
    let serde_json::Value::Object(schema) = schema else {
        unreachable!("a JSON object literal")
    };
    let mut tool = Tool::new(
        TOOL_NAME,
        "Run a task with attest: the model proposes tool calls, attest executes them and writes a receipt for each, and the terminal state (completed, unverified, incomplete, failed, cancelled) is decided from the receipts against the completion contract. Returns the state, reason, basis, receipts and answer.",
        schema,
    );
    // The runs use the workspace's tools, which may write.
    let mut annotations = ToolAnnotations::default();
    annotations.read_only_hint = Some(false);
    annotations.open_world_hint = Some(true);
    tool.annotations = Some(annotations);
    tool
}

impl AttestServer {
    async fn run(
        &self,
        call: RunCall,
        cancel: tokio_util::sync::CancellationToken,
    ) -> CallToolResult {
        let mut args = self.engine.clone();
        args.json = false;
        if let Some(expect) = &call.expect {
            match expect.parse::<ContractKind>() {
                Ok(kind) => args.expect = Some(kind),
                Err(e) => return refusal(format!("invalid `expect`: {e}")),
            }
        }
        if !call.required_tools.is_empty() {
            args.require_tool = call.required_tools.clone();
        }
        if call.prompt.trim().is_empty() {
            return refusal("the prompt is empty".to_string());
        }
        // Building connects MCP servers of the config: not on the
        // protocol's task.
        let prepared = match tokio::task::spawn_blocking(move || prepare(&args)).await {
            Ok(Ok(prepared)) => prepared,
            Ok(Err(e)) => return refusal(format!("{e:#}")),
            Err(e) => return refusal(format!("set-up failed: {e}")),
        };
        let mut observer = |_: &attest_protocol::Event| {};
        let outcome = prepared
            .engine
            .run_observed(RunRequest::new(call.prompt), &mut observer, cancel)
            .await;
        match outcome {
            Ok(outcome) => {
                let result = json!({
                    "run_id": outcome.run_id,
                    "session_id": outcome.session_id,
                    "state": outcome.state,
                    "reason": outcome.reason,
                    "basis": outcome.basis,
                    "answer": outcome.answer,
                    "receipts": outcome.receipts,
                    "steps": outcome.steps,
                });
                CallToolResult::structured(result)
            }
            Err(e) => refusal(format!("the run could not be carried out: {e}")),
        }
    }
}

/// A call that produced no run: an error result the calling agent sees.
fn refusal(reason: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(reason)])
}

impl ServerHandler for AttestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("attest", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Call attest_run to delegate a task whose outcome is verified from execution receipts.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![attest_run_tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name != TOOL_NAME {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`; the only tool is `{TOOL_NAME}`",
                    request.name
                ),
                None,
            ));
        }
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let call: RunCall = serde_json::from_value(arguments)
            .map_err(|e| McpError::invalid_params(format!("invalid arguments: {e}"), None))?;
        Ok(self.run(call, context.ct.clone()).await.into())
    }
}
