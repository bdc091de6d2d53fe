//! Scrubbing secrets before anything keeps or sends text: configured
//! values (API keys) and anything shaped like a key, token or webhook
//! (the patterns of [`attest_tools::Redactor`]).

use attest_tools::Redactor;

/// Redact `text` with the configured `secrets` and the key/token patterns.
/// Never shortens the text otherwise.
pub fn redact_secrets(text: &str, secrets: &[String]) -> String {
    Redactor::new()
        .with_secrets(secrets.iter().cloned())
        .redact_to(text, usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_configured_values_and_key_shaped_strings() {
        let secrets = vec!["my-private-value-123".to_string()];
        let out = redact_secrets(
            "a my-private-value-123 b sk-live-abcdef0123456789",
            &secrets,
        );
        assert!(!out.contains("my-private-value-123"), "{out}");
        assert!(!out.contains("sk-live-abcdef0123456789"), "{out}");
        assert!(out.starts_with("a ") && out.contains(" b "), "{out}");
    }
}
