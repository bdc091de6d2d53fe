//! A decoder-only transformer over a GGUF file, with a KV cache that can be
//! rewound to any earlier position (SPEC D5: prefix reuse). Supported
//! architectures: `qwen2` (attention biases, NeoX rotary embedding) and
//! `llama` (no biases, interleaved rotary embedding as GGUF stores its Q/K
//! weights), both with grouped-query attention.
//!
//! Two paths share the weights and the cache: many tokens at once (a long
//! prompt) run as candle tensor ops, whose batched quantized matmuls are
//! fast once candle has repacked the weights for them; one token
//! (generation) or a few (a short prompt) run in `decode` as plain loops
//! over the stored blocks, where candle's per-op overhead and repacked
//! weights would cost a third of the speed. The repacking takes 0.6–2 s
//! for a 1.5B model on two threads, so it waits for the first prompt long
//! enough to earn it back.
//! Which path a chunk takes depends only on where it ends, so that the same
//! prompt gets the same logits in every process.
//!
//! The cache is one buffer per layer, `[kv_head][capacity][head_dim]`, grown
//! by doubling; writing at position `p` overwrites what a rewound cache held
//! there, so "rewind" is just a length.

use crate::error::{LocalError, Result};
use crate::weights::WeightLoading;
use candle_core::quantized::{gguf_file, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use std::path::Path;
use std::sync::Arc;

/// Architectures this module can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Qwen2,
    Llama,
}

impl Arch {
    fn from_gguf(name: &str) -> Option<Arch> {
        match name {
            "qwen2" => Some(Arch::Qwen2),
            "llama" => Some(Arch::Llama),
            _ => None,
        }
    }
}

/// Shape of the network, read from the GGUF metadata.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub arch: Arch,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub rms_eps: f64,
    pub rope_base: f32,
    /// Context length the model was trained for.
    pub trained_context: usize,
    /// Context length this instance accepts (≤ `trained_context`).
    pub context_limit: usize,
    pub vocab_size: usize,
}

pub(crate) struct Layer {
    pub(crate) attn_norm: Tensor,
    pub(crate) wq: Arc<QTensor>,
    pub(crate) wk: Arc<QTensor>,
    pub(crate) wv: Arc<QTensor>,
    mq: QMatMul,
    mk: QMatMul,
    mv: QMatMul,
    bias: Option<(Tensor, Tensor, Tensor)>,
    /// The biases as plain vectors, for the decode step.
    pub(crate) bias_vec: Option<[Vec<f32>; 3]>,
    pub(crate) wo_t: Arc<QTensor>,
    wo: QMatMul,
    ffn_norm: Tensor,
    pub(crate) attn_norm_vec: Vec<f32>,
    pub(crate) ffn_norm_vec: Vec<f32>,
    pub(crate) gate: Arc<QTensor>,
    pub(crate) up: Arc<QTensor>,
    pub(crate) down_t: Arc<QTensor>,
    mgate: QMatMul,
    mup: QMatMul,
    down: QMatMul,
}

/// K and V for one layer, `[n_kv_head][capacity][head_dim]` each.
pub(crate) struct LayerCache {
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
}

pub struct Model {
    pub(crate) cfg: ModelConfig,
    pub(crate) embed: Arc<QTensor>,
    pub(crate) layers: Vec<Layer>,
    norm: Tensor,
    pub(crate) norm_vec: Vec<f32>,
    pub(crate) output_t: Arc<QTensor>,
    output: QMatMul,
    cos: Tensor,
    sin: Tensor,
    /// `[position][head_dim / 2]` rotary tables for the decode step.
    pub(crate) cos_vec: Vec<f32>,
    pub(crate) sin_vec: Vec<f32>,
    pub(crate) cache: Vec<LayerCache>,
    pub(crate) capacity: usize,
    /// Positions `0..len` of the cache hold valid K/V.
    len: usize,
    device: Device,
    /// Whether the batched path's weights have been repacked.
    batched_ready: bool,
    /// Chunks ending at or before this position take the stored-block path.
    stored_block_limit: usize,
}

/// Default of [`Model::set_stored_block_limit`]: prompts this short run on
/// the stored blocks, where repacking the weights would cost more than it
/// saves. Measured on Qwen2.5 1.5B Q4_K_M, 2 threads: about 20 ms a token
/// on the stored blocks, against 0.6–0.7 s of repacking and 5.5 ms a token
/// on the batched path, even at about 46 tokens.
pub const STORED_BLOCK_LIMIT: usize = 48;

