//! One loaded model and its KV cache: prompt rendering, tokenization, and
//! generation with prefix reuse (SPEC D5).
//!
//! Between calls the cache keeps the K/V of the last prompt and of what was
//! generated after it. A new prompt is compared token by token with what the
//! cache holds; the common prefix (system prompt, tools, unchanged history)
//! is kept, the cache is rewound to where the two differ, and only the rest
//! is evaluated. When history changed early the rewind goes back that far;
//! a prompt equal to the cached one still re-evaluates its last token, which
//! the next-token logits need.

use crate::error::{LocalError, Result};
use crate::model::{GgufFile, Model, ModelConfig};
use crate::prefix_store::PrefixStore;
use crate::template::{ChatMessage, ChatTemplate};
use crate::tokenizer::GgufTokenizer;
use crate::weights::WeightLoading;
use attest_protocol::ToolSpec;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Tokens evaluated per forward pass while reading a prompt.
const PREFILL_CHUNK: usize = 256;

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Cap on the context length (default: the model's, at most 32768).
    pub max_context: Option<usize>,
    /// Directory of the on-disk prefix cache ([`PrefixStore`]); `None`:
    /// every process evaluates its first prompt in full.
    pub prefix_cache_dir: Option<PathBuf>,
    /// Map the weights from the file (default) or read them.
    pub weights: WeightLoading,
}

/// Shortest stable prefix worth storing on disk, in tokens.
const MIN_STORED_PREFIX: usize = 16;

/// How to generate.
#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_new_tokens: usize,
    /// `None` or ≤ 0: greedy.
    pub temperature: Option<f32>,
    /// Text that ends generation (not included in the output).
    pub stop: Vec<String>,
    pub seed: u64,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_new_tokens: 256,
            temperature: None,
            stop: Vec::new(),
            seed: 0x5eed,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// A stop token (its text) or a stop string.
    Stop(String),
    /// `max_new_tokens` reached.
    Length,
}

/// What one generation produced and cost.
#[derive(Debug, Clone)]
pub struct Generation {
    pub text: String,
    pub finish: Finish,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Of those, served from the KV cache.
    pub reused_tokens: usize,
    /// Of those, evaluated now (`prompt_tokens - reused_tokens`).
    pub evaluated_tokens: usize,
    pub generated_tokens: usize,
    pub prompt_time: Duration,
    pub generation_time: Duration,
}

