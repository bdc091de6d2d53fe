//! Context windows of known models (SPEC P2), by model name. The engine
//! sizes compaction from the window; `[provider] context_window` overrides
//! this table, and a local GGUF reports its own `context_length`.

/// Name fragments (lower case) and their windows in tokens. The first
/// fragment the model name contains wins, so more specific names come
/// before the family they belong to.
const KNOWN: &[(&str, usize)] = &[
    // OpenAI
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-oss", 131_072),
    // Anthropic
    ("claude", 200_000),
    // Qwen
    ("qwen3-coder", 262_144),
    ("qwen3", 32_768),
    ("qwq", 131_072),
    ("qwen2.5-coder", 32_768),
    ("qwen2.5", 32_768),
    ("qwen2", 32_768),
    ("qwen", 32_768),
    // DeepSeek
    ("deepseek-r1", 131_072),
    ("deepseek-v3", 131_072),
    ("deepseek-chat", 131_072),
    ("deepseek-reasoner", 131_072),
    ("deepseek-coder", 16_384),
    ("deepseek", 131_072),
    // GLM
    ("glm-4.6", 200_000),
    ("glm-4.5", 131_072),
    ("glm-4", 128_000),
    ("glm", 128_000),
    // Llama
    ("llama-4", 1_048_576),
    ("llama-3.3", 131_072),
    ("llama-3.2", 131_072),
    ("llama-3.1", 131_072),
    ("llama3.3", 131_072),
    ("llama3.2", 131_072),
    ("llama3.1", 131_072),
    ("llama-3", 8_192),
    ("llama3", 8_192),
    ("llama-2", 4_096),
    ("llama2", 4_096),
    // OpenAI's reasoning models, last: their short names occur inside others.
    ("o4-mini", 200_000),
    ("o3", 200_000),
    ("o1-mini", 128_000),
    ("o1", 200_000),
];

/// The window of a known model, from its name as sent to the endpoint
/// (`gpt-4o-mini`, `anthropic/claude-sonnet-4`, `Qwen/Qwen2.5-7B-Instruct`).
pub fn known_context_window(model: &str) -> Option<usize> {
    let name = model.to_ascii_lowercase();
    // A router's vendor prefix (`openai/…`, `accounts/…/models/…`) is not
    // part of the model's name.
    let name = name.rsplit('/').next().unwrap_or(&name);
    KNOWN
        .iter()
        .find(|(fragment, _)| name.contains(fragment))
        .map(|&(_, tokens)| tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_recognised_by_name() {
        assert_eq!(known_context_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_context_window("gpt-4"), Some(8_192));
        assert_eq!(known_context_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(known_context_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(
            known_context_window("Qwen/Qwen2.5-7B-Instruct"),
            Some(32_768)
        );
        assert_eq!(known_context_window("qwen3-coder-480b"), Some(262_144));
        assert_eq!(known_context_window("deepseek-chat"), Some(131_072));
        assert_eq!(known_context_window("glm-4.6"), Some(200_000));
        assert_eq!(
            known_context_window("meta-llama/Llama-3.1-8B-Instruct"),
            Some(131_072)
        );
        assert_eq!(known_context_window("o3-mini"), Some(200_000));
        assert_eq!(known_context_window("test-model"), None);
    }
}
