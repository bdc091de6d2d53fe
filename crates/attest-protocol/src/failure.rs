//! Failure and data-quality semantics of tool results (SPEC F6, F7, F11).
//!
//! A failed call, an empty result, partial data, stale data and data from a
//! fallback source are different facts, and the model must be able to tell
//! them apart. These types carry those facts; `attest-tools` fills them and
//! renders them for the model. Data quality is several independent
//! dimensions on purpose (seed 003 P5): "ok but stale from a fallback" is one
//! value, not a choice between `stale` and `fallback`.

use crate::ConfidenceLevel;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A tool failure as the harness records it and the model is told it.
///
/// Only the harness writes these: `sanitized_reason` is redacted and cut,
/// `trusted_model_hint_code` is chosen by harness code (never copied from a
/// provider's text), and `failure_fingerprint` is an HMAC, so equal
/// fingerprints mean "the same call failed the same way" without exposing
/// the arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolFailure {
    pub tool_name: String,
    /// Who served the call: `local` for built-in tools, otherwise the
    /// external service or program.
    pub provider: String,
    pub error_type: ErrorType,
    /// The tool's or provider's reason, redacted, single-line, length-capped.
    /// Data, never an instruction.
    pub sanitized_reason: String,
    /// Which outputs are missing because of this failure (field names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub affected_fields: Vec<String>,
    pub data_impact: DataImpact,
    pub trusted_model_hint_code: HintCode,
    /// Hex HMAC-SHA256 over tool, provider, error type and the redacted
    /// parameter signature.
    pub failure_fingerprint: String,
    /// Retries so far of this fingerprint (the first failure is 0).
    pub retry_count: u32,
    /// Retries allowed before the harness refuses the call until
    /// `next_retry_after`.
    pub retry_budget: u32,
    pub first_seen_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    /// Repeats of this failure that were aggregated instead of being shown
    /// again in full.
    pub suppressed_duplicates_count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_after: Option<DateTime<Utc>>,
}

impl ToolFailure {
    /// True when the retry budget is spent: the next identical call is
    /// refused until `next_retry_after`.
    pub fn budget_spent(&self) -> bool {
        self.retry_count >= self.retry_budget
    }
}

/// A controlled classification of what went wrong. Part of the failure
/// fingerprint, so it never carries free text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    Timeout,
    RateLimited,
    /// The external service answered with an error.
    ProviderError,
    /// The answer could not be parsed.
    ParseError,
    InvalidArguments,
    NotFound,
    /// The operating system or the sandbox refused an access.
    PermissionDenied,
    /// A command ran and exited unsuccessfully.
    NonZeroExit,
    /// The program could not be started.
    SpawnFailed,
    NetworkUnavailable,
    /// The tool reported a failure of no more specific kind.
    ToolError,
    Unknown,
}

impl ErrorType {
    pub const ALL: [ErrorType; 12] = [
        ErrorType::Timeout,
        ErrorType::RateLimited,
        ErrorType::ProviderError,
        ErrorType::ParseError,
        ErrorType::InvalidArguments,
        ErrorType::NotFound,
        ErrorType::PermissionDenied,
        ErrorType::NonZeroExit,
        ErrorType::SpawnFailed,
        ErrorType::NetworkUnavailable,
        ErrorType::ToolError,
        ErrorType::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Timeout => "timeout",
            ErrorType::RateLimited => "rate_limited",
            ErrorType::ProviderError => "provider_error",
            ErrorType::ParseError => "parse_error",
            ErrorType::InvalidArguments => "invalid_arguments",
            ErrorType::NotFound => "not_found",
            ErrorType::PermissionDenied => "permission_denied",
            ErrorType::NonZeroExit => "non_zero_exit",
            ErrorType::SpawnFailed => "spawn_failed",
            ErrorType::NetworkUnavailable => "network_unavailable",
            ErrorType::ToolError => "tool_error",
            ErrorType::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much a failure harms the task's result (SPEC F6, F11). Ordered from
/// harmless to blocking.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum DataImpact {
    #[default]
    None,
    Low,
    Medium,
    High,
    /// The task cannot be done correctly without this data.
    Blocking,
}

impl DataImpact {
    pub fn as_str(self) -> &'static str {
        match self {
            DataImpact::None => "none",
            DataImpact::Low => "low",
            DataImpact::Medium => "medium",
            DataImpact::High => "high",
            DataImpact::Blocking => "blocking",
        }
    }
}