/// The parsed GGUF header (metadata and tensor index) and the open file.
pub struct GgufFile {
    pub content: gguf_file::Content,
    pub file: std::fs::File,
}

impl GgufFile {
    pub fn open(path: &Path) -> Result<GgufFile> {
        let file = std::fs::File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => LocalError::ModelMissing {
                path: path.to_path_buf(),
                hint: String::new(),
            },
            _ => LocalError::io(path, e),
        })?;
        // The header is many small reads (a vocabulary of strings): buffered.
        let mut reader = std::io::BufReader::new(file);
        let content = catch(|| gguf_file::Content::read(&mut reader).map_err(|e| e.to_string()))
            .map_err(|reason| LocalError::BadModel {
                path: path.to_path_buf(),
                reason,
            })?;
        Ok(GgufFile {
            content,
            file: reader.into_inner(),
        })
    }

    pub fn meta(&self, key: &str) -> Option<&gguf_file::Value> {
        self.content.metadata.get(key)
    }

    pub fn meta_str(&self, key: &str) -> Option<&str> {
        self.meta(key)
            .and_then(|v| v.to_string().ok())
            .map(String::as_str)
    }

    pub fn meta_u32(&self, key: &str) -> Option<u32> {
        self.meta(key).and_then(|v| match v {
            gguf_file::Value::U8(x) => Some(*x as u32),
            gguf_file::Value::U16(x) => Some(*x as u32),
            gguf_file::Value::U32(x) => Some(*x),
            gguf_file::Value::U64(x) => u32::try_from(*x).ok(),
            gguf_file::Value::I32(x) => u32::try_from(*x).ok(),
            gguf_file::Value::I64(x) => u32::try_from(*x).ok(),
            _ => None,
        })
    }

    pub fn meta_f32(&self, key: &str) -> Option<f32> {
        self.meta(key).and_then(|v| match v {
            gguf_file::Value::F32(x) => Some(*x),
            gguf_file::Value::F64(x) => Some(*x as f32),
            _ => None,
        })
    }
}

/// Run `f`, turning a panic inside candle into an error message: a corrupt
/// file must give an error, never a crash.
pub(crate) fn catch<T>(
    f: impl FnOnce() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".to_string())),
    }
}

impl Model {
    /// Load the weights, mapped or read as `weights` says. `max_context`
    /// caps the context (and the rotary table); `None` takes the model's
    /// trained length, at most 32768.
    pub fn load(
        gguf: &mut GgufFile,
        path: &Path,
        max_context: Option<usize>,
        weights: WeightLoading,
    ) -> Result<Model> {
        let bad = |reason: String| LocalError::BadModel {
            path: path.to_path_buf(),
            reason,
        };
        let arch_name = gguf
            .meta_str("general.architecture")
            .ok_or_else(|| bad("no general.architecture".into()))?
            .to_string();
        let arch =
            Arch::from_gguf(&arch_name).ok_or_else(|| LocalError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                arch: arch_name.clone(),
            })?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let need = |k: &str| {
            gguf.meta_u32(&key(k))
                .map(|v| v as usize)
                .ok_or_else(|| bad(format!("missing metadata {}", key(k))))
        };
        let n_layer = need("block_count")?;
        let n_embd = need("embedding_length")?;
        let n_head = need("attention.head_count")?;
        let n_kv_head = need("attention.head_count_kv")?;
        let trained_context = need("context_length")?;
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 || n_embd % n_head != 0 {
            return Err(bad(format!(
                "inconsistent attention shape: {n_head} heads, {n_kv_head} KV heads, width {n_embd}"
            )));
        }
        let head_dim = n_embd / n_head;
        let rms_eps = gguf
            .meta_f32(&key("attention.layer_norm_rms_epsilon"))
            .ok_or_else(|| {
                bad(format!(
                    "missing metadata {}",
                    key("attention.layer_norm_rms_epsilon")
                ))
            })? as f64;
        let rope_base = gguf.meta_f32(&key("rope.freq_base")).unwrap_or(10_000.0);
        let context_limit = max_context.unwrap_or(32_768).min(trained_context).max(16);
        keep_freed_memory();

