//! Token counting with a real BPE tokenizer (cl100k), for budgets. Provider
//! tokenizers differ; cl100k is a close, deterministic estimate.

mod cl100k;

/// Tokens in `text` (cl100k, special tokens counted as ordinary text).
pub fn count_tokens(text: &str) -> usize {
    cl100k::count(text)
}

/// Whether `text` is at most `max` tokens, without tokenizing it when its
/// length already decides: every cl100k token covers at least one byte, so
/// a text of `max` bytes or fewer cannot exceed `max` tokens. Budgets are
/// checked on every step; most texts are far below them.
pub fn within_tokens(text: &str, max: usize) -> bool {
    text.len() <= max || count_tokens(text) <= max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_real_tokens() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("hello world"), 2);
        assert!(count_tokens(&"word ".repeat(100)) >= 100);
    }

    #[test]
    fn tokens_never_exceed_bytes_so_the_byte_bound_is_sound() {
        for text in [
            "a",
            "日本語のテキスト、そして中文。",
            "\u{1F600}\u{1F680} emoji \u{0301}",
            "{\"path\":\"data/f0001.txt\",\"n\":[1,2,3]}",
            &"\u{7}\u{0}\u{ff}x".repeat(50),
        ] {
            assert!(count_tokens(text) <= text.len(), "{text:?}");
            assert!(within_tokens(text, text.len()));
        }
        assert!(!within_tokens(&"word ".repeat(100), 50));
        assert!(within_tokens(&"word ".repeat(100), 200));
    }
}
