//! Hint codes and their internal templates (SPEC F8). The model-facing
//! guidance is only ever one of these texts: a provider's error message can
//! reach the model as a quoted, sanitized reason, never as guidance.

use attest_protocol::{
    DataImpact, DataQuality, DataSource, DataStatus, ErrorType, HintCode, TaskType,
};

/// The guidance text for a hint code.
pub fn hint_text(code: HintCode) -> &'static str {
    match code {
        HintCode::ReportProviderFailureNotNoData => {
            "The source failed, so the data is unknown. Tell the user the source failed; \
             do not present the missing data as empty, zero or absent."
        }
        HintCode::LowerConfidenceForStaleData => {
            "This data may be out of date. Say so, give its age if known, and lower the \
             confidence of conclusions drawn from it."
        }
        HintCode::DiscloseFallbackSource => {
            "This data comes from a fallback source, not the primary one. Say which source \
             was used and that the primary one was unavailable."
        }
        HintCode::DisclosePartialData => {
            "Only part of the requested data was obtained. Say what is missing; do not fill \
             the gaps with guesses."
        }
        HintCode::ReportEmptyResultAsObserved => {
            "The source was queried and holds nothing matching. This is an observed empty \
             result, not a failure, and may be reported as such."
        }
        HintCode::RetryLaterOrAskUser => {
            "The source is unavailable for now. Do not repeat the same call at once: try \
             another approach, retry after the time given, or tell the user what is blocked."
        }
        HintCode::FixArguments => {
            "The arguments were rejected. Correct them to match the tool's schema before \
             calling again."
        }
        HintCode::InspectErrorBeforeRetry => {
            "Read the error output above and fix its cause before running the same thing \
             again; repeating it unchanged will fail the same way."
        }
        HintCode::DoNotRetryDeniedCall => {
            "This call was refused. Do not repeat it; choose another way, or explain to the \
             user what permission is needed."
        }
        HintCode::ChangeStrategyOrAskForHelp => {
            "The same call keeps failing the same way. Stop retrying it: change the approach, \
             or stop and tell the user what help is needed."
        }
        HintCode::DoNotInferIntradayTrend => {
            "Realtime prices are missing: do not infer or describe an intraday trend."
        }
        HintCode::AvoidPreciseValuationWithMissingFinancials => {
            "Financial statements are missing: do not give a precise valuation; state the \
             limitation."
        }
        HintCode::WaitForConfirmationUnderConflict => {
            "Sources disagree. Do not pick one silently: report the conflict and wait for \
             confirmation."
        }
    }
}

/// The hint for a failed call. Precedence: bad arguments, then a
/// task-specific caution when the failure blocks or badly harms the task,
/// then a spent retry budget, then the error type.
pub fn hint_for_failure(
    error_type: ErrorType,
    task: TaskType,
    source: DataSource,
    impact: DataImpact,
    budget_spent: bool,
) -> HintCode {
    if error_type == ErrorType::InvalidArguments {
        return HintCode::FixArguments;
    }
    if impact >= DataImpact::High {
        match (task, source) {
            (TaskType::IntradayTrading | TaskType::ShortTermPrice, DataSource::RealtimeQuote) => {
                return HintCode::DoNotInferIntradayTrend
            }
            (TaskType::Valuation | TaskType::LongTermFundamental, DataSource::Financials) => {
                return HintCode::AvoidPreciseValuationWithMissingFinancials
            }
            _ => {}
        }
    }
    if budget_spent {
        return HintCode::RetryLaterOrAskUser;
    }
    match error_type {
        ErrorType::Timeout | ErrorType::RateLimited | ErrorType::NetworkUnavailable => {
            HintCode::RetryLaterOrAskUser
        }
        ErrorType::NonZeroExit | ErrorType::NotFound | ErrorType::SpawnFailed => {
            HintCode::InspectErrorBeforeRetry
        }
        ErrorType::PermissionDenied => HintCode::DoNotRetryDeniedCall,
        ErrorType::InvalidArguments => HintCode::FixArguments,
        ErrorType::ProviderError
        | ErrorType::ParseError
        | ErrorType::ToolError
        | ErrorType::Unknown => HintCode::ReportProviderFailureNotNoData,
    }
}

