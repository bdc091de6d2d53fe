//! Model providers: everything that knows a wire format.
//!
//! A provider turns a [`ModelRequest`] (system prompt, tool specs and the
//! canonical transcript) into one model call and returns a [`ModelResponse`]:
//! the text, the parsed tool calls, the raw finish reason and the raw output
//! for audit.
//!
//! Invariants:
//! - Requests are rebuilt from the canonical transcript on every step
//!   ([`pairing::normalize`] first): each tool call is answered by exactly one
//!   result before the next message, and orphan results are dropped (SPEC C3).
//! - The system prompt and tool list serialize byte-identically for identical
//!   inputs (SPEC D5): no maps with random order, no timestamps.
//! - Providers never decide terminal states; they report what came back,
//!   including "tool use was signalled but nothing parsed" (an empty
//!   `tool_calls` with [`FinishKind::ToolUse`]).
//! - An incomplete stream (no `[DONE]` / `message_stop` / `response.completed`)
//!   is an error, never an answer.

pub mod anthropic;
pub mod content_calls;
pub mod context_window;
pub mod fragments;
pub mod http;
pub mod openai;
pub mod relaxed_json;
pub mod replay;
pub mod responses;
pub mod scripted;
mod sse;
pub mod text_protocol;
pub mod tool_call_format;
mod wire;

// The trait and types every provider implements, re-exported for
// implementors and callers of this crate.
#[doc(no_inline)]
pub use attest_core::provider::{
    pairing, shared_history, FinishKind, ModelProvider, ModelRequest, ModelResponse, ParsedCall,
    ProtocolViolation, ProviderError, TextSink,
};
