//! Rule-based extractors: what in a run might be worth remembering.
//! Extraction only proposes; the gate (`gate.rs`) decides what a proposal
//! may become, so a generous extractor cannot pollute memory.

use super::values::{distinctive_values, Value, ValueKind};
use attest_protocol::MemoryKind;
use regex::Regex;
use std::sync::OnceLock;

/// Who said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The user, in a prompt.
    UserStatement,
    /// The model, in an answer.
    Answer,
}

/// A candidate for memory, before the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub content: String,
    pub kind: MemoryKind,
    pub origin: Origin,
    pub values: Vec<Value>,
}

/// Longest sentence taken as one fact; longer text is prose, not a fact.
const MAX_FACT_CHARS: usize = 400;

/// Longest subject of "our … is …": a rule's `subject` group, when it has
/// one, matches only up to this many characters.
const SUBJECT_MAX_CHARS: usize = 40;

/// Splits text into sentences at `.`, `!`, `?`, `;` followed by whitespace
/// (so `api.example.com` and `3.14` stay whole), at CJK sentence marks and
/// at line breaks.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|&(_, n)| n);
        let end = match c {
            '\n' => Some(i),
            // `1. First item`: a list number, not the end of a sentence.
            '.' if is_list_number(&text[start..i]) => None,
            '.' | '!' | '?' | ';' if next.is_none_or(char::is_whitespace) => Some(i + 1),
            '。' | '！' | '？' | '；' => Some(i + c.len_utf8()),
            _ => None,
        };
        if let Some(end) = end {
            push_sentence(&text[start..end], &mut out);
            start = if c == '\n' { i + 1 } else { end };
        }
    }
    push_sentence(&text[start..], &mut out);
    out
}

fn is_list_number(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty() && s.len() <= 3 && s.chars().all(|c| c.is_ascii_digit())
}

fn push_sentence<'a>(s: &'a str, out: &mut Vec<&'a str>) {
    let s = s
        .trim()
        .trim_start_matches(['-', '*', '+', '>', '#', '•'])
        .trim();
    // A numbered list item: `1. ` or `2) `.
    let s = match s.split_once([' ']) {
        Some((head, rest))
            if head.len() <= 4
                && head.ends_with(['.', ')'])
                && head[..head.len() - 1].chars().all(|c| c.is_ascii_digit())
                && head.len() > 1 =>
        {
            rest.trim()
        }
        _ => s,
    };
    if !s.is_empty() {
        out.push(s);
    }
}

fn is_question(s: &str) -> bool {
    s.ends_with('?') || s.ends_with('？')
}

struct Rule {
    re: Regex,
    kind: MemoryKind,
    /// Keep only the capture (after "remember that"), not the sentence.
    capture_only: bool,
}

fn rules() -> &'static [Rule] {
    static RULES: OnceLock<Vec<Rule>> = OnceLock::new();
    RULES.get_or_init(|| {
        let table: [(&str, MemoryKind, bool); 9] = [
            (
                r"(?i)^(?:please\s+|also\s+|and\s+)?(?:remember|note|keep in mind)(?:\s+that)?[:,]?\s+(.+)$",
                MemoryKind::ProjectFact,
                true,
            ),
            (r"^(?:请)?记住[：:，,]?\s*(.+)$", MemoryKind::ProjectFact, true),
            (
                r"(?i)^(?:my name is|call me|i am called|i'm called)\s+(.+)$",
                MemoryKind::UserFact,
                false,
            ),
            (r"^我(?:叫|的名字是)\s*(.+)$", MemoryKind::UserFact, false),
            (
                r"(?i)^(?:i\s+(?:always\s+)?prefer|i'd\s+rather|i\s+would\s+rather|from\s+now\s+on|(?:please\s+)?(?:always|never)\s+(?:use|answer|reply|respond|write|ask|include|add|format|keep|call|put))\b[,:]?\s*(.+)$",
                MemoryKind::Preference,
                false,
            ),
            (r"^(?:我|以后)(?:更)?(?:喜欢|偏好|倾向于?|希望)\s*(.+)$", MemoryKind::Preference, false),
            (
                r"(?i)^we(?:'re|\s+are)?\s+(?:use|using|deploy|deploying|host|hosting|run|running|decided)\b\s*(.+)$",
                MemoryKind::Decision,
                false,
            ),
            (r"^我们(?:用|使用|采用|决定)\s*(.+)$", MemoryKind::Decision, false),
            (
                // The subject's length is checked in code (SUBJECT_MAX_CHARS):
                // `[\w .-]{1,40}?` compiles 40 copies of Unicode `\w`, 3 MB.
                r"(?i)^our\s+(?P<subject>[\w .-]+?)\s+(?:is|are|lives|runs|uses)\s+(.+)$",
                MemoryKind::ProjectFact,
                false,
            ),
        ];
        table
            .into_iter()
            .map(|(p, kind, capture_only)| Rule {
                re: Regex::new(p)
                    .unwrap_or_else(|e| panic!("built-in extractor must compile: {e}")),
                kind,
                capture_only,
            })
            .collect()
    })
}

