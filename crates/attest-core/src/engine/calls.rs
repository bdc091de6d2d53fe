//! Executing the calls of one response: write-ahead logging, argument
//! validation, permission and approval, execution, receipts.

use super::model::Interrupter;
use super::run::Run;
use super::EngineError;
use crate::approval::ApprovalRequest;
use crate::render;
use attest_protocol::{
    AssistantPhase, EventBody, Permission, Receipt, ReceiptStatus, TraceRecord, TranscriptItem,
};
use attest_providers::{ModelResponse, ParsedCall};
use std::sync::Arc;

impl Run<'_> {
    /// Log the response's commentary and calls (write-ahead), then execute
    /// the calls in order. Returns the interrupt if the run was stopped.
    pub(super) async fn run_calls(
        &mut self,
        step: u32,
        response: &ModelResponse,
    ) -> Result<Option<super::model::Interrupt>, EngineError> {
        if !response.text.trim().is_empty() {
            let text = self.redact(&response.text);
            self.push(TranscriptItem::AssistantOutput {
                text: text.clone(),
                reasoning: None,
                phase: AssistantPhase::Commentary,
            })?;
            self.state.on_commentary(&text, &format!("step_{step}"));
            self.emit(EventBody::Progress { step, text })?;
        }
        let calls: Vec<ParsedCall> = response
            .tool_calls
            .iter()
            .map(|c| self.unique_call(c))
            .collect();
        for call in &calls {
            self.push(TranscriptItem::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            })?;
        }
        for (i, call) in calls.iter().enumerate() {
            let interrupt = Interrupter {
                cancel: self.interrupt.cancel.clone(),
                deadline: self.interrupt.deadline,
            };
            let finished = tokio::select! {
                r = self.execute_call(step, call) => { r?; None }
                why = interrupt.wait() => Some(why),
            };
            if let Some(why) = finished {
                for pending in &calls[i..] {
                    self.record_refusal(
                        step,
                        pending,
                        ReceiptStatus::Interrupted,
                        "the run was stopped while this call was pending or in flight",
                    )?;
                }
                return Ok(Some(why));
            }
        }
        Ok(None)
    }

    /// Call ids must be unique within a run for pairing to mean anything;
    /// a missing or reused id gets a fresh one.
    fn unique_call(&mut self, call: &ParsedCall) -> ParsedCall {
        let mut id = call.id.clone();
        if id.is_empty() || self.seen_call_ids.contains(&id) {
            let base = if id.is_empty() {
                "call".to_string()
            } else {
                id
            };
            let mut n = self.seen_call_ids.len();
            loop {
                let candidate = format!("{base}_{n}");
                if !self.seen_call_ids.contains(&candidate) {
                    id = candidate;
                    break;
                }
                n += 1;
            }
        }
        self.seen_call_ids.insert(id.clone());
        ParsedCall {
            id,
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        }
    }

    async fn execute_call(&mut self, step: u32, call: &ParsedCall) -> Result<(), EngineError> {
        let registry = if call.name == super::HISTORY_TOOL && self.compacted {
            Arc::clone(&self.history_registry)
        } else {
            Arc::clone(&self.engine.registry)
        };
        let prepared = match registry.prepare(&call.name, &call.arguments) {
            Ok(p) => p,
            Err(e) => {
                let reason = e.to_string();
                self.trace(TraceRecord::InvalidArguments {
                    call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    error: reason.clone(),
                })?;
                return self.record_refusal(step, call, e.status(), &reason);
            }
        };

        let (approved, decided_by, message) = match prepared.permission {
            Permission::Allow => (true, "policy".to_string(), None),
            Permission::Deny => (
                false,
                "policy".to_string(),
                Some(format!(
                    "tool `{}` is denied by the permission policy",
                    call.name
                )),
            ),
            Permission::Ask => {
                let request = ApprovalRequest {
                    call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    arguments: prepared.arguments.clone(),
                    reason: format!("tool `{}` requires approval", call.name),
                };
                self.emit(EventBody::ApprovalRequested {
                    call_id: request.call_id.clone(),
                    tool_name: request.tool_name.clone(),
                    arguments: request.arguments.clone(),
                    reason: request.reason.clone(),
                })?;
                let decision = self.engine.approver.decide(&request).await;
                self.emit(EventBody::ApprovalResolved {
                    call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    approved: decision.approved,
                    decided_by: decision.decided_by.clone(),
                })?;
                let message = (!decision.approved).then(|| {
                    let base = format!(
                        "approval for `{}` was denied ({})",
                        call.name, decision.decided_by
                    );
                    match decision.message {
                        Some(m) => format!("{base}: {m}"),
                        None => base,
                    }
                });
                (decision.approved, decision.decided_by, message)
            }
        };
        self.trace(TraceRecord::PermissionDecision {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            permission: prepared.permission,
            approved,
            decided_by,
        })?;
        if !approved {
            let reason = message.unwrap_or_else(|| "refused".to_string());
            return self.record_refusal(step, call, ReceiptStatus::Denied, &reason);
        }

        self.emit(EventBody::ToolStarted {
            step,
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            effect: Some(prepared.effect),
            arguments: prepared.arguments.clone(),
        })?;
        let (output, mut receipt) = registry
            .execute(&call.id, &prepared, &self.engine.tool_ctx)
            .await;
        receipt.error = receipt.error.map(|e| self.redact(&e));
        let text = render::tool_result_text(receipt.status, &self.redact(&output.output));
        self.record_result(step, call, text, receipt)
    }

    pub(super) fn record_refusal(
        &mut self,
        step: u32,
        call: &ParsedCall,
        status: ReceiptStatus,
        reason: &str,
    ) -> Result<(), EngineError> {
        let receipt = self.engine.registry.refusal_receipt(
            &call.id,
            &call.name,
            &call.arguments,
            status,
            reason,
        );
        let text = render::tool_result_text(status, reason);
        self.record_result(step, call, text, receipt)
    }

    fn record_result(
        &mut self,
        step: u32,
        call: &ParsedCall,
        text: String,
        receipt: Receipt,
    ) -> Result<(), EngineError> {
        self.push(TranscriptItem::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            status: receipt.status,
            output: text.clone(),
            receipt: Some(receipt.clone()),
        })?;
        let needed = super::run::needed(self.cfg, &receipt);
        self.state.on_receipt(
            &receipt,
            &super::run::arguments_summary(&call.arguments),
            needed,
        );
        self.receipts.push(receipt.clone());
        self.emit(EventBody::ToolResult {
            step,
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            status: receipt.status,
            output_preview: preview(&text, 400),
            receipt,
        })
    }
}

fn preview(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::preview;

    #[test]
    fn preview_cuts_on_char_boundaries() {
        assert_eq!(preview("héllo", 2), "hé…");
        assert_eq!(preview("hi", 5), "hi");
    }
}
