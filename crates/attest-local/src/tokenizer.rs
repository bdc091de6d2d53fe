//! The tokenizer embedded in the GGUF (`tokenizer.ggml.*`), built with
//! candle's `TokenizerFromGguf`, plus the pre-tokenizers candle does not know.

use crate::error::{LocalError, Result};
use crate::model::{catch, GgufFile};
use candle_core::quantized::tokenizer::TokenizerFromGguf;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::Tokenizer;

/// Tokens that end a turn in the chat formats we know.
const END_OF_TURN: [&str; 8] = [
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|end|>",
    "</s>",
];

pub struct GgufTokenizer {
    inner: Tokenizer,
    /// Token ids that end generation.
    stop_ids: Vec<u32>,
    bos: Option<String>,
    eos: Option<String>,
    /// `tokenizer.ggml.pre`, for messages.
    pub pre: String,
}

impl GgufTokenizer {
    pub fn from_gguf(gguf: &GgufFile) -> Result<GgufTokenizer> {
        let mut inner = catch(|| Tokenizer::from_gguf(&gguf.content).map_err(|e| e.to_string()))
            .map_err(LocalError::Tokenizer)?;
        let pre = gguf
            .meta_str("tokenizer.ggml.pre")
            .unwrap_or("default")
            .to_string();
        if pre == "smollm" {
            // SmolLM's tokenizer.json: single digits, then byte-level BPE
            // without a prefix space (candle's default adds one).
            let seq = Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ]);
            inner.with_pre_tokenizer(Some(seq));
        }
        let token = |key: &str| gguf.meta_u32(key).and_then(|id| inner.id_to_token(id));
        let bos = token("tokenizer.ggml.bos_token_id");
        let eos = token("tokenizer.ggml.eos_token_id");
        let mut stop_ids: Vec<u32> = gguf
            .meta_u32("tokenizer.ggml.eos_token_id")
            .into_iter()
            .collect();
        for t in END_OF_TURN {
            if let Some(id) = inner.token_to_id(t) {
                if !stop_ids.contains(&id) {
                    stop_ids.push(id);
                }
            }
        }
        Ok(GgufTokenizer {
            inner,
            stop_ids,
            bos,
            eos,
            pre,
        })
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`)
    /// become their ids; nothing is added around the text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| LocalError::Tokenizer(e.to_string()))
    }

    /// Text of `ids`, special tokens kept (`<tool_call>` is one).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| LocalError::Tokenizer(e.to_string()))
    }

    pub fn is_stop(&self, id: u32) -> bool {
        self.stop_ids.contains(&id)
    }

    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.bos.as_deref()
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.eos.as_deref()
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
