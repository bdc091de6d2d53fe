//! The engine's tool registry, driven with the real built-in and command tools.

use async_trait::async_trait;
use attest_core::text::sha256_hex;
use attest_core::tool::registry_limits::{MODEL_OUTPUT_LIMIT, RECEIPT_ERROR_LIMIT};
use attest_core::tool::{
    fingerprint_arguments, PrepareError, RegistryError, Tool, ToolContext, ToolOutput,
    ToolRegistry, Workspace,
};
use attest_protocol::{
    EffectClass, Evidence, Permission, ReceiptStatus, ToolSpec, VerificationStatus,
};
use attest_tools::{builtin_tools, CommandTool, CommandToolConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A tool whose behaviour the test picks.
struct Mock {
    spec: ToolSpec,
    behaviour: Behaviour,
    timeout: Duration,
}

#[derive(Clone)]
enum Behaviour {
    Output(ToolOutput),
    Sleep(Duration),
    Panic,
}

fn mock(name: &str, behaviour: Behaviour) -> Arc<dyn Tool> {
    Arc::new(Mock {
        spec: ToolSpec {
            name: name.to_string(),
            description: "test tool".to_string(),
            parameters: json!({"type": "object", "properties": {}}),
            effect: EffectClass::Deliver,
        },
        behaviour,
        timeout: Duration::from_millis(100),
    })
}

#[async_trait]
impl Tool for Mock {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn default_permission(&self) -> Permission {
        Permission::Ask
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }
    async fn execute(&self, _args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
        match &self.behaviour {
            Behaviour::Output(out) => out.clone(),
            Behaviour::Sleep(d) => {
                tokio::time::sleep(*d).await;
                ToolOutput::ok("woke", Evidence::default())
            }
            Behaviour::Panic => panic!("boom"),
        }
    }
}

fn builtins() -> ToolRegistry {
    ToolRegistry::new(builtin_tools(None)).unwrap()
}

fn context() -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path()).unwrap();
    (dir, ToolContext::new(workspace))
}

#[test]
fn duplicate_names_are_refused() {
    let mut tools = builtin_tools(None);
    tools.push(mock("read_file", Behaviour::Panic));
    let err = ToolRegistry::new(tools).unwrap_err();
    assert!(matches!(&err, RegistryError::DuplicateName { name } if name == "read_file"));
}

#[test]
fn uncompilable_schema_is_refused() {
    let tool = Arc::new(Mock {
        spec: ToolSpec {
            name: "bad".to_string(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"a": {"type": 12}}}),
            effect: EffectClass::Observe,
        },
        behaviour: Behaviour::Panic,
        timeout: Duration::from_secs(1),
    });
    assert!(matches!(
        ToolRegistry::new(vec![tool]),
        Err(RegistryError::InvalidSchema { .. })
    ));
}

#[test]
fn specs_keep_registration_order() {
    let mut tools = builtin_tools(None);
    tools.insert(0, mock("zzz", Behaviour::Panic));
    let reg = ToolRegistry::new(tools).unwrap();
    let names: Vec<String> = reg.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "zzz",
            "read_file",
            "list_dir",
            "grep",
            "write_file",
            "edit_file",
            "shell"
        ]
    );
    assert_eq!(reg.names(), names);
    assert_eq!(
        serde_json::to_string(&reg.specs()).unwrap(),
        serde_json::to_string(&reg.specs()).unwrap()
    );
}

