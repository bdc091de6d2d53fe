//! Code spans and quotations in prose: `` `…` ``, `"…"` and `“…”`, each on
//! one line and of bounded length, found leftmost first and never
//! overlapping — what the regex ``Delim([^Close\n]{1,N})Close``, one
//! alternative per delimiter, finds. Scanned by hand: as regexes, the
//! bounded repetitions of a Unicode class compile to about 2 MB of
//! automata (the tests hold the scanner to the regexes).

use std::ops::Range;

/// Which delimiters a span has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delimiter {
    /// `` `code` ``, at most 200 characters inside.
    Backtick,
    /// `"quoted"`, at most 120 characters inside.
    Straight,
    /// `“quoted”`, at most 120 characters inside.
    Curly,
}

impl Delimiter {
    fn open(self) -> char {
        match self {
            Delimiter::Backtick => '`',
            Delimiter::Straight => '"',
            Delimiter::Curly => '“',
        }
    }

    fn close(self) -> char {
        match self {
            Delimiter::Backtick => '`',
            Delimiter::Straight => '"',
            Delimiter::Curly => '”',
        }
    }

    fn max_chars(self) -> usize {
        match self {
            Delimiter::Backtick => 200,
            Delimiter::Straight | Delimiter::Curly => 120,
        }
    }
}

/// One span found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    pub delimiter: Delimiter,
    /// The delimiters and what is between them.
    pub whole: Range<usize>,
    /// What is between them: never empty, never a line break.
    pub inner: Range<usize>,
}

/// The spans of `text` with any of `delimiters`, left to right.
pub(crate) fn spans<'a>(
    text: &'a str,
    delimiters: &'a [Delimiter],
) -> impl Iterator<Item = Span> + 'a {
    let mut at = 0;
    std::iter::from_fn(move || {
        while let Some(c) = text[at..].chars().next() {
            let start = at;
            at += c.len_utf8();
            let Some(&delimiter) = delimiters.iter().find(|d| d.open() == c) else {
                continue;
            };
            if let Some(inner_end) = closing(text, at, delimiter) {
                let end = inner_end + delimiter.close().len_utf8();
                let inner = at..inner_end;
                at = end;
                return Some(Span {
                    delimiter,
                    whole: start..end,
                    inner,
                });
            }
        }
        None
    })
}

/// Where the span opened just before `from` closes: the first closing
/// delimiter, if no line break comes before it and 1 to `max_chars`
/// characters lie between. (Nothing shorter could close it: the inside
/// holds no closing delimiter.)
fn closing(text: &str, from: usize, delimiter: Delimiter) -> Option<usize> {
    for (count, (i, c)) in text[from..].char_indices().enumerate() {
        if c == delimiter.close() {
            return (count >= 1).then_some(from + i);
        }
        if c == '\n' || count == delimiter.max_chars() {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use regex::Regex;

    /// The patterns these spans replace, as (regex, delimiter per group).
    fn by_regex(text: &str, pattern: &str, groups: &[Delimiter]) -> Vec<Span> {
        Regex::new(pattern)
            .unwrap()
            .captures_iter(text)
            .map(|caps| {
                let (i, inner) = (1..=groups.len())
                    .find_map(|i| caps.get(i).map(|m| (i, m.range())))
                    .unwrap();
                Span {
                    delimiter: groups[i - 1],
                    whole: caps.get(0).unwrap().range(),
                    inner,
                }
            })
            .collect()
    }

    const ALL: &[Delimiter] = &[Delimiter::Backtick, Delimiter::Straight, Delimiter::Curly];
    const ALL_PATTERN: &str = r#"`([^`\n]{1,200})`|"([^"\n]{1,120})"|“([^”\n]{1,120})”"#;
    const QUOTES: &[Delimiter] = &[Delimiter::Straight, Delimiter::Curly];
    const QUOTES_PATTERN: &str = r#""([^"\n]{1,120})"|“([^”\n]{1,120})”"#;

    fn assert_same(text: &str) {
        assert_eq!(
            spans(text, ALL).collect::<Vec<_>>(),
            by_regex(text, ALL_PATTERN, ALL),
            "{text:?}"
        );
        assert_eq!(
            spans(text, QUOTES).collect::<Vec<_>>(),
            by_regex(text, QUOTES_PATTERN, QUOTES),
            "{text:?}"
        );
        assert_eq!(
            spans(text, &[Delimiter::Backtick]).collect::<Vec<_>>(),
            by_regex(text, r"`([^`\n]{1,200})`", &[Delimiter::Backtick]),
            "{text:?}"
        );
    }

    #[test]
    fn spans_are_what_the_regexes_found() {
        let long = "x".repeat(200);
        for text in [
            "Read `src/main.rs` and \"config.toml\", then “quoted” text.",
            "``, \"\" and “” are empty; `a` \"b\" “c” are not",
            "`unclosed and \"unclosed and “unclosed",
            "`line\nbreak` \"line\nbreak\" “line\nbreak”",
            "a \"quote with `code` inside\" and `code with \"quote\" inside`",
            "“nested “inner” text” and ”stray closers“",
            format!("`{long}` then `{long}x` then `ok`").as_str(),
            format!("\"{}\" \"{}\"", "y".repeat(120), "y".repeat(121)).as_str(),
            "emoji `😀🚀` and CJK “中文引号”",
        ] {
            assert_same(text);
        }
    }

    proptest! {
        #[test]
        fn spans_equal_the_regexes_matches(
            text in "([`\"“”\\n ]|[a-z😀]{1,3}|x{100,130}|y{195,205}){0,40}"
        ) {
            assert_same(&text);
        }
    }
}
