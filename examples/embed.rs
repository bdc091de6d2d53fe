//! Embedding attest: a tool of your own, a scripted model, an observe
//! contract, and the verdict the receipts decide.
//!
//! Run it with `cargo run --example embed`.

use async_trait::async_trait;
use attest::providers::scripted::ScriptedProvider;
use attest::{ContractKind, EffectClass, Engine, Evidence, Permission, RunRequest};
use attest::{Tool, ToolContext, ToolOutput, ToolSpec};

/// Looks up an order's status in "our" system.
struct OrderStatus(ToolSpec);

#[async_trait]
impl Tool for OrderStatus {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn default_permission(&self) -> Permission {
        Permission::Allow
    }
    async fn execute(&self, args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
        let id = args["order_id"].as_str().unwrap_or_default();
        ToolOutput::ok(format!("order {id}: shipped"), Evidence::default())
    }
}

/// Build an engine with the tool and a model that calls it, and run one task.
async fn ask_about_an_order() -> Result<attest::RunOutcome, attest::Error> {
    let tool = OrderStatus(ToolSpec::new(
        "order_status",
        "The status of an order",
        EffectClass::Observe,
        serde_json::json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
    ));
    // A model that calls the tool, then answers from its result.
    let model = ScriptedProvider::from_text(
        r#"[{"tool_calls": [{"name": "order_status", "arguments": {"order_id": "A-17"}}]},
            {"text": "Order A-17 has shipped."}]"#,
    )
    .map_err(|e| attest::Error::Config(e.to_string()))?;

    let engine = Engine::builder().provider(model).tool(tool).build()?;
    let request = RunRequest::new("Has order A-17 shipped?").expect(ContractKind::Observe);
    engine.run(request).await
}

#[tokio::main]
async fn main() -> Result<(), attest::Error> {
    let outcome = ask_about_an_order().await?;
    println!("{}: {}", outcome.state, outcome.basis);
    println!("answer: {}", outcome.answer.unwrap_or_default());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_receipt_decides_completed() {
        let outcome = super::ask_about_an_order().await.unwrap();
        assert_eq!(outcome.state, attest::TerminalState::Completed);
        assert_eq!(outcome.receipts[0].tool_name, "order_status");
        assert_eq!(outcome.answer.as_deref(), Some("Order A-17 has shipped."));
    }
}
