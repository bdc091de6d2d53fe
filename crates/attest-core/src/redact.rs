//! Scrubbing configured secret values (API keys) from text before anything
//! keeps it: transcript, events, trace, store.

/// Replace every occurrence of each secret (of 4+ characters) by `[REDACTED]`.
pub fn redact_secrets(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "[REDACTED]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_every_occurrence_and_ignores_trivial_secrets() {
        let secrets = vec!["sk-123456".to_string(), "ab".to_string()];
        assert_eq!(
            redact_secrets("a sk-123456 b sk-123456 ab", &secrets),
            "a [REDACTED] b [REDACTED] ab"
        );
    }
}
