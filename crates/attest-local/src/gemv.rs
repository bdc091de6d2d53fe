//! Matrix–vector products over GGUF weights in their stored block format,
//! for the one-token decode step and for prompts of a few tokens.
//!
//! Why not candle's `QMatMul` here: on AVX-512 machines candle repacks Q4_K
//! weights into tiles a third larger than the file's blocks, which pays off
//! for the many rows of a prompt but reads a third more bytes when one row
//! is multiplied, and decoding reads every weight once per token.
//! Repacking also takes 0.6–2 s, which a short prompt would not earn back.
//! The dot products are candle's (`GgmlType::vec_dot`, the ggml kernels),
//! except Q4_K and Q6_K on AVX-512 machines (`kdot`, which for several
//! inputs unpacks each weight block once per group of them); this module
//! walks the rows, in parallel (the `team` of a generation, else the
//! current rayon pool, so that the `threads` setting holds), and lets
//! several weights that share one input (Q/K/V, gate/up) run in a single
//! parallel region.

use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8K, BlockQ8_0, BlockQ8_1, GgmlType,
};
use candle_core::quantized::{GgmlDType, QTensor};
use half::{bf16, f16};

use crate::kdot;

/// Rows of one weight handed to a worker at a time: large enough that the
/// scheduling cost vanishes, small enough to balance two to a few threads.
const ROWS_PER_TASK: usize = 64;

/// One output row's dot products against each prepared input, written to
/// the slice (one value per input).
type RowDots<'a> = Box<dyn Fn(usize, &mut [f32]) + Sync + 'a>;

/// A row's dot product with one input.
type Dot<T> = fn(&[T], &[<T as GgmlType>::VecDotType]) -> f32;
/// A row's dot products with several inputs, one after another.
type MultiDot<T> = fn(&[T], &[<T as GgmlType>::VecDotType], &mut [f32]);

/// `ys[i] = W_i · x` for several weights `W_i` of shape `(n_i, k)` that share
/// the input `x` (length `k`). Each `ys[i]` must have length `n_i`.
pub fn gemv_shared(ws: &[&QTensor], x: &[f32], ys: &mut [&mut [f32]]) -> Result<(), String> {
    gemm_shared(ws, x, 1, ys)
}

/// `W · x` for one weight.
pub fn gemv(w: &QTensor, x: &[f32]) -> Result<Vec<f32>, String> {
    let (n, _) = w.shape().dims2().map_err(|e| e.to_string())?;
    let mut y = vec![0f32; n];
    gemv_shared(&[w], x, &mut [&mut y])?;
    Ok(y)
}

/// [`gemv_shared`] for `m` inputs at once: `xs` holds them row after row
/// (`m × k`) and each `ys[i]` receives `m × n_i` outputs, input after
/// input. Each weight row is read once and met by all `m` inputs while it
/// is in cache, which is what makes a few-token prompt cheap without the
/// batched kernels' repacked weights.
pub fn gemm_shared(
    ws: &[&QTensor],
    xs: &[f32],
    m: usize,
    ys: &mut [&mut [f32]],
) -> Result<(), String> {
    if ws.len() != ys.len() {
        return Err(format!("{} weights but {} outputs", ws.len(), ys.len()));
    }
    let mut dots = Vec::with_capacity(ws.len());
    for (w, y) in ws.iter().zip(ys.iter()) {
        let (n, k) = w.shape().dims2().map_err(|e| e.to_string())?;
        if m == 0 || k * m != xs.len() || n * m != y.len() {
            return Err(format!(
                "shape mismatch: weight ({n}, {k}), {m} inputs in {}, output {}",
                xs.len(),
                y.len()
            ));
        }
        dots.push(row_dots(w, xs, m)?);
    }
    // The tasks write rows in order, each with its `m` outputs, so that a
    // task's rows are one slice; for one input that is the outputs' own
    // layout, and they are written in place (generation's path).
    let mut scratch: Vec<Vec<f32>> = match m {
        1 => Vec::new(),
        _ => ys.iter().map(|y| vec![0f32; y.len()]).collect(),
    };
    let bufs: Vec<&mut [f32]> = match m {
        1 => ys.iter_mut().map(|y| &mut **y).collect(),
        _ => scratch.iter_mut().map(Vec::as_mut_slice).collect(),
    };
    let mut tasks: Vec<(&RowDots, usize, &mut [f32])> = Vec::new();
    for (dot, buf) in dots.iter().zip(bufs) {
        for (i, chunk) in buf.chunks_mut(ROWS_PER_TASK * m).enumerate() {
            tasks.push((dot, i * ROWS_PER_TASK, chunk));
        }
    }
    crate::team::for_each(tasks, |(dot, row0, out)| {
        for (i, row_out) in out.chunks_exact_mut(m).enumerate() {
            dot(row0 + i, row_out);
        }
    });
    for (buf, y) in scratch.iter().zip(ys.iter_mut()) {
        let n = buf.len() / m;
        for (row, outs) in buf.chunks_exact(m).enumerate() {
            for (t, v) in outs.iter().enumerate() {
                y[t * n + row] = *v;
            }
        }
    }
    Ok(())
}

