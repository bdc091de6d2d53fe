//! One MCP server's connection: how it is reached ([`McpConnector`]), the
//! client side of the protocol ([`McpClientHandler`]), and the life cycle
//! ([`McpServer`]): a server that crashes, hangs or garbles its answers
//! gives a structured failure and is restarted once; after a second fault
//! it stays down and every call says so. Nothing here panics.

use super::runtime::McpRuntime;
use crate::process::{self, GroupKill};
use crate::{Sandbox, ToolContext};
use async_trait::async_trait;
use attest_core::tool::{ProgressSink, ToolProgress};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
    JsonObject, JsonRpcMessage, JsonRpcNotification, ProgressNotificationParam, ProgressToken,
    RequestId, ServerNotification, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService, ServiceError};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::Transport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// A running client session with one server.
pub type McpService = RunningService<RoleClient, McpClientHandler>;

/// Bytes of a stdio server's stderr kept for failure messages.
const STDERR_TAIL: usize = 2 * 1024;
/// Progress tokens nobody watches yet whose notifications are kept (a
/// notification can overtake the caller's registration), and how many of
/// each.
const EARLY_TOKENS: usize = 16;
const EARLY_PER_TOKEN: usize = 16;

/// A live connection and whatever keeps its transport alive (a child
/// process, killed with its whole group when this drops).
pub struct McpConnection {
    pub service: McpService,
    pub guard: Option<Box<dyn Send + Sync>>,
}

/// How a server is reached: a fresh connection per call of `connect`.
#[async_trait]
pub trait McpConnector: Send + Sync + std::fmt::Debug {
    /// Start (or dial) the server and complete the MCP handshake.
    async fn connect(&self, handler: McpClientHandler) -> Result<McpConnection, String>;
    /// What the server's stderr said lately, for failure messages.
    fn stderr_tail(&self) -> String {
        String::new()
    }
}

/// The client side: answers the server's notifications.
#[derive(Debug, Clone, Default)]
pub struct McpClientHandler {
    state: Arc<HandlerState>,
}

#[derive(Debug, Default)]
struct HandlerState {
    /// `notifications/tools/list_changed` received so far.
    tools_changed: AtomicU64,
    /// Where the progress of each call in flight goes, by the progress
    /// token rmcp gave its request.
    progress: Mutex<HashMap<ProgressToken, Watch>>,
    /// The tools the server lists now (`None` before the first listing),
    /// read again whenever it says its list changed.
    /// With how many `list_changed` notices it was taken after: an older
    /// listing that finishes late never replaces a newer one.
    listed: Mutex<Option<(u64, Vec<String>)>>,
    /// Orders the early notifications (see [`Watch::Early`]).
    early_seq: AtomicU64,
}

#[derive(Debug)]
enum Watch {
    /// Notifications that came before the call registered its sink (or,
    /// handled late, after its call ended), with when the first came.
    Early(u64, Vec<ToolProgress>),
    Sink(ProgressSink),
}

/// How long the listing after `tools/list_changed` may take.
const RELIST_TIMEOUT: Duration = Duration::from_secs(30);

fn set_listed(state: &HandlerState, changes: u64, tools: &[rmcp::model::Tool]) {
    if let Ok(mut listed) = state.listed.lock() {
        if listed.as_ref().is_none_or(|(seen, _)| *seen <= changes) {
            *listed = Some((changes, tools.iter().map(|t| t.name.to_string()).collect()));
        }
    }
}

/// Unregisters a call's progress sink when the call is over.
struct WatchGuard {
    state: Arc<HandlerState>,
    token: ProgressToken,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Ok(mut all) = self.state.progress.lock() {
            all.remove(&self.token);
        }
    }
}

impl McpClientHandler {
    /// How many times the server said its tool list changed.
    pub fn tools_changed(&self) -> u64 {
        self.state.tools_changed.load(Ordering::SeqCst)
    }

