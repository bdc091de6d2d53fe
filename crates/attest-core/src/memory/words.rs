//! Word sets for relevance and subject matching: lowercase, stop words
//! removed, CJK characters one per token (CJK text has no spaces).

use super::values::distinctive_values;
use std::collections::BTreeSet;

/// Function words, and the linking verbs facts are phrased with ("lives
/// at", "runs on"), which say nothing about what a fact is about.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "been",
    "but",
    "by",
    "can",
    "configured",
    "could",
    "default",
    "did",
    "do",
    "does",
    "for",
    "from",
    "had",
    "has",
    "have",
    "here",
    "how",
    "i",
    "in",
    "into",
    "is",
    "it",
    "its",
    "just",
    "live",
    "lives",
    "located",
    "me",
    "my",
    "now",
    "of",
    "on",
    "or",
    "our",
    "please",
    "remember",
    "run",
    "runs",
    "set",
    "should",
    "so",
    "that",
    "the",
    "their",
    "then",
    "there",
    "these",
    "this",
    "to",
    "use",
    "used",
    "uses",
    "using",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "who",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "hosted",
    "served",
    "tell",
    "know",
    "的",
    "是",
    "了",
    "在",
    "我",
    "你",
    "们",
    "吗",
    "呢",
    "和",
    "也",
    "就",
    "都",
    "把",
    "请",
];

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF)
}

/// The content words of `text`.
pub fn words(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut current = String::new();
    let flush = |w: &mut String, out: &mut BTreeSet<String>| {
        if w.chars().count() >= 2 && !STOPWORDS.contains(&w.as_str()) {
            out.insert(std::mem::take(w));
        } else {
            w.clear();
        }
    };
    for c in text.chars().flat_map(char::to_lowercase) {
        if is_cjk(c) {
            flush(&mut current, &mut out);
            let s = c.to_string();
            if !STOPWORDS.contains(&s.as_str()) {
                out.insert(s);
            }
        } else if c.is_alphanumeric() {
            current.push(c);
        } else {
            flush(&mut current, &mut out);
        }
    }
    flush(&mut current, &mut out);
    out
}

/// What a statement is about: its words without its values. "The API
/// lives at api.example.com" is about {api}.
pub fn subject(content: &str) -> BTreeSet<String> {
    let mut rest = content.to_string();
    for v in distinctive_values(content) {
        rest = rest.replace(&v.text, " ");
    }
    words(&rest)
}

/// Subject words plus whole values ("api", "api.example.com"): what
/// relevance compares, so a domain counts once, not as four fragments.
pub fn terms(text: &str) -> BTreeSet<String> {
    let mut out = subject(text);
    out.extend(
        distinctive_values(text)
            .into_iter()
            .map(|v| v.text.to_lowercase()),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn words_and_subjects() {
        assert_eq!(
            words("Which port does the server listen on?"),
            set(&["port", "server", "listen"])
        );
        assert_eq!(words("The port is 8080."), set(&["port", "8080"]));
        assert_eq!(
            subject("The API lives at api.wrong-example.com."),
            set(&["api"])
        );
        assert_eq!(
            subject("The API is at `api.right-example.com`"),
            set(&["api"])
        );
        assert_eq!(subject("The admin port is 9000"), set(&["admin", "port"]));
        assert_eq!(words("端口是8080"), set(&["端", "口", "8080"]));
        assert_eq!(
            terms("The API lives at api.right-example.com."),
            set(&["api", "api.right-example.com"])
        );
    }
}
