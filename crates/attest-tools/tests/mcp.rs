//! The MCP client against a stdio server that misbehaves on request
//! (`tests/fixtures/flaky_mcp.py`): paginated listing, effect classes from
//! annotations, and crash / hang / garbled output turned into structured
//! failures with one restart.

use attest_core::tool::{Tool, ToolContext, Workspace};
use attest_protocol::{EffectClass, ErrorType, Permission};
use attest_tools::mcp::{McpRuntime, McpServerConfig, McpToolset, StdioConnector};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

struct Fixture {
    _dir: tempfile::TempDir,
    counter: std::path::PathBuf,
    set: McpToolset,
    ctx: ToolContext,
}

fn start(extra_config: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("starts");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/flaky_mcp.py");
    let cfg: McpServerConfig = toml::from_str(&format!(
        "name = \"flaky\"\ncommand = \"python3\"\ntimeout_ms = 1500\n{extra_config}"
    ))
    .unwrap();
    let ctx = ToolContext::new(Workspace::new(dir.path()).unwrap());
    let connector = StdioConnector::new(
        "python3",
        vec![script.display().to_string(), counter.display().to_string()],
        Default::default(),
        None,
        ctx.clone(),
    );
    let runtime = McpRuntime::start().unwrap();
    let set = McpToolset::start(&cfg, Arc::new(connector), &runtime).unwrap();
    Fixture {
        _dir: dir,
        counter,
        set,
        ctx,
    }
}

impl Fixture {
    fn tool(&self, name: &str) -> &Arc<attest_tools::mcp::McpTool> {
        self.set
            .tools
            .iter()
            .find(|t| t.spec().name == name)
            .unwrap_or_else(|| panic!("no tool {name}"))
    }