impl Generation {
    /// Prompt tokens evaluated per second.
    pub fn prompt_tps(&self) -> f64 {
        rate(self.evaluated_tokens, self.prompt_time)
    }
    /// Generated tokens per second (the first one comes from the prompt pass).
    pub fn generation_tps(&self) -> f64 {
        rate(
            self.generated_tokens.saturating_sub(1),
            self.generation_time,
        )
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

/// A model ready to chat.
pub struct LocalModel {
    model: Model,
    tokenizer: GgufTokenizer,
    template: ChatTemplate,
    /// Tokens whose K/V the cache holds, in order.
    cached: Vec<u32>,
    prefix_store: Option<PrefixStore>,
    /// The stable prefix on disk already, or whose saving failed (not
    /// tried again: each try costs an export and a hash of tens of MB).
    stored_prefix: Option<Vec<u32>>,
    /// Read the stored prefix when the cache is empty (off for the call
    /// after [`Self::clear_cache`]).
    restore_from_store: bool,
    pub name: String,
    pub load_time: Duration,
}

impl LocalModel {
    pub fn load(path: &Path, opts: &LoadOptions) -> Result<LocalModel> {
        let start = Instant::now();
        let mut gguf = GgufFile::open(path)?;
        let tokenizer = GgufTokenizer::from_gguf(&gguf)?;
        let template = ChatTemplate::new(
            gguf.meta_str("tokenizer.chat_template"),
            tokenizer.bos_token(),
            tokenizer.eos_token(),
        )?;
        let name = gguf
            .meta_str("general.name")
            .map(str::to_string)
            .unwrap_or_else(|| {
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let model = Model::load(&mut gguf, path, opts.max_context, opts.weights)?;
        if tokenizer.vocab_size() > model.config().vocab_size + 1024 {
            return Err(LocalError::BadModel {
                path: path.to_path_buf(),
                reason: format!(
                    "the tokenizer has {} tokens but the embedding only {}",
                    tokenizer.vocab_size(),
                    model.config().vocab_size
                ),
            });
        }
        let prefix_store = opts
            .prefix_cache_dir
            .as_deref()
            .and_then(|dir| PrefixStore::new(dir, path));
        Ok(LocalModel {
            model,
            tokenizer,
            template,
            cached: Vec::new(),
            prefix_store,
            stored_prefix: None,
            restore_from_store: true,
            name,
            load_time: start.elapsed(),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        self.model.config()
    }

    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.tokenizer
    }

    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The prompt text for a conversation.
    pub fn render(&self, messages: &[ChatMessage], tools: &[ToolSpec]) -> Result<String> {
        self.template.render(messages, tools)
    }

    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text)
    }

    /// Tokens currently in the KV cache.
    pub fn cached_tokens(&self) -> usize {
        self.cached.len()
    }

    /// Drop the KV cache (the next prompt is evaluated in full, not read
    /// from the prefix store either).
    pub fn clear_cache(&mut self) {
        self.cached.clear();
        self.model.truncate(0);
        self.restore_from_store = false;
    }

    /// Generate a continuation of `prompt`, calling `on_text` with each
    /// piece of new text. `cancel` is polled between forward passes.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str),
        cancel: &AtomicBool,
    ) -> Result<Generation> {
        let limit = self.model.config().context_limit;
        if prompt.is_empty() {
            return Err(LocalError::Inference("empty prompt".into()));
        }
        if prompt.len() >= limit {
            return Err(LocalError::ContextTooLong {
                prompt_tokens: prompt.len(),
                max_new: params.max_new_tokens,
                limit,
                why: "no room is left to generate".into(),
            });
        }
        let max_new = params.max_new_tokens.min(limit - prompt.len()).max(1);

        if self.model.cached_len() == 0 {
            self.restore_stored_prefix(prompt);
        }
        // Prefix reuse: keep what the cache shares with this prompt.
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(self.model.cached_len());
        let keep = common.min(prompt.len() - 1);
        self.model.truncate(keep);
        self.cached.truncate(keep);

        let prompt_start = Instant::now();
        let mut logits = Vec::new();
        let mut pos = keep;
        for chunk in prompt[keep..].chunks(PREFILL_CHUNK) {
            if cancel.load(Ordering::Relaxed) {
                return Err(LocalError::Cancelled);
            }
            logits = self.model.forward(chunk, pos)?;
            pos += chunk.len();
            self.cached.extend_from_slice(chunk);
        }
        let prompt_time = prompt_start.elapsed();

        let gen_start = Instant::now();
        let mut rng = XorShift::new(params.seed);
        let mut generated: Vec<u32> = Vec::new();
        let mut text = String::new();
        let mut decoded_upto = 0usize; // tokens of `generated` decoded into `text`
        let mut emitted = 0usize; // bytes of `text` passed to `on_text`
        let hold_back = params
            .stop
            .iter()
            .map(|s| s.len())
            .max()
            .unwrap_or(0)
            .saturating_sub(1);
        // The decode step's regions on threads that stay awake between
        // them (`team`); the prompt above may have run candle's kernels.
        let finish = crate::team::with_team(|| -> Result<Finish> {
            Ok(loop {
                if cancel.load(Ordering::Relaxed) {
                    return Err(LocalError::Cancelled);
                }
                let next = sample(&logits, params.temperature, &mut rng);
                if self.tokenizer.is_stop(next) {
                    let t = self.tokenizer.decode(&[next]).unwrap_or_default();
                    break Finish::Stop(t);
                }
                generated.push(next);
                let piece = self.tokenizer.decode(&generated[decoded_upto..])?;
                if !piece.ends_with('\u{FFFD}') {
                    text.push_str(&piece);
                    decoded_upto = generated.len();
                }
                if let Some((at, s)) = find_stop(&text, &params.stop) {
                    text.truncate(at);
                    break Finish::Stop(s);
                }
                let safe = floor_char_boundary(&text, text.len().saturating_sub(hold_back));
                if safe > emitted {
                    on_text(&text[emitted..safe]);
                    emitted = safe;
                }
                if generated.len() >= max_new {
                    break Finish::Length;
                }
                logits = self.model.forward(&[next], pos)?;
                pos += 1;
                self.cached.push(next);
            })
        })?;
        if decoded_upto < generated.len()
            && !matches!(finish, Finish::Stop(ref s) if params.stop.contains(s))
        {
            text.push_str(&self.tokenizer.decode(&generated[decoded_upto..])?);
        }
        if text.len() > emitted {
            let from = floor_char_boundary(&text, emitted);
            on_text(&text[from..]);
        }
        // After the answer, not before its first token: writing costs time.
        self.store_stable_prefix(prompt);
        Ok(Generation {
            text,
            finish,
            prompt_tokens: prompt.len(),
            reused_tokens: keep,
            evaluated_tokens: prompt.len() - keep,
            generated_tokens: generated.len(),
            prompt_time,
            generation_time: gen_start.elapsed(),
        })
    }
}

impl LocalModel {
    /// The prompt up to and including its first end-of-turn token: the
    /// system message, the same from run to run (SPEC D5).
    fn stable_prefix<'p>(&self, prompt: &'p [u32]) -> Option<&'p [u32]> {
        let end = prompt.iter().position(|&t| self.tokenizer.is_stop(t))?;
        (end + 1 >= MIN_STORED_PREFIX && end + 1 < prompt.len()).then(|| &prompt[..=end])
    }

