use std::path::PathBuf;

/// Everything that can go wrong in the local provider. Every message says
/// what to do next where there is something to do.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("model file {path} does not exist{hint}")]
    ModelMissing { path: PathBuf, hint: String },

    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path} is not a usable GGUF model: {reason}")]
    BadModel { path: PathBuf, reason: String },

    #[error("{path}: architecture `{arch}` is not supported (supported: qwen2, llama)")]
    UnsupportedArchitecture { path: PathBuf, arch: String },

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error("chat template: {0}")]
    Template(String),

    #[error(
        "the prompt is {prompt_tokens} tokens and {max_new} more may be generated, \
but the context is limited to {limit} tokens ({why}); shorten the task or the session history, \
or lower [provider] max_tokens"
    )]
    ContextTooLong {
        prompt_tokens: usize,
        max_new: usize,
        limit: usize,
        why: String,
    },

    #[error("inference failed: {0}")]
    Inference(String),

    #[error("could not fetch model {model}:\n{attempts}\n{manual}")]
    Fetch {
        model: String,
        /// One line per source tried, with its error.
        attempts: String,
        /// What to do by hand.
        manual: String,
    },

    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {actual}")]
    Checksum {
        path: PathBuf,
        expected: String,
        actual: String,
    },

    #[error("the local model worker has stopped: {0}")]
    WorkerGone(String),

    #[error("cancelled")]
    Cancelled,
}

impl LocalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LocalError::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = LocalError> = std::result::Result<T, E>;
