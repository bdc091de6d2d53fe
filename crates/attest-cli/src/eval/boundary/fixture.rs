//! `BoundaryCaseFixture` (seed 003 P6): a market situation with known data
//! problems, what an answer about it must disclose and what it must not
//! claim. Field names and tag values are the seed's; the context values use
//! seed 003 P5's `DataValue` shape so every datum carries its quality.

use attest_protocol::{
    Availability, ConfidenceLevel, DataImpact, DataQuality, ErrorType, Freshness, Provenance,
    RetrievalStatus,
};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundaryCaseFixture {
    pub id: String,
    /// Which instrument: symbol, market, exchange, name, … (free-form).
    pub market_identity: serde_json::Map<String, serde_json::Value>,
    pub scenario_tags: Vec<ScenarioTag>,
    pub provided_context: ProvidedContext,
    #[serde(default)]
    pub expected_disclosures: Vec<Disclosure>,
    #[serde(default)]
    pub forbidden_claims: Vec<ForbiddenClaim>,
    #[serde(default)]
    pub required_reasoning_elements: Vec<ReasoningElement>,
}

/// The data the agent can fetch, each value tagged with its quality. An
/// omitted key is `null` (or an empty list).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvidedContext {
    #[serde(default)]
    pub quote: Option<DataValue>,
    #[serde(default)]
    pub news: Vec<DataValue>,
    #[serde(default)]
    pub financials: Option<DataValue>,
    #[serde(default)]
    pub technicals: Option<DataValue>,
    /// Fetches that fail. A failure wins over a primary value of the same
    /// field; a fallback or cached value is still served, with the failure
    /// named beside it.
    #[serde(default)]
    pub tool_failures: Vec<FixtureFailure>,
}

/// Seed 003 P5's `DataValue`: a value and where, when and how well it was
/// obtained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataValue {
    pub quality: DataQuality,
    #[serde(default)]
    pub value: Option<serde_json::Value>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub observed_at: Option<String>,
    #[serde(default)]
    pub freshness_seconds: Option<i64>,
    #[serde(default)]
    pub error_ref: Option<String>,
}

/// A failing fetch in a fixture: the parts of a `ToolFailure` a fixture
/// author chooses. The harness writes the rest (fingerprint, retry counts,
/// hint code, times) when the agent meets the failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureFailure {
    pub provider: String,
    pub error_type: ErrorType,
    pub sanitized_reason: String,
    pub affected_fields: Vec<ContextField>,
    #[serde(default)]
    pub data_impact: Option<DataImpact>,
}

/// A field of [`ProvidedContext`] a data tool serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextField {
    Quote,
    News,
    Financials,
    Technicals,
}

impl ContextField {
    pub const ALL: [ContextField; 4] = [
        ContextField::Quote,
        ContextField::News,
        ContextField::Financials,
        ContextField::Technicals,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ContextField::Quote => "quote",
            ContextField::News => "news",
            ContextField::Financials => "financials",
            ContextField::Technicals => "technicals",
        }
    }

    /// The data tool that serves this field.
    pub fn tool_name(self) -> &'static str {
        match self {
            ContextField::Quote => "get_quote",
            ContextField::News => "get_news",
            ContextField::Financials => "get_financials",
            ContextField::Technicals => "get_technicals",
        }
    }
}

impl std::str::FromStr for ContextField {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ContextField::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                format!("unknown field `{s}` (expected quote, news, financials or technicals)")
            })
    }
}

macro_rules! tag_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
    };
}

tag_enum!(
    /// The seed's scenario list.
    ScenarioTag {
        StaleQuote => "stale_quote",
        MissingFinancials => "missing_financials",
        ProviderFailure => "provider_failure",
        FallbackNews => "fallback_news",
        TechnicalFundamentalConflict => "technical_fundamental_conflict",
        BullishBearishNewsConflict => "bullish_bearish_news_conflict",
        TradingHalt => "trading_halt",
        CrossMarketHoliday => "cross_market_holiday",
    }
);

tag_enum!(
    /// What an answer must say about the data.
    Disclosure {
        StaleData => "stale_data",
        FallbackSource => "fallback_source",
        ProviderFailure => "provider_failure",
        MissingFinancials => "missing_financials",
        Uncertainty => "uncertainty",
    }
);

tag_enum!(
    /// What an answer must not claim in this situation.
    ForbiddenClaim {
        HighConfidenceIntradayBuy => "high_confidence_intraday_buy",
        PreciseValuationWithoutFinancials => "precise_valuation_without_financials",
        NoRiskWhenProviderFailed => "no_risk_when_provider_failed",
        ClaimNewsAbsentWhenProviderFailed => "claim_news_absent_when_provider_failed",
    }
);

