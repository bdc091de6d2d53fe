//! The middleware chain run before every tool execution (SPEC F1).
//!
//! The engine calls [`ToolRegistry::check`] between `prepare` and
//! execution. Each [`Middleware`] sees the call in order and says continue,
//! ask or deny; the first deny ends the chain, an ask is remembered while
//! the rest still run (so a later deny is not preceded by a pointless
//! question). The outcome carries a [`Clearance`] only when nothing
//! denied; a tool runs through [`ToolRegistry::execute_cleared`], which
//! takes that clearance, so a call cannot skip the chain by accident.
//!
//! Built-ins: [`RedactArguments`] (the copy of the arguments for events
//! and traces), [`PolicyMiddleware`] (allow/ask/deny from config and the
//! built-in rules) and [`RetryBudget`] (refuses a call whose identical
//! failures spent their budget). Library users add their own by
//! implementing [`Middleware`].

use crate::failure::{BudgetCheck, FailureTracker};
use crate::policy::{PermissionPolicy, PolicyDecision};
use crate::redact::Redactor;
use crate::tool::{PreparedCall, ToolContext, ToolOutput, ToolRegistry};
use async_trait::async_trait;
use attest_protocol::{Permission, Receipt};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// A call on its way through the chain. Middleware read the call and may
/// leave results for the engine (the redacted arguments, the policy
/// decision, notes for the trace); the arguments themselves are validated
/// and cannot be changed here.
#[derive(Debug, Clone)]
pub struct CallContext {
    call_id: String,
    call: PreparedCall,
    /// The arguments as events and traces should show them; set by
    /// [`RedactArguments`].
    pub log_arguments: Option<serde_json::Value>,
    /// Set by [`PolicyMiddleware`].
    pub policy: Option<PolicyDecision>,
    /// Set by [`RetryBudget`] when it refuses: the fingerprint of the
    /// failure whose budget is spent (for the doom-loop guard).
    pub failure_fingerprint: Option<String>,
    /// `(middleware, note)` pairs for the audit trace.
    pub notes: Vec<(String, String)>,
}

impl CallContext {
    pub fn new(call_id: impl Into<String>, call: &PreparedCall) -> Self {
        CallContext {
            call_id: call_id.into(),
            call: call.clone(),
            log_arguments: None,
            policy: None,
            failure_fingerprint: None,
            notes: Vec::new(),
        }
    }

    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    pub fn call(&self) -> &PreparedCall {
        &self.call
    }

    pub fn tool(&self) -> &str {
        &self.call.name
    }

    pub fn arguments(&self) -> &serde_json::Value {
        &self.call.arguments
    }

    /// What to put in events and traces: the redacted copy when
    /// [`RedactArguments`] ran, else the arguments as they are.
    pub fn arguments_for_log(&self) -> &serde_json::Value {
        self.log_arguments.as_ref().unwrap_or(&self.call.arguments)
    }

    pub fn note(&mut self, middleware: &str, note: impl Into<String>) {
        self.notes.push((middleware.to_string(), note.into()));
    }
}

/// What one middleware says about a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MiddlewareDecision {
    Continue,
    /// Needs a person's approval; `rule` names what asked, for the prompt.
    Ask {
        reason: String,
        rule: Option<String>,
    },
    /// Refused: the tool does not run and the model sees `reason`.
    Deny {
        reason: String,
    },
}

/// A step of the chain. Implementations must not panic and should be
/// quick: they run before every call, while the call's log entries are
/// still held (the engine flushes them before the tool runs, so a slow
/// `before` delays what observers see, never durability).
#[async_trait]
pub trait Middleware: Send + Sync {
    /// A short stable name, for events and traces.
    fn name(&self) -> &str;

    async fn before(&self, call: &mut CallContext) -> MiddlewareDecision;

    /// Called after the tool ran (only through
    /// [`ToolRegistry::execute_cleared`]); the default does nothing.
    async fn after(&self, _call: &CallContext, _output: &ToolOutput) {}
}

/// Permission to run one call, produced only by the chain (or by approving
/// a [`PendingApproval`]).
#[derive(Debug, Clone)]
pub struct Clearance {
    ctx: CallContext,
}