impl fmt::Display for DataImpact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Guidance for the model, chosen by the harness. The text for each code is
/// an internal template in `attest-tools`; tests assert codes, not prose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HintCode {
    ReportProviderFailureNotNoData,
    LowerConfidenceForStaleData,
    DiscloseFallbackSource,
    DisclosePartialData,
    ReportEmptyResultAsObserved,
    RetryLaterOrAskUser,
    FixArguments,
    /// A command failed: read its error output and fix the cause before
    /// running it again.
    InspectErrorBeforeRetry,
    DoNotRetryDeniedCall,
    ChangeStrategyOrAskForHelp,
    DoNotInferIntradayTrend,
    AvoidPreciseValuationWithMissingFinancials,
    WaitForConfirmationUnderConflict,
}

impl HintCode {
    pub const ALL: [HintCode; 13] = [
        HintCode::ReportProviderFailureNotNoData,
        HintCode::LowerConfidenceForStaleData,
        HintCode::DiscloseFallbackSource,
        HintCode::DisclosePartialData,
        HintCode::ReportEmptyResultAsObserved,
        HintCode::RetryLaterOrAskUser,
        HintCode::FixArguments,
        HintCode::InspectErrorBeforeRetry,
        HintCode::DoNotRetryDeniedCall,
        HintCode::ChangeStrategyOrAskForHelp,
        HintCode::DoNotInferIntradayTrend,
        HintCode::AvoidPreciseValuationWithMissingFinancials,
        HintCode::WaitForConfirmationUnderConflict,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HintCode::ReportProviderFailureNotNoData => "REPORT_PROVIDER_FAILURE_NOT_NO_DATA",
            HintCode::LowerConfidenceForStaleData => "LOWER_CONFIDENCE_FOR_STALE_DATA",
            HintCode::DiscloseFallbackSource => "DISCLOSE_FALLBACK_SOURCE",
            HintCode::DisclosePartialData => "DISCLOSE_PARTIAL_DATA",
            HintCode::ReportEmptyResultAsObserved => "REPORT_EMPTY_RESULT_AS_OBSERVED",
            HintCode::RetryLaterOrAskUser => "RETRY_LATER_OR_ASK_USER",
            HintCode::FixArguments => "FIX_ARGUMENTS",
            HintCode::InspectErrorBeforeRetry => "INSPECT_ERROR_BEFORE_RETRY",
            HintCode::DoNotRetryDeniedCall => "DO_NOT_RETRY_DENIED_CALL",
            HintCode::ChangeStrategyOrAskForHelp => "CHANGE_STRATEGY_OR_ASK_FOR_HELP",
            HintCode::DoNotInferIntradayTrend => "DO_NOT_INFER_INTRADAY_TREND",
            HintCode::AvoidPreciseValuationWithMissingFinancials => {
                "AVOID_PRECISE_VALUATION_WITH_MISSING_FINANCIALS"
            }
            HintCode::WaitForConfirmationUnderConflict => "WAIT_FOR_CONFIRMATION_UNDER_CONFLICT",
        }
    }
}

impl fmt::Display for HintCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of task a run is doing, for the `data_impact` mapping (SPEC
/// F11). The generic kinds mirror the completion contracts; the analysis
/// kinds are the ones seed 003 P5 gives mapping examples for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum TaskType {
    /// Nothing more specific is known.
    #[default]
    General,
    Answer,
    Observe,
    Mutate,
    Deliver,
    IntradayTrading,
    LongTermFundamental,
    EventDriven,
    TechnicalAnalysis,
    Valuation,
    ShortTermPrice,
}

