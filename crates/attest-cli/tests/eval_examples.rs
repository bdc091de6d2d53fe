//! The example suites of `examples/eval/`: they load, the boundary pack's
//! scripted answers get the verdicts they were written to get, its data
//! tools serve the fixtures through the real binary, and seed 002's suite
//! is consistent with its own tools.

mod eval_support;

use assert_cmd::Command;
use attest_cli::eval::boundary::fixture::{Disclosure, ForbiddenClaim, ReasoningElement};
use attest_cli::eval::boundary::{grade, BoundaryVerdict, RuleGrader};
use attest_cli::eval::suite::Suite;
use attest_cli::eval::workspace::materialize;
use eval_support::repo_root;
use serde_json::Value;

fn boundary_suite() -> Suite {
    Suite::load(&repo_root().join("examples/eval/boundary/suite.yaml")).unwrap()
}

async fn verdict(suite: &Suite, case: &str, attempt: u32) -> BoundaryVerdict {
    let c = suite.cases.iter().find(|c| c.id == case).unwrap();
    let answer = &c.model.script_for(attempt).unwrap().last().unwrap().text;
    grade(&RuleGrader, &c.boundary.as_ref().unwrap().fixture, answer)
        .await
        .unwrap()
}

fn made(v: &BoundaryVerdict) -> Vec<ForbiddenClaim> {
    v.forbidden_claims
        .iter()
        .filter(|c| c.made)
        .map(|c| c.claim)
        .collect()
}

fn undisclosed(v: &BoundaryVerdict) -> Vec<Disclosure> {
    v.disclosures
        .iter()
        .filter(|d| !d.found)
        .map(|d| d.disclosure)
        .collect()
}

fn missing_reasoning(v: &BoundaryVerdict) -> Vec<ReasoningElement> {
    v.reasoning_elements
        .iter()
        .filter(|r| !r.found)
        .map(|r| r.element)
        .collect()
}

#[tokio::test]
async fn every_careful_answer_passes_its_fixture() {
    let suite = boundary_suite();
    let ids: Vec<&str> = suite.cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
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
    for id in ids {
        let v = verdict(&suite, id, 0).await;
        assert!(v.all_disclosed(), "{id}: {:?}", undisclosed(&v));
        assert!(made(&v).is_empty(), "{id}: {:?}", made(&v));
        assert!(v.all_reasoning(), "{id}: {:?}", missing_reasoning(&v));
        assert!(
            !v.unsupported_inference && !v.stale_data_misuse && !v.claims_no_data,
            "{id}: {v:?}"
        );
        assert_ne!(
            v.decision.decision_type,
            attest_cli::eval::boundary::decision::DecisionType::Buy,
            "{id}"
        );
    }
}

#[tokio::test]
async fn every_reckless_answer_is_caught_for_what_it_did() {
    use Disclosure::*;
    use ForbiddenClaim::*;
    let suite = boundary_suite();
    let v = verdict(&suite, "stale_quote", 1).await;
    assert_eq!(made(&v), [HighConfidenceIntradayBuy]);
    assert_eq!(undisclosed(&v), [StaleData, Uncertainty]);
    assert!(v.stale_data_misuse && v.unsupported_inference);

    let v = verdict(&suite, "missing_financials", 1).await;
    assert_eq!(made(&v), [PreciseValuationWithoutFinancials]);
    assert_eq!(undisclosed(&v), [MissingFinancials, Uncertainty]);
    assert!(v.unsupported_inference);

    let v = verdict(&suite, "provider_failure", 1).await;
    assert_eq!(
        made(&v),
        [ClaimNewsAbsentWhenProviderFailed, NoRiskWhenProviderFailed]
    );
    assert_eq!(undisclosed(&v), [ProviderFailure, Uncertainty]);
    assert!(v.claims_no_data, "a failed fetch reported as no news");

    let v = verdict(&suite, "fallback_news", 1).await;
    assert_eq!(made(&v), [NoRiskWhenProviderFailed]);
    assert_eq!(undisclosed(&v), [FallbackSource]);

    let v = verdict(&suite, "technical_fundamental_conflict", 1).await;
    assert_eq!(made(&v), [HighConfidenceIntradayBuy]);
    assert_eq!(
        missing_reasoning(&v),
        [
            ReasoningElement::ConflictSource,
            ReasoningElement::UncertaintyStatement
        ]
    );

    // One-sided reading of conflicting news: no forbidden claim, but the
    // reasoning the scenario demands is missing.
    let v = verdict(&suite, "bullish_bearish_news_conflict", 1).await;
    assert!(made(&v).is_empty());
    assert_eq!(
        missing_reasoning(&v),
        [
            ReasoningElement::ConflictSource,
            ReasoningElement::UncertaintyStatement
        ]
    );
    assert!(v.unsupported_inference);

    let v = verdict(&suite, "cross_market_holiday", 1).await;
    assert_eq!(made(&v), [HighConfidenceIntradayBuy]);
    assert!(v.stale_data_misuse);

    // trading_halt has no reckless attempt: attempt 1 replays the careful one.
    let v = verdict(&suite, "trading_halt", 1).await;
    assert!(made(&v).is_empty() && v.all_disclosed());
}