    /// Whether the server's latest listing has `tool` (true before any).
    fn lists(&self, tool: &str) -> bool {
        self.state
            .listed
            .lock()
            .map(|listed| {
                listed
                    .as_ref()
                    .is_none_or(|(_, l)| l.iter().any(|t| t == tool))
            })
            .unwrap_or(true)
    }

    /// Send `token`'s progress to `sink` until the guard drops, starting
    /// with whatever arrived for it already.
    fn watch(&self, token: ProgressToken, sink: ProgressSink) -> WatchGuard {
        if let Ok(mut all) = self.state.progress.lock() {
            if let Some(Watch::Early(_, reports)) = all.remove(&token) {
                reports.into_iter().for_each(|r| sink.report(r));
            }
            all.insert(token.clone(), Watch::Sink(sink));
        }
        WatchGuard {
            state: Arc::clone(&self.state),
            token,
        }
    }

    /// `transport` with the server's progress and `tools/list_changed`
    /// notifications handled as they are read (see [`NotificationTap`]).
    /// Every connector serves through it.
    pub fn tap<T: Transport<RoleClient>>(&self, transport: T) -> NotificationTap<T> {
        NotificationTap {
            inner: transport,
            handler: self.clone(),
        }
    }

    /// Count a `tools/list_changed` notice.
    fn note_tools_changed(&self) {
        self.state.tools_changed.fetch_add(1, Ordering::SeqCst);
    }

    /// Hand a progress notification to the call watching its token (or
    /// keep it for a call that has yet to register).
    fn route_progress(&self, params: ProgressNotificationParam) {
        let report = ToolProgress {
            progress: params.progress,
            total: params.total,
            message: params.message,
        };
        let Ok(mut all) = self.state.progress.lock() else {
            return;
        };
        match all.get_mut(&params.progress_token) {
            Some(Watch::Sink(sink)) => sink.report(report),
            Some(Watch::Early(_, reports)) if reports.len() < EARLY_PER_TOKEN => {
                reports.push(report)
            }
            Some(Watch::Early(..)) => {}
            None => {
                // Tokens nobody claims (yet: the notice overtook the
                // caller's registration; or ever: a server reporting on a
                // call that is over) are kept in small numbers, the oldest
                // dropped first.
                let early: Vec<(u64, ProgressToken)> = all
                    .iter()
                    .filter_map(|(token, w)| match w {
                        Watch::Early(since, _) => Some((*since, token.clone())),
                        Watch::Sink(_) => None,
                    })
                    .collect();
                if early.len() >= EARLY_TOKENS {
                    if let Some((_, oldest)) = early.into_iter().min_by_key(|(since, _)| *since) {
                        all.remove(&oldest);
                    }
                }
                let since = self.state.early_seq.fetch_add(1, Ordering::SeqCst);
                all.insert(params.progress_token, Watch::Early(since, vec![report]));
            }
        }
    }
}

