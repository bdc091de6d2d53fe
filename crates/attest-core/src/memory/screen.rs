//! Secrets never become memory (SPEC F8, H2). Content goes through the
//! shared redactor; anything the redactor would touch, or that still looks
//! like a credential afterwards, is refused whole — a memory item with a
//! hole where a key was is useless, and a partial key is still a leak.

use crate::redact::Redactor;
use regex::Regex;
use std::sync::OnceLock;

/// Why content was refused, with a preview that is safe to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    /// The redacted content, cut short.
    pub preview: String,
}

/// Longest content kept as one memory item.
pub const MAX_CONTENT_CHARS: usize = 500;

/// Markers the redactors leave behind: content that already passed through
/// a redactor upstream (the engine scrubs configured keys from prompts).
const MARKERS: &[&str] = &["[REDACTED", "[redacted"];

fn credential_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // A credential word followed, within a few words, by an opaque
        // token: "my key is x7Gq…", "password: hunter22".
        Regex::new(
            r"(?i)(?:\b(?:password|passwd|passphrase|secret|token|api[ _-]?key|access[ _-]?key|private[ _-]?key|credential|key)s?\b|密码|密钥|令牌).{0,24}?[\s:=：是为]\s*([A-Za-z0-9+/_=.:-]{8,})",
        )
        .unwrap_or_else(|e| panic!("built-in pattern must compile: {e}"))
    })
}

/// Returns the content to store, or why it may not be stored.
pub fn screen(content: &str, redactor: &Redactor) -> Result<String, Refusal> {
    let content = content.split_whitespace().collect::<Vec<_>>().join(" ");
    let redacted = redactor.redact_to(&content, usize::MAX);
    let preview = super::preview(&redacted);
    let refuse = |reason: &str| {
        Err(Refusal {
            reason: reason.to_string(),
            preview: preview.clone(),
        })
    };
    if content.is_empty() {
        return refuse("empty");
    }
    if redacted != content {
        return refuse("contains a secret (key, token, credential URL or encoded blob); secrets are never remembered");
    }
    if MARKERS.iter().any(|m| content.contains(m)) {
        return refuse("contains redacted text; a secret was removed from it upstream");
    }
    if credential_re()
        .captures_iter(&content)
        .filter_map(|c| c.get(1))
        .any(|m| looks_opaque(m.as_str()))
    {
        return refuse("names a credential next to an opaque value; secrets are never remembered");
    }
    if content.chars().count() > MAX_CONTENT_CHARS {
        return refuse("longer than a memory item may be");
    }
    Ok(content)
}

/// Letters mixed with digits or symbols, not a plain word or number.
fn looks_opaque(s: &str) -> bool {
    let letters = s.chars().any(|c| c.is_ascii_alphabetic());
    let digits = s.chars().any(|c| c.is_ascii_digit());
    let symbols = s.chars().any(|c| matches!(c, '+' | '/' | '_' | '=' | '-'));
    letters && (digits || symbols) && !s.contains('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "sk-canary-memory-5d1e9b7a";

    #[test]
    fn canaries_are_refused_and_absent_from_the_preview() {
        let r = Redactor::new().with_secrets(["configured-secret-value-123"]);
        for text in [
            format!("My key is {CANARY}"),
            "the token is configured-secret-value-123".to_string(),
            "Use https://user:pw@db.example.com to connect".to_string(),
            "My password is hunter2x9".to_string(),
            "my api key: Zq81Lm22Xx".to_string(),
            "Remember my key is [REDACTED]".to_string(),
            "密码是 abc123XYZ".to_string(),
        ] {
            let refusal = screen(&text, &r).unwrap_err();
            assert!(!refusal.preview.contains(CANARY), "{refusal:?}");
            assert!(
                !refusal.preview.contains("configured-secret"),
                "{refusal:?}"
            );
            assert!(!refusal.preview.contains("pw@"), "{refusal:?}");
        }
    }

    #[test]
    fn ordinary_facts_pass_unchanged() {
        let r = Redactor::new();
        for text in [
            "The port is 8080.",
            "The API lives at api.example.com.",
            "The key file is config.toml.",
            "Deploy with `make ship`.",
            "The token limit is 4096.",
            "My name is Ada.",
        ] {
            assert_eq!(screen(text, &r).as_deref(), Ok(text), "{text}");
        }
        assert_eq!(screen("a  b\n c", &r).as_deref(), Ok("a b c"));
        assert!(screen("  ", &r).is_err());
        assert!(screen(&"word ".repeat(200), &r).is_err());
    }
}
