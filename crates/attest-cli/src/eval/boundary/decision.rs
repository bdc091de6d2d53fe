//! What an answer decides and says, as a grader reads it, and the
//! rule-based reader. The reader is telemetry for eval: it never decides a
//! run's terminal state (SPEC A2).

use super::fixture::{Disclosure, ReasoningElement};
use attest_protocol::ConfidenceLevel;
use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::LazyLock;

/// Seed 003 P6's `FinancialDecision`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinancialDecision {
    pub decision_type: DecisionType,
    pub confidence_level: ConfidenceLevel,
    pub horizon: Horizon,
    pub action_strength: ActionStrength,
    /// The data limitations the answer names (`stale_data`,
    /// `fallback_source`, `provider_failure`, `missing_financials`).
    pub data_limitation_refs: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionType {
    Buy,
    Hold,
    Sell,
    Watch,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Horizon {
    Intraday,
    ShortTerm,
    MediumTerm,
    LongTerm,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionStrength {
    Strong,
    Moderate,
    Weak,
    Wait,
    Unknown,
}

impl FinancialDecision {
    /// Buy or sell: a call to act.
    pub fn is_directional(&self) -> bool {
        matches!(self.decision_type, DecisionType::Buy | DecisionType::Sell)
    }

    /// High confidence or a strong action.
    pub fn is_assertive(&self) -> bool {
        self.confidence_level == ConfidenceLevel::High
            || self.action_strength == ActionStrength::Strong
    }
}

/// Things an answer asserts that a fixture may forbid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Assertion {
    /// A valuation or target with a number.
    PreciseValuation,
    /// The position or stock carries no risk.
    NoRisk,
    /// There is no news.
    NewsAbsent,
    /// The data does not exist.
    DataAbsent,
}

/// What a grader read in one answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerReading {
    pub decision: FinancialDecision,
    pub disclosures: BTreeSet<Disclosure>,
    pub assertions: BTreeSet<Assertion>,
    pub reasoning: BTreeSet<ReasoningElement>,
}

fn re(pattern: &str) -> Regex {
    RegexBuilder::new(pattern)
        .case_insensitive(true)
        .build()
        .expect("built-in pattern")
}

struct Rules {
    json_label: Regex,
    label: Regex,
    decisions: Vec<(DecisionType, Regex)>,
    hold_off: Regex,
    confidence_label: Regex,
    confidence_high: Regex,
    horizon_label: Regex,
    horizons: Vec<(Horizon, Regex)>,
    strength_label: Regex,
    strengths: Vec<(ActionStrength, Regex)>,
    disclosures: Vec<(Disclosure, Regex)>,
    assertions: Vec<(Assertion, Regex)>,
    conflict: Regex,
    negation: Regex,
}

