//! The one-token forward pass (generation), as plain loops over `f32`
//! slices and the quantized weights' blocks ([`crate::gemv`]).
//!
//! It computes exactly what the candle path in [`crate::model`] computes for
//! a one-token chunk — same norms, rotary embedding, grouped-query attention
//! over the cache, SwiGLU — without building some twenty-five tensors per
//! layer per token.

use crate::gemv::{dequantize_row, gemv, gemv_shared};
use crate::model::{Arch, Model};
use rayon::prelude::*;

/// Cache positions above which attention is split across threads by head.
const PARALLEL_ATTENTION_FROM: usize = 256;

/// Run `token` at position `pos` (the cache holds `0..pos` and has room for
/// one more) and return the logits.
pub(crate) fn step(model: &mut Model, token: u32, pos: usize) -> Result<Vec<f32>, String> {
    let cfg = model.cfg.clone();
    let (h, kv, hd) = (cfg.n_head, cfg.n_kv_head, cfg.head_dim);
    let cap = model.capacity;
    let eps = cfg.rms_eps as f32;
    let half = hd / 2;
    let cos = &model.cos_vec[pos * half..(pos + 1) * half];
    let sin = &model.sin_vec[pos * half..(pos + 1) * half];
    let scale = 1.0 / (hd as f32).sqrt();

    let mut x = dequantize_row(&model.embed, token as usize)?;
    let mut q = vec![0f32; h * hd];
    let mut k = vec![0f32; kv * hd];
    let mut v = vec![0f32; kv * hd];
    let mut attn = vec![0f32; h * hd];
    let ffn = model.layers.first().map_or(0, |l| l.up.shape().dims()[0]);
    let mut gate = vec![0f32; ffn];
    let mut up = vec![0f32; ffn];

    for (layer, cache) in model.layers.iter().zip(model.cache.iter_mut()) {
        let xn = rms_norm(&x, &layer.attn_norm_vec, eps);
        gemv_shared(
            &[&layer.wq, &layer.wk, &layer.wv],
            &xn,
            &mut [&mut q, &mut k, &mut v],
        )?;
        if let Some([bq, bk, bv]) = &layer.bias_vec {
            add(&mut q, bq);
            add(&mut k, bk);
            add(&mut v, bv);
        }
        for head in q.chunks_mut(hd).chain(k.chunks_mut(hd)) {
            rope(cfg.arch, head, cos, sin);
        }
        for g in 0..kv {
            let at = g * cap * hd + pos * hd;
            cache.k[at..at + hd].copy_from_slice(&k[g * hd..(g + 1) * hd]);
            cache.v[at..at + hd].copy_from_slice(&v[g * hd..(g + 1) * hd]);
        }
        let kv_len = pos + 1;
        let rep = h / kv;
        let head_out = |(i, out): (usize, &mut [f32])| {
            let g = i / rep;
            let keys = &cache.k[g * cap * hd..g * cap * hd + kv_len * hd];
            let values = &cache.v[g * cap * hd..g * cap * hd + kv_len * hd];
            attend(&q[i * hd..(i + 1) * hd], keys, values, scale, out);
        };
        if kv_len >= PARALLEL_ATTENTION_FROM {
            attn.par_chunks_mut(hd).enumerate().for_each(head_out);
        } else {
            attn.chunks_mut(hd).enumerate().for_each(head_out);
        }
        let o = gemv(&layer.wo_t, &attn)?;
        add(&mut x, &o);

        let xn = rms_norm(&x, &layer.ffn_norm_vec, eps);
        gemv_shared(&[&layer.gate, &layer.up], &xn, &mut [&mut gate, &mut up])?;
        for (g, u) in gate.iter_mut().zip(&up) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
        let down = gemv(&layer.down_t, &gate)?;
        add(&mut x, &down);
    }
    let xn = rms_norm(&x, &model.norm_vec, eps);
    gemv(&model.output_t, &xn)
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let mean_square = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (mean_square + eps).sqrt();
    x.iter().zip(weight).map(|(v, w)| v * inv * w).collect()
}

/// Rotate one head in place. Qwen2 pairs dimension `i` with `i + hd/2`
/// (NeoX); llama's GGUF weights pair `2i` with `2i + 1`.
fn rope(arch: Arch, head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = head.len() / 2;
    for i in 0..half {
        let (a, b) = match arch {
            Arch::Qwen2 => (i, i + half),
            Arch::Llama => (2 * i, 2 * i + 1),
        };
        let (x0, x1) = (head[a], head[b]);
        head[a] = x0 * cos[i] - x1 * sin[i];
        head[b] = x0 * sin[i] + x1 * cos[i];
    }
}

/// Softmax attention of one query head over `kv_len` cached keys/values
/// (`[kv_len][hd]` each), written to `out`.
fn attend(q: &[f32], keys: &[f32], values: &[f32], scale: f32, out: &mut [f32]) {
    let hd = q.len();
    let mut scores: Vec<f32> = keys
        .chunks_exact(hd)
        .map(|key| dot(q, key) * scale)
        .collect();
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for s in &mut scores {
        *s = (*s - max).exp();
        sum += *s;
    }
    out.fill(0.0);
    for (p, value) in scores.iter().zip(values.chunks_exact(hd)) {
        let w = p / sum;
        for (o, v) in out.iter_mut().zip(value) {
            *o += w * v;
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums so the compiler can keep them in one vector register.
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + ra.iter().zip(rb).map(|(x, y)| x * y).sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_over_one_position_returns_its_value() {
        let q = [1.0, 0.0, 0.0, 0.0];
        let keys = [0.5, 0.5, 0.5, 0.5];
        let values = [1.0, 2.0, 3.0, 4.0];
        let mut out = [0f32; 4];
        attend(&q, &keys, &values, 0.5, &mut out);
        assert_eq!(out, values);
    }

    #[test]
    fn attention_weights_follow_the_softmax_of_the_scores() {
        let q = [1.0, 0.0];
        let keys = [0.0, 0.0, 2.0f32.ln(), 0.0]; // scores 0 and ln 2: weights 1/3, 2/3
        let values = [3.0, 0.0, 0.0, 3.0];
        let mut out = [0f32; 2];
        attend(&q, &keys, &values, 1.0, &mut out);
        assert!(
            (out[0] - 1.0).abs() < 1e-5 && (out[1] - 2.0).abs() < 1e-5,
            "{out:?}"
        );
    }

    #[test]
    fn rope_pairs_differ_between_architectures() {
        let cos = [0.0, 1.0];
        let sin = [1.0, 0.0];
        let mut neox = [1.0, 2.0, 3.0, 4.0];
        rope(Arch::Qwen2, &mut neox, &cos, &sin);
        // pair (0, 2) rotated by 90°, pair (1, 3) unchanged
        assert_eq!(neox, [-3.0, 2.0, 1.0, 4.0]);
        let mut interleaved = [1.0, 2.0, 3.0, 4.0];
        rope(Arch::Llama, &mut interleaved, &cos, &sin);
        // pair (0, 1) rotated by 90°, pair (2, 3) unchanged
        assert_eq!(interleaved, [-2.0, 1.0, 3.0, 4.0]);
    }

    #[test]
    fn dot_handles_lengths_that_are_not_multiples_of_eight() {
        let a: Vec<f32> = (0..13).map(|i| i as f32).collect();
        let b = vec![1.0; 13];
        assert_eq!(dot(&a, &b), 78.0);
    }
}