        let device = Device::Cpu;
        let content = &gguf.content;
        // Every tensor of the file, all at once; the ones the network takes
        // are looked up below, and a missing one is an error naming it.
        let names: Vec<String> = content.tensor_infos.keys().cloned().collect();
        let loaded = catch(|| crate::weights::load_tensors(&gguf.file, content, &names, weights))
            .map_err(bad)?;
        let loaded = std::cell::RefCell::new(loaded);
        let tensor = |name: &str| -> Result<QTensor> {
            loaded
                .borrow_mut()
                .remove(name)
                .ok_or_else(|| bad(format!("tensor {name}: not in the file")))
        };
        let dense = |name: &str| -> Result<Tensor> {
            let t = tensor(name)?;
            t.dequantize(&Device::Cpu)
                .map_err(|e| bad(format!("tensor {name}: {e}")))
        };
        let embed = Arc::new(tensor("token_embd.weight")?);
        let vocab_size = embed
            .shape()
            .dims2()
            .map_err(|e| bad(format!("token_embd.weight: {e}")))?
            .0;
        let norm = dense("output_norm.weight")?;
        let output = if content.tensor_infos.contains_key("output.weight") {
            Arc::new(tensor("output.weight")?)
        } else {
            Arc::clone(&embed)
        };
        let output_t = output;
        let output = qmatmul(Arc::clone(&output_t)).map_err(bad)?;
        let mut layers = Vec::with_capacity(n_layer);
        for i in 0..n_layer {
            let p = format!("blk.{i}");
            let bias = if content
                .tensor_infos
                .contains_key(&format!("{p}.attn_q.bias"))
            {
                Some((
                    dense(&format!("{p}.attn_q.bias"))?,
                    dense(&format!("{p}.attn_k.bias"))?,
                    dense(&format!("{p}.attn_v.bias"))?,
                ))
            } else {
                None
            };
            let bias_vec = match &bias {
                Some((q, k, v)) => Some([
                    vec1(q).map_err(bad)?,
                    vec1(k).map_err(bad)?,
                    vec1(v).map_err(bad)?,
                ]),
                None => None,
            };
            let attn_norm = dense(&format!("{p}.attn_norm.weight"))?;
            let ffn_norm = dense(&format!("{p}.ffn_norm.weight"))?;
            let wq = Arc::new(tensor(&format!("{p}.attn_q.weight"))?);
            let wk = Arc::new(tensor(&format!("{p}.attn_k.weight"))?);
            let wv = Arc::new(tensor(&format!("{p}.attn_v.weight"))?);
            let gate = Arc::new(tensor(&format!("{p}.ffn_gate.weight"))?);
            let up = Arc::new(tensor(&format!("{p}.ffn_up.weight"))?);
            let wo_t = Arc::new(tensor(&format!("{p}.attn_output.weight"))?);
            let down_t = Arc::new(tensor(&format!("{p}.ffn_down.weight"))?);
            layers.push(Layer {
                attn_norm_vec: vec1(&attn_norm).map_err(bad)?,
                ffn_norm_vec: vec1(&ffn_norm).map_err(bad)?,
                attn_norm,
                ffn_norm,
                bias_vec,
                mq: qmatmul(Arc::clone(&wq)).map_err(bad)?,
                mk: qmatmul(Arc::clone(&wk)).map_err(bad)?,
                mv: qmatmul(Arc::clone(&wv)).map_err(bad)?,
                wq,
                wk,
                wv,
                bias,
                wo: qmatmul(Arc::clone(&wo_t)).map_err(bad)?,
                wo_t,
                mgate: qmatmul(Arc::clone(&gate)).map_err(bad)?,
                mup: qmatmul(Arc::clone(&up)).map_err(bad)?,
                gate,
                up,
                down: qmatmul(Arc::clone(&down_t)).map_err(bad)?,
                down_t,
            });
        }
        let (cos_vec, sin_vec) = rope_tables(head_dim, rope_base, context_limit);
        let half = head_dim / 2;
        let (cos, sin) = Tensor::from_slice(&cos_vec, (context_limit, half), &device)
            .and_then(|c| {
                Ok((
                    c,
                    Tensor::from_slice(&sin_vec, (context_limit, half), &device)?,
                ))
            })
            .map_err(|e| bad(e.to_string()))?;
        check_shapes(
            &embed, &output_t, &layers, n_embd, n_head, n_kv_head, head_dim,
        )
        .map_err(bad)?;
        if norm.elem_count() != n_embd {
            return Err(bad(format!(
                "output_norm.weight has {} values, not {n_embd}",
                norm.elem_count()
            )));
        }
        let cfg = ModelConfig {
            arch,
            n_layer,
            n_embd,
            n_head,
            n_kv_head,
            head_dim,
            rms_eps,
            rope_base,
            trained_context,
            context_limit,
            vocab_size,
        };
        let model = Model {
            cfg,
            embed,
            layers,
            norm_vec: vec1(&norm).map_err(bad)?,
            norm,
            output_t,
            output,
            cos,
            sin,
            cos_vec,
            sin_vec,
            cache: Vec::new(),
            capacity: 0,
            len: 0,
            device,
            batched_ready: false,
            stored_block_limit: STORED_BLOCK_LIMIT,
        };
        Ok(model)
    }

    /// Chunks of several tokens that end at or before position `limit` run
    /// on the stored blocks (the `gemv` module); later ones on the batched
    /// path. The choice depends on where a chunk ends, not on how it was cut
    /// or what ran before, so a prompt gives the same logits whether its
    /// prefix was evaluated here or restored from disk. Default
    /// [`STORED_BLOCK_LIMIT`]; 0 sends every multi-token chunk to the
    /// batched path.
    pub fn set_stored_block_limit(&mut self, limit: usize) {
        self.stored_block_limit = limit;
    }

    /// Runs each weight's batched matmul once, on zeros, all weights at
    /// once on the current rayon pool, before the first chunk that takes
    /// the batched path. candle converts a quantized weight into its
    /// batched-kernel layout the first time a multi-row matmul meets it,
    /// one weight after another on one thread; done here, the conversion
    /// runs on every thread of the pool. The shapes are the ones the prompt
    /// path uses (several rows per layer weight, one row for the output
    /// head), so nothing is converted that a prompt would not convert
    /// anyway.
    fn repack_weights(&self) -> std::result::Result<(), String> {
        use rayon::prelude::*;
        let mut jobs: Vec<(&QMatMul, usize)> = Vec::with_capacity(self.layers.len() * 7 + 1);
        for l in &self.layers {
            for m in [&l.mq, &l.mk, &l.mv, &l.wo, &l.mgate, &l.mup, &l.down] {
                jobs.push((m, 2));
            }
        }
        jobs.push((&self.output, 1));
        jobs.into_par_iter()
            .try_for_each(|(m, rows)| -> std::result::Result<(), String> {
                let k = match m {
                    QMatMul::QTensor(t) => t.shape().dims2().map_err(|e| e.to_string())?.1,
                    // Dense weights have nothing to convert.
                    _ => return Ok(()),
                };
                let zeros = Tensor::zeros((1, rows, k), DType::F32, &Device::Cpu)
                    .map_err(|e| e.to_string())?;
                catch(|| m.forward(&zeros).map(drop).map_err(|e| e.to_string()))
            })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Number of positions whose K/V are cached.
    pub fn cached_len(&self) -> usize {
        self.len
    }

    /// Append the K/V of positions `0..n` to `out`: per layer, K then V,
    /// each `[kv_head][n][head_dim]` as little-endian `f32`.
    pub(crate) fn export_prefix(&self, n: usize, out: &mut Vec<u8>) {
        let n = n.min(self.len);
        let hd = self.cfg.head_dim;
        for layer in &self.cache {
            for buf in [&layer.k, &layer.v] {
                for head in 0..self.cfg.n_kv_head {
                    let at = head * self.capacity * hd;
                    for x in &buf[at..at + n * hd] {
                        out.extend_from_slice(&x.to_le_bytes());
                    }
                }
            }
        }
    }

    /// Fill an empty cache with positions `0..n` of `data`, which holds
    /// `stored ≥ n` positions in [`Self::export_prefix`]'s layout.
    pub(crate) fn restore_prefix(
        &mut self,
        stored: usize,
        n: usize,
        data: &[u8],
    ) -> std::result::Result<(), String> {
        let (kv, hd) = (self.cfg.n_kv_head, self.cfg.head_dim);
        let misfit = || "stored prefix does not fit this model instance".to_string();
        let per_buffer = kv
            .checked_mul(stored)
            .and_then(|x| x.checked_mul(hd * 4))
            .ok_or_else(misfit)?;
        let total = per_buffer
            .checked_mul(self.cfg.n_layer * 2)
            .ok_or_else(misfit)?;
        if per_buffer == 0 || n > stored || n >= self.cfg.context_limit || data.len() != total {
            return Err(misfit());
        }
        self.len = 0;
        self.ensure_capacity(n)?;
        let cap = self.capacity;
        let mut chunks = data.chunks_exact(per_buffer);
        for layer in &mut self.cache {
            for buf in [&mut layer.k, &mut layer.v] {
                let stored_buf = chunks.next().ok_or("short prefix data")?;
                for head in 0..kv {
                    let from = &stored_buf[head * stored * hd * 4..][..n * hd * 4];
                    let to = &mut buf[head * cap * hd..][..n * hd];
                    for (x, b) in to.iter_mut().zip(from.chunks_exact(4)) {
                        *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    }
                }
            }
        }
        self.len = n;
        Ok(())
    }

    /// Forget cached positions from `len` on (a rewind). Never grows.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Run `tokens` at positions `pos..pos + tokens.len()` and return the
    /// logits of the last one. `pos` must not exceed [`Self::cached_len`]:
    /// the cache is rewound to `pos` first.
    pub fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(LocalError::Inference("forward with no tokens".into()));
        }
        if pos > self.len {
            return Err(LocalError::Inference(format!(
                "forward at position {pos} past the cache ({} positions)",
                self.len
            )));
        }
        let end = pos + tokens.len();
        if end > self.cfg.context_limit {
            return Err(LocalError::ContextTooLong {
                prompt_tokens: end,
                max_new: 0,
                limit: self.cfg.context_limit,
                why: "the context limit of this model instance".into(),
            });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(LocalError::Inference(format!(
                "token id {bad} is outside the vocabulary"
            )));
        }
        self.len = pos;
        let result = catch(|| {
            self.ensure_capacity(end).map_err(|e| e.to_string())?;
            if tokens.len() == 1 || end <= self.stored_block_limit {
                return crate::decode::run(self, tokens, pos);
            }
            if !self.batched_ready {
                self.repack_weights()?;
                self.batched_ready = true;
            }
            self.forward_inner(tokens, pos).map_err(|e| e.to_string())
        });
        match result {
            Ok(logits) => {
                self.len = end;
                Ok(logits)
            }
            Err(e) => {
                // The cache may hold a partial write: trust only what came before.
                self.len = pos;
                Err(LocalError::Inference(e))
            }
        }
    }

    fn ensure_capacity(&mut self, needed: usize) -> std::result::Result<(), String> {
        if needed <= self.capacity && !self.cache.is_empty() {
            return Ok(());
        }
        let mut cap = self.capacity.max(256);
        while cap < needed {
            cap *= 2;
        }
        let cap = cap.min(self.cfg.context_limit).max(needed);
        let (kv, hd) = (self.cfg.n_kv_head, self.cfg.head_dim);
        let keep = self.len * hd;
        let mut fresh = Vec::with_capacity(self.cfg.n_layer);
        for i in 0..self.cfg.n_layer {
            let mut k = vec![0f32; kv * cap * hd];
            let mut v = vec![0f32; kv * cap * hd];
            if let Some(old) = self.cache.get(i) {
                for head in 0..kv {
                    let (from, to) = (head * self.capacity * hd, head * cap * hd);
                    k[to..to + keep].copy_from_slice(&old.k[from..from + keep]);
                    v[to..to + keep].copy_from_slice(&old.v[from..from + keep]);
                }
            }
            fresh.push(LayerCache { k, v });
        }
        self.cache = fresh;
        self.capacity = cap;
        Ok(())
    }

    fn forward_inner(&mut self, tokens: &[u32], pos: usize) -> candle_core::Result<Vec<f32>> {
        let seq = tokens.len();
        let kv_len = pos + seq;
        let cap = self.capacity;
        let cfg = &self.cfg;
        let (h, kv, hd) = (cfg.n_head, cfg.n_kv_head, cfg.head_dim);
        let rep = h / kv;
        let ids = Tensor::new(tokens, &self.device)?.unsqueeze(0)?;
        let mut x = self.embed.embedding(&ids)?.to_dtype(DType::F32)?;
        let cos = self.cos.narrow(0, pos, seq)?;
        let sin = self.sin.narrow(0, pos, seq)?;
        let mask = if seq > 1 {
            Some(causal_mask(seq, pos, &self.device)?)
        } else {
            None
        };
        let scale = 1.0 / (hd as f64).sqrt();
        for (layer, cache) in self.layers.iter().zip(self.cache.iter_mut()) {
            let residual = &x;
            let xn = candle_nn::ops::rms_norm(&x, &layer.attn_norm, cfg.rms_eps as f32)?;
            let (q, k, v) = (
                layer.mq.forward(&xn)?,
                layer.mk.forward(&xn)?,
                layer.mv.forward(&xn)?,
            );
            let (q, k, v) = match &layer.bias {
                Some((bq, bk, bv)) => (
                    q.broadcast_add(bq)?,
                    k.broadcast_add(bk)?,
                    v.broadcast_add(bv)?,
                ),
                None => (q, k, v),
            };
            let q = q.reshape((1, seq, h, hd))?.transpose(1, 2)?.contiguous()?;
            let k = k.reshape((1, seq, kv, hd))?.transpose(1, 2)?.contiguous()?;
            let v = v.reshape((1, seq, kv, hd))?.transpose(1, 2)?.contiguous()?;
            let (q, k) = match cfg.arch {
                Arch::Qwen2 => (
                    candle_nn::rotary_emb::rope(&q, &cos, &sin)?,
                    candle_nn::rotary_emb::rope(&k, &cos, &sin)?,
                ),
                Arch::Llama => (
                    candle_nn::rotary_emb::rope_i(&q, &cos, &sin)?,
                    candle_nn::rotary_emb::rope_i(&k, &cos, &sin)?,
                ),
            };
            let k_all = append_to_cache(&mut cache.k, &k, (kv, cap, hd), pos)?;
            let v_all = append_to_cache(&mut cache.v, &v, (kv, cap, hd), pos)?;
            // Group the query heads that share a KV head: no copy of K/V.
            let qg = q.reshape((1, kv, rep * seq, hd))?;
            let scores = (qg.matmul(&k_all.t()?)? * scale)?;
            let scores = match &mask {
                Some(m) => scores
                    .reshape((1, kv, rep, seq, kv_len))?
                    .broadcast_add(m)?
                    .reshape((1, kv, rep * seq, kv_len))?,
                None => scores,
            };
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let attn = probs.matmul(&v_all)?; // (1, kv, rep*seq, hd)
            let attn = attn
                .reshape((1, h, seq, hd))?
                .transpose(1, 2)?
                .reshape((1, seq, h * hd))?;
            let x1 = (layer.wo.forward(&attn)? + residual)?;
            let xn = candle_nn::ops::rms_norm(&x1, &layer.ffn_norm, cfg.rms_eps as f32)?;
            let (g, u) = (layer.mgate.forward(&xn)?, layer.mup.forward(&xn)?);
            let ff = layer.down.forward(&(candle_nn::ops::silu(&g)? * u)?)?;
            x = (ff + x1)?;
        }
        let last = x.narrow(1, seq - 1, 1)?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, cfg.rms_eps as f32)?;
        let logits = self.output.forward(&last)?;
        logits.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
    }
}