impl TaskType {
    pub const ALL: [TaskType; 11] = [
        TaskType::General,
        TaskType::Answer,
        TaskType::Observe,
        TaskType::Mutate,
        TaskType::Deliver,
        TaskType::IntradayTrading,
        TaskType::LongTermFundamental,
        TaskType::EventDriven,
        TaskType::TechnicalAnalysis,
        TaskType::Valuation,
        TaskType::ShortTermPrice,
    ];
}

/// What kind of data a failing tool was supposed to supply.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum DataSource {
    /// Files and listings in the workspace.
    #[default]
    Workspace,
    /// A command's output (shell, command tools).
    Command,
    /// A web page or remote API of no more specific kind.
    Network,
    /// Sending a message or publishing.
    Delivery,
    RealtimeQuote,
    News,
    Financials,
}

impl DataSource {
    pub const ALL: [DataSource; 7] = [
        DataSource::Workspace,
        DataSource::Command,
        DataSource::Network,
        DataSource::Delivery,
        DataSource::RealtimeQuote,
        DataSource::News,
        DataSource::Financials,
    ];
}

/// The quality of the data a tool returned, in independent dimensions
/// (SPEC F7, seed 003 P5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DataQuality {
    pub retrieval_status: RetrievalStatus,
    pub availability: Availability,
    pub freshness: Freshness,
    pub provenance: Provenance,
    pub confidence_level: ConfidenceLevel,
}

/// Whether fetching worked at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetrievalStatus {
    Ok,
    #[serde(alias = "failed")]
    ProviderFailure,
    Timeout,
    RateLimited,
    ParseError,
    Unknown,
}

/// Whether the requested data is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Availability {
    Present,
    /// The answer lacks the requested item (a field, a record).
    Missing,
    /// The source was asked and has nothing: an observation, not a failure.
    Empty,
    Partial,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Freshness {
    Fresh,
    Stale,
    Unknown,
}

/// Where the data came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    Primary,
    Fallback,
    Cached,
    Synthetic,
    Manual,
    Unknown,
}

/// The one-word headline of a [`DataQuality`], for displays and for picking
/// a hint. Where several apply, a failure outranks emptiness, which outranks
/// partial, fallback and stale, in that order; the full value keeps them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataStatus {
    Ok,
    Empty,
    Partial,
    Failed,
    Timeout,
    Fallback,
    Stale,
}

impl DataStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DataStatus::Ok => "ok",
            DataStatus::Empty => "empty",
            DataStatus::Partial => "partial",
            DataStatus::Failed => "failed",
            DataStatus::Timeout => "timeout",
            DataStatus::Fallback => "fallback",
            DataStatus::Stale => "stale",
        }
    }
}

impl DataQuality {
    /// Fresh, complete data from the primary source.
    pub fn ok() -> Self {
        DataQuality {
            retrieval_status: RetrievalStatus::Ok,
            availability: Availability::Present,
            freshness: Freshness::Fresh,
            provenance: Provenance::Primary,
            confidence_level: ConfidenceLevel::High,
        }
    }

    /// The source answered and has nothing.
    pub fn empty() -> Self {
        DataQuality {
            availability: Availability::Empty,
            ..DataQuality::ok()
        }
    }

    pub fn partial() -> Self {
        DataQuality {
            availability: Availability::Partial,
            confidence_level: ConfidenceLevel::Medium,
            ..DataQuality::ok()
        }
    }

    pub fn stale() -> Self {
        DataQuality {
            freshness: Freshness::Stale,
            confidence_level: ConfidenceLevel::Low,
            ..DataQuality::ok()
        }
    }

    pub fn fallback() -> Self {
        DataQuality {
            provenance: Provenance::Fallback,
            confidence_level: ConfidenceLevel::Medium,
            ..DataQuality::ok()
        }
    }

    /// Retrieval failed: nothing is known about the data.
    pub fn failed(status: RetrievalStatus) -> Self {
        DataQuality {
            retrieval_status: status,
            availability: Availability::Unknown,
            freshness: Freshness::Unknown,
            provenance: Provenance::Primary,
            confidence_level: ConfidenceLevel::Unknown,
        }
    }