/// Row `row` of `w` as floats (an embedding lookup).
pub fn dequantize_row(w: &QTensor, row: usize) -> Result<Vec<f32>, String> {
    let (n, k) = w.shape().dims2().map_err(|e| e.to_string())?;
    if row >= n {
        return Err(format!("row {row} of a weight with {n} rows"));
    }
    let mut out = vec![0f32; k];
    macro_rules! rows {
        ($t:ty) => {{
            let blocks = blocks::<$t>(w, n, k)?;
            let kb = k / <$t>::BLCK_SIZE;
            <$t>::to_float(&blocks[row * kb..(row + 1) * kb], &mut out);
        }};
    }
    dispatch!(w.dtype(), rows);
    Ok(out)
}

/// Call `$m!(BlockType)` for the block type of `$dtype`.
macro_rules! dispatch {
    ($dtype:expr, $m:ident) => {
        match $dtype {
            GgmlDType::F32 => $m!(f32),
            GgmlDType::F16 => $m!(f16),
            GgmlDType::BF16 => $m!(bf16),
            GgmlDType::Q4_0 => $m!(BlockQ4_0),
            GgmlDType::Q4_1 => $m!(BlockQ4_1),
            GgmlDType::Q5_0 => $m!(BlockQ5_0),
            GgmlDType::Q5_1 => $m!(BlockQ5_1),
            GgmlDType::Q8_0 => $m!(BlockQ8_0),
            GgmlDType::Q8_1 => $m!(BlockQ8_1),
            GgmlDType::Q2K => $m!(BlockQ2K),
            GgmlDType::Q3K => $m!(BlockQ3K),
            GgmlDType::Q4K => $m!(BlockQ4K),
            GgmlDType::Q5K => $m!(BlockQ5K),
            GgmlDType::Q6K => $m!(BlockQ6K),
            GgmlDType::Q8K => $m!(BlockQ8K),
            #[allow(unreachable_patterns)]
            other => return Err(format!("unsupported weight type {other:?}")),
        }
    };
}
pub(crate) use dispatch;

fn row_dots<'a>(w: &'a QTensor, xs: &[f32], m: usize) -> Result<RowDots<'a>, String> {
    let (n, k) = w.shape().dims2().map_err(|e| e.to_string())?;
    // The two types a Q4_K_M file is made of, where this CPU has faster
    // kernels than candle's.
    match w.dtype() {
        GgmlDType::Q4K => {
            if let Some(dot) = kdot::q4k() {
                return typed_row_dots(blocks(w, n, k)?, k, xs, m, dot, kdot::q4k_multi());
            }
        }
        GgmlDType::Q6K => {
            if let Some(dot) = kdot::q6k() {
                return typed_row_dots(blocks(w, n, k)?, k, xs, m, dot, kdot::q6k_multi());
            }
        }
        _ => {}
    }
    macro_rules! make {
        ($t:ty) => {
            return typed_row_dots::<$t>(blocks::<$t>(w, n, k)?, k, xs, m, candle_dot::<$t>, None)
        };
    }
    dispatch!(w.dtype(), make);
}

/// candle's kernel for `T` (AVX2 on x86-64).
fn candle_dot<T: GgmlType>(w: &[T], x: &[T::VecDotType]) -> f32 {
    T::vec_dot(w.len() * T::BLCK_SIZE, w, x)
}

fn typed_row_dots<'a, T: GgmlType + 'static>(
    blocks: &'a [T],
    k: usize,
    xs: &[f32],
    m: usize,
    dot: Dot<T>,
    multi: Option<MultiDot<T>>,
) -> Result<RowDots<'a>, String> {
    let kb = k / T::BLCK_SIZE;
    let mut xq = vec![T::VecDotType::zeros(); kb * m];
    for (x, q) in xs.chunks_exact(k).zip(xq.chunks_exact_mut(kb)) {
        if T::DIRECT_COPY {
            T::VecDotType::direct_copy(x, q);
        } else {
            T::VecDotType::from_float(x, q);
        }
    }
    Ok(Box::new(move |row, out| {
        let w = &blocks[row * kb..(row + 1) * kb];
        match multi {
            Some(multi) if out.len() > 1 => multi(w, &xq, out),
            _ => {
                for (o, q) in out.iter_mut().zip(xq.chunks_exact(kb)) {
                    *o = dot(w, q);
                }
            }
        }
    }))
}

