//! Terminal-state judgement: contract + receipts → state and reason (SPEC A1–A4).
//! Pure functions; the engine calls [`judge`] when the model gives an answer.

use attest_protocol::{
    CompletionContract, ContractKind, EffectClass, Receipt, ReceiptStatus, TerminalReason,
    TerminalState, VerificationStatus,
};

/// One tool call as the judge sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub tool_name: String,
    pub effect: EffectClass,
    pub status: ReceiptStatus,
    pub verification: VerificationStatus,
}

impl From<&Receipt> for Attempt {
    fn from(r: &Receipt) -> Self {
        Attempt {
            tool_name: r.tool_name.clone(),
            effect: r.effect,
            status: r.status,
            verification: r.verification_status,
        }
    }
}

impl Attempt {
    fn succeeded_with(&self, verification: VerificationStatus) -> bool {
        self.status == ReceiptStatus::Ok && self.verification == verification
    }
}

/// The verdict on an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Every requirement has a satisfying receipt.
    Satisfied,
    /// Requirements unmet and nothing relevant was validly attempted: the
    /// model may get a corrective turn (SPEC A4).
    NoAttempt { missing: String },
    /// The run must end now with this state and reason.
    End {
        state: TerminalState,
        reason: TerminalReason,
        basis: String,
    },
}

/// A requirement of the contract: the effect class, or one named tool.
#[derive(Debug, Clone, Copy)]
enum Requirement<'a> {
    Effect(ContractKind),
    Tool(&'a str),
}

impl Requirement<'_> {
    fn matches(&self, contract: &CompletionContract, a: &Attempt) -> bool {
        match self {
            Requirement::Effect(_) => contract.effect_counts(a.effect),
            // The harness's own tools prove nothing, even when named.
            Requirement::Tool(name) => a.tool_name == *name && a.effect != EffectClass::Internal,
        }
    }

    /// A relevant attempt meets the requirement when it succeeded with its
    /// evidence; a mutating call that changed nothing (`no_effect`) still
    /// observed, so it counts for `observe` and for nothing else.
    fn satisfied_by(&self, a: &Attempt) -> bool {
        a.succeeded_with(VerificationStatus::Verified)
            || (matches!(self, Requirement::Effect(ContractKind::Observe))
                && a.succeeded_with(VerificationStatus::NoEffect))
    }

    fn describe(&self) -> String {
        match self {
            // Effect classes are not tool names: small models copy a
            // back-ticked `observe` as one, so the wording avoids that.
            Requirement::Effect(ContractKind::Deliver) => {
                "a successful result from a delivering tool (deliver class) carrying its evidence, e.g. a message id".into()
            }
            Requirement::Effect(ContractKind::Mutate) => {
                "a successful result from a tool that changes state (mutate class)".into()
            }
            Requirement::Effect(_) => {
                "a successful result from a tool that reads or checks state (observe class)".into()
            }
            Requirement::Tool(name) => format!("a successful receipt from tool `{name}`"),
        }
    }
}