/// Every weight has the shape the metadata implies: a corrupt file gives an
/// error at load rather than a failure (or silent truncation) mid-run.
fn check_shapes(
    embed: &QTensor,
    output: &QTensor,
    layers: &[Layer],
    n_embd: usize,
    n_head: usize,
    n_kv_head: usize,
    head_dim: usize,
) -> std::result::Result<(), String> {
    let (q_dim, kv_dim) = (n_head * head_dim, n_kv_head * head_dim);
    let dims = |name: &str, t: &QTensor| t.shape().dims2().map_err(|e| format!("{name}: {e}"));
    let (vocab, width) = dims("token_embd.weight", embed)?;
    if width != n_embd || dims("output.weight", output)? != (vocab, n_embd) {
        return Err(format!(
            "embedding or output weight is not ({vocab}, {n_embd})"
        ));
    }
    for (i, l) in layers.iter().enumerate() {
        let ffn = dims("ffn_up", &l.up)?.0;
        let expected: [(&str, &QTensor, (usize, usize)); 7] = [
            ("attn_q", &l.wq, (q_dim, n_embd)),
            ("attn_k", &l.wk, (kv_dim, n_embd)),
            ("attn_v", &l.wv, (kv_dim, n_embd)),
            ("attn_output", &l.wo_t, (n_embd, q_dim)),
            ("ffn_gate", &l.gate, (ffn, n_embd)),
            ("ffn_up", &l.up, (ffn, n_embd)),
            ("ffn_down", &l.down_t, (n_embd, ffn)),
        ];
        for (name, t, want) in expected {
            let got = dims(name, t)?;
            if got != want {
                return Err(format!(
                    "blk.{i}.{name}.weight is {got:?}, expected {want:?}"
                ));
            }
        }
        let vectors = [
            ("attn_norm", l.attn_norm_vec.len(), n_embd),
            ("ffn_norm", l.ffn_norm_vec.len(), n_embd),
        ];
        let biases = l.bias_vec.as_ref().map(|[q, k, v]| {
            [
                ("attn_q.bias", q.len(), q_dim),
                ("attn_k.bias", k.len(), kv_dim),
                ("attn_v.bias", v.len(), kv_dim),
            ]
        });
        for (name, got, want) in vectors.into_iter().chain(biases.into_iter().flatten()) {
            if got != want {
                return Err(format!("blk.{i}.{name} has {got} values, expected {want}"));
            }
        }
    }
    Ok(())
}