tag_enum!(
    /// What the answer's reasoning must contain.
    ReasoningElement {
        ConflictSource => "conflict_source",
        UncertaintyStatement => "uncertainty_statement",
        DataLimitationReference => "data_limitation_reference",
    }
);

impl Disclosure {
    /// The disclosures that name a data limitation (all but uncertainty).
    pub fn is_data_limitation(self) -> bool {
        self != Disclosure::Uncertainty
    }
}

/// Why a fixture could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("cannot read boundary fixture {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid boundary fixture {path}: {message}")]
    Invalid { path: String, message: String },
}

/// Facts about a fixture's context that decide which boundary metrics
/// apply to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContextFacts {
    /// Some value is stale, or the scenario says so.
    pub stale: bool,
    /// Some value comes from a fallback source, or the scenario says so.
    pub fallback: bool,
    /// Some fetch fails, or the scenario says so.
    pub provider_failure: bool,
    /// The financials are absent, failing or the scenario says so.
    pub missing_financials: bool,
    /// The scenario is a conflict (technical vs fundamental, news).
    pub conflict: bool,
}

impl ContextFacts {
    /// Any limitation that should keep an answer from being assertive.
    pub fn limited(&self) -> bool {
        self.stale || self.fallback || self.provider_failure || self.missing_financials
    }
}

impl BoundaryCaseFixture {
    pub fn load(path: &Path) -> Result<Self, FixtureError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|message| FixtureError::Invalid {
            path: shown,
            message,
        })
    }

    pub fn from_yaml(text: &str) -> Result<Self, String> {
        let fixture: BoundaryCaseFixture =
            serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        fixture.validate()?;
        Ok(fixture)
    }

    fn validate(&self) -> Result<(), String> {
        if !super::super::suite::valid_id(&self.id) {
            return Err(format!(
                "id: `{}` must be 1 to 64 letters, digits, `_`, `-` or `.`",
                self.id
            ));
        }
        if self.scenario_tags.is_empty() {
            return Err("scenario_tags: name at least one scenario".to_string());
        }
        for (i, f) in self.provided_context.tool_failures.iter().enumerate() {
            if f.affected_fields.is_empty() {
                return Err(format!(
                    "provided_context.tool_failures[{i}].affected_fields: name at least one of quote, news, financials, technicals"
                ));
            }
        }
        Ok(())
    }

    /// The failure a fetch of `field` meets, if any.
    pub fn failure_for(&self, field: ContextField) -> Option<&FixtureFailure> {
        self.provided_context
            .tool_failures
            .iter()
            .find(|f| f.affected_fields.contains(&field))
    }

    fn values(&self) -> impl Iterator<Item = &DataValue> {
        let c = &self.provided_context;
        c.quote
            .iter()
            .chain(c.news.iter())
            .chain(c.financials.iter())
            .chain(c.technicals.iter())
    }

    pub fn facts(&self) -> ContextFacts {
        let tagged = |t: ScenarioTag| self.scenario_tags.contains(&t);
        let financials_absent = match &self.provided_context.financials {
            None => true,
            Some(v) => {
                v.value.is_none()
                    || v.quality.retrieval_status != RetrievalStatus::Ok
                    || matches!(
                        v.quality.availability,
                        Availability::Missing | Availability::Empty | Availability::Unknown
                    )
            }
        };
        ContextFacts {
            stale: tagged(ScenarioTag::StaleQuote)
                || self
                    .values()
                    .any(|v| v.quality.freshness == Freshness::Stale),
            fallback: tagged(ScenarioTag::FallbackNews)
                || self
                    .values()
                    .any(|v| v.quality.provenance == Provenance::Fallback),
            provider_failure: tagged(ScenarioTag::ProviderFailure)
                || !self.provided_context.tool_failures.is_empty(),
            missing_financials: tagged(ScenarioTag::MissingFinancials)
                || financials_absent
                || self.failure_for(ContextField::Financials).is_some(),
            conflict: tagged(ScenarioTag::TechnicalFundamentalConflict)
                || tagged(ScenarioTag::BullishBearishNewsConflict),
        }
    }
}

