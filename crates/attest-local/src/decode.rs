//! The forward pass for one token (generation) or a few (a short prompt),
//! as plain loops over `f32` slices and the quantized weights' blocks
//! ([`crate::gemv`]).
//!
//! It computes exactly what the candle path in [`crate::model`] computes for
//! the same chunk — same norms, rotary embedding, grouped-query attention
//! over the cache, SwiGLU — without building some twenty-five tensors per
//! layer, and without the batched kernels' repacked weights.

use crate::gemv::{dequantize_row, gemm_shared, gemv};
use crate::model::{Arch, Model};

/// Query-key products per layer above which attention is split across
/// threads.
const PARALLEL_ATTENTION_FROM: usize = 256;

/// Run `tokens` at positions `pos..pos + tokens.len()` (the cache holds
/// `0..pos` and has room for them) and return the logits of the last one.
pub(crate) fn run(model: &mut Model, tokens: &[u32], pos: usize) -> Result<Vec<f32>, String> {
    let cfg = model.cfg.clone();
    let m = tokens.len();
    let (h, kv, hd) = (cfg.n_head, cfg.n_kv_head, cfg.head_dim);
    let (qd, kvd) = (h * hd, kv * hd);
    let cap = model.capacity;
    let eps = cfg.rms_eps as f32;
    let half = hd / 2;
    let scale = 1.0 / (hd as f32).sqrt();
    let end = pos + m;
    if m == 0 || end > cap || end * half > model.cos_vec.len() {
        return Err(format!("{m} tokens at {pos} do not fit the cache ({cap})"));
    }

    let mut x = Vec::with_capacity(m * cfg.n_embd);
    for &token in tokens {
        x.extend(dequantize_row(&model.embed, token as usize)?);
    }
    let mut q = vec![0f32; m * qd];
    let mut k = vec![0f32; m * kvd];
    let mut v = vec![0f32; m * kvd];
    let mut attn = vec![0f32; m * qd];
    let ffn = model.layers.first().map_or(0, |l| l.up.shape().dims()[0]);
    let mut gate = vec![0f32; m * ffn];
    let mut up = vec![0f32; m * ffn];
    let mut o = vec![0f32; m * cfg.n_embd];

    for (layer, cache) in model.layers.iter().zip(model.cache.iter_mut()) {
        let xn = rms_norm_rows(&x, &layer.attn_norm_vec, eps);
        gemm_shared(
            &[&layer.wq, &layer.wk, &layer.wv],
            &xn,
            m,
            &mut [&mut q, &mut k, &mut v],
        )?;
        if let Some([bq, bk, bv]) = &layer.bias_vec {
            add_rows(&mut q, bq);
            add_rows(&mut k, bk);
            add_rows(&mut v, bv);
        }
        for t in 0..m {
            let p = pos + t;
            let (cos, sin) = (
                &model.cos_vec[p * half..(p + 1) * half],
                &model.sin_vec[p * half..(p + 1) * half],
            );
            let heads = q[t * qd..(t + 1) * qd].chunks_mut(hd);
            for head in heads.chain(k[t * kvd..(t + 1) * kvd].chunks_mut(hd)) {
                rope(cfg.arch, head, cos, sin);
            }
            for g in 0..kv {
                let at = g * cap * hd + p * hd;
                let from = t * kvd + g * hd;
                cache.k[at..at + hd].copy_from_slice(&k[from..from + hd]);
                cache.v[at..at + hd].copy_from_slice(&v[from..from + hd]);
            }
        }
        let rep = h / kv;
        // Head `i` of token `t` sees the cache up to and including its own
        // position.
        let head_out = |(j, out): (usize, &mut [f32])| {
            let (t, i) = (j / h, j % h);
            let g = i / rep;
            let kv_len = pos + t + 1;
            let keys = &cache.k[g * cap * hd..g * cap * hd + kv_len * hd];
            let values = &cache.v[g * cap * hd..g * cap * hd + kv_len * hd];
            let at = t * qd + i * hd;
            attend(&q[at..at + hd], keys, values, scale, out);
        };
        if m * end >= PARALLEL_ATTENTION_FROM {
            crate::team::for_each(attn.chunks_mut(hd).enumerate().collect(), head_out);
        } else {
            attn.chunks_mut(hd).enumerate().for_each(head_out);
        }
        gemm_shared(&[&layer.wo_t], &attn, m, &mut [&mut o])?;
        add(&mut x, &o);

        let xn = rms_norm_rows(&x, &layer.ffn_norm_vec, eps);
        gemm_shared(&[&layer.gate, &layer.up], &xn, m, &mut [&mut gate, &mut up])?;
        for (g, u) in gate.iter_mut().zip(&up) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
        gemm_shared(&[&layer.down_t], &gate, m, &mut [&mut o])?;
        add(&mut x, &o);
    }
    let last = &x[(m - 1) * cfg.n_embd..];
    let xn = rms_norm(last, &model.norm_vec, eps);
    gemv(&model.output_t, &xn)
}

/// Add `bias` to each row of `rows` (rows of `bias.len()` values).
fn add_rows(rows: &mut [f32], bias: &[f32]) {
    for row in rows.chunks_exact_mut(bias.len()) {
        add(row, bias);
    }
}

/// [`rms_norm`] of each row of `x` (rows of `weight.len()` values).
fn rms_norm_rows(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(weight.len()) {
        out.extend(rms_norm(row, weight, eps));
    }
    out
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