/// The weight's storage as `n * k / BLCK_SIZE` blocks of `T`, checked.
fn blocks<T: GgmlType>(w: &QTensor, n: usize, k: usize) -> Result<&[T], String> {
    if w.dtype() != T::DTYPE {
        return Err(format!("weight is {:?}, not {:?}", w.dtype(), T::DTYPE));
    }
    if !k.is_multiple_of(T::BLCK_SIZE) {
        return Err(format!(
            "row length {k} is not a multiple of the {:?} block ({})",
            T::DTYPE,
            T::BLCK_SIZE
        ));
    }
    let data = match w.data().map_err(|e| e.to_string())? {
        std::borrow::Cow::Borrowed(d) => d,
        std::borrow::Cow::Owned(_) => return Err("weight is not in CPU memory".into()),
    };
    let count = n * (k / T::BLCK_SIZE);
    if data.len() != count * std::mem::size_of::<T>() {
        return Err(format!(
            "weight holds {} bytes, expected {count} blocks of {}",
            data.len(),
            std::mem::size_of::<T>()
        ));
    }
    if data.as_ptr().align_offset(std::mem::align_of::<T>()) != 0 {
        return Err("weight storage is misaligned".into());
    }
    // SAFETY: candle keeps CPU weights as a `Vec<T>` of this very block type
    // (dtype checked above); size and alignment are checked; the slice
    // borrows `w`, which outlives it.
    Ok(unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<T>(), count) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn weight(dtype: GgmlDType, n: usize, k: usize) -> (QTensor, Vec<f32>) {
        let data: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        let t = Tensor::from_vec(data, (n, k), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&t, dtype).unwrap();
        let dense = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        (q, dense)
    }

    fn reference(dense: &[f32], x: &[f32], n: usize, k: usize) -> Vec<f32> {
        (0..n)
            .map(|r| (0..k).map(|c| dense[r * k + c] * x[c]).sum())
            .collect()
    }

    #[test]
    fn matches_the_dequantized_product_for_each_block_type() {
        let (n, k) = (200, 512);
        let x: Vec<f32> = (0..k).map(|i| ((i % 13) as f32 - 6.0) / 7.0).collect();
        for dtype in [
            GgmlDType::F32,
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q8_0,
            GgmlDType::Q4K,
            GgmlDType::Q6K,
        ] {
            let (w, dense) = weight(dtype, n, k);
            let want = reference(&dense, &x, n, k);
            let got = gemv(&w, &x).unwrap();
            for (r, (g, e)) in got.iter().zip(&want).enumerate() {
                // The input is quantized to 8 bits for the quantized types.
                let tol = 0.02 * e.abs().max(1.0);
                assert!((g - e).abs() < tol, "{dtype:?} row {r}: {g} vs {e}");
            }
        }
    }

    #[test]
    fn shared_input_fills_every_output() {
        let k = 256;
        let x: Vec<f32> = (0..k).map(|i| (i as f32).sin()).collect();
        let (a, _) = weight(GgmlDType::Q4K, 130, k);
        let (b, _) = weight(GgmlDType::Q6K, 20, k);
        let mut ya = vec![f32::NAN; 130];
        let mut yb = vec![f32::NAN; 20];
        gemv_shared(&[&a, &b], &x, &mut [&mut ya, &mut yb]).unwrap();
        assert_eq!(ya, gemv(&a, &x).unwrap());
        assert_eq!(yb, gemv(&b, &x).unwrap());
    }

    #[test]
    fn several_inputs_get_what_each_gets_alone() {
        let (n, k, m) = (70, 512, 5);
        let (w, _) = weight(GgmlDType::Q4K, n, k);
        let (w2, _) = weight(GgmlDType::Q6K, 9, k);
        let xs: Vec<f32> = (0..m * k)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0)
            .collect();
        let mut ys = vec![f32::NAN; m * n];
        let mut ys2 = vec![f32::NAN; m * 9];
        gemm_shared(&[&w, &w2], &xs, m, &mut [&mut ys, &mut ys2]).unwrap();
        for (t, x) in xs.chunks_exact(k).enumerate() {
            assert_eq!(
                ys[t * n..(t + 1) * n],
                gemv(&w, x).unwrap()[..],
                "input {t}"
            );
            assert_eq!(
                ys2[t * 9..(t + 1) * 9],
                gemv(&w2, x).unwrap()[..],
                "input {t}"
            );
        }
        let mut short = vec![0f32; n];
        assert!(gemm_shared(&[&w], &xs, m, &mut [&mut short]).is_err());
    }

    #[test]
    fn shape_mismatches_are_errors_not_panics() {
        let (w, _) = weight(GgmlDType::Q4K, 16, 256);
        assert!(gemv(&w, &[0.0; 100]).is_err());
        let mut short = vec![0f32; 3];
        assert!(gemv_shared(&[&w], &[0.0; 256], &mut [&mut short]).is_err());
        assert!(dequantize_row(&w, 16).is_err());
        assert_eq!(dequantize_row(&w, 15).unwrap().len(), 256);
    }
}