    fn starts(&self) -> u32 {
        std::fs::read_to_string(&self.counter)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

#[tokio::test]
async fn every_page_is_listed_and_annotations_are_only_hints_when_untrusted() {
    let f = start("");
    let names: Vec<&str> = f.set.tools.iter().map(|t| t.spec().name.as_str()).collect();
    assert_eq!(
        names,
        [
            "flaky__echo",
            "flaky__crash",
            "flaky__hang",
            "flaky__garble",
            "flaky__fail",
            "flaky__wipe",
            "flaky__bad_name_",
            "flaky__retool"
        ],
        "both pages, names qualified and made valid"
    );
    let echo = f.tool("flaky__echo");
    assert_eq!(echo.spec().effect, EffectClass::Mutate);
    assert_eq!(echo.default_permission(), Permission::Ask);
    assert_eq!(echo.remote_name(), "echo");
}

#[tokio::test]
async fn trusted_annotations_give_observe_and_destructive_stays_ask() {
    let f = start("trusted_annotations = true\npermission = \"allow\"\ntools = [\"echo\", \"wipe\", \"missing\"]");
    let names: Vec<&str> = f.set.tools.iter().map(|t| t.spec().name.as_str()).collect();
    assert_eq!(names, ["flaky__echo", "flaky__wipe"], "the allow list");
    assert_eq!(f.tool("flaky__echo").spec().effect, EffectClass::Observe);
    assert_eq!(
        f.tool("flaky__echo").default_permission(),
        Permission::Allow
    );
    let wipe = f.tool("flaky__wipe");
    assert_eq!(wipe.spec().effect, EffectClass::Mutate);
    assert_eq!(wipe.default_permission(), Permission::Ask);
    assert!(
        f.set.skipped.iter().any(|s| s.contains("`missing`")),
        "{:?}",
        f.set.skipped
    );
}

#[tokio::test]
async fn a_result_an_error_result_and_an_rpc_error() {
    let f = start("");
    let ok = f
        .tool("flaky__echo")
        .execute(json!({"text": "hi"}), &f.ctx)
        .await;
    assert!(ok.success, "{ok:?}");
    assert_eq!(ok.output, "hi (start 1)");
    assert!(ok.evidence.sha256.is_some());
    let failed = f.tool("flaky__fail").execute(json!({}), &f.ctx).await;
    assert!(!failed.success);
    assert_eq!(failed.output, "the thing is broken");
    assert_eq!(failed.failure_type(), Some(ErrorType::ToolError));
    // The server still works: an error result is not a fault.
    let again = f
        .tool("flaky__echo")
        .execute(json!({"text": "x"}), &f.ctx)
        .await;
    assert_eq!(again.output, "x (start 1)");
    assert_eq!(f.starts(), 1);
}

#[tokio::test]
async fn a_crash_is_a_failure_and_the_server_is_restarted_once() {
    let f = start("");
    let crash = f.tool("flaky__crash").execute(json!({}), &f.ctx).await;
    assert!(!crash.success);
    assert!(crash.output.contains("restarted"), "{}", crash.output);
    assert_eq!(crash.failure_type(), Some(ErrorType::ProviderError));
    let echo = f
        .tool("flaky__echo")
        .execute(json!({"text": "back"}), &f.ctx)
        .await;
    assert_eq!(echo.output, "back (start 2)", "{echo:?}");

    let crash = f.tool("flaky__crash").execute(json!({}), &f.ctx).await;
    assert!(!crash.success);
    assert!(
        crash.output.contains("not restarted again"),
        "{}",
        crash.output
    );
    let down = f
        .tool("flaky__echo")
        .execute(json!({"text": "x"}), &f.ctx)
        .await;
    assert!(!down.success);
    assert!(down.output.contains("stays stopped"), "{}", down.output);
    assert_eq!(f.starts(), 2, "one restart only");
}

#[tokio::test]
async fn a_hang_times_out_and_restarts() {
    let f = start("");
    let hang = f.tool("flaky__hang").execute(json!({}), &f.ctx).await;
    assert!(!hang.success);
    assert!(hang.timed_out, "{hang:?}");
    assert!(
        hang.output.contains("no answer within 1500 ms"),
        "{}",
        hang.output
    );
    let echo = f
        .tool("flaky__echo")
        .execute(json!({"text": "ok"}), &f.ctx)
        .await;
    assert_eq!(echo.output, "ok (start 2)");
}

#[tokio::test]
async fn garbled_output_is_a_failure_not_a_panic() {
    let f = start("");
    let garbled = f.tool("flaky__garble").execute(json!({}), &f.ctx).await;
    assert!(!garbled.success, "{garbled:?}");
    let echo = f
        .tool("flaky__echo")
        .execute(json!({"text": "ok"}), &f.ctx)
        .await;
    assert!(echo.success, "{echo:?}");
    assert!(echo.output.starts_with("ok (start "), "{}", echo.output);
}

#[test]
fn a_server_that_cannot_start_is_an_error_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cfg: McpServerConfig =
        toml::from_str("name = \"gone\"\ncommand = \"/nonexistent/server\"\ntimeout_ms = 1000")
            .unwrap();
    let ctx = ToolContext::new(Workspace::new(dir.path()).unwrap());
    let connector = StdioConnector::new(
        "/nonexistent/server",
        Vec::new(),
        Default::default(),
        None,
        ctx,
    );
    let runtime = McpRuntime::start().unwrap();
    let err = McpToolset::start(&cfg, Arc::new(connector), &runtime).unwrap_err();
    assert!(err.to_string().contains("could not start"), "{err}");
}

#[tokio::test]
async fn a_tool_withdrawn_by_list_changed_fails_plainly() {
    let f = start("");
    let retool = f.tool("flaky__retool").execute(json!({}), &f.ctx).await;
    assert!(retool.success, "{retool:?}");
    // The server sent the notice before its answer: it was counted as it
    // was read, before the answer was.
    assert_eq!(f.set.server.tools_changed(), 1, "the notification arrived");
    let echo = f
        .tool("flaky__echo")
        .execute(json!({"text": "x"}), &f.ctx)
        .await;
    assert!(!echo.success, "{echo:?}");
    assert_eq!(echo.failure_type(), Some(ErrorType::NotFound));
    assert!(
        echo.output.contains("no longer offers `echo`"),
        "{}",
        echo.output
    );
    // The other tools still work, on the same server process.
    let fail = f.tool("flaky__fail").execute(json!({}), &f.ctx).await;
    assert_eq!(fail.output, "the thing is broken");
    assert_eq!(f.starts(), 1);
}