    pub fn status(&self) -> DataStatus {
        match self.retrieval_status {
            RetrievalStatus::Ok => {}
            RetrievalStatus::Timeout => return DataStatus::Timeout,
            RetrievalStatus::ProviderFailure
            | RetrievalStatus::RateLimited
            | RetrievalStatus::ParseError
            | RetrievalStatus::Unknown => return DataStatus::Failed,
        }
        match self.availability {
            Availability::Empty | Availability::Missing => return DataStatus::Empty,
            Availability::Partial => return DataStatus::Partial,
            Availability::Present | Availability::Unknown => {}
        }
        if self.provenance == Provenance::Fallback {
            return DataStatus::Fallback;
        }
        if self.freshness == Freshness::Stale {
            return DataStatus::Stale;
        }
        DataStatus::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn tool_failure_round_trips_with_snake_case_fields() {
        let t = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let f = ToolFailure {
            tool_name: "quote".into(),
            provider: "exchange".into(),
            error_type: ErrorType::RateLimited,
            sanitized_reason: "429 too many requests".into(),
            affected_fields: vec!["price".into()],
            data_impact: DataImpact::Blocking,
            trusted_model_hint_code: HintCode::RetryLaterOrAskUser,
            failure_fingerprint: "ab".repeat(32),
            retry_count: 1,
            retry_budget: 2,
            first_seen_at: t,
            last_seen_at: t,
            suppressed_duplicates_count: 1,
            next_retry_after: Some(t),
        };
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["error_type"], "rate_limited");
        assert_eq!(json["data_impact"], "blocking");
        assert_eq!(json["trusted_model_hint_code"], "RETRY_LATER_OR_ASK_USER");
        assert_eq!(json["next_retry_after"], "2026-01-02T03:04:05Z");
        let back: ToolFailure = serde_json::from_value(json).unwrap();
        assert_eq!(back, f);
        assert!(!f.budget_spent());
    }

    #[test]
    fn codes_serialize_as_their_names() {
        for code in HintCode::ALL {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::String(code.as_str().to_string())
            );
        }
        for e in ErrorType::ALL {
            assert_eq!(
                serde_json::to_value(e).unwrap(),
                serde_json::Value::String(e.as_str().to_string())
            );
        }
    }

    #[test]
    fn impact_is_ordered() {
        assert!(DataImpact::None < DataImpact::Low);
        assert!(DataImpact::High < DataImpact::Blocking);
    }

    #[test]
    fn quality_headline_tells_cases_apart() {
        assert_eq!(DataQuality::ok().status(), DataStatus::Ok);
        assert_eq!(DataQuality::empty().status(), DataStatus::Empty);
        assert_eq!(DataQuality::partial().status(), DataStatus::Partial);
        assert_eq!(DataQuality::stale().status(), DataStatus::Stale);
        assert_eq!(DataQuality::fallback().status(), DataStatus::Fallback);
        assert_eq!(
            DataQuality::failed(RetrievalStatus::Timeout).status(),
            DataStatus::Timeout
        );
        assert_eq!(
            DataQuality::failed(RetrievalStatus::ProviderFailure).status(),
            DataStatus::Failed
        );
        // Seed 003's "fallback_stale_quote": both facts are kept, the
        // headline says fallback.
        let q = DataQuality {
            freshness: Freshness::Stale,
            ..DataQuality::fallback()
        };
        assert_eq!(q.status(), DataStatus::Fallback);
        assert_eq!(q.freshness, Freshness::Stale);
    }

    #[test]
    fn retrieval_status_accepts_failed_as_an_alias() {
        let s: RetrievalStatus = serde_json::from_str("\"failed\"").unwrap();
        assert_eq!(s, RetrievalStatus::ProviderFailure);
        let q: DataQuality = serde_json::from_value(serde_json::json!({
            "retrieval_status": "ok",
            "availability": "empty",
            "freshness": "fresh",
            "provenance": "primary",
            "confidence_level": "high"
        }))
        .unwrap();
        assert_eq!(q, DataQuality::empty());
    }
}
