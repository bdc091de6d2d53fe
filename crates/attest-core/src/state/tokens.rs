//! Token counting with a real BPE tokenizer (cl100k), for budgets. Provider
//! tokenizers differ; cl100k is a close, deterministic estimate.

use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

fn bpe() -> Option<&'static CoreBPE> {
    static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::cl100k_base().ok()).as_ref()
}

/// Tokens in `text`; falls back to a bytes/4 estimate if the tokenizer
/// cannot be built (it is embedded, so that should not happen).
pub fn count_tokens(text: &str) -> usize {
    match bpe() {
        Some(bpe) => bpe.encode_ordinary(text).len(),
        None => text.len().div_ceil(4),
    }
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