impl ClientHandler for McpClientHandler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        // Counted by the tap as it was read (see [`NotificationTap`]).
        let changes = self.tools_changed();
        // List again off the notification's task (a request awaited here
        // would wait on the loop that delivers its answer), so that the
        // engine stops offering a withdrawn tool from its next request.
        let state = Arc::clone(&self.state);
        tokio::spawn(async move {
            let listing = tokio::time::timeout(RELIST_TIMEOUT, context.peer.list_all_tools());
            if let Ok(Ok(tools)) = listing.await {
                set_listed(&state, changes, &tools);
            }
        });
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("attest", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// A transport that routes progress notifications to their calls, and
/// counts `tools/list_changed` notices, in the order the server sent them,
/// before the reading loop goes on to the next message. rmcp hands
/// notifications to the handler on tasks of their own, so a report routed
/// there could come after its call's result (a tool's final `3 of 3` lost),
/// and a call sent after the answer that followed a notice could still be
/// let through to a tool the server had withdrawn.
pub struct NotificationTap<T> {
    inner: T,
    handler: McpClientHandler,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for NotificationTap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(JsonRpcNotification { notification, .. }) = &message {
            match notification {
                ServerNotification::ProgressNotification(progress) => {
                    self.handler.route_progress(progress.params.clone())
                }
                ServerNotification::ToolListChangedNotification(_) => {
                    self.handler.note_tools_changed()
                }
                _ => {}
            }
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// A stdio server: a child process in the tool sandbox, the workspace as
/// its working directory, the tools' environment plus the entry's `env`.
#[derive(Debug)]
pub struct StdioConnector {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub sandbox: Option<Arc<Sandbox>>,
    pub ctx: ToolContext,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl StdioConnector {
    pub fn new(
        program: impl Into<PathBuf>,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        sandbox: Option<Arc<Sandbox>>,
        ctx: ToolContext,
    ) -> Self {
        StdioConnector {
            program: program.into(),
            args,
            env,
            sandbox,
            ctx,
            stderr: Arc::default(),
        }
    }
}

#[async_trait]
impl McpConnector for StdioConnector {
    async fn connect(&self, handler: McpClientHandler) -> Result<McpConnection, String> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let mut cmd =
            process::tool_command(&self.ctx, self.sandbox.as_deref(), &self.program, &args)
                .map_err(|e| format!("the sandbox could not be set up: {e}"))?;
        cmd.envs(&self.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        process::in_new_session(&mut cmd);
        let mut child = process::spawn(&mut cmd)
            .await
            .map_err(|e| format!("could not start `{}`: {e}", self.program.display()))?;
        let group = GroupKill::new(child.id());
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the server's pipes could not be opened".to_string());
        };
        let tail = Arc::clone(&self.stderr);
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Ok(mut kept) = tail.lock() {
                    kept.extend_from_slice(&buf[..n]);
                    let excess = kept.len().saturating_sub(STDERR_TAIL);
                    kept.drain(..excess);
                }
            }
        });
        let transport = handler.tap(AsyncRwTransport::new_client(stdout, stdin));
        let service = handler
            .serve(transport)
            .await
            .map_err(|e| format!("the MCP handshake failed: {e}"))?;
        Ok(McpConnection {
            service,
            guard: Some(Box::new((child, group))),
        })
    }

    fn stderr_tail(&self) -> String {
        let kept = self.stderr.lock().map(|k| k.clone()).unwrap_or_default();
        String::from_utf8_lossy(&kept).trim().to_string()
    }
}

/// Why a call produced no result.
#[derive(Debug, Clone, PartialEq)]
pub enum CallFailure {
    /// The server answered with a JSON-RPC error: it is alive.
    Rpc(String),
    /// No answer in time; the server was stopped (and restarted once).
    Hung(String),
    /// The connection broke (crash, garbled output); restarted once.
    Broken(String),
    /// Down for good, or it could not be started.
    Unavailable(String),
    /// The server withdrew the tool (`tools/list_changed`).
    Withdrawn(String),
}

/// What a successful call returned.
#[derive(Debug, Clone)]
pub struct CallReply {
    pub result: CallToolResult,
}

enum State {
    Live(McpConnection),
    Down(String),
}

