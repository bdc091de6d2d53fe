//! The data tools of a boundary case. Each is an ordinary command tool
//! (`[[tools]]` shape) that runs `attest eval serve-fixture FIXTURE --field
//! F`: the agent meets stale quotes, fallback sources and provider failures
//! through the real tool path, with receipts, failure records and hints
//! written by the harness as for any tool.
//!
//! A served value is printed as JSON with its `DataQuality` and headline
//! status; a fetch the fixture makes fail exits non-zero with a one-line
//! reason on stderr, so the harness records a failed receipt and a
//! `ToolFailure`, never an empty success.

use super::fixture::{news_quality, BoundaryCaseFixture, ContextField, DataValue};
use attest::tools::CommandToolConfig;
use attest_protocol::{
    Availability, ConfidenceLevel, DataQuality, EffectClass, Freshness, Provenance, RetrievalStatus,
};
use serde_json::{json, Value};
use std::path::Path;

/// What a fetch of one field yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Served {
    /// Printed on stdout; the tool succeeds.
    Data(Value),
    /// Printed on stderr; the tool exits with status 1.
    Failure(String),
}

/// Quality of a value the fixture does not have: the source answered and
/// the item is missing (true no-data, not a failure).
fn missing_quality() -> DataQuality {
    DataQuality {
        retrieval_status: RetrievalStatus::Ok,
        availability: Availability::Missing,
        freshness: Freshness::Unknown,
        provenance: Provenance::Primary,
        confidence_level: ConfidenceLevel::High,
    }
}

fn value_json(v: &DataValue) -> Value {
    json!({
        "data_status": v.quality.status().as_str(),
        "quality": v.quality,
        "value": v.value,
        "source": v.source,
        "observed_at": v.observed_at,
        "freshness_seconds": v.freshness_seconds,
        "error_ref": v.error_ref,
    })
}

/// Serve `field` of `fixture` for a call with `args` (`{"symbol": …}`,
/// optional).
pub fn serve(fixture: &BoundaryCaseFixture, field: ContextField, args: &Value) -> Served {
    let own_symbol = fixture
        .market_identity
        .get("symbol")
        .and_then(Value::as_str);
    if let (Some(asked), Some(own)) = (args.get("symbol").and_then(Value::as_str), own_symbol) {
        if asked != own {
            return Served::Failure(format!(
                "not_found: no data for symbol `{asked}` (this source serves `{own}`)"
            ));
        }
    }
    let failure = fixture.failure_for(field);
    let context = &fixture.provided_context;
    let mut body = match field {
        ContextField::News => {
            let usable: Vec<&DataValue> = context
                .news
                .iter()
                .filter(|v| failure.is_none() || v.quality.provenance != Provenance::Primary)
                .collect();
            if failure.is_some() && usable.is_empty() {
                return Served::Failure(failure_line(failure));
            }
            let items: Vec<DataValue> = usable.into_iter().cloned().collect();
            let quality = news_quality(&items);
            json!({
                "data_status": quality.status().as_str(),
                "quality": quality,
                "items": items.iter().map(value_json).collect::<Vec<_>>(),
            })
        }
        ContextField::Quote | ContextField::Financials | ContextField::Technicals => {
            let value = match field {
                ContextField::Quote => &context.quote,
                ContextField::Financials => &context.financials,
                _ => &context.technicals,
            };
            match (value, failure) {
                (Some(v), Some(_)) if v.quality.provenance != Provenance::Primary => value_json(v),
                (_, Some(f)) => return Served::Failure(failure_line(Some(f))),
                (Some(v), None) => value_json(v),
                (None, None) => {
                    let q = missing_quality();
                    json!({"data_status": q.status().as_str(), "quality": q, "value": null})
                }
            }
        }
    };
    let object = body.as_object_mut().expect("built as an object");
    if let Some(f) = failure {
        // A fallback was served because the primary source failed: say so.
        object.insert("fallback_used".into(), json!(true));
        object.insert(
            "primary_failure".into(),
            json!({
                "provider": f.provider,
                "error_type": f.error_type,
                "sanitized_reason": f.sanitized_reason,
            }),
        );
    }
    object.insert("field".into(), json!(field.as_str()));
    object.insert("market_identity".into(), json!(fixture.market_identity));
    Served::Data(body)
}

fn failure_line(failure: Option<&super::fixture::FixtureFailure>) -> String {
    match failure {
        Some(f) => format!("{} {}: {}", f.provider, f.error_type, f.sanitized_reason),
        None => "unknown failure".to_string(),
    }
}