#[test]
fn lookups_and_permissions() {
    let mut reg = builtins();
    assert!(reg.get("grep").is_some());
    assert!(reg.get("nope").is_none());
    assert_eq!(reg.effect_of("shell"), Some(EffectClass::Mutate));
    assert_eq!(reg.effect_of("nope"), None);
    assert_eq!(reg.permission("read_file"), Permission::Allow);
    assert_eq!(reg.permission("shell"), Permission::Ask);
    assert_eq!(reg.permission("nope"), Permission::Deny);
    reg.set_permission("shell", Permission::Allow);
    reg.set_permission("read_file", Permission::Deny);
    reg.set_permission("nope", Permission::Allow);
    assert_eq!(reg.permission("shell"), Permission::Allow);
    assert_eq!(reg.permission("read_file"), Permission::Deny);
    assert_eq!(reg.permission("nope"), Permission::Deny);
    let call = reg.prepare("shell", r#"{"command": "true"}"#).unwrap();
    assert_eq!(call.permission, Permission::Allow);
    assert_eq!(call.effect, EffectClass::Mutate);
}

#[test]
fn unknown_tool() {
    let reg = builtins();
    let err = reg.prepare("read_files", "{}").unwrap_err();
    assert_eq!(err.status(), ReceiptStatus::UnknownTool);
    match &err {
        PrepareError::UnknownTool { name, available } => {
            assert_eq!(name, "read_files");
            assert_eq!(available.len(), 6);
        }
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.starts_with("unknown tool `read_files`"), "{msg}");
    assert!(msg.contains("read_file, list_dir, grep"), "{msg}");
}

#[test]
fn invalid_json() {
    let reg = builtins();
    let err = reg.prepare("read_file", r#"{"path": "a""#).unwrap_err();
    assert_eq!(err.status(), ReceiptStatus::InvalidArguments);
    assert!(matches!(err, PrepareError::InvalidJson { .. }));
    let msg = err.to_string();
    assert!(msg.starts_with("arguments are not valid JSON: "), "{msg}");
    assert!(msg.contains("EOF while parsing"), "{msg}");
}

#[test]
fn empty_arguments_mean_an_empty_object() {
    let reg = builtins();
    for raw in ["", "   ", "\n"] {
        let call = reg.prepare("list_dir", raw).unwrap();
        assert_eq!(call.arguments, json!({}));
        assert_eq!(call.input_fingerprint, fingerprint_arguments(&json!({})));
    }
    // ...which still has to satisfy the schema.
    let err = reg.prepare("read_file", "").unwrap_err();
    assert!(
        err.to_string().contains("\"path\" is a required property"),
        "{err}"
    );
}

#[test]
fn non_object_arguments_are_refused() {
    let reg = builtins();
    for raw in ["[1]", "\"x\"", "null", "3"] {
        let err = reg.prepare("list_dir", raw).unwrap_err();
        assert!(matches!(err, PrepareError::SchemaViolation { .. }), "{raw}");
        assert_eq!(err.status(), ReceiptStatus::InvalidArguments);
        assert!(err.to_string().contains("must be a JSON object"), "{err}");
    }
}

#[test]
fn schema_violation_lists_every_error_with_its_path() {
    let reg = builtins();
    let err = reg
        .prepare(
            "edit_file",
            r#"{"path": 3, "old_string": "a", "extra": true}"#,
        )
        .unwrap_err();
    let PrepareError::SchemaViolation { errors } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("/path: ") && e.contains("\"string\"")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("(root): ") && e.contains("new_string")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("(root): ") && e.contains("extra")),
        "{errors:?}"
    );
    assert!(err
        .to_string()
        .starts_with("arguments do not match the tool's schema: "));
}

#[test]
fn long_schema_errors_are_cut() {
    let reg = builtins();
    let huge = "x".repeat(10_000);
    let err = reg
        .prepare("read_file", &json!({"path": [huge]}).to_string())
        .unwrap_err();
    assert!(err.to_string().len() < 1000, "{}", err.to_string().len());
}

