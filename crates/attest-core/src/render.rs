//! What the model is shown for a tool call's outcome. Failures are rendered
//! as failures, never as empty results (SPEC F7, issue item 14).

use attest_protocol::ReceiptStatus;

/// The text of a tool result for the model, from the status and the tool's
/// own output (or the harness's reason when the tool did not run).
pub fn tool_result_text(status: ReceiptStatus, output: &str) -> String {
    match status {
        ReceiptStatus::Ok => output.to_string(),
        ReceiptStatus::Error => format!(
            "[attest] TOOL FAILED: {output}\nThis is a failure, not an empty result: the data was not obtained."
        ),
        ReceiptStatus::Timeout => format!(
            "[attest] TOOL TIMED OUT: {output}\nThis is a failure, not an empty result: the data was not obtained."
        ),
        ReceiptStatus::InvalidArguments => format!(
            "[attest] NOT EXECUTED, invalid arguments: {output}\nFix the arguments to match the tool's schema and call again."
        ),
        ReceiptStatus::Denied => format!("[attest] NOT EXECUTED, refused: {output}"),
        ReceiptStatus::UnknownTool => format!("[attest] NOT EXECUTED: {output}"),
        ReceiptStatus::Skipped => format!("[attest] ALREADY DONE: {output}"),
        ReceiptStatus::Interrupted => format!(
            "[attest] INTERRUPTED: {output}\nThe call did not complete; its effect is unknown."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_never_look_like_empty_results() {
        for status in [ReceiptStatus::Error, ReceiptStatus::Timeout] {
            let text = tool_result_text(status, "");
            assert!(text.contains("not an empty result"), "{text}");
        }
        assert_eq!(tool_result_text(ReceiptStatus::Ok, "data"), "data");
    }
}
