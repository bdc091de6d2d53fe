//! The HTTP provider: one POST per model call, streaming or not, in either
//! wire format. The API key never appears in errors or `Debug` output.

use crate::content_calls::{self, ContentToolCalls};
use crate::fragments::{Fragments, KeptBody};
use crate::responses::{self, ResponsesOptions};
use crate::{
    anthropic, openai, sse, wire, ModelProvider, ModelRequest, ModelResponse, ProviderError,
    TextSink,
};
use async_trait::async_trait;
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Error bodies are cut to this many bytes.
const MAX_ERROR_BODY: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// `POST {base_url}/chat/completions`; the base URL includes `/v1`.
    OpenAiChat,
    /// `POST {base_url}/v1/messages`; the base URL does not include `/v1`.
    AnthropicMessages,
    /// `POST {base_url}/responses` (OpenAI Responses API); the base URL includes `/v1`.
    OpenAiResponses,
}

impl WireFormat {
    pub fn api_family(self) -> &'static str {
        match self {
            WireFormat::OpenAiChat => "openai_chat",
            WireFormat::AnthropicMessages => "anthropic_messages",
            WireFormat::OpenAiResponses => "openai_responses",
        }
    }
}

#[derive(Clone)]
pub struct HttpProviderConfig {
    pub name: String,
    pub wire: WireFormat,
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// Limit for the whole call, streamed body included.
    pub request_timeout: Duration,
    /// Sent last, so they can override the defaults (e.g. `anthropic-version`).
    pub extra_headers: Vec<(String, String)>,
    /// Whether calls written in the content are read as calls
    /// ([`content_calls`]).
    pub content_tool_calls: ContentToolCalls,
    /// Responses API only: ask for encrypted reasoning and pass back what
    /// the transcript kept of it (set when the reasoning policy keeps
    /// reasoning). Ignored by the other wire formats.
    pub encrypted_reasoning: bool,
    /// Send prompt-cache hints (`prompt_cache_key`, Anthropic's
    /// `cache_control` breakpoints) when the request has a cache key; off
    /// for servers that reject fields they do not know.
    pub prompt_cache: bool,
}