/// Statements in a user's text that ask to be remembered or state a
/// preference, decision or fact about the user or project.
pub fn user_statements(text: &str) -> Vec<Proposal> {
    let mut out = Vec::new();
    for sentence in sentences(text) {
        if is_question(sentence) || sentence.chars().count() > MAX_FACT_CHARS {
            continue;
        }
        let Some((rule, caps)) = rules().iter().find_map(|r| {
            let caps = r.re.captures(sentence)?;
            let subject_fits = caps
                .name("subject")
                .is_none_or(|s| s.as_str().chars().count() <= SUBJECT_MAX_CHARS);
            subject_fits.then_some((r, caps))
        }) else {
            continue;
        };
        // The statement itself is each rule's last group.
        let captured = caps
            .iter()
            .last()
            .flatten()
            .map_or("", |m| m.as_str())
            .trim();
        if captured.is_empty() {
            continue;
        }
        let content = if rule.capture_only {
            capitalize(captured)
        } else {
            sentence.to_string()
        };
        // "Remember that I prefer …" is a preference, not a project fact.
        let kind = if rule.capture_only {
            statement_kind(captured).unwrap_or(rule.kind)
        } else {
            rule.kind
        };
        let values = distinctive_values(&content);
        let kind = if kind == MemoryKind::ProjectFact
            && values.iter().any(|v| v.kind == ValueKind::Command)
        {
            MemoryKind::Procedure
        } else {
            kind
        };
        out.push(Proposal {
            content,
            kind,
            origin: Origin::UserStatement,
            values,
        });
    }
    out
}

/// The kind a nested statement ("remember that my name is Ada") has.
fn statement_kind(text: &str) -> Option<MemoryKind> {
    rules()
        .iter()
        .filter(|r| !r.capture_only)
        .find(|r| r.re.is_match(text))
        .map(|r| r.kind)
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Sentences of an answer that state something checkable: they name at
/// least one distinctive value. Prose without values ("Sure, done.") is
/// not a fact and is not proposed.
pub fn answer_facts(text: &str) -> Vec<Proposal> {
    sentences(text)
        .into_iter()
        .filter(|s| !is_question(s) && s.chars().count() <= MAX_FACT_CHARS)
        .filter_map(|s| {
            let values = distinctive_values(s);
            if values.is_empty() {
                return None;
            }
            let kind = if values.iter().any(|v| v.kind == ValueKind::Command) {
                MemoryKind::Procedure
            } else {
                MemoryKind::ProjectFact
            };
            Some(Proposal {
                content: s.to_string(),
                kind,
                origin: Origin::Answer,
                values,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_keep_domains_and_numbers_whole() {
        assert_eq!(
            sentences(
                "The API is at api.example.com. Pi is 3.14!\n- Port 8080; done?\n1. First item"
            ),
            [
                "The API is at api.example.com.",
                "Pi is 3.14!",
                "Port 8080;",
                "done?",
                "First item"
            ]
        );
        assert_eq!(
            sentences("记住：端口是8080。好的"),
            ["记住：端口是8080。", "好的"]
        );
        assert!(sentences("  \n ").is_empty());
    }

    #[test]
    fn user_statements_by_rule() {
        let got = |t: &str| -> Vec<(String, MemoryKind)> {
            user_statements(t)
                .into_iter()
                .map(|p| (p.content, p.kind))
                .collect()
        };
        assert_eq!(
            got("Please remember that the staging port is 8443. Now fix the bug."),
            [("The staging port is 8443.".into(), MemoryKind::ProjectFact)]
        );
        assert_eq!(
            got("remember that my name is Ada"),
            [("My name is Ada".into(), MemoryKind::UserFact)]
        );
        assert_eq!(
            got("My name is Ada. I prefer short answers. We use PostgreSQL 16."),
            [
                ("My name is Ada.".into(), MemoryKind::UserFact),
                ("I prefer short answers.".into(), MemoryKind::Preference),
                ("We use PostgreSQL 16.".into(), MemoryKind::Decision)
            ]
        );
        assert_eq!(
            got("Always answer in English."),
            [("Always answer in English.".into(), MemoryKind::Preference)]
        );
        assert_eq!(
            got("Remember: deploy with `make ship`"),
            [("Deploy with `make ship`".into(), MemoryKind::Procedure)]
        );
        assert_eq!(
            got("我叫小明。记住：我们使用 Rust"),
            [
                ("我叫小明。".into(), MemoryKind::UserFact),
                ("我们使用 Rust".into(), MemoryKind::Decision)
            ]
        );
        assert_eq!(
            got("Our build server is ci-7.example.com."),
            [(
                "Our build server is ci-7.example.com.".into(),
                MemoryKind::ProjectFact
            )]
        );
        // A subject of 40 characters is one; of 41, prose.
        let subject = |n: usize| "x".repeat(n);
        assert_eq!(
            got(&format!("Our {} is on port 8443.", subject(40))).len(),
            1
        );
        // Tasks and questions are not statements to remember.
        for t in [
            format!("Our {} is on port 8443.", subject(41)).as_str(),
            "Fix the bug in src/main.rs",
            "Do you remember the port?",
            "I want you to read config.toml",
            "remember",
            "Which port does the server use?",
            "Never mind, list the files.",
        ] {
            assert!(got(t).is_empty(), "{t}: {:?}", got(t));
        }
    }

    #[test]
    fn answer_facts_need_a_value() {
        let facts = answer_facts(
            "Sure! The port is 8080. It is configured in config.toml.\nIs that all? Done.",
        );
        let contents: Vec<&str> = facts.iter().map(|p| p.content.as_str()).collect();
        assert_eq!(
            contents,
            ["The port is 8080.", "It is configured in config.toml."]
        );
        assert!(facts.iter().all(|p| p.origin == Origin::Answer));
        assert_eq!(
            answer_facts("Run `make ship`.")[0].kind,
            MemoryKind::Procedure
        );
        assert!(answer_facts("All good, nothing to report.").is_empty());
    }
}