/// One configured server and its connection.
pub struct McpServer {
    name: String,
    connector: Arc<dyn McpConnector>,
    runtime: Arc<McpRuntime>,
    timeout: Duration,
    handler: McpClientHandler,
    state: tokio::sync::Mutex<State>,
    /// Whether the one restart has been used.
    restarted: std::sync::atomic::AtomicBool,
    /// How many `tools/list_changed` notices the last refresh has seen.
    seen_changes: AtomicU64,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("connector", &self.connector)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Connect (blocking the calling thread; start-up and handshake bounded
    /// by `timeout`, at least 10 s) and list every page of the server's
    /// tools (bounded by `timeout`).
    pub fn start(
        name: &str,
        connector: Arc<dyn McpConnector>,
        runtime: &Arc<McpRuntime>,
        timeout: Duration,
    ) -> Result<(Arc<McpServer>, Vec<rmcp::model::Tool>), String> {
        let handler = McpClientHandler::default();
        let first = {
            let connector = Arc::clone(&connector);
            let handler = handler.clone();
            runtime
                .block_on(async move { bounded(timeout, connector.connect(handler)).await })
                .unwrap_or_else(|| Err("the MCP runtime stopped".to_string()))
        };
        let connection = first.map_err(|e| with_stderr(e, connector.as_ref()))?;
        let server = Arc::new(McpServer {
            name: name.to_string(),
            connector,
            runtime: Arc::clone(runtime),
            timeout,
            handler,
            state: tokio::sync::Mutex::new(State::Live(connection)),
            restarted: std::sync::atomic::AtomicBool::new(false),
            seen_changes: AtomicU64::new(0),
        });
        let lister = Arc::clone(&server);
        let tools = runtime
            .block_on(async move { lister.list_tools().await })
            .unwrap_or_else(|| Err("the MCP runtime stopped".to_string()))?;
        server.remember(0, &tools);
        Ok((server, tools))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How many times the server said its tool list changed.
    pub fn tools_changed(&self) -> u64 {
        self.handler.tools_changed()
    }

    /// Every page of `tools/list`.
    pub async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>, String> {
        let peer = self.live_peer().await.map_err(|f| describe(&f))?;
        match tokio::time::timeout(self.timeout, peer.list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => Err(format!("tools/list failed: {e}")),
            Err(_) => Err(format!(
                "tools/list got no answer within {} ms",
                self.timeout.as_millis()
            )),
        }
    }

    /// Call `tool` with `arguments`, on the MCP runtime, from any runtime;
    /// the server's progress notifications for the call go to `progress`.
    pub async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: JsonObject,
        progress: Option<ProgressSink>,
    ) -> Result<CallReply, CallFailure> {
        let server = Arc::clone(self);
        let tool = tool.to_string();
        self.runtime
            .run(async move { server.call_here(tool, arguments, progress).await })
            .await
            .unwrap_or_else(|| Err(CallFailure::Unavailable("the MCP runtime stopped".into())))
    }

    fn remember(&self, changes: u64, tools: &[rmcp::model::Tool]) {
        set_listed(&self.handler.state, changes, tools);
    }

    /// Whether the server still offers `tool` (its name there): false once
    /// a listing after `tools/list_changed` leaves it out.
    pub fn offers(&self, tool: &str) -> bool {
        self.handler.lists(tool)
    }

    /// After `notifications/tools/list_changed`, before a call: list again
    /// (if the handler's own relisting has not yet), so that a call to a
    /// tool the server withdrew fails plainly. A withdrawn tool leaves the
    /// offered tools at the next request (a declared cache reset); tools
    /// the server added are offered from the next run.
    async fn refresh_if_changed(&self) {
        let changes = self.handler.tools_changed();
        if changes == self.seen_changes.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(tools) = self.list_tools().await {
            self.remember(changes, &tools);
            self.seen_changes.store(changes, Ordering::SeqCst);
        }
    }

    async fn call_here(
        &self,
        tool: String,
        arguments: JsonObject,
        progress: Option<ProgressSink>,
    ) -> Result<CallReply, CallFailure> {
        self.refresh_if_changed().await;
        if !self.offers(&tool) {
            return Err(CallFailure::Withdrawn(format!(
                "MCP server `{}` no longer offers `{tool}`: its tool list changed during the run (the new list is offered from the next run)",
                self.name
            )));
        }
        let peer = self.live_peer().await?;
        let params = CallToolRequestParams::new(tool).with_arguments(arguments);
        // rmcp gives every request its own progress token; the handle
        // says which, so the notifications can be tied to this call.
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let sent = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await;
        let outcome = match sent {
            Ok(handle) => {
                let _watch =
                    progress.map(|sink| self.handler.watch(handle.progress_token.clone(), sink));
                let mut abandoned = CancelOnDrop::new(peer.clone(), handle.id.clone());
                let outcome = tokio::time::timeout(self.timeout, handle.await_response()).await;
                if outcome.is_ok() {
                    // Answered: nothing to cancel. A timeout sends the cancel.
                    abandoned.disarm();
                }
                outcome.map(|answer| answer.and_then(call_result))
            }
            Err(e) => Ok(Err(e)),
        };
        match outcome {
            Ok(Ok(result)) => Ok(CallReply { result }),
            Ok(Err(ServiceError::McpError(e))) => Err(CallFailure::Rpc(e.message.to_string())),
            Ok(Err(e)) => {
                let note = self.recover().await;
                Err(CallFailure::Broken(with_stderr(
                    format!("the connection to the server broke ({e}); {note}"),
                    self.connector.as_ref(),
                )))
            }
            Err(_) => {
                let note = self.recover().await;
                Err(CallFailure::Hung(format!(
                    "no answer within {} ms; {note}",
                    self.timeout.as_millis()
                )))
            }
        }
    }

    /// The live connection's peer; a connection found closed (the server
    /// died between calls) is replaced first, if the restart is unused.
    async fn live_peer(&self) -> Result<rmcp::Peer<RoleClient>, CallFailure> {
        {
            let state = self.state.lock().await;
            match &*state {
                State::Live(c) if !c.service.is_closed() => return Ok(c.service.peer().clone()),
                State::Down(reason) => return Err(CallFailure::Unavailable(reason.clone())),
                State::Live(_) => {}
            }
        }
        let note = self.recover().await;
        let state = self.state.lock().await;
        match &*state {
            State::Live(c) if !c.service.is_closed() => Ok(c.service.peer().clone()),
            _ => Err(CallFailure::Unavailable(format!(
                "the server had stopped; {note}"
            ))),
        }
    }

    /// Stop the current connection and start a new one, once per server.
    /// Says what happened, for the failure message.
    async fn recover(&self) -> String {
        let mut state = self.state.lock().await;
        // Dropping the connection kills the process group.
        *state = State::Down(String::new());
        if self.restarted.swap(true, Ordering::SeqCst) {
            let reason = format!(
                "MCP server `{}` failed again after its restart and stays stopped",
                self.name
            );
            *state = State::Down(reason);
            return "it failed before and was not restarted again".to_string();
        }
        match bounded(self.timeout, self.connector.connect(self.handler.clone())).await {
            Ok(connection) => {
                *state = State::Live(connection);
                "the server was restarted; the call was not repeated".to_string()
            }
            Err(e) => {
                let reason = format!("MCP server `{}` could not be restarted: {e}", self.name);
                *state = State::Down(reason);
                format!("restarting it failed: {e}")
            }
        }
    }
}

/// A `tools/call` answer as its result.
fn call_result(answer: ServerResult) -> Result<CallToolResult, ServiceError> {
    match answer {
        ServerResult::CallToolResult(result) => Ok(result),
        // `{}` parses as the empty result: a call that returned nothing.
        ServerResult::EmptyResult(_) => Ok(CallToolResult::success(Vec::new())),
        // Only `_meta`: a result without content, as rmcp reads it.
        ServerResult::CustomResult(custom)
            if custom
                .0
                .as_object()
                .is_some_and(|o| o.keys().all(|k| k == "_meta")) =>
        {
            Ok(CallToolResult::success(Vec::new()))
        }
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Tells the server a call is abandoned (the run was cancelled, or timed
/// out) when the call's future is dropped before its answer.
struct CancelOnDrop {
    peer: Option<rmcp::Peer<RoleClient>>,
    id: RequestId,
    /// The MCP runtime, where the call runs.
    runtime: tokio::runtime::Handle,
}

impl CancelOnDrop {
    fn new(peer: rmcp::Peer<RoleClient>, id: RequestId) -> Self {
        CancelOnDrop {
            peer: Some(peer),
            id,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let notification = CancelledNotification::new(CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the call was abandoned".to_string()),
        ));
        self.runtime.spawn(async move {
            let _ = peer.send_notification(notification.into()).await;
        });
    }
}

/// Least time a server gets to start and complete its handshake, whatever
/// its calls' `timeout_ms` (as Codex bounds start-up apart from calls): a
/// process start on a loaded machine can take longer than a call should.
const STARTUP_FLOOR: Duration = Duration::from_secs(10);

async fn bounded(
    timeout: Duration,
    connect: impl std::future::Future<Output = Result<McpConnection, String>>,
) -> Result<McpConnection, String> {
    let timeout = timeout.max(STARTUP_FLOOR);
    tokio::time::timeout(timeout, connect)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the server did not complete the handshake within {} ms",
                timeout.as_millis()
            ))
        })
}