/// Judge an answer against the contract, given every call attempted so far.
///
/// Order of verdicts for an unmet requirement, from its relevant attempts:
/// a success lacking declared evidence → `unverified` (re-asking could repeat
/// a delivery, so no corrective turn); any execution failure → `failed`,
/// `tool_failure`; only refusals → `failed`, `approval_denied`; nothing that
/// ran → [`Judgement::NoAttempt`].
pub fn judge(contract: &CompletionContract, attempts: &[Attempt]) -> Judgement {
    let mut requirements = Vec::new();
    if contract.kind != ContractKind::Answer {
        requirements.push(Requirement::Effect(contract.kind));
    }
    requirements.extend(contract.required_tools.iter().map(|t| Requirement::Tool(t)));

    let mut unattempted = Vec::new();
    for req in &requirements {
        let relevant: Vec<&Attempt> = attempts
            .iter()
            .filter(|a| req.matches(contract, a))
            .collect();
        if relevant.iter().any(|a| req.satisfied_by(a)) {
            continue;
        }
        let mut missing = req.describe();
        if relevant.iter().any(|a| {
            a.status == ReceiptStatus::Ok && a.verification == VerificationStatus::MissingEvidence
        }) {
            return Judgement::End {
                state: TerminalState::Unverified,
                reason: TerminalReason::MissingReceipt,
                basis: format!(
                    "the contract needs {missing}; the tool ran but its result lacks the declared evidence"
                ),
            };
        }
        if let Some(failed) = relevant.iter().find(|a| a.status.is_execution_failure()) {
            return Judgement::End {
                state: TerminalState::Failed,
                reason: TerminalReason::ToolFailure,
                basis: format!(
                    "the contract needs {missing}; every attempt failed (e.g. `{}` ended {})",
                    failed.tool_name,
                    failed.status.as_str()
                ),
            };
        }
        if let Some(denied) = relevant.iter().find(|a| a.status == ReceiptStatus::Denied) {
            return Judgement::End {
                state: TerminalState::Failed,
                reason: TerminalReason::ApprovalDenied,
                basis: format!(
                    "the contract needs {missing}; the call to `{}` was refused by permission policy or approval",
                    denied.tool_name
                ),
            };
        }
        if let Some(idle) = relevant
            .iter()
            .find(|a| a.succeeded_with(VerificationStatus::NoEffect))
        {
            // Worth a corrective turn: the model may not know it changed nothing.
            missing.push_str(&format!(
                " (`{}` ran but changed nothing: no_effect)",
                idle.tool_name
            ));
        }
        unattempted.push(missing);
    }
    if unattempted.is_empty() {
        Judgement::Satisfied
    } else {
        Judgement::NoAttempt {
            missing: unattempted.join(" and "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(name: &str, effect: EffectClass, status: ReceiptStatus) -> Attempt {
        Attempt {
            tool_name: name.into(),
            effect,
            status,
            verification: if status == ReceiptStatus::Ok {
                VerificationStatus::Verified
            } else {
                VerificationStatus::NotApplicable
            },
        }
    }

    fn contract(kind: ContractKind) -> CompletionContract {
        CompletionContract::new(kind)
    }

    #[test]
    fn answer_contract_needs_nothing() {
        assert_eq!(
            judge(&contract(ContractKind::Answer), &[]),
            Judgement::Satisfied
        );
    }

    #[test]
    fn observe_is_satisfied_by_an_observe_or_mutate_receipt_only() {
        let c = contract(ContractKind::Observe);
        assert!(matches!(judge(&c, &[]), Judgement::NoAttempt { .. }));
        let read = attempt("read_file", EffectClass::Observe, ReceiptStatus::Ok);
        assert_eq!(judge(&c, &[read]), Judgement::Satisfied);
        let shell = attempt("shell", EffectClass::Mutate, ReceiptStatus::Ok);
        assert_eq!(judge(&c, &[shell]), Judgement::Satisfied);
        let send = attempt("send", EffectClass::Deliver, ReceiptStatus::Ok);
        assert!(matches!(judge(&c, &[send]), Judgement::NoAttempt { .. }));
    }

    #[test]
    fn deliver_without_evidence_is_unverified_without_a_corrective_turn() {
        let mut a = attempt("send", EffectClass::Deliver, ReceiptStatus::Ok);
        a.verification = VerificationStatus::MissingEvidence;
        match judge(&contract(ContractKind::Deliver), &[a]) {
            Judgement::End { state, reason, .. } => {
                assert_eq!(state, TerminalState::Unverified);
                assert_eq!(reason, TerminalReason::MissingReceipt);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn failures_and_denials_end_the_run_with_their_reasons() {
        let c = contract(ContractKind::Observe);
        let failed = attempt("read_file", EffectClass::Observe, ReceiptStatus::Timeout);
        let denied = attempt("shell", EffectClass::Mutate, ReceiptStatus::Denied);
        match judge(&c, &[failed.clone(), denied.clone()]) {
            Judgement::End { state, reason, .. } => {
                assert_eq!(
                    (state, reason),
                    (TerminalState::Failed, TerminalReason::ToolFailure)
                )
            }
            other => panic!("unexpected {other:?}"),
        }
        match judge(&c, &[denied]) {
            Judgement::End { state, reason, .. } => {
                assert_eq!(
                    (state, reason),
                    (TerminalState::Failed, TerminalReason::ApprovalDenied)
                )
            }
            other => panic!("unexpected {other:?}"),
        }
        // A later success outweighs an earlier failure.
        let ok = attempt("read_file", EffectClass::Observe, ReceiptStatus::Ok);
        assert_eq!(judge(&c, &[failed, ok]), Judgement::Satisfied);
    }

    #[test]
    fn invalid_arguments_count_as_no_valid_attempt() {
        let bad = attempt(
            "read_file",
            EffectClass::Observe,
            ReceiptStatus::InvalidArguments,
        );
        assert!(matches!(
            judge(&contract(ContractKind::Observe), &[bad]),
            Judgement::NoAttempt { .. }
        ));
    }

    #[test]
    fn no_effect_satisfies_observe_but_no_mutate_contract() {
        let mut idle = attempt("shell", EffectClass::Mutate, ReceiptStatus::Ok);
        idle.verification = VerificationStatus::NoEffect;
        assert_eq!(
            judge(
                &contract(ContractKind::Observe),
                std::slice::from_ref(&idle)
            ),
            Judgement::Satisfied
        );
        match judge(&contract(ContractKind::Mutate), std::slice::from_ref(&idle)) {
            Judgement::NoAttempt { missing } => assert!(missing.contains("no_effect"), "{missing}"),
            other => panic!("unexpected {other:?}"),
        }
        let mut c = contract(ContractKind::Answer);
        c.required_tools = vec!["shell".into()];
        assert!(matches!(judge(&c, &[idle]), Judgement::NoAttempt { .. }));
    }

    #[test]
    fn internal_tools_satisfy_no_contract_even_when_required() {
        let search = attempt("tool_search", EffectClass::Internal, ReceiptStatus::Ok);
        for kind in [
            ContractKind::Observe,
            ContractKind::Mutate,
            ContractKind::Deliver,
        ] {
            assert!(
                matches!(
                    judge(&contract(kind), std::slice::from_ref(&search)),
                    Judgement::NoAttempt { .. }
                ),
                "{kind}"
            );
        }
        let mut c = contract(ContractKind::Answer);
        c.required_tools = vec!["tool_search".into()];
        assert!(matches!(judge(&c, &[search]), Judgement::NoAttempt { .. }));
    }

    #[test]
    fn required_tools_must_each_have_a_receipt() {
        let mut c = contract(ContractKind::Answer);
        c.required_tools = vec!["grep".into()];
        let read = attempt("read_file", EffectClass::Observe, ReceiptStatus::Ok);
        match judge(&c, std::slice::from_ref(&read)) {
            Judgement::NoAttempt { missing } => assert!(missing.contains("`grep`"), "{missing}"),
            other => panic!("unexpected {other:?}"),
        }
        let grep = attempt("grep", EffectClass::Observe, ReceiptStatus::Ok);
        assert_eq!(judge(&c, &[read, grep]), Judgement::Satisfied);
    }
}