/// The data tools for a boundary case: `get_quote`, `get_news`,
/// `get_financials`, `get_technicals`, each running `attest_exe eval
/// serve-fixture FIXTURE --field F`. `fixture_path` must lie outside the
/// attempt's workspace, so the agent cannot read the expectations.
pub fn fixture_tools(fixture_path: &Path, attest_exe: &Path) -> Vec<CommandToolConfig> {
    ContextField::ALL
        .into_iter()
        .map(|field| CommandToolConfig {
            name: field.tool_name().to_string(),
            description: format!(
                "Fetch the instrument's {} with its data quality (retrieval status, availability, freshness, provenance, confidence).",
                field.as_str()
            ),
            effect: EffectClass::Observe,
            command: vec![
                attest_exe.display().to_string(),
                "eval".into(),
                "serve-fixture".into(),
                fixture_path.display().to_string(),
                "--field".into(),
                field.as_str().into(),
            ],
            parameters: json!({
                "type": "object",
                "properties": {"symbol": {"type": "string", "description": "The instrument's symbol."}},
                "additionalProperties": false
            }),
            evidence: None,
            permission: None,
            timeout_ms: Some(10_000),
            sandbox: None,
        })
        .collect()
}

/// The names of the data tools [`fixture_tools`] makes.
pub fn fixture_tool_names() -> impl Iterator<Item = &'static str> {
    ContextField::ALL.into_iter().map(ContextField::tool_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> BoundaryCaseFixture {
        BoundaryCaseFixture::from_yaml(
            r#"
id: t
market_identity: {symbol: "600519", market: cn}
scenario_tags: [stale_quote, provider_failure, fallback_news]
provided_context:
  quote:
    value: {price: 1688.0}
    quality: {retrieval_status: ok, availability: present, freshness: stale, provenance: fallback, confidence_level: low}
    source: backup_feed
  news:
    - value: {headline: "Dividend raised"}
      quality: {retrieval_status: ok, availability: present, freshness: fresh, provenance: fallback, confidence_level: medium}
  financials: null
  technicals:
    value: {rsi: 71}
    quality: {retrieval_status: ok, availability: present, freshness: fresh, provenance: primary, confidence_level: high}
  tool_failures:
    - {provider: exchange_feed, error_type: timeout, sanitized_reason: realtime quote timed out, affected_fields: [quote, technicals]}
    - {provider: news_api, error_type: provider_error, sanitized_reason: "HTTP 503", affected_fields: [news]}
"#,
        )
        .unwrap()
    }

    #[test]
    fn fallback_values_are_served_with_the_primary_failure() {
        let Served::Data(v) = serve(&fixture(), ContextField::Quote, &json!({})) else {
            panic!("quote should be served from the fallback");
        };
        assert_eq!(v["data_status"], "fallback");
        assert_eq!(v["quality"]["freshness"], "stale");
        assert_eq!(v["quality"]["provenance"], "fallback");
        assert_eq!(v["fallback_used"], true);
        assert_eq!(v["primary_failure"]["error_type"], "timeout");
        assert_eq!(v["value"]["price"], 1688.0);
        assert_eq!(v["field"], "quote");
        let Served::Data(n) = serve(&fixture(), ContextField::News, &json!({})) else {
            panic!("news should be served from the fallback");
        };
        assert_eq!(n["quality"]["provenance"], "fallback");
        assert_eq!(n["items"][0]["value"]["headline"], "Dividend raised");
    }

    #[test]
    fn a_failed_primary_value_is_a_failure_not_an_empty_success() {
        assert_eq!(
            serve(&fixture(), ContextField::Technicals, &json!({})),
            Served::Failure("exchange_feed timeout: realtime quote timed out".into())
        );
    }

    #[test]
    fn absent_data_is_missing_with_an_ok_retrieval() {
        let Served::Data(v) = serve(&fixture(), ContextField::Financials, &json!({})) else {
            panic!("absent financials are an observation");
        };
        assert_eq!(v["quality"]["retrieval_status"], "ok");
        assert_eq!(v["quality"]["availability"], "missing");
        assert_eq!(v["data_status"], "empty");
        assert!(v["value"].is_null());
        assert!(v.get("primary_failure").is_none());
    }

    #[test]
    fn another_symbol_is_not_found() {
        let Served::Failure(msg) =
            serve(&fixture(), ContextField::Quote, &json!({"symbol": "AAPL"}))
        else {
            panic!("a foreign symbol must fail");
        };
        assert!(msg.contains("AAPL"), "{msg}");
    }

    #[test]
    fn tools_are_valid_command_tools() {
        let tools = fixture_tools(Path::new("/suite/f.yaml"), Path::new("/bin/attest"));
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["get_quote", "get_news", "get_financials", "get_technicals"]
        );
        for t in tools {
            assert_eq!(
                &t.command[1..],
                [
                    "eval",
                    "serve-fixture",
                    "/suite/f.yaml",
                    "--field",
                    t.name.trim_start_matches("get_")
                ]
            );
            attest::tools::CommandTool::new(t, Path::new("/tmp")).unwrap();
        }
    }
}