fn with_stderr(message: String, connector: &dyn McpConnector) -> String {
    let tail = connector.stderr_tail();
    if tail.is_empty() {
        message
    } else {
        format!("{message} (stderr: {tail})")
    }
}

/// A failure in words, for the model and for notices.
pub fn describe(failure: &CallFailure) -> String {
    match failure {
        CallFailure::Rpc(m) => format!("the server answered with an error: {m}"),
        CallFailure::Hung(m)
        | CallFailure::Broken(m)
        | CallFailure::Unavailable(m)
        | CallFailure::Withdrawn(m) => m.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::VecDeque;

    /// A server that has already sent its messages.
    struct Sent(VecDeque<RxJsonRpcMessage<RoleClient>>);

    impl Transport<RoleClient> for Sent {
        type Error = std::io::Error;

        fn send(
            &mut self,
            _item: TxJsonRpcMessage<RoleClient>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            std::future::ready(Ok(()))
        }

        async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
            self.0.pop_front()
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    fn message(value: serde_json::Value) -> RxJsonRpcMessage<RoleClient> {
        serde_json::from_value(value).expect("a server message")
    }

    #[tokio::test]
    async fn a_calls_last_report_is_with_its_sink_before_its_result_is_read() {
        let handler = McpClientHandler::default();
        let (sink, mut reports) = ProgressSink::channel();
        let token = ProgressToken(rmcp::model::NumberOrString::Number(7));
        let _watch = handler.watch(token, sink);
        let mut tap = handler.tap(Sent(VecDeque::from([
            message(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 7, "progress": 3, "total": 3}})),
            message(json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}})),
        ])));
        assert!(matches!(
            tap.receive().await,
            Some(JsonRpcMessage::Notification(_))
        ));
        // No task had a chance to run: the report was routed in `receive`.
        let report = reports.try_recv().expect("routed as it was read");
        assert_eq!((report.progress, report.total), (3.0, Some(3.0)));
        assert!(matches!(
            tap.receive().await,
            Some(JsonRpcMessage::Response(_))
        ));
        assert!(reports.try_recv().is_err(), "one report, once");
    }

    #[tokio::test]
    async fn a_list_changed_notice_is_counted_before_the_next_message_is_read() {
        let handler = McpClientHandler::default();
        let mut tap = handler.tap(Sent(VecDeque::from([
            message(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})),
            message(json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}})),
        ])));
        tap.receive().await.expect("the notice");
        assert_eq!(handler.tools_changed(), 1, "counted as it was read");
        tap.receive().await.expect("the answer");
        assert_eq!(handler.tools_changed(), 1);
    }

    #[tokio::test]
    async fn a_report_that_overtakes_its_callers_registration_is_kept_for_it() {
        let handler = McpClientHandler::default();
        let mut tap = handler.tap(Sent(VecDeque::from([message(json!({
            "jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "t", "progress": 1, "message": "first"}
        }))])));
        tap.receive().await.expect("the notification");
        let (sink, mut reports) = ProgressSink::channel();
        let _watch = handler.watch(
            ProgressToken(rmcp::model::NumberOrString::String("t".into())),
            sink,
        );
        let report = reports.try_recv().expect("handed over on registration");
        assert_eq!(report.message.as_deref(), Some("first"));
    }
}