/// Write `new` (`(1, kv, seq, hd)`, positions `pos..pos + seq`) into a
/// layer's cache buffer and return the cache's first `pos + seq` positions
/// as a `(1, kv, pos + seq, hd)` tensor.
fn append_to_cache(
    buf: &mut [f32],
    new: &Tensor,
    (kv, cap, hd): (usize, usize, usize),
    pos: usize,
) -> candle_core::Result<Tensor> {
    let seq = new.dim(2)?;
    let data = new.flatten_all()?.to_vec1::<f32>()?;
    let kv_len = pos + seq;
    let mut all = Vec::with_capacity(kv * kv_len * hd);
    for head in 0..kv {
        let base = head * cap * hd;
        buf[base + pos * hd..base + kv_len * hd]
            .copy_from_slice(&data[head * seq * hd..(head + 1) * seq * hd]);
        all.extend_from_slice(&buf[base..base + kv_len * hd]);
    }
    Tensor::from_vec(all, (1, kv, kv_len, hd), new.device())
}

/// Keeps memory the batched path frees for its next use. Each candle op
/// allocates its output, tens of megabytes on a long prompt, and glibc
/// hands blocks that large back to the kernel when they are freed (as
/// their own mappings, or by trimming the heap), so the next op faults
/// fresh zeroed pages in again: up to a fifth of a long prompt's time. With
/// these thresholds they stay in the heap, at the cost of holding the
/// largest prompt's working memory until the process ends. Process-wide
/// and set once; only a process that loads a model gets it.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: mallopt only sets allocator parameters; both values
            // are within the ranges glibc accepts (the mmap threshold's
            // maximum on 64-bit is 32 MiB).
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
            }
        });
    }
}

fn vec1(t: &Tensor) -> std::result::Result<Vec<f32>, String> {
    t.flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| e.to_string())
}

fn qmatmul(t: Arc<QTensor>) -> std::result::Result<QMatMul, String> {
    QMatMul::from_arc(t).map_err(|e| e.to_string())
}

/// Rotary tables `[position][head_dim / 2]`: cosines, sines.
fn rope_tables(head_dim: usize, base: f32, len: usize) -> (Vec<f32>, Vec<f32>) {
    let inv: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / head_dim as f32))
        .collect();
    let mut cos = Vec::with_capacity(len * inv.len());
    let mut sin = Vec::with_capacity(len * inv.len());
    for p in 0..len {
        for f in &inv {
            let angle = p as f32 * f;
            cos.push(angle.cos());
            sin.push(angle.sin());
        }
    }
    (cos, sin)
}

/// Additive mask `(seq, pos + seq)`: query `i` (at position `pos + i`) sees
/// keys `0..=pos + i`.
fn causal_mask(seq: usize, pos: usize, device: &Device) -> candle_core::Result<Tensor> {
    let kv_len = pos + seq;
    let data: Vec<f32> = (0..seq)
        .flat_map(|i| (0..kv_len).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(data, (seq, kv_len), device)
}