    /// A cold cache starts from the stable prefix an earlier process
    /// stored, when there is one (not right after [`Self::clear_cache`]).
    fn restore_stored_prefix(&mut self, prompt: &[u32]) {
        self.cached.clear();
        let restore = std::mem::replace(&mut self.restore_from_store, true);
        let Some(store) = self.prefix_store.as_ref().filter(|_| restore) else {
            return;
        };
        let restored = store.load(prompt, &mut self.model);
        self.cached.extend_from_slice(&prompt[..restored]);
        if let Some(stable) = self.stable_prefix(prompt) {
            if restored >= stable.len() {
                self.stored_prefix = Some(stable.to_vec());
            }
        }
    }

    /// Write the stable prefix's K/V to disk unless it is there already.
    /// Best effort: a failure costs the next process time, nothing else.
    fn store_stable_prefix(&mut self, prompt: &[u32]) {
        let Some(store) = &self.prefix_store else {
            return;
        };
        let Some(stable) = self.stable_prefix(prompt) else {
            return;
        };
        if self.stored_prefix.as_deref() == Some(stable) || !self.cached.starts_with(stable) {
            return;
        }
        // Tried once per prefix, whether or not it worked.
        let _ = store.save(stable, &self.model);
        self.stored_prefix = Some(stable.to_vec());
    }
}

fn find_stop(text: &str, stops: &[String]) -> Option<(usize, String)> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()).map(|at| (at, s.clone())))
        .min_by_key(|(at, _)| *at)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Greedy, or temperature sampling with nucleus 0.95.
fn sample(logits: &[f32], temperature: Option<f32>, rng: &mut XorShift) -> u32 {
    let argmax = || {
        logits
            .iter()
            .enumerate()
            .fold((0usize, f32::NEG_INFINITY), |best, (i, &v)| {
                if v > best.1 {
                    (i, v)
                } else {
                    best
                }
            })
            .0 as u32
    };
    let t = match temperature {
        Some(t) if t > 0.0 && t.is_finite() => t,
        _ => return argmax(),
    };
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<(usize, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i, ((l - max) / t).exp()))
        .filter(|(_, p)| *p > 0.0)
        .collect();
    probs.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f32 = probs.iter().map(|p| p.1).sum();
    if total.is_nan() || total <= 0.0 {
        return argmax();
    }
    let mut kept = 0.0;
    let mut n = 0;
    for (_, p) in &probs {
        kept += p / total;
        n += 1;
        if kept >= 0.95 {
            break;
        }
    }
    let probs = &probs[..n.max(1)];
    let sum: f32 = probs.iter().map(|p| p.1).sum();
    let mut r = rng.next_f32() * sum;
    for (i, p) in probs {
        r -= p;
        if r <= 0.0 {
            return *i as u32;
        }
    }
    probs[0].0 as u32
}

struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }
    fn next_f32(&mut self) -> f32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_argmax_and_sampling_is_seeded() {
        let logits = [0.1, 3.0, -1.0, 2.9];
        let mut rng = XorShift::new(1);
        assert_eq!(sample(&logits, None, &mut rng), 1);
        assert_eq!(sample(&logits, Some(0.0), &mut rng), 1);
        let a: Vec<u32> = {
            let mut r = XorShift::new(7);
            (0..20)
                .map(|_| sample(&logits, Some(1.0), &mut r))
                .collect()
        };
        let b: Vec<u32> = {
            let mut r = XorShift::new(7);
            (0..20)
                .map(|_| sample(&logits, Some(1.0), &mut r))
                .collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|&i| i == 1 || i == 3), "{a:?}");
    }

    #[test]
    fn stop_strings_cut_at_the_earliest() {
        let stops = vec!["<b>".to_string(), "<a>".to_string()];
        assert_eq!(
            find_stop("xx<a>yy<b>", &stops),
            Some((2, "<a>".to_string()))
        );
        assert_eq!(find_stop("plain", &stops), None);
    }
}