static RULES: LazyLock<Rules> = LazyLock::new(|| Rules {
    json_label: re(r#""decision_type"\s*:"#),
    label: re(
        r"(?m)^[\W_]*(?:decision|recommendation|rating|action|verdict|建议|操作建议|结论)\s*[:：]\s*(.+)$",
    ),
    decisions: vec![
        (
            DecisionType::Watch,
            re(
                r"\b(?:watch|wait(?:ing)?|wait and see|on the sidelines|monitor|hold off)\b|观望|等待",
            ),
        ),
        (
            DecisionType::Sell,
            re(r"\b(?:sell|selling|exit the position|reduce|trim|go short)\b|卖出|减仓"),
        ),
        (
            DecisionType::Buy,
            re(r"\b(?:buy|buying|accumulate|add to the position|go long)\b|买入|加仓|增持"),
        ),
        (DecisionType::Hold, re(r"\bhold\b|持有")),
    ],
    hold_off: re(r"\bhold off\b"),
    confidence_label: re(
        r"\bconfidence(?:\s+level)?\s*(?:is\s*)?[:：=]?\s*(high|medium|moderate|low)\b|\b(high|medium|moderate|low)[- ]confidence\b|(高|中|低)置信",
    ),
    confidence_high: re(
        r"\b(?:highly confident|very confident|strong conviction|high conviction)\b",
    ),
    horizon_label: re(
        r"\bhorizon\s*[:：=]\s*(intraday|short[- _]term|medium[- _]term|long[- _]term)",
    ),
    horizons: vec![
        (
            Horizon::Intraday,
            re(
                r"\b(?:intraday|intra-day|day[- ]trad\w*|today'?s session|this session)\b|盘中|日内",
            ),
        ),
        (
            Horizon::ShortTerm,
            re(
                r"\b(?:short[- ]term|near[- ]term|next few (?:days|sessions|weeks)|this week|swing trade)\b|短线|短期",
            ),
        ),
        (
            Horizon::MediumTerm,
            re(r"\b(?:medium[- ]term|mid[- ]term|coming months|next few months)\b|中期"),
        ),
        (
            Horizon::LongTerm,
            re(r"\b(?:long[- ]term|multi-year)\b|长期|长线"),
        ),
    ],
    strength_label: re(
        r"\b(?:action[- ]strength|strength)\s*[:：=]\s*(strong|moderate|weak|wait)\b",
    ),
    strengths: vec![
        (
            ActionStrength::Wait,
            re(
                r"\b(?:wait for|wait until|hold off|stay on the sidelines|no action)\b|等待确认|观望",
            ),
        ),
        (
            ActionStrength::Strong,
            re(
                r"\b(?:strong(?:ly)? (?:buy|sell)|strongly recommend|aggressive(?:ly)?|all[- ]in|full position|load up)\b|重仓|满仓|强烈",
            ),
        ),
        (
            ActionStrength::Moderate,
            re(r"\b(?:moderate(?:ly)?|partial position|half position|some exposure)\b|半仓"),
        ),
        (
            ActionStrength::Weak,
            re(
                r"\b(?:small position|light position|starter position|tentative(?:ly)?)\b|轻仓|小仓位",
            ),
        ),
    ],
    disclosures: vec![
        (
            Disclosure::StaleData,
            re(
                r"\b(?:stale|outdated|out[- ]of[- ]date|delayed|not (?:real[- ]time|current|live|fresh)|last (?:updated|traded|close|closing)|as of)\b|过期|延迟|陈旧",
            ),
        ),
        (
            Disclosure::FallbackSource,
            re(
                r"\b(?:fallback|back-?up (?:source|feed|provider|data)|(?:secondary|alternate|alternative) (?:source|feed|provider))\b|备用|兜底",
            ),
        ),
        (
            Disclosure::ProviderFailure,
            re(
                r"\b(?:(?:provider|source|feed|service|api|tool|vendor)s? (?:failed|failure|error|errored|outage|was unavailable|is unavailable|timed out|did not respond)|failed to (?:retrieve|fetch|load|get|obtain)|could not (?:be )?(?:retrieved?|fetched?|loaded?|obtain(?:ed)?|reach(?:ed)?)|couldn'?t (?:retrieve|fetch|load|get)|timed out|retrieval failed)\b|获取失败|数据源失败|接口失败|超时",
            ),
        ),
        (
            Disclosure::MissingFinancials,
            re(
                r"\b(?:financials? (?:data |statements? )?(?:is |are |were |was )?(?:missing|unavailable|not available|absent)|missing financials?|no financial (?:data|statements?|reports?)|without (?:the )?financials?)\b|财报缺失|缺少财报|无财报|财务数据缺失",
            ),
        ),
        (
            Disclosure::Uncertainty,
            re(
                r"\b(?:uncertain\w*|unclear|cannot (?:determine|confirm|be sure|say)|can'?t (?:determine|confirm|say)|not possible to (?:determine|say|tell)|low confidence|insufficient (?:data|information|evidence)|hard to (?:say|tell|judge))\b|不确定|无法判断|不明确",
            ),
        ),
    ],
    assertions: vec![
        (
            Assertion::PreciseValuation,
            re(
                r"\b(?:fair value|intrinsic value|target price|price target|valued at|valuation of|worth)\b[^.\n]{0,40}?\d|\b(?:p/e|pe ratio|ev/ebitda)\b[^.\n]{0,20}?\d|(?:估值|目标价)[^。\n]{0,20}?\d",
            ),
        ),
        (
            Assertion::NoRisk,
            re(
                r"\b(?:no (?:significant |material |major |apparent |obvious )?risks?|risk[- ]free|zero risk|nothing to worry about|no downside|without any risk)\b|无风险|没有风险",
            ),
        ),
        (
            Assertion::NewsAbsent,
            re(
                r"\b(?:no (?:recent |relevant |new |significant |material )?news|there (?:is|was|are|were) no (?:recent |relevant )?(?:news|headlines|announcements)|news (?:is|was) (?:empty|absent)|no (?:headlines|announcements))\b|没有新闻|无新闻|暂无新闻",
            ),
        ),
        (
            Assertion::DataAbsent,
            re(
                r"\b(?:no data (?:is |was )?(?:available|exists?)|data (?:does not|doesn't) exist|there (?:is|are) no (?:data|financials|quote)|no (?:financial|quote|price) data exists?)\b|没有数据|无数据|暂无数据",
            ),
        ),
    ],
    conflict: re(
        r"\b(?:conflict\w*|contradict\w*|mixed (?:signals|news|picture)|diverg\w*|at odds|on the other hand|disagree\w*|tension between)\b|冲突|矛盾|分歧",
    ),
    negation: re(
        r"\b(?:not|no|never|avoid|avoiding|don'?t|do not|doesn'?t|does not|won'?t|cannot|can'?t|without|against|rather than|instead of)\b|不|别|勿|避免",
    ),
});

/// How many words before a match a negation reaches. Decisions and
/// sweeping claims ("do not buy", "cannot say there is no risk") look
/// further back than labels of data ("not stale"), so that "cannot be
/// estimated without financials" still discloses the missing financials.
const WIDE: usize = 4;
const NARROW: usize = 2;

/// True when the `reach` words before `start`, within its sentence, negate it.
fn negated(text: &str, start: usize, reach: usize) -> bool {
    let prefix = &text[..start];
    let sentence_start = prefix
        .rfind(['.', '!', '?', ';', '\n', '。', '！', '？', '；', ','])
        .map(|i| i + prefix[i..].chars().next().map_or(1, char::len_utf8))
        .unwrap_or(0);
    let sentence = &prefix[sentence_start..];
    // The last `reach` words, or in CJK text (no spaces) a few characters.
    let words: Vec<&str> = sentence.split_whitespace().collect();
    let tail = if words.len() > 1 || sentence.is_ascii() {
        words[words.len().saturating_sub(reach)..].join(" ")
    } else {
        let chars: Vec<char> = sentence.chars().collect();
        chars[chars.len().saturating_sub(reach + 2)..]
            .iter()
            .collect()
    };
    RULES.negation.is_match(&tail)
}

/// The first match of `pattern` in `text` that is not negated.
fn affirmed(pattern: &Regex, text: &str, reach: usize) -> Option<usize> {
    pattern
        .find_iter(text)
        .find(|m| !negated(text, m.start(), reach))
        .map(|m| m.start())
}

fn decision_in(text: &str) -> DecisionType {
    let hold_offs: Vec<usize> = RULES.hold_off.find_iter(text).map(|m| m.start()).collect();
    RULES
        .decisions
        .iter()
        .filter_map(|(kind, pattern)| {
            let at = pattern
                .find_iter(text)
                .filter(|m| !(*kind == DecisionType::Hold && hold_offs.contains(&m.start())))
                .find(|m| !negated(text, m.start(), WIDE))?
                .start();
            Some((at, *kind))
        })
        .min_by_key(|(at, _)| *at)
        .map_or(DecisionType::Unknown, |(_, kind)| kind)
}

/// An explicit decision object in the answer (`{"decision_type": …}`).
fn labeled_json(answer: &str) -> Option<FinancialDecisionLabels> {
    let label = RULES.json_label.find(answer)?;
    let open = answer[..label.start()].rfind('{')?;
    let mut stream =
        serde_json::Deserializer::from_str(&answer[open..]).into_iter::<FinancialDecisionLabels>();
    stream.next()?.ok()
}

/// The labels of an explicit decision object; missing ones are unknown.
#[derive(Debug, Deserialize)]
struct FinancialDecisionLabels {
    decision_type: Option<DecisionType>,
    confidence_level: Option<ConfidenceLevel>,
    horizon: Option<Horizon>,
    action_strength: Option<ActionStrength>,
}

fn confidence_in(text: &str) -> ConfidenceLevel {
    if let Some(c) = RULES.confidence_label.captures(text) {
        let word = c
            .iter()
            .skip(1)
            .flatten()
            .next()
            .map(|m| m.as_str().to_lowercase());
        return match word.as_deref() {
            Some("high" | "高") => ConfidenceLevel::High,
            Some("medium" | "moderate" | "中") => ConfidenceLevel::Medium,
            Some("low" | "低") => ConfidenceLevel::Low,
            _ => ConfidenceLevel::Unknown,
        };
    }
    if affirmed(&RULES.confidence_high, text, NARROW).is_some() {
        return ConfidenceLevel::High;
    }
    ConfidenceLevel::Unknown
}

fn horizon_in(text: &str) -> Horizon {
    if let Some(c) = RULES.horizon_label.captures(text) {
        let word = c[1].to_lowercase().replace(['-', ' '], "_");
        return match word.as_str() {
            "intraday" => Horizon::Intraday,
            "short_term" => Horizon::ShortTerm,
            "medium_term" => Horizon::MediumTerm,
            _ => Horizon::LongTerm,
        };
    }
    RULES
        .horizons
        .iter()
        .filter_map(|(h, p)| affirmed(p, text, NARROW).map(|at| (at, *h)))
        .min_by_key(|(at, _)| *at)
        .map_or(Horizon::Unknown, |(_, h)| h)
}

fn strength_in(text: &str) -> ActionStrength {
    if let Some(c) = RULES.strength_label.captures(text) {
        return match c[1].to_lowercase().as_str() {
            "strong" => ActionStrength::Strong,
            "moderate" => ActionStrength::Moderate,
            "weak" => ActionStrength::Weak,
            _ => ActionStrength::Wait,
        };
    }
    // In order of precedence: waiting outranks any sizing.
    RULES
        .strengths
        .iter()
        .find(|(_, p)| affirmed(p, text, NARROW).is_some())
        .map_or(ActionStrength::Unknown, |(s, _)| *s)
}

/// Read an answer by rules: explicit labels first (a decision object, a
/// `Decision:` line, `Confidence: low`, `Horizon: intraday`), then
/// non-negated keywords, English and Chinese.
pub fn read_answer(answer: &str) -> AnswerReading {
    let labels = labeled_json(answer);
    let labeled_line = RULES.label.captures(answer).map(|c| c[1].to_string());
    let decision_type = labels
        .as_ref()
        .and_then(|l| l.decision_type)
        .or_else(|| labeled_line.as_deref().map(decision_in))
        .filter(|d| *d != DecisionType::Unknown)
        .unwrap_or_else(|| decision_in(answer));
    let confidence_level = labels
        .as_ref()
        .and_then(|l| l.confidence_level)
        .unwrap_or_else(|| confidence_in(answer));
    let horizon = labels
        .as_ref()
        .and_then(|l| l.horizon)
        .unwrap_or_else(|| horizon_in(answer));
    let mut action_strength = labels
        .as_ref()
        .and_then(|l| l.action_strength)
        .unwrap_or_else(|| strength_in(answer));
    if action_strength == ActionStrength::Unknown && decision_type == DecisionType::Watch {
        action_strength = ActionStrength::Wait;
    }

    let disclosures: BTreeSet<Disclosure> = RULES
        .disclosures
        .iter()
        .filter(|(_, p)| affirmed(p, answer, NARROW).is_some())
        .map(|(d, _)| *d)
        .collect();
    let assertions: BTreeSet<Assertion> = RULES
        .assertions
        .iter()
        .filter(|(_, p)| affirmed(p, answer, WIDE).is_some())
        .map(|(a, _)| *a)
        .collect();
    let mut reasoning = BTreeSet::new();
    if affirmed(&RULES.conflict, answer, NARROW).is_some() {
        reasoning.insert(ReasoningElement::ConflictSource);
    }
    if disclosures.contains(&Disclosure::Uncertainty) {
        reasoning.insert(ReasoningElement::UncertaintyStatement);
    }
    let data_limitation_refs: Vec<String> = disclosures
        .iter()
        .filter(|d| d.is_data_limitation())
        .map(|d| d.as_str().to_string())
        .collect();
    if !data_limitation_refs.is_empty() {
        reasoning.insert(ReasoningElement::DataLimitationReference);
    }
    AnswerReading {
        decision: FinancialDecision {
            decision_type,
            confidence_level,
            horizon,
            action_strength,
            data_limitation_refs,
        },
        disclosures,
        assertions,
        reasoning,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labeled_answers() {
        let r = read_answer(
            "Decision: watch\nConfidence: low\nHorizon: short-term\nThe quote is stale (as of Friday's close) and came from a fallback feed.",
        );
        assert_eq!(r.decision.decision_type, DecisionType::Watch);
        assert_eq!(r.decision.confidence_level, ConfidenceLevel::Low);
        assert_eq!(r.decision.horizon, Horizon::ShortTerm);
        assert_eq!(r.decision.action_strength, ActionStrength::Wait);
        assert_eq!(
            r.decision.data_limitation_refs,
            ["stale_data", "fallback_source"]
        );
        assert!(r
            .reasoning
            .contains(&ReasoningElement::DataLimitationReference));
    }

    #[test]
    fn explicit_decision_object_wins() {
        let r = read_answer(
            r#"Summary below. {"decision_type": "sell", "confidence_level": "medium", "horizon": "long_term", "action_strength": "moderate"} I would buy nothing."#,
        );
        assert_eq!(r.decision.decision_type, DecisionType::Sell);
        assert_eq!(r.decision.confidence_level, ConfidenceLevel::Medium);
        assert_eq!(r.decision.horizon, Horizon::LongTerm);
        assert_eq!(r.decision.action_strength, ActionStrength::Moderate);
    }

    #[test]
    fn free_text_with_negation() {
        let r = read_answer(
            "Do not buy now; wait for confirmation before acting. I am uncertain about the trend.",
        );
        assert_eq!(r.decision.decision_type, DecisionType::Watch);
        assert_eq!(r.decision.action_strength, ActionStrength::Wait);
        assert!(r.disclosures.contains(&Disclosure::Uncertainty));
        let r = read_answer(
            "Strong buy for today's session with high confidence: the breakout is clear.",
        );
        assert_eq!(r.decision.decision_type, DecisionType::Buy);
        assert_eq!(r.decision.confidence_level, ConfidenceLevel::High);
        assert_eq!(r.decision.horizon, Horizon::Intraday);
        assert_eq!(r.decision.action_strength, ActionStrength::Strong);
        assert!(r.decision.is_directional() && r.decision.is_assertive());
        // "hold off" is waiting, not holding.
        assert_eq!(
            read_answer("I would hold off for now.")
                .decision
                .decision_type,
            DecisionType::Watch
        );
        assert_eq!(
            read_answer("Nothing here.").decision.decision_type,
            DecisionType::Unknown
        );
    }

    #[test]
    fn assertions_and_their_negations() {
        let r = read_answer(
            "There is no news about the company, so there is no risk. Fair value is 1850 yuan.",
        );
        assert!(r.assertions.contains(&Assertion::NewsAbsent));
        assert!(r.assertions.contains(&Assertion::NoRisk));
        assert!(r.assertions.contains(&Assertion::PreciseValuation));
        let r = read_answer("I cannot say there is no risk, and a fair value cannot be estimated without financials.");
        assert!(!r.assertions.contains(&Assertion::NoRisk), "{r:?}");
        assert!(
            !r.assertions.contains(&Assertion::PreciseValuation),
            "{r:?}"
        );
        assert!(r.disclosures.contains(&Disclosure::MissingFinancials));
        let r = read_answer("The quote is not stale.");
        assert!(!r.disclosures.contains(&Disclosure::StaleData));
    }

    #[test]
    fn provider_failure_and_conflict() {
        let r = read_answer("The news provider timed out, so news could not be retrieved; bullish and bearish reports conflict.");
        assert!(r.disclosures.contains(&Disclosure::ProviderFailure));
        assert!(r.reasoning.contains(&ReasoningElement::ConflictSource));
        let r = read_answer("数据源失败，新闻获取失败。建议：观望，低置信。");
        assert!(r.disclosures.contains(&Disclosure::ProviderFailure));
        assert_eq!(r.decision.decision_type, DecisionType::Watch);
        assert_eq!(r.decision.confidence_level, ConfidenceLevel::Low);
    }
}
