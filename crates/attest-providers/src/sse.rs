//! Turns a streaming HTTP response into server-sent events.

use crate::ProviderError;
use eventsource_stream::{Event, Eventsource};
use futures::{Stream, StreamExt};

/// The SSE events of `resp`, in order. A transport failure or malformed
/// framing mid-stream surfaces as [`ProviderError::IncompleteStream`]: the
/// answer was cut off, and retrying is the right response. `redact` scrubs
/// the error text (reqwest errors include the URL).
pub(crate) fn events(
    resp: reqwest::Response,
    redact: impl Fn(String) -> String,
) -> impl Stream<Item = Result<Event, ProviderError>> {
    resp.bytes_stream().eventsource().map(move |ev| {
        ev.map_err(|e| ProviderError::IncompleteStream(redact(format!("stream broke off: {e}"))))
    })
}