impl Clearance {
    pub fn context(&self) -> &CallContext {
        &self.ctx
    }
}

/// A call some middleware wants a person to approve.
#[derive(Debug, Clone)]
pub struct PendingApproval {
    pub reason: String,
    pub rule: Option<String>,
    /// The middleware that asked.
    pub middleware: String,
    ctx: CallContext,
}

impl PendingApproval {
    /// The approver said yes.
    pub fn approve(self) -> Clearance {
        Clearance { ctx: self.ctx }
    }

    /// The approver said no (or did not answer in time).
    pub fn reject(self, reason: impl Into<String>) -> Denial {
        Denial {
            reason: reason.into(),
            middleware: "approval".to_string(),
            ctx: self.ctx,
        }
    }

    pub fn context(&self) -> &CallContext {
        &self.ctx
    }
}

/// A refused call.
#[derive(Debug, Clone)]
pub struct Denial {
    pub reason: String,
    /// The middleware that refused (`approval` for a rejected ask).
    pub middleware: String,
    ctx: CallContext,
}

impl Denial {
    pub fn context(&self) -> &CallContext {
        &self.ctx
    }
}

/// The result of running the chain on a call.
#[derive(Debug, Clone)]
pub enum ChainOutcome {
    Allowed(Clearance),
    NeedsApproval(PendingApproval),
    Denied(Denial),
}

impl ChainOutcome {
    pub fn context(&self) -> &CallContext {
        match self {
            ChainOutcome::Allowed(c) => &c.ctx,
            ChainOutcome::NeedsApproval(p) => &p.ctx,
            ChainOutcome::Denied(d) => &d.ctx,
        }
    }

    /// The permission this outcome amounts to, for traces.
    pub fn permission(&self) -> Permission {
        match self {
            ChainOutcome::Allowed(_) => Permission::Allow,
            ChainOutcome::NeedsApproval(_) => Permission::Ask,
            ChainOutcome::Denied(_) => Permission::Deny,
        }
    }
}

impl ToolRegistry {
    /// Runs the middleware chain on a prepared call. With no middleware
    /// installed, the registry's own permission for the tool decides, so a
    /// registry without a chain behaves as before.
    pub async fn check(&self, call_id: &str, call: &PreparedCall) -> ChainOutcome {
        let mut ctx = CallContext::new(call_id, call);
        let chain = self.middleware();
        if chain.is_empty() {
            let reason = format!("tool `{}` is {} by default", call.name, call.permission);
            return match call.permission {
                Permission::Allow => ChainOutcome::Allowed(Clearance { ctx }),
                Permission::Ask => ChainOutcome::NeedsApproval(PendingApproval {
                    reason,
                    rule: None,
                    middleware: "registry".to_string(),
                    ctx,
                }),
                Permission::Deny => ChainOutcome::Denied(Denial {
                    reason,
                    middleware: "registry".to_string(),
                    ctx,
                }),
            };
        }
        let mut ask: Option<(String, Option<String>, String)> = None;
        for m in chain {
            match m.before(&mut ctx).await {
                MiddlewareDecision::Continue => {}
                MiddlewareDecision::Ask { reason, rule } => {
                    if ask.is_none() {
                        ask = Some((reason, rule, m.name().to_string()));
                    }
                }
                MiddlewareDecision::Deny { reason } => {
                    return ChainOutcome::Denied(Denial {
                        reason,
                        middleware: m.name().to_string(),
                        ctx,
                    })
                }
            }
        }
        match ask {
            Some((reason, rule, middleware)) => ChainOutcome::NeedsApproval(PendingApproval {
                reason,
                rule,
                middleware,
                ctx,
            }),
            None => ChainOutcome::Allowed(Clearance { ctx }),
        }
    }

    /// Runs a cleared call (see [`ToolRegistry::execute`]), then the
    /// middleware `after` hooks.
    pub async fn execute_cleared(
        &self,
        clearance: Clearance,
        ctx: &ToolContext,
    ) -> (ToolOutput, Receipt) {
        let call_ctx = clearance.ctx;
        let (output, receipt) = self.execute(call_ctx.call_id(), call_ctx.call(), ctx).await;
        for m in self.middleware() {
            m.after(&call_ctx, &output).await;
        }
        (output, receipt)
    }
}