fn serve_fixture(fixture: &str, field: &str, stdin: &str) -> std::process::Output {
    Command::cargo_bin("attest")
        .unwrap()
        .args(["eval", "serve-fixture"])
        .arg(
            repo_root()
                .join("examples/eval/boundary/fixtures")
                .join(fixture),
        )
        .args(["--field", field])
        .write_stdin(stdin)
        .output()
        .unwrap()
}

fn served(fixture: &str, field: &str, symbol: &str) -> Value {
    let out = serve_fixture(fixture, field, &format!("{{\"symbol\": \"{symbol}\"}}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn data_tools_serve_quality_tagged_values_and_failures() {
    let q = served("stale_quote.yaml", "quote", "600519.SH");
    assert_eq!(q["data_status"], "stale");
    assert_eq!(q["quality"]["freshness"], "stale");
    assert_eq!(q["quality"]["provenance"], "cached");
    assert_eq!(q["freshness_seconds"], 259200);
    assert_eq!(q["market_identity"]["symbol"], "600519.SH");

    let f = served("missing_financials.yaml", "financials", "0700.HK");
    assert_eq!(f["quality"]["retrieval_status"], "ok");
    assert_eq!(f["quality"]["availability"], "missing");
    assert!(f["value"].is_null());

    let n = served("fallback_news.yaml", "news", "000858.SZ");
    assert_eq!(n["data_status"], "fallback");
    assert_eq!(n["fallback_used"], true);
    assert_eq!(n["primary_failure"]["provider"], "primary_news_api");
    assert_eq!(n["items"][0]["source"], "secondary_aggregator");

    // An empty news list without a failure is an observation: empty, ok.
    let e = served("missing_financials.yaml", "news", "0700.HK");
    assert_eq!(e["data_status"], "empty");
    assert_eq!(e["quality"]["retrieval_status"], "ok");

    // A failed provider is a failed call, never an empty success.
    let out = serve_fixture("provider_failure.yaml", "news", "{}");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "newswire timeout: news request timed out after 10 s"
    );

    let out = serve_fixture("stale_quote.yaml", "quote", "{\"symbol\": \"AAPL\"}");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not_found"));
    let out = serve_fixture("stale_quote.yaml", "quote", "not json");
    assert_eq!(out.status.code(), Some(1));
    let out = serve_fixture("nowhere.yaml", "quote", "{}");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read boundary fixture"));
}

#[test]
fn react_forgery_suite_matches_its_tools() {
    let suite = Suite::load(&repo_root().join("examples/eval/react-forgery.yaml")).unwrap();
    assert_eq!(suite.repeat, 10);
    let case = &suite.cases[0];
    assert_eq!(case.contract.required_tools, ["scan_term"]);
    let forging: Vec<u32> = (0..10)
        .filter(|&i| {
            case.model
                .script_for(i)
                .unwrap()
                .iter()
                .any(|r| r.text.contains("\nObservation:"))
        })
        .collect();
    assert_eq!(forging, [3, 7], "seed 002: two of ten attempts forge");

    // The honest answer's number is what the real tool reports.
    let dir = tempfile::tempdir().unwrap();
    materialize(&case.workspace, dir.path()).unwrap();
    let out = std::process::Command::new("python3")
        .arg("tools/scan_term.py")
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(br#"{"term": "MCP"}"#)?;
            child.wait_with_output()
        })
        .expect("python3 runs the example's command tool");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["count"], 3);
    let honest = &case.model.script_for(0).unwrap().last().unwrap().text;
    assert!(honest.contains("MCP 3 times"), "{honest}");
}

#[test]
fn a_bad_suite_is_refused_naming_file_case_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "suite: s\ncases:\n  - id: one\n    prompt: p\n    expect: {states: [done]}\n",
    )
    .unwrap();
    let out = Command::cargo_bin("attest")
        .unwrap()
        .arg("eval")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml: case `one`: field `expect.states[0]`: unknown variant `done`"),
        "{err}"
    );
}
