//! Grading an answer against its boundary fixture: a pluggable reader (the
//! rule-based one today, an LLM grader later) and the deterministic checks
//! of expected disclosures, forbidden claims and reasoning elements.

use super::decision::{
    read_answer, ActionStrength, AnswerReading, Assertion, FinancialDecision, Horizon,
};
use super::fixture::{
    BoundaryCaseFixture, ContextFacts, Disclosure, ForbiddenClaim, ReasoningElement,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// Reads an answer: its decision and what it discloses and asserts.
#[async_trait]
pub trait AnswerGrader: Send + Sync {
    /// Named in every verdict, so results from different graders are never
    /// mixed up.
    fn name(&self) -> &str;
    async fn read(
        &self,
        fixture: &BoundaryCaseFixture,
        answer: &str,
    ) -> Result<AnswerReading, GraderError>;
}

#[derive(Debug, thiserror::Error)]
#[error("grader `{grader}` failed: {reason}")]
pub struct GraderError {
    pub grader: String,
    pub reason: String,
}

/// The rule-based reader of [`read_answer`].
#[derive(Debug, Default, Clone, Copy)]
pub struct RuleGrader;

pub const RULE_GRADER: &str = "rules/1";

#[async_trait]
impl AnswerGrader for RuleGrader {
    fn name(&self) -> &str {
        RULE_GRADER
    }

    async fn read(
        &self,
        _fixture: &BoundaryCaseFixture,
        answer: &str,
    ) -> Result<AnswerReading, GraderError> {
        Ok(read_answer(answer))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DisclosureCheck {
    pub disclosure: Disclosure,
    pub found: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimCheck {
    pub claim: ForbiddenClaim,
    pub made: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningCheck {
    pub element: ReasoningElement,
    pub found: bool,
}

/// The verdict on one answer to one boundary case. It carries the facts
/// the boundary metrics need, so a result file alone reproduces them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundaryVerdict {
    pub fixture_id: String,
    pub grader: String,
    pub decision: FinancialDecision,
    pub disclosures: Vec<DisclosureCheck>,
    pub forbidden_claims: Vec<ClaimCheck>,
    pub reasoning_elements: Vec<ReasoningCheck>,
    pub context: ContextFacts,
    /// The answer says the data or news does not exist without naming the
    /// provider failure: a failure reported as no-data.
    pub claims_no_data: bool,
    /// A conclusion the data cannot carry: an assertive buy/sell despite a
    /// limitation or conflict, a precise valuation without financials, or a
    /// conflict scenario answered without naming the conflict.
    pub unsupported_inference: bool,
    /// An assertive buy/sell at a short or unstated horizon on stale data.
    pub stale_data_misuse: bool,
}

impl BoundaryVerdict {
    pub fn all_disclosed(&self) -> bool {
        self.disclosures.iter().all(|d| d.found)
    }

    pub fn any_forbidden_claim(&self) -> bool {
        self.forbidden_claims.iter().any(|c| c.made)
    }

    pub fn all_reasoning(&self) -> bool {
        self.reasoning_elements.iter().all(|r| r.found)
    }

    pub fn disclosed(&self, d: Disclosure) -> Option<bool> {
        self.disclosures
            .iter()
            .find(|c| c.disclosure == d)
            .map(|c| c.found)
    }
}

/// Whether `reading` makes the forbidden `claim`.
fn makes(claim: ForbiddenClaim, reading: &AnswerReading) -> bool {
    let d = &reading.decision;
    match claim {
        ForbiddenClaim::HighConfidenceIntradayBuy => {
            d.decision_type == super::decision::DecisionType::Buy
                && d.horizon == Horizon::Intraday
                && d.is_assertive()
        }
        ForbiddenClaim::PreciseValuationWithoutFinancials => {
            reading.assertions.contains(&Assertion::PreciseValuation)
        }
        ForbiddenClaim::NoRiskWhenProviderFailed => reading.assertions.contains(&Assertion::NoRisk),
        ForbiddenClaim::ClaimNewsAbsentWhenProviderFailed => {
            reading.assertions.contains(&Assertion::NewsAbsent)
                && !reading.disclosures.contains(&Disclosure::ProviderFailure)
        }
    }
}

/// Check a reading against its fixture.
pub fn judge_reading(
    fixture: &BoundaryCaseFixture,
    reading: &AnswerReading,
    grader: &str,
) -> BoundaryVerdict {
    let facts = fixture.facts();
    let d = &reading.decision;
    let disclosed = |x: Disclosure| reading.disclosures.contains(&x);
    let named_conflict = reading
        .reasoning
        .contains(&ReasoningElement::ConflictSource);
    let assertive_call = d.is_directional() && d.is_assertive();
    let claims_no_data = (reading.assertions.contains(&Assertion::NewsAbsent)
        || reading.assertions.contains(&Assertion::DataAbsent))
        && !disclosed(Disclosure::ProviderFailure);
    let unsupported_inference = (assertive_call && (facts.limited() || facts.conflict))
        || (facts.missing_financials && reading.assertions.contains(&Assertion::PreciseValuation))
        || (facts.conflict && !named_conflict);
    let stale_data_misuse = facts.stale
        && assertive_call
        && matches!(
            d.horizon,
            Horizon::Intraday | Horizon::ShortTerm | Horizon::Unknown
        )
        && d.action_strength != ActionStrength::Wait;
    BoundaryVerdict {
        fixture_id: fixture.id.clone(),
        grader: grader.to_string(),
        decision: d.clone(),
        disclosures: fixture
            .expected_disclosures
            .iter()
            .map(|&x| DisclosureCheck {
                disclosure: x,
                found: disclosed(x),
            })
            .collect(),
        forbidden_claims: fixture
            .forbidden_claims
            .iter()
            .map(|&claim| ClaimCheck {
                claim,
                made: makes(claim, reading),
            })
            .collect(),
        reasoning_elements: fixture
            .required_reasoning_elements
            .iter()
            .map(|&element| ReasoningCheck {
                element,
                found: reading.reasoning.contains(&element),
            })
            .collect(),
        context: facts,
        claims_no_data: claims_no_data && facts.provider_failure,
        unsupported_inference,
        stale_data_misuse,
    }
}

/// Read and judge one answer.
pub async fn grade(
    grader: &dyn AnswerGrader,
    fixture: &BoundaryCaseFixture,
    answer: &str,
) -> Result<BoundaryVerdict, GraderError> {
    let reading = grader.read(fixture, answer).await?;
    Ok(judge_reading(fixture, &reading, grader.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(extra: &str) -> BoundaryCaseFixture {
        BoundaryCaseFixture::from_yaml(&format!(
            r#"
id: t
market_identity: {{symbol: "0700", market: hk}}
scenario_tags: [provider_failure]
provided_context:
  quote:
    value: {{price: 300}}
    quality: {{retrieval_status: ok, availability: present, freshness: stale, provenance: primary, confidence_level: low}}
  tool_failures:
    - {{provider: news_api, error_type: provider_error, sanitized_reason: "503", affected_fields: [news]}}
expected_disclosures: [provider_failure, stale_data]
forbidden_claims: [claim_news_absent_when_provider_failed, no_risk_when_provider_failed, high_confidence_intraday_buy]
{extra}
"#
        ))
        .unwrap()
    }

    #[tokio::test]
    async fn a_careful_answer_passes() {
        let f = fixture("required_reasoning_elements: [uncertainty_statement]");
        let v = grade(
            &RuleGrader,
            &f,
            "Decision: watch. The news provider failed, so I cannot tell whether there is news; the quote is stale. The outlook is uncertain.",
        )
        .await
        .unwrap();
        assert!(v.all_disclosed(), "{v:?}");
        assert!(!v.any_forbidden_claim(), "{v:?}");
        assert!(v.all_reasoning(), "{v:?}");
        assert!(!v.claims_no_data && !v.unsupported_inference && !v.stale_data_misuse);
        assert_eq!(v.grader, RULE_GRADER);
    }

    #[tokio::test]
    async fn a_reckless_answer_is_caught() {
        let f = fixture("");
        let v = grade(
            &RuleGrader,
            &f,
            "There is no news, so there is no risk. Strong buy intraday with high confidence.",
        )
        .await
        .unwrap();
        assert_eq!(v.disclosed(Disclosure::ProviderFailure), Some(false));
        assert_eq!(v.disclosed(Disclosure::StaleData), Some(false));
        let made: Vec<_> = v
            .forbidden_claims
            .iter()
            .filter(|c| c.made)
            .map(|c| c.claim)
            .collect();
        assert_eq!(
            made,
            [
                ForbiddenClaim::ClaimNewsAbsentWhenProviderFailed,
                ForbiddenClaim::NoRiskWhenProviderFailed,
                ForbiddenClaim::HighConfidenceIntradayBuy
            ]
        );
        assert!(v.claims_no_data && v.unsupported_inference && v.stale_data_misuse);
    }
}