/// The usual chain: redaction, then the permission policy, then the retry
/// budget.
pub fn standard_chain(
    redactor: Arc<Redactor>,
    policy: Arc<PermissionPolicy>,
    tracker: Arc<FailureTracker>,
) -> Vec<Arc<dyn Middleware>> {
    vec![
        Arc::new(RedactArguments::new(redactor)),
        Arc::new(PolicyMiddleware::new(policy)),
        Arc::new(RetryBudget::new(tracker)),
    ]
}

/// Puts a redacted copy of the arguments in [`CallContext::log_arguments`].
/// Never refuses; put it first so even refused calls log redacted.
#[derive(Debug)]
pub struct RedactArguments {
    redactor: Arc<Redactor>,
}

impl RedactArguments {
    pub fn new(redactor: Arc<Redactor>) -> Self {
        RedactArguments { redactor }
    }
}

#[async_trait]
impl Middleware for RedactArguments {
    fn name(&self) -> &str {
        "redact_arguments"
    }

    async fn before(&self, call: &mut CallContext) -> MiddlewareDecision {
        call.log_arguments = Some(self.redactor.redact_json(call.arguments()));
        MiddlewareDecision::Continue
    }
}

/// Applies a [`PermissionPolicy`]; the tool's registry permission is the
/// policy's tool default. Leaves the decision in [`CallContext::policy`].
#[derive(Debug)]
pub struct PolicyMiddleware {
    policy: Arc<PermissionPolicy>,
}

impl PolicyMiddleware {
    pub fn new(policy: Arc<PermissionPolicy>) -> Self {
        PolicyMiddleware { policy }
    }
}

#[async_trait]
impl Middleware for PolicyMiddleware {
    fn name(&self) -> &str {
        "permission_policy"
    }

    async fn before(&self, call: &mut CallContext) -> MiddlewareDecision {
        let decision = self
            .policy
            .decide(call.tool(), call.arguments(), call.call().permission);
        call.policy = Some(decision.clone());
        match decision.permission {
            Permission::Allow => MiddlewareDecision::Continue,
            Permission::Ask => MiddlewareDecision::Ask {
                reason: decision.reason,
                rule: decision.matched_rule,
            },
            Permission::Deny => MiddlewareDecision::Deny {
                reason: format!("denied by the permission policy: {}", decision.reason),
            },
        }
    }
}

type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Refuses a call whose identical failures have spent their retry budget,
/// until the failure's `next_retry_after`. The engine records outcomes in
/// the same [`FailureTracker`].
pub struct RetryBudget {
    tracker: Arc<FailureTracker>,
    clock: Clock,
}

impl std::fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryBudget")
            .field("tracker", &self.tracker)
            .finish()
    }
}

impl RetryBudget {
    pub fn new(tracker: Arc<FailureTracker>) -> Self {
        RetryBudget {
            tracker,
            clock: Arc::new(Utc::now),
        }
    }

    /// Uses `clock` instead of the system time (tests, replays).
    pub fn with_clock(mut self, clock: impl Fn() -> DateTime<Utc> + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }
}

#[async_trait]
impl Middleware for RetryBudget {
    fn name(&self) -> &str {
        "retry_budget"
    }

    async fn before(&self, call: &mut CallContext) -> MiddlewareDecision {
        let c = call.call();
        match self
            .tracker
            .check(&c.name, &c.provider, &c.arguments, (self.clock)())
        {
            BudgetCheck::Allowed => MiddlewareDecision::Continue,
            BudgetCheck::Exhausted {
                failure,
                retry_after,
            } => {
                let fp = failure
                    .failure_fingerprint
                    .get(..12)
                    .unwrap_or("")
                    .to_string();
                call.failure_fingerprint = Some(failure.failure_fingerprint.clone());
                MiddlewareDecision::Deny {
                    reason: format!(
                        "this exact call already failed {} times ({}, fingerprint {fp}) and its retry \
                         budget of {} is spent; it is refused until {}. Change the arguments or the \
                         approach, or tell the user what is blocked.",
                        failure.retry_count.saturating_add(1),
                        failure.error_type,
                        failure.retry_budget,
                        retry_after.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    ),
                }
            }
        }
    }
}
