//! The committed `docs/openapi.json` is the document the server generates
//! from its handlers: a change to the wire is a visible diff. To update
//! it after changing the API: `ATTEST_UPDATE_OPENAPI=1 cargo test -p
//! attest-server --test openapi`.

use std::path::PathBuf;

fn committed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

#[test]
fn the_committed_openapi_document_matches_the_generated_one() {
    let generated = attest_server::openapi::document_json();
    if std::env::var_os("ATTEST_UPDATE_OPENAPI").is_some() {
        std::fs::write(committed(), &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(committed()).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/openapi.json differs from the generated document; \
         run `ATTEST_UPDATE_OPENAPI=1 cargo test -p attest-server --test openapi` and commit it"
    );
}

#[test]
fn every_endpoint_is_documented_with_its_scope_and_errors() {
    let doc: serde_json::Value =
        serde_json::from_str(&attest_server::openapi::document_json()).unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/v1/runs",
        "/v1/runs/{id}",
        "/v1/runs/{id}/cancel",
        "/v1/runs/{id}/trace",
        "/v1/runs/{id}/events",
        "/v1/approvals",
        "/v1/approvals/{call_id}",
        "/v1/hooks/{adapter}",
        "/v1/sessions",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/events",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(paths.contains_key(path), "{path} is not documented");
    }
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap() {
            if op.get("security").is_some() {
                let responses = op["responses"].as_object().unwrap();
                for status in ["401", "403"] {
                    assert!(
                        responses.contains_key(status),
                        "{method} {path} does not document {status}"
                    );
                }
            }
        }
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}
