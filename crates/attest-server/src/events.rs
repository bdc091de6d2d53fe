//! Server-Sent Events read from the durable log. A run's stream sends its
//! events with `id:` = the event's `seq` and ends after `done`; a
//! session's sends every event of its runs with `id:` = the event's
//! position in the store's log and stays open. `Last-Event-ID` resumes
//! after that id, exactly, also across restarts: nothing is sent that is
//! not in the store, and the store is read from the id on.

use crate::api::EventsQuery;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::routes::{authorized, session_known};
use crate::state::AppState;
use attest::store::StoredEvent;
use attest::EventBody;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;
use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::watch;

/// How often a stream re-reads the store without being woken.
const POLL: Duration = Duration::from_secs(1);

/// What a stream follows.
enum Source {
    Run(String),
    Session(String),
}

struct Tail {
    state: AppState,
    source: Source,
    /// The last id sent (or given as `Last-Event-ID`).
    after: i64,
    buffer: VecDeque<StoredEvent>,
    kinds: Option<HashSet<String>>,
    wake: watch::Receiver<u64>,
    ended: bool,
}

impl Tail {
    /// The id an event is sent with.
    fn id_of(&self, e: &StoredEvent) -> i64 {
        match self.source {
            Source::Run(_) => e.event.seq as i64,
            Source::Session(_) => e.position,
        }
    }

    fn read(&mut self) -> Result<(), ApiError> {
        let store = self.state.store();
        let events = match &self.source {
            Source::Run(id) => store.events_after(id, self.after.max(0) as u64)?,
            Source::Session(id) => store.session_events_after(id, self.after)?,
        };
        self.buffer.extend(events);
        Ok(())
    }

    /// A run that will never write an event: settled before it started.
    fn run_never_started(&self) -> bool {
        let Source::Run(id) = &self.source else {
            return false;
        };
        let store = self.state.store();
        let started = store.run(id).is_ok_and(|r| r.id == *id);
        !started
            && store
                .queued_run(id)
                .ok()
                .flatten()
                .is_none_or(|q| q.is_settled())
    }

    /// The next event to send; `None` when the stream ends.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            while let Some(stored) = self.buffer.pop_front() {
                let id = self.id_of(&stored);
                self.after = id;
                let is_done = matches!(stored.event.body, EventBody::Done { .. });
                if is_done && matches!(self.source, Source::Run(_)) {
                    self.ended = true;
                }
                let wanted = self
                    .kinds
                    .as_ref()
                    .is_none_or(|k| k.contains(stored.event.body.type_name()));
                if wanted {
                    let data = serde_json::to_string(&stored.event).unwrap_or_default();
                    return Some(SseEvent::default().id(id.to_string()).data(data));
                }
                if self.ended {
                    return None;
                }
            }
            if self.ended {
                return None;
            }
            // Mark the wake-ups seen before reading, so none is missed.
            self.wake.borrow_and_update();
            if self.read().is_err() {
                return None;
            }
            if !self.buffer.is_empty() {
                continue;
            }
            if self.run_never_started() {
                return None;
            }
            tokio::select! {
                changed = self.wake.changed() => {
                    if changed.is_err() {
                        // The run ended here; its last events are in the store.
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                _ = tokio::time::sleep(POLL) => {}
            }
        }
    }
}

fn last_event_id(headers: &HeaderMap) -> Result<i64, ApiError> {
    match headers.get("last-event-id") {
        None => Ok(0),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                ApiError::BadRequest("Last-Event-ID must be a non-negative integer".into())
            }),
    }
}

fn kinds(query: &EventsQuery) -> Option<HashSet<String>> {
    query.kinds.as_ref().map(|k| {
        k.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    })
}

fn stream_of(tail: Tail) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    futures::stream::unfold(tail, |mut tail| async move {
        tail.next().await.map(|e| (Ok(e), tail))
    })
}

fn sse(tail: Tail) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let heartbeat = tail.state.cfg.heartbeat;
    Sse::new(stream_of(tail)).keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat"))
}

/// A run's events as Server-Sent Events, to its `done`.
#[utoipa::path(
    get, path = "/v1/runs/{id}/events", tag = "runs",
    params(
        ("id" = String, Path, description = "The run's id"),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event (the `id:` last received)"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "`text/event-stream`: one event per `data:` line (the `attest run --json` schema), `id:` = its `seq`; heartbeat comments every 15 s; ends after `done`", content_type = "text/event-stream", body = String),
        (status = 400, body = crate::api::ErrorBody), (status = 401, body = crate::api::ErrorBody),
        (status = 403, body = crate::api::ErrorBody), (status = 404, body = crate::api::ErrorBody),
    ),
    security(("bearer" = ["runs:read"]))
)]
pub async fn run_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    authorized(&state, &headers, "runs:read")?;
    let after = last_event_id(&headers)?;
    {
        let store = state.store();
        let known = store.queued_run(&id)?.is_some() || store.run(&id).is_ok_and(|r| r.id == id);
        if !known {
            return Err(ApiError::NotFound(format!("no run `{id}`")));
        }
    }
    let wake = state.hub.subscribe_run(&id);
    Ok(sse(Tail {
        state: state.clone(),
        source: Source::Run(id),
        after,
        buffer: VecDeque::new(),
        kinds: kinds(&query),
        wake,
        ended: false,
    }))
}

/// A session's events as Server-Sent Events; the stream stays open.
#[utoipa::path(
    get, path = "/v1/sessions/{id}/events", tag = "sessions",
    params(
        ("id" = String, Path, description = "The session's id"),
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event (the `id:` last received)"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "`text/event-stream`: every event of the session's runs, `id:` = its position in the store's log; heartbeat comments every 15 s; stays open", content_type = "text/event-stream", body = String),
        (status = 400, body = crate::api::ErrorBody), (status = 401, body = crate::api::ErrorBody),
        (status = 403, body = crate::api::ErrorBody), (status = 404, body = crate::api::ErrorBody),
    ),
    security(("bearer" = ["runs:read"]))
)]
pub async fn session_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    authorized(&state, &headers, "runs:read")?;
    let after = last_event_id(&headers)?;
    if !session_known(&state, &id)? {
        return Err(ApiError::NotFound(format!("no session `{id}`")));
    }
    let wake = state.hub.subscribe_session(&id);
    Ok(sse(Tail {
        state: state.clone(),
        source: Source::Session(id),
        after,
        buffer: VecDeque::new(),
        kinds: kinds(&query),
        wake,
        ended: false,
    }))
}
