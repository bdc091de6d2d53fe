//! Permission patterns: `*` matches any run of characters (spaces
//! included), everything else is literal, whitespace runs are one space.
//! A pattern ending in ` *` also matches without the space, so `rm -rf *`
//! covers a bare `rm -rf` and `git status*` covers `git status`.

/// A compiled permission pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    source: String,
    tokens: Vec<Tok>,
    specificity: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Char(char),
    Star,
}

impl Glob {
    /// Compiles `pattern`. `\*` is a literal star.
    pub(crate) fn new(pattern: &str) -> Self {
        let normalized = pattern.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut tokens = Vec::new();
        let mut chars = normalized.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&'*') => {
                    chars.next();
                    tokens.push(Tok::Char('*'));
                }
                '*' => {
                    // `**` is the same as `*`.
                    if tokens.last() != Some(&Tok::Star) {
                        tokens.push(Tok::Star);
                    }
                }
                c => tokens.push(Tok::Char(c)),
            }
        }
        let specificity = tokens
            .iter()
            .filter(|t| matches!(t, Tok::Char(c) if *c != ' '))
            .count();
        Glob {
            source: normalized,
            tokens,
            specificity,
        }
    }

    /// The pattern as written (whitespace normalized).
    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    /// Literal, non-space characters: more means more specific.
    pub(crate) fn specificity(&self) -> usize {
        self.specificity
    }

    /// Whether the whole of `text` (whitespace normalized) matches.
    pub(crate) fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .collect();
        if wildcard_match(&self.tokens, &text) {
            return true;
        }
        // `X *` also matches a bare `X`.
        match self.tokens.as_slice() {
            [head @ .., Tok::Char(' '), Tok::Star] => wildcard_match(head, &text),
            _ => false,
        }
    }
}

/// Iterative wildcard matching with single-star backtracking: linear in
/// practice, quadratic at worst, never exponential.
fn wildcard_match(pattern: &[Tok], text: &[char]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(Tok::Char(c)) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            Some(Tok::Star) => {
                star = Some((p, t));
                p += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..]
        .iter()
        .all(|tok| *tok == Tok::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_with_star() {
        let g = Glob::new("git status*");
        assert!(g.matches("git status"));
        assert!(g.matches("git status -s"));
        assert!(g.matches("git   status   -s"));
        assert!(!g.matches("git stash"));
        assert!(!g.matches("sudo git status"));
        assert_eq!(g.specificity(), 9);
    }

    #[test]
    fn trailing_space_star_matches_bare() {
        let g = Glob::new("rm -rf *");
        assert!(g.matches("rm -rf"));
        assert!(g.matches("rm -rf build"));
        assert!(!g.matches("rm -rfx"));
        assert_eq!(g.specificity(), 5);
    }

    #[test]
    fn stars_anywhere() {
        let g = Glob::new("dd * of=/dev/*");
        assert!(g.matches("dd if=/dev/zero of=/dev/sda bs=1M"));
        assert!(!g.matches("dd if=a of=b"));
        let g = Glob::new("*");
        assert!(g.matches(""));
        assert!(g.matches("anything at all"));
        assert_eq!(g.specificity(), 0);
        let g = Glob::new("a**b");
        assert!(g.matches("ab") && g.matches("a x b"));
    }

    #[test]
    fn exact_and_escaped() {
        let g = Glob::new("ls");
        assert!(g.matches("ls"));
        assert!(!g.matches("ls -la"));
        let g = Glob::new(r"echo \*");
        assert!(g.matches("echo *"));
        assert!(!g.matches("echo x"));
        assert_eq!(g.specificity(), 5);
        assert_eq!(Glob::new("  a   b ").as_str(), "a b");
    }

    #[test]
    fn backtracking_is_bounded() {
        let g = Glob::new(&"*a".repeat(50));
        let text = "a".repeat(49) + "b";
        let start = std::time::Instant::now();
        assert!(!g.matches(&text));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }
}