impl fmt::Debug for HttpProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProviderConfig")
            .field("name", &self.name)
            .field("wire", &self.wire)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("request_timeout", &self.request_timeout)
            .field("content_tool_calls", &self.content_tool_calls)
            .field("encrypted_reasoning", &self.encrypted_reasoning)
            .field("prompt_cache", &self.prompt_cache)
            // Header values may hold secrets too; names are enough to debug.
            .field(
                "extra_headers",
                &self
                    .extra_headers
                    .iter()
                    .map(|(k, _)| k)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

pub struct HttpProvider {
    cfg: HttpProviderConfig,
    client: reqwest::Client,
    headers: HeaderMap,
    endpoint: String,
    /// `endpoint` parsed once, where reqwest would parse the string anew
    /// for every request; `None` when it does not parse, and then each
    /// request fails as reqwest reports it.
    endpoint_url: Option<reqwest::Url>,
    /// Ids for calls read from the content: unique per provider (the
    /// counter) and across processes (the start time), since a session's
    /// later runs are sent the earlier runs' calls.
    content_call_prefix: String,
    next_content_call: AtomicU64,
    /// The JSON of the pieces earlier request bodies were made of.
    kept: Mutex<Fragments>,
}

impl fmt::Debug for HttpProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProvider")
            .field("config", &self.cfg)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl HttpProvider {
    /// Fails (as `Transport`, there being no configuration variant) on a
    /// header name or value that HTTP cannot carry.
    pub fn new(cfg: HttpProviderConfig) -> Result<Self, ProviderError> {
        let base = cfg.base_url.trim_end_matches('/');
        let endpoint = match cfg.wire {
            WireFormat::OpenAiChat => format!("{base}/chat/completions"),
            WireFormat::AnthropicMessages => format!("{base}/v1/messages"),
            WireFormat::OpenAiResponses => format!("{base}/responses"),
        };
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let key = cfg.api_key.as_deref().filter(|k| !k.is_empty());
        match cfg.wire {
            WireFormat::OpenAiChat | WireFormat::OpenAiResponses => {
                if let Some(key) = key {
                    headers.insert("authorization", secret_value(&format!("Bearer {key}"))?);
                }
            }
            WireFormat::AnthropicMessages => {
                if let Some(key) = key {
                    headers.insert("x-api-key", secret_value(key)?);
                }
                headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
            }
        }
        for (name, value) in &cfg.extra_headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| config_error(format!("invalid header name `{name}`")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| config_error(format!("invalid value for header `{name}`")))?;
            headers.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .timeout(cfg.request_timeout)
            .user_agent(concat!("attest/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| config_error(redact(cfg.api_key.as_deref(), error_chain(&e))))?;
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(Self {
            cfg,
            client,
            headers,
            endpoint_url: reqwest::Url::parse(&endpoint).ok(),
            endpoint,
            content_call_prefix: format!("call_{started:x}"),
            next_content_call: AtomicU64::new(1),
            kept: Mutex::default(),
        })
    }

    /// The URL every call is posted to.
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    fn redact(&self, s: String) -> String {
        redact(self.cfg.api_key.as_deref(), s)
    }

    async fn http_error(&self, resp: reqwest::Response) -> ProviderError {
        let status = resp.status().as_u16();
        let retry_after = retry_after(resp.headers(), SystemTime::now());
        let body = resp.text().await.unwrap_or_default();
        // Redact before cutting, so no fragment of the key survives the cut.
        let body = wire::truncate(&self.redact(body), MAX_ERROR_BODY).to_string();
        ProviderError::Http {
            status,
            body,
            retry_after,
        }
    }

    async fn read_stream(
        &self,
        resp: reqwest::Response,
        sink: Option<&TextSink>,
    ) -> Result<ModelResponse, ProviderError> {
        let key = self.cfg.api_key.clone();
        let events = sse::events(resp, move |s| redact(key.as_deref(), s));
        match self.cfg.wire {
            WireFormat::OpenAiChat => drain(events, openai::StreamAccumulator::new(), sink).await,
            WireFormat::AnthropicMessages => {
                drain(events, anthropic::StreamAccumulator::new(), sink).await
            }
            WireFormat::OpenAiResponses => {
                drain(events, responses::StreamAccumulator::new(), sink).await
            }
        }
    }

    async fn send(
        &self,
        request: &ModelRequest,
        sink: Option<&TextSink>,
    ) -> Result<ModelResponse, ProviderError> {
        // Only the opt-out pays for a copy of the request.
        let uncached;
        let request = if !self.cfg.prompt_cache && request.cache_key.is_some() {
            uncached = ModelRequest {
                cache_key: None,
                ..request.clone()
            };
            &uncached
        } else {
            request
        };
        // A poisoned lock still holds valid pieces (each is whole).
        let kept = || self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let body: KeptBody = match self.cfg.wire {
            WireFormat::OpenAiChat => openai::body_kept(request, &self.cfg.model, &mut kept()),
            WireFormat::AnthropicMessages => {
                anthropic::body_kept(request, &self.cfg.model, &mut kept())
            }
            WireFormat::OpenAiResponses => responses::build_body(
                request,
                &self.cfg.model,
                ResponsesOptions {
                    encrypted_reasoning: self.cfg.encrypted_reasoning,
                },
            )
            .to_string()
            .into(),
        };
        let post = |body: reqwest::Body| {
            let request = match &self.endpoint_url {
                Some(url) => self.client.post(url.clone()),
                None => self.client.post(&self.endpoint),
            };
            request.headers(self.headers.clone()).body(body).send()
        };
        let transport = |e: reqwest::Error| ProviderError::Transport(self.redact(error_chain(&e)));
        // Frames of a known total length: one body, not chunked.
        let mut resp = post(reqwest::Body::wrap(body.clone()))
            .await
            .map_err(transport)?;
        // reqwest re-sends only a body it holds whole: a 307/308 (an
        // endpoint that moved) comes back unfollowed; send it again whole.
        if matches!(resp.status().as_u16(), 307 | 308) {
            let whole = bytes::Bytes::from(body.into_parts().concat());
            resp = post(reqwest::Body::from(whole)).await.map_err(transport)?;
        }
        if !resp.status().is_success() {
            return Err(self.http_error(resp).await);
        }
        // A server that ignores `stream` answers with one JSON body (often an error).
        let is_json = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        let mut response = if request.stream && !is_json {
            self.read_stream(resp, sink).await?
        } else {
            let text = resp
                .text()
                .await
                .map_err(|e| ProviderError::Transport(self.redact(error_chain(&e))))?;
            match self.cfg.wire {
                WireFormat::OpenAiChat => openai::parse_response(&text)?,
                WireFormat::AnthropicMessages => anthropic::parse_response(&text)?,
                WireFormat::OpenAiResponses => responses::parse_response(&text)?,
            }
        };
        if self.cfg.content_tool_calls == ContentToolCalls::Auto {
            content_calls::adopt(&mut response, &request.tools, || {
                let n = self.next_content_call.fetch_add(1, Ordering::Relaxed);
                format!("{}_{n}", self.content_call_prefix)
            });
        }
        Ok(response)
    }
}

#[async_trait]
impl ModelProvider for HttpProvider {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn api_family(&self) -> &str {
        self.cfg.wire.api_family()
    }

    fn model(&self) -> &str {
        &self.cfg.model
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        self.send(request, None).await
    }

    async fn complete_streaming(
        &self,
        request: &ModelRequest,
        sink: &TextSink,
    ) -> Result<ModelResponse, ProviderError> {
        self.send(request, Some(sink)).await
    }
}

/// What every stream accumulator offers.
trait Accumulator {
    fn push(&mut self, data: &str) -> Result<(), ProviderError>;
    fn text_so_far(&self) -> String;
    fn is_done(&self) -> bool;
    fn finish(self) -> Result<ModelResponse, ProviderError>;
}

macro_rules! accumulator {
    ($t:ty) => {
        impl Accumulator for $t {
            fn push(&mut self, data: &str) -> Result<(), ProviderError> {
                <$t>::push(self, data)
            }
            fn is_done(&self) -> bool {
                <$t>::is_done(self)
            }
            fn text_so_far(&self) -> String {
                <$t>::text_so_far(self)
            }
            fn finish(self) -> Result<ModelResponse, ProviderError> {
                <$t>::finish(self)
            }
        }
    };
}
accumulator!(openai::StreamAccumulator);
accumulator!(anthropic::StreamAccumulator);
accumulator!(responses::StreamAccumulator);

/// Feed events until the terminator; stop reading there rather than wait for
/// the server to close. A stream that ends early fails in `finish`.
async fn drain<A: Accumulator>(
    events: impl Stream<Item = Result<eventsource_stream::Event, ProviderError>>,
    mut acc: A,
    sink: Option<&TextSink>,
) -> Result<ModelResponse, ProviderError> {
    let mut events = std::pin::pin!(events);
    let mut shown = 0;
    while let Some(event) = events.next().await {
        acc.push(&event?.data)?;
        if let Some(sink) = sink {
            let text = acc.text_so_far();
            if text.len() > shown && text.is_char_boundary(shown) {
                (sink.0)(&text[shown..]);
                shown = text.len();
            }
        }
        if acc.is_done() {
            break;
        }
    }
    acc.finish()
}

fn secret_value(s: &str) -> Result<HeaderValue, ProviderError> {
    let mut v = HeaderValue::from_str(s)
        .map_err(|_| config_error("API key is not a valid header value".into()))?;
    v.set_sensitive(true);
    Ok(v)
}

fn config_error(message: String) -> ProviderError {
    ProviderError::Transport(format!("invalid provider configuration: {message}"))
}

fn redact(key: Option<&str>, s: String) -> String {
    match key {
        Some(k) if !k.is_empty() && s.contains(k) => s.replace(k, "[REDACTED]"),
        _ => s,
    }
}

/// reqwest's `Display` omits the cause ("connection refused" …); include it.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// `retry-after-ms` (OpenAI), else `retry-after` as seconds (possibly
/// fractional) or as an HTTP date.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return secs(ms / 1000.0);
    }
    let value = get(RETRY_AFTER.as_str())?;
    if let Ok(s) = value.parse::<f64>() {
        return secs(s);
    }
    let at = http_date(value)?;
    let now = now.duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

fn secs(s: f64) -> Option<Duration> {
    (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(86_400.0)))
}

/// Seconds since the epoch of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
/// the only date form servers send today.
fn http_date(s: &str) -> Option<u64> {
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)? as i64
        + 1;
    let (day, year): (i64, i64) = (day.parse().ok()?, year.parse().ok()?);
    let hms: Vec<u64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, sec] = hms.as_slice() else {
        return None;
    };
    if !(1..=31).contains(&day) || *h > 23 || *m > 59 || *sec > 60 {
        return None;
    }
    // Days from civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(days * 86_400 + h * 3600 + m * 60 + sec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_date_parses_imf_fixdate() {
        assert_eq!(
            http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(http_date("garbage"), None);
    }

    #[test]
    fn retry_after_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("1.5"));
        assert_eq!(retry_after(&h, now), Some(Duration::from_millis(1500)));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"),
        );
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
        h.insert(RETRY_AFTER, HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h, now), None);
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h, now), Some(Duration::from_millis(250)));
    }

    #[test]
    fn redact_ignores_empty_key() {
        assert_eq!(redact(Some(""), "abc".into()), "abc");
        assert_eq!(redact(Some("sk-1"), "x sk-1 y".into()), "x [REDACTED] y");
    }
}