#[test]
fn fingerprint_is_stable_under_key_order() {
    let reg = builtins();
    let a = reg
        .prepare("write_file", r#"{"path": "a.txt", "content": "x"}"#)
        .unwrap();
    let b = reg
        .prepare("write_file", r#"{ "content" : "x", "path":"a.txt" }"#)
        .unwrap();
    assert_eq!(a.input_fingerprint, b.input_fingerprint);
    let c = reg
        .prepare("write_file", r#"{"path": "a.txt", "content": "y"}"#)
        .unwrap();
    assert_ne!(a.input_fingerprint, c.input_fingerprint);
    // Nested objects too, and the exact canonical form is pinned.
    let x: serde_json::Value =
        serde_json::from_str(r#"{"b": {"y": [2, {"q": 1, "p": "é"}], "x": 1}, "a": null}"#)
            .unwrap();
    assert_eq!(
        fingerprint_arguments(&x),
        fingerprint_of(r#"{"a":null,"b":{"x":1,"y":[2,{"p":"é","q":1}]}}"#)
    );
}

fn fingerprint_of(canonical: &str) -> String {
    sha256_hex(canonical.as_bytes())
}

#[tokio::test]
async fn execute_ok_is_verified() {
    let reg = builtins();
    let (dir, ctx) = context();
    std::fs::write(dir.path().join("f.txt"), "content").unwrap();
    let call = reg.prepare("read_file", r#"{"path": "f.txt"}"#).unwrap();
    let (out, receipt) = reg.execute("call-1", &call, &ctx).await;
    assert!(out.success);
    assert_eq!(out.output, "content");
    assert_eq!(receipt.call_id, "call-1");
    assert_eq!(receipt.tool_name, "read_file");
    assert_eq!(receipt.effect, EffectClass::Observe);
    assert_eq!(receipt.status, ReceiptStatus::Ok);
    assert_eq!(receipt.verification_status, VerificationStatus::Verified);
    assert!(receipt.is_satisfying());
    assert_eq!(receipt.input_fingerprint, call.input_fingerprint);
    assert_eq!(receipt.evidence, out.evidence);
    assert_eq!(receipt.evidence.size_bytes, Some(7));
    assert_eq!(receipt.error, None);
    assert!(receipt.finished_at >= receipt.started_at);
}

#[tokio::test]
async fn execute_failure_is_an_error_receipt() {
    let reg = builtins();
    let (_dir, ctx) = context();
    let call = reg.prepare("read_file", r#"{"path": "../x"}"#).unwrap();
    let (out, receipt) = reg.execute("c", &call, &ctx).await;
    assert!(!out.success);
    assert_eq!(receipt.status, ReceiptStatus::Error);
    assert_eq!(
        receipt.verification_status,
        VerificationStatus::NotApplicable
    );
    assert_eq!(receipt.error.as_deref(), Some(out.output.as_str()));
    assert!(!receipt.is_satisfying());
}

#[tokio::test]
async fn success_without_evidence_is_missing_evidence() {
    let out = ToolOutput {
        evidence_present: false,
        ..ToolOutput::ok("sent", Evidence::default())
    };
    let reg = ToolRegistry::new(vec![mock("send", Behaviour::Output(out))]).unwrap();
    let (_dir, ctx) = context();
    let call = reg.prepare("send", "{}").unwrap();
    let (out, receipt) = reg.execute("c", &call, &ctx).await;
    assert!(out.success);
    assert_eq!(receipt.status, ReceiptStatus::Ok);
    assert_eq!(
        receipt.verification_status,
        VerificationStatus::MissingEvidence
    );
    assert_eq!(receipt.effect, EffectClass::Deliver);
    assert!(!receipt.is_satisfying());
    assert_eq!(receipt.error, None);
}

#[tokio::test]
async fn registry_timeout_gives_a_timeout_receipt() {
    let reg = ToolRegistry::new(vec![mock(
        "slow",
        Behaviour::Sleep(Duration::from_secs(10)),
    )])
    .unwrap();
    let (_dir, ctx) = context();
    let call = reg.prepare("slow", "").unwrap();
    let start = std::time::Instant::now();
    let (out, receipt) = reg.execute("c", &call, &ctx).await;
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(!out.success);
    assert!(out.timed_out);
    assert_eq!(out.output, "timed out after 100 ms");
    assert_eq!(receipt.status, ReceiptStatus::Timeout);
    assert_eq!(
        receipt.verification_status,
        VerificationStatus::NotApplicable
    );
    assert_eq!(receipt.error.as_deref(), Some("timed out after 100 ms"));
}

#[tokio::test]
async fn tool_timeout_gives_a_timeout_receipt() {
    let (dir, ctx) = context();
    let cfg: CommandToolConfig = serde_json::from_value(json!({
        "name": "hang",
        "description": "hangs",
        "effect": "observe",
        "command": ["sleep", "30"],
        "timeout_ms": 150
    }))
    .unwrap();
    let tool = CommandTool::new(cfg, dir.path()).unwrap();
    let reg = ToolRegistry::new(vec![Arc::new(tool)]).unwrap();
    let call = reg.prepare("hang", "{}").unwrap();
    let (out, receipt) = reg.execute("c", &call, &ctx).await;
    assert_eq!(out.output, "timed out after 150 ms");
    assert_eq!(receipt.status, ReceiptStatus::Timeout);
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_not_a_crash() {
    let reg = ToolRegistry::new(vec![mock("bad", Behaviour::Panic)]).unwrap();
    let (_dir, ctx) = context();
    let call = reg.prepare("bad", "{}").unwrap();
    let (out, receipt) = reg.execute("c", &call, &ctx).await;
    assert!(!out.success);
    assert!(out.output.contains("panicked"));
    assert_eq!(receipt.status, ReceiptStatus::Error);
}

#[tokio::test]
async fn output_and_receipt_error_are_capped() {
    let big = "e".repeat(200 * 1024);
    let reg = ToolRegistry::new(vec![
        mock(
            "loud",
            Behaviour::Output(ToolOutput::ok(big.clone(), Evidence::default())),
        ),
        mock("loudfail", Behaviour::Output(ToolOutput::error(big))),
    ])
    .unwrap();
    let (_dir, ctx) = context();
    let (out, _) = reg
        .execute("c", &reg.prepare("loud", "{}").unwrap(), &ctx)
        .await;
    assert!(out.output.len() < MODEL_OUTPUT_LIMIT + 100);
    assert!(out.output.contains("[truncated"));
    let (out, receipt) = reg
        .execute("c", &reg.prepare("loudfail", "{}").unwrap(), &ctx)
        .await;
    assert!(out.output.len() < MODEL_OUTPUT_LIMIT + 100);
    let error = receipt.error.unwrap();
    assert!(error.len() < RECEIPT_ERROR_LIMIT + 100);
    assert!(error.contains("[truncated"));
}

#[tokio::test]
async fn dropping_execute_kills_the_command() {
    let reg = builtins();
    let (dir, ctx) = context();
    let call = reg
        .prepare("shell", r#"{"command": "sleep 1; touch marker"}"#)
        .unwrap();
    let cancelled =
        tokio::time::timeout(Duration::from_millis(200), reg.execute("c", &call, &ctx)).await;
    assert!(cancelled.is_err());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !dir.path().join("marker").exists(),
        "the command outlived its call"
    );
}

#[test]
fn refusal_receipts() {
    let reg = builtins();
    let raw = r#"{"command": "rm -rf /", "x": 1}"#;
    let r = reg.refusal_receipt(
        "c1",
        "shell",
        raw,
        ReceiptStatus::Denied,
        "denied by policy",
    );
    assert_eq!(r.call_id, "c1");
    assert_eq!(r.tool_name, "shell");
    assert_eq!(r.effect, EffectClass::Mutate);
    assert_eq!(r.status, ReceiptStatus::Denied);
    assert_eq!(r.started_at, r.finished_at);
    assert_eq!(r.verification_status, VerificationStatus::NotApplicable);
    assert_eq!(r.error.as_deref(), Some("denied by policy"));
    assert_eq!(r.evidence, Evidence::default());
    let reordered: serde_json::Value =
        serde_json::from_str(r#"{"x": 1, "command": "rm -rf /"}"#).unwrap();
    assert_eq!(r.input_fingerprint, fingerprint_arguments(&reordered));

    let r = reg.refusal_receipt("c2", "nope", "{bad", ReceiptStatus::UnknownTool, "unknown");
    assert_eq!(r.effect, EffectClass::Observe);
    assert_eq!(r.status, ReceiptStatus::UnknownTool);
    assert_eq!(r.input_fingerprint, sha256_hex(b"{bad"));

    let r = reg.refusal_receipt("c3", "grep", "", ReceiptStatus::Interrupted, "cancelled");
    assert_eq!(r.input_fingerprint, fingerprint_arguments(&json!({})));
    assert_eq!(r.status, ReceiptStatus::Interrupted);
}