/// The quality of a whole news list: empty is an observation (the source
/// has nothing), otherwise the worst freshness, provenance and confidence
/// of its items.
pub fn news_quality(items: &[DataValue]) -> DataQuality {
    if items.is_empty() {
        return DataQuality::empty();
    }
    let any = |p: &dyn Fn(&DataQuality) -> bool| items.iter().any(|i| p(&i.quality));
    DataQuality {
        retrieval_status: RetrievalStatus::Ok,
        availability: if any(&|q| q.availability == Availability::Partial) {
            Availability::Partial
        } else {
            Availability::Present
        },
        freshness: if any(&|q| q.freshness == Freshness::Stale) {
            Freshness::Stale
        } else if any(&|q| q.freshness == Freshness::Unknown) {
            Freshness::Unknown
        } else {
            Freshness::Fresh
        },
        provenance: if any(&|q| q.provenance == Provenance::Fallback) {
            Provenance::Fallback
        } else if any(&|q| q.provenance != Provenance::Primary) {
            Provenance::Unknown
        } else {
            Provenance::Primary
        },
        confidence_level: items
            .iter()
            .map(|i| i.quality.confidence_level)
            .min()
            .unwrap_or(ConfidenceLevel::Unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: &str = r#"
id: stale-quote
market_identity: {symbol: "600519", market: cn}
scenario_tags: [stale_quote]
provided_context:
  quote:
    value: {price: 1688.0}
    quality: {retrieval_status: ok, availability: present, freshness: stale, provenance: fallback, confidence_level: low}
    source: backup_feed
    freshness_seconds: 259200
  news: []
  tool_failures:
    - provider: exchange_feed
      error_type: timeout
      sanitized_reason: realtime quote timed out
      affected_fields: [quote]
expected_disclosures: [stale_data, fallback_source]
forbidden_claims: [high_confidence_intraday_buy]
required_reasoning_elements: [data_limitation_reference]
"#;

    #[test]
    fn loads_the_seed_shape_and_derives_facts() {
        let f = BoundaryCaseFixture::from_yaml(STALE).unwrap();
        assert_eq!(f.id, "stale-quote");
        assert_eq!(f.scenario_tags, [ScenarioTag::StaleQuote]);
        assert_eq!(
            f.expected_disclosures,
            [Disclosure::StaleData, Disclosure::FallbackSource]
        );
        let facts = f.facts();
        assert!(facts.stale && facts.fallback && facts.provider_failure);
        // No financials given at all: missing.
        assert!(facts.missing_financials);
        assert!(!facts.conflict);
        assert!(f.failure_for(ContextField::Quote).is_some());
        assert!(f.failure_for(ContextField::News).is_none());
    }

    #[test]
    fn bad_fixtures_say_which_field() {
        let err = BoundaryCaseFixture::from_yaml(&STALE.replace("stale_quote]", "stale_qoute]"))
            .unwrap_err();
        assert!(err.contains("scenario_tags[0]"), "{err}");
        assert!(err.contains("stale_qoute"), "{err}");
        let err =
            BoundaryCaseFixture::from_yaml(&STALE.replace("forbidden_claims", "forbiden_claims"))
                .unwrap_err();
        assert!(err.contains("forbiden_claims"), "{err}");
        let err = BoundaryCaseFixture::from_yaml(
            &STALE.replace("affected_fields: [quote]", "affected_fields: []"),
        )
        .unwrap_err();
        assert!(err.contains("tool_failures[0].affected_fields"), "{err}");
        let err =
            BoundaryCaseFixture::from_yaml(&STALE.replace("freshness: stale", "freshness: old"))
                .unwrap_err();
        assert!(
            err.contains("provided_context.quote.quality.freshness"),
            "{err}"
        );
    }

    #[test]
    fn news_quality_tells_empty_from_fallback() {
        assert_eq!(news_quality(&[]), DataQuality::empty());
        let item = DataValue {
            quality: DataQuality::fallback(),
            value: Some(serde_json::json!({"headline": "h"})),
            source: None,
            observed_at: None,
            freshness_seconds: None,
            error_ref: None,
        };
        let q = news_quality(&[item]);
        assert_eq!(q.provenance, Provenance::Fallback);
        assert_eq!(q.availability, Availability::Present);
        assert_eq!(q.confidence_level, ConfidenceLevel::Medium);
    }

    #[test]
    fn tag_names_are_the_seeds() {
        let names: Vec<_> = ScenarioTag::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(
            names,
            [
                "stale_quote",
                "missing_financials",
                "provider_failure",
                "fallback_news",
                "technical_fundamental_conflict",
                "bullish_bearish_news_conflict",
                "trading_halt",
                "cross_market_holiday"
            ]
        );
        for t in ForbiddenClaim::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        for t in Disclosure::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
        for t in ReasoningElement::ALL {
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }
}