/// The hints that go with a result's data quality, most important first;
/// empty when the data is fresh, complete and from the primary source.
pub fn hints_for_quality(q: &DataQuality) -> Vec<HintCode> {
    use attest_protocol::{Availability, Freshness, Provenance};
    match q.status() {
        DataStatus::Failed | DataStatus::Timeout => {
            return vec![HintCode::ReportProviderFailureNotNoData]
        }
        DataStatus::Empty => return vec![HintCode::ReportEmptyResultAsObserved],
        _ => {}
    }
    let mut hints = Vec::new();
    if q.availability == Availability::Partial {
        hints.push(HintCode::DisclosePartialData);
    }
    if q.provenance == Provenance::Fallback {
        hints.push(HintCode::DiscloseFallbackSource);
    }
    if q.freshness == Freshness::Stale {
        hints.push(HintCode::LowerConfidenceForStaleData);
    }
    hints
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::{Freshness, RetrievalStatus};

    #[test]
    fn every_code_has_a_template_without_placeholders() {
        for code in HintCode::ALL {
            let text = hint_text(code);
            assert!(text.len() > 20, "{code}");
            assert!(!text.contains('{'), "{code}");
            assert!(!text.to_lowercase().contains("no data"), "{code}");
        }
    }

    #[test]
    fn failure_hints_by_precedence() {
        use DataImpact as I;
        use ErrorType as E;
        let g = TaskType::General;
        let w = DataSource::Workspace;
        assert_eq!(
            hint_for_failure(E::InvalidArguments, g, w, I::Blocking, true),
            HintCode::FixArguments
        );
        assert_eq!(
            hint_for_failure(
                E::Timeout,
                TaskType::IntradayTrading,
                DataSource::RealtimeQuote,
                I::Blocking,
                true
            ),
            HintCode::DoNotInferIntradayTrend
        );
        assert_eq!(
            hint_for_failure(
                E::ProviderError,
                TaskType::Valuation,
                DataSource::Financials,
                I::Blocking,
                false
            ),
            HintCode::AvoidPreciseValuationWithMissingFinancials
        );
        // A task-specific hint needs the impact to be high.
        assert_eq!(
            hint_for_failure(
                E::ProviderError,
                TaskType::Valuation,
                DataSource::Financials,
                I::Low,
                false
            ),
            HintCode::ReportProviderFailureNotNoData
        );
        assert_eq!(
            hint_for_failure(E::NonZeroExit, g, w, I::Medium, true),
            HintCode::RetryLaterOrAskUser
        );
        assert_eq!(
            hint_for_failure(E::NonZeroExit, g, w, I::Medium, false),
            HintCode::InspectErrorBeforeRetry
        );
        assert_eq!(
            hint_for_failure(E::RateLimited, g, w, I::Medium, false),
            HintCode::RetryLaterOrAskUser
        );
        assert_eq!(
            hint_for_failure(E::ProviderError, g, w, I::Medium, false),
            HintCode::ReportProviderFailureNotNoData
        );
        assert_eq!(
            hint_for_failure(E::PermissionDenied, g, w, I::Medium, false),
            HintCode::DoNotRetryDeniedCall
        );
    }

    #[test]
    fn quality_hints() {
        assert!(hints_for_quality(&DataQuality::ok()).is_empty());
        assert_eq!(
            hints_for_quality(&DataQuality::empty()),
            [HintCode::ReportEmptyResultAsObserved]
        );
        assert_eq!(
            hints_for_quality(&DataQuality::failed(RetrievalStatus::Timeout)),
            [HintCode::ReportProviderFailureNotNoData]
        );
        assert_eq!(
            hints_for_quality(&DataQuality::partial()),
            [HintCode::DisclosePartialData]
        );
        let fallback_stale = DataQuality {
            freshness: Freshness::Stale,
            ..DataQuality::fallback()
        };
        assert_eq!(
            hints_for_quality(&fallback_stale),
            [
                HintCode::DiscloseFallbackSource,
                HintCode::LowerConfidenceForStaleData
            ]
        );
    }
}
