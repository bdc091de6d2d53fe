//! Dot products of Q4_K and Q6_K weight rows with inputs quantized to
//! Q8_K, in AVX-512 (BW, VL, VNNI), for machines that have it: one input
//! (a generated token) or several (a short prompt's tokens, each weight
//! block unpacked once for a group of them).
//!
//! Why: candle's kernels are AVX2 and chosen at compile time (the workspace
//! builds for x86-64-v3, which every supported machine has). Decoding a
//! token is mostly these two dot products, and candle's take about twice
//! the instructions per weight that 512-bit registers with VNNI's 16-bit
//! multiply-add need; on a 2-core AVX-512 machine they, not memory, set the
//! pace. The choice is made at run time, so one binary serves both kinds
//! of machine: where AVX-512 is missing the getters return `None` and the
//! caller keeps candle's kernels.
//!
//! The arithmetic is ggml's: integer sums of weight × input per 16 or 32
//! values, scaled by the block's 6- or 8-bit scales, then by the two
//! blocks' float scales. The integer part is exact, so results differ from
//! candle's only in the order of the float additions.

use candle_core::quantized::k_quants::{BlockQ4K, BlockQ6K, BlockQ8K};

/// A row's dot product with the input, block for block.
pub type Dot<W> = fn(&[W], &[BlockQ8K]) -> f32;

/// The Q4_K × Q8_K kernel, where this CPU can run it.
pub fn q4k() -> Option<Dot<BlockQ4K>> {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has the features the kernel is compiled for.
        let dot: Dot<BlockQ4K> = |w, x| unsafe { avx512::q4k(avx512::cast(w), avx512::cast(x)) };
        return Some(dot);
    }
    None
}

/// The Q6_K × Q8_K kernel, where this CPU can run it.
pub fn q6k() -> Option<Dot<BlockQ6K>> {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has the features the kernel is compiled for.
        let dot: Dot<BlockQ6K> = |w, x| unsafe { avx512::q6k(avx512::cast(w), avx512::cast(x)) };
        return Some(dot);
    }
    None
}

/// A row's dot products with several inputs, stored one after another
/// (`w.len()` blocks each), into `out` (one value per input): each weight
/// block is unpacked once for a group of inputs.
pub type MultiDot<W> = fn(&[W], &[BlockQ8K], &mut [f32]);

/// [`q4k`] for several inputs at once.
pub fn q4k_multi() -> Option<MultiDot<BlockQ4K>> {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has the features the kernel is compiled for.
        let dot: MultiDot<BlockQ4K> =
            |w, x, out| unsafe { avx512::q4k_multi(avx512::cast(w), avx512::cast(x), out) };
        return Some(dot);
    }
    None
}

/// [`q6k`] for several inputs at once.
pub fn q6k_multi() -> Option<MultiDot<BlockQ6K>> {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        // SAFETY: the CPU has the features the kernel is compiled for.
        let dot: MultiDot<BlockQ6K> =
            |w, x, out| unsafe { avx512::q6k_multi(avx512::cast(w), avx512::cast(x), out) };
        return Some(dot);
    }
    None
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{BlockQ4K, BlockQ6K, BlockQ8K};
    use half::f16;
    use std::arch::x86_64::*;
    use std::mem::{align_of, size_of};

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
    }

    // ggml's blocks, field for field. candle's own block types are these
    // (`#[repr(C)]`, the GGUF file's bytes), but their fields are private
    // to candle; the unit tests below check the reading against candle's
    // own kernels.
    #[repr(C)]
    pub struct Q4K {
        d: u16,
        dmin: u16,
        scales: [u8; 12],
        qs: [u8; 128],
    }
    #[repr(C)]
    pub struct Q6K {
        ql: [u8; 128],
        qh: [u8; 64],
        scales: [i8; 16],
        d: u16,
    }
    #[repr(C)]
    pub struct Q8K {
        d: f32,
        qs: [i8; 256],
        bsums: [i16; 16],
    }

    /// A slice of candle's blocks read as ggml's.
    pub trait Mirror {
        type Of;
    }
    impl Mirror for BlockQ4K {
        type Of = Q4K;
    }
    impl Mirror for BlockQ6K {
        type Of = Q6K;
    }
    impl Mirror for BlockQ8K {
        type Of = Q8K;
    }
    const _: () = {
        assert!(size_of::<Q4K>() == size_of::<BlockQ4K>());
        assert!(align_of::<Q4K>() == align_of::<BlockQ4K>());
        assert!(size_of::<Q6K>() == size_of::<BlockQ6K>());
        assert!(align_of::<Q6K>() == align_of::<BlockQ6K>());
        assert!(size_of::<Q8K>() == size_of::<BlockQ8K>());
        assert!(align_of::<Q8K>() == align_of::<BlockQ8K>());
    };

    pub fn cast<B: Mirror>(blocks: &[B]) -> &[B::Of] {
        // SAFETY: each mirror has its block's size and alignment (checked
        // above) and the same `#[repr(C)]` fields, all plain integers or
        // floats for which every bit pattern is valid.
        unsafe { std::slice::from_raw_parts(blocks.as_ptr().cast(), blocks.len()) }
    }

    /// 32 lanes of 16 bits: `lo` in the first 16, `hi` in the last 16.
    #[inline(always)]
    unsafe fn halves16(lo: i16, hi: i16) -> __m512i {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(lo)),
            _mm256_set1_epi16(hi),
        )
    }

    /// 32 lanes of 16 bits: lane `i` holds `first + i / 8`.
    #[inline(always)]
    unsafe fn eighths16(first: i16) -> __m512i {
        let quarter = |q: i16| _mm_set1_epi16(first + q);
        let low = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(quarter(0)), quarter(1));
        let high = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(quarter(2)), quarter(3));
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low), high)
    }

    /// Inputs a row meets per pass over its blocks in the several-input
    /// kernels: each block is unpacked once per group, and the group's
    /// accumulators stay in registers.
    const GROUP: usize = 4;

    /// What unpacking a Q4_K block needs.
    struct Q4Consts {
        low4: __m512i,
        nibble_shift: __m512i,
        scale_index: [__m512i; 4],
        min_index: __m256i,
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn q4_consts() -> Q4Consts {
        Q4Consts {
            low4: _mm512_set1_epi8(0x0F),
            // A chunk's 32 bytes hold 64 weights: the low nibbles are the
            // first 32, the high nibbles the next 32; loaded into both
            // halves of a register, the upper half is shifted down by 4.
            nibble_shift: halves16(0, 4),
            // The 16-bit scale for each product pair of chunk j:
            // sub-blocks 2j and 2j+1.
            scale_index: [
                halves16(0, 1),
                halves16(2, 3),
                halves16(4, 5),
                halves16(6, 7),
            ],
            // Each minimum covers two of the input's 16-value sums.
            min_index: _mm256_setr_epi16(
                8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15,
            ),
        }
    }

    /// Q4_K: 256 weights in 8 sub-blocks of 32, each with a 6-bit scale and
    /// a 6-bit minimum; weight = d·scale·q − dmin·min, q in 0..16. One
    /// block unpacked: the weights as bytes, each product pair's scale,
    /// the minimums (each twice) and the block's float scales.
    struct Q4Block {
        q: [__m512i; 4],
        scale: [__m512i; 4],
        mins: __m256i,
        d: f32,
        dmin: f32,
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn q4_block(w: &Q4K, c: &Q4Consts) -> Q4Block {
        // ggml's 12-byte packing of eight 6-bit scales and eight 6-bit
        // minimums, unpacked to scales in bytes 0..8, minimums in 8..16.
        let s = |i: usize| u32::from_le_bytes(w.scales[4 * i..4 * i + 4].try_into().unwrap());
        let (s0, s1, s2) = (s(0), s(1), s(2));
        let unpacked = _mm_setr_epi32(
            (s0 & 0x3f3f_3f3f) as i32,
            ((s2 & 0x0f0f_0f0f) | (((s0 >> 6) & 0x0303_0303) << 4)) as i32,
            (s1 & 0x3f3f_3f3f) as i32,
            (((s2 >> 4) & 0x0f0f_0f0f) | (((s1 >> 6) & 0x0303_0303) << 4)) as i32,
        );
        let scales_mins = _mm256_cvtepu8_epi16(unpacked);
        let scales = _mm512_castsi256_si512(scales_mins);
        // Plain loops: a closure is compiled as a function of its own, with
        // only the target features of the function that defines it; an
        // earlier version, whose helpers had none, ran 4× slower.
        let mut q = [_mm512_setzero_si512(); 4];
        let mut scale = [_mm512_setzero_si512(); 4];
        for j in 0..4 {
            let packed = _mm256_loadu_si256(w.qs.as_ptr().add(32 * j).cast());
            q[j] = _mm512_and_si512(
                _mm512_srlv_epi16(_mm512_broadcast_i64x4(packed), c.nibble_shift),
                c.low4,
            );
            scale[j] = _mm512_permutexvar_epi16(c.scale_index[j], scales);
        }
        Q4Block {
            q,
            scale,
            mins: _mm256_permutexvar_epi16(c.min_index, scales_mins),
            d: f16::from_bits(w.d).to_f32(),
            dmin: f16::from_bits(w.dmin).to_f32(),
        }
    }

    /// Adds one block's products with the input's matching block.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn q4_dot(b: &Q4Block, x: &Q8K, acc: &mut __m512, acc_min: &mut __m256) {
        let bsums = _mm256_loadu_si256(x.bsums.as_ptr().cast());
        let min_sums = _mm256_madd_epi16(b.mins, bsums);
        *acc_min = _mm256_fmadd_ps(
            _mm256_set1_ps(-x.d * b.dmin),
            _mm256_cvtepi32_ps(min_sums),
            *acc_min,
        );
        let mut sum = _mm512_setzero_si512();
        for j in 0..4 {
            let q8 = _mm512_loadu_si512(x.qs.as_ptr().add(64 * j).cast());
            sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(b.q[j], q8), b.scale[j]);
        }
        *acc = _mm512_fmadd_ps(_mm512_set1_ps(x.d * b.d), _mm512_cvtepi32_ps(sum), *acc);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn q4k(ws: &[Q4K], xs: &[Q8K]) -> f32 {
        assert_eq!(ws.len(), xs.len());
        let c = q4_consts();
        let (mut acc, mut acc_min) = (_mm512_setzero_ps(), _mm256_setzero_ps());
        for (w, x) in ws.iter().zip(xs) {
            prefetch_ahead(w);
            q4_dot(&q4_block(w, &c), x, &mut acc, &mut acc_min);
        }
        _mm512_reduce_add_ps(acc) + reduce256(acc_min)
    }

    /// [`q4k`] for `out.len()` inputs, one after another in `xs`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn q4k_multi(ws: &[Q4K], xs: &[Q8K], out: &mut [f32]) {
        let kb = ws.len();
        assert_eq!(xs.len(), kb * out.len());
        let c = q4_consts();
        for (g, outs) in out.chunks_mut(GROUP).enumerate() {
            let inputs = &xs[g * GROUP * kb..];
            let mut acc = [_mm512_setzero_ps(); GROUP];
            let mut acc_min = [_mm256_setzero_ps(); GROUP];
            for (i, w) in ws.iter().enumerate() {
                let b = q4_block(w, &c);
                for t in 0..outs.len() {
                    q4_dot(&b, &inputs[t * kb + i], &mut acc[t], &mut acc_min[t]);
                }
            }
            for (t, o) in outs.iter_mut().enumerate() {
                *o = _mm512_reduce_add_ps(acc[t]) + reduce256(acc_min[t]);
            }
        }
    }

    /// What unpacking a Q6_K block needs.
    struct Q6Consts {
        low4: __m512i,
        bits45: __m512i,
        first_high: __m512i,
        second_high: __m512i,
        scale_index: [__m512i; 4],
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn q6_consts() -> Q6Consts {
        Q6Consts {
            low4: _mm512_set1_epi8(0x0F),
            bits45: _mm512_set1_epi8(0x30),
            // In each half of 128 weights, `qh` byte l holds the high bits
            // of weights l, l+32, l+64, l+96 in its bit pairs 0, 2, 4, 6;
            // these shifts bring each pair to bits 4..6.
            first_high: halves16(4, 2),  // left: weights l and l+32
            second_high: halves16(0, 2), // right: weights l+64 and l+96
            scale_index: [eighths16(0), eighths16(4), eighths16(8), eighths16(12)],
        }
    }

    /// Q6_K: 256 weights in 16 sub-blocks of 16, each with an 8-bit signed
    /// scale; weight = d·scale·(q − 32), q in 0..64 from 4 low bits (`ql`)
    /// and 2 high bits (`qh`). One block unpacked: the weights as bytes in
    /// four runs of 64, each product pair's scale, the 16 scales, `d`.
    struct Q6Block {
        q: [__m512i; 4],
        scale: [__m512i; 4],
        scales16: __m256i,
        d: f32,
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn q6_block(w: &Q6K, c: &Q6Consts) -> Q6Block {
        let scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.scales.as_ptr().cast()));
        let scales = _mm512_castsi256_si512(scales16);
        let mut q = [_mm512_setzero_si512(); 4];
        let mut scale = [_mm512_setzero_si512(); 4];
        for h in 0..2 {
            let ql = _mm512_loadu_si512(w.ql.as_ptr().add(64 * h).cast());
            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(w.qh.as_ptr().add(32 * h).cast()));
            q[2 * h] = _mm512_or_si512(
                _mm512_and_si512(ql, c.low4),
                _mm512_and_si512(_mm512_sllv_epi16(qh, c.first_high), c.bits45),
            );
            q[2 * h + 1] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), c.low4),
                _mm512_and_si512(_mm512_srlv_epi16(qh, c.second_high), c.bits45),
            );
        }
        for (scale, index) in scale.iter_mut().zip(c.scale_index) {
            *scale = _mm512_permutexvar_epi16(index, scales);
        }
        Q6Block {
            q,
            scale,
            scales16,
            d: f16::from_bits(w.d).to_f32(),
        }
    }

    /// Adds one block's products with the input's matching block.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn q6_dot(b: &Q6Block, x: &Q8K, acc: &mut __m512) {
        // The −32 in every weight: Σ scale·32·(sum of 16 inputs), taken off
        // in integers, where it is exact (in floats it cancels most of the
        // sum and leaves rounding error).
        let bsums = _mm256_loadu_si256(x.bsums.as_ptr().cast());
        let offsets = _mm256_slli_epi32::<5>(_mm256_madd_epi16(b.scales16, bsums));
        let mut sum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(offsets));
        for k in 0..4 {
            let q8 = _mm512_loadu_si512(x.qs.as_ptr().add(64 * k).cast());
            sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(b.q[k], q8), b.scale[k]);
        }
        *acc = _mm512_fmadd_ps(_mm512_set1_ps(x.d * b.d), _mm512_cvtepi32_ps(sum), *acc);
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn q6k(ws: &[Q6K], xs: &[Q8K]) -> f32 {
        assert_eq!(ws.len(), xs.len());
        let c = q6_consts();
        let mut acc = _mm512_setzero_ps();
        for (w, x) in ws.iter().zip(xs) {
            prefetch_ahead(w);
            q6_dot(&q6_block(w, &c), x, &mut acc);
        }
        _mm512_reduce_add_ps(acc)
    }

    /// [`q6k`] for `out.len()` inputs, one after another in `xs`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn q6k_multi(ws: &[Q6K], xs: &[Q8K], out: &mut [f32]) {
        let kb = ws.len();
        assert_eq!(xs.len(), kb * out.len());
        let c = q6_consts();
        for (g, outs) in out.chunks_mut(GROUP).enumerate() {
            let inputs = &xs[g * GROUP * kb..];
            let mut acc = [_mm512_setzero_ps(); GROUP];
            for (i, w) in ws.iter().enumerate() {
                let b = q6_block(w, &c);
                for t in 0..outs.len() {
                    q6_dot(&b, &inputs[t * kb + i], &mut acc[t]);
                }
            }
            for (t, o) in outs.iter_mut().enumerate() {
                *o = _mm512_reduce_add_ps(acc[t]);
            }
        }
    }

    /// Bytes past the block being read that the kernels ask the cache for
    /// (see [`prefetch_ahead`]).
    const AHEAD: usize = 2048;

    /// Asks for the cache lines `AHEAD` bytes past `block`: a token's
    /// decoding reads each weight once, in order, in rows of a few blocks,
    /// and the hardware's streamer starts over at every 4 KiB page. On an
    /// Intel VM the kernels waited on those loads (perf: most samples on
    /// the first use of each block's scales). A prefetch never faults, so
    /// one past the tensor's end is harmless.
    #[inline(always)]
    unsafe fn prefetch_ahead<T>(block: &T) {
        let ahead = (block as *const T).cast::<i8>().wrapping_add(AHEAD);
        for line in (0..size_of::<T>()).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
        }
    }

    #[inline(always)]
    unsafe fn reduce256(v: __m256) -> f32 {
        let sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
        _mm_cvtss_f32(_mm_add_ss(sum, _mm_movehdup_ps(sum)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::k_quants::GgmlType;

    /// Rows of `T` quantized from varied floats, and an input as Q8_K.
    fn data<T: GgmlType>(rows: usize, k: usize, seed: u32) -> (Vec<T>, Vec<BlockQ8K>) {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1 << 24) as f32 * 2.0 - 1.0
        };
        // Row scales spread over orders of magnitude, as in real weights.
        let w: Vec<f32> = (0..rows * k)
            .map(|i| next() * (1.0 + (i / k) as f32).powi(2) / 50.0)
            .collect();
        let x: Vec<f32> = (0..k).map(|_| next() * 3.0).collect();
        let mut wq = vec![T::zeros(); rows * k / 256];
        T::from_float(&w, &mut wq);
        let mut xq = vec![BlockQ8K::zeros(); k / 256];
        BlockQ8K::from_float(&x, &mut xq);
        (wq, xq)
    }

    fn agrees_with_candle<T: GgmlType<VecDotType = BlockQ8K>>(dot: Dot<T>) {
        let k = 256 * 7;
        for seed in 1..6 {
            let (w, x) = data::<T>(9, k, seed);
            for row in w.chunks_exact(k / 256) {
                let want = T::vec_dot(k, row, &x);
                let got = dot(row, &x);
                let tol = 1e-5 * want.abs().max(1.0);
                assert!((got - want).abs() <= tol, "{got} vs candle's {want}");
            }
        }
    }

    /// The several-input kernel gives each input exactly what the
    /// one-input kernel gives it, for group sizes that do and do not divide
    /// the inputs.
    fn multi_agrees_with_single<T: GgmlType<VecDotType = BlockQ8K>>(
        single: Dot<T>,
        multi: MultiDot<T>,
    ) {
        let kb = 5;
        for m in [1, 3, 4, 9] {
            let (w, _) = data::<T>(3, 256 * kb, m as u32);
            let xs: Vec<BlockQ8K> = (0..m)
                .flat_map(|t| data::<T>(1, 256 * kb, 100 + t as u32).1)
                .collect();
            for row in w.chunks_exact(kb) {
                let mut out = vec![f32::NAN; m];
                multi(row, &xs, &mut out);
                let want: Vec<f32> = xs.chunks_exact(kb).map(|x| single(row, x)).collect();
                assert_eq!(out, want, "{m} inputs");
            }
        }
    }

    #[test]
    fn several_inputs_get_what_each_gets_alone() {
        match (q4k(), q4k_multi(), q6k(), q6k_multi()) {
            (Some(a), Some(b), Some(c), Some(d)) => {
                multi_agrees_with_single::<BlockQ4K>(a, b);
                multi_agrees_with_single::<BlockQ6K>(c, d);
            }
            (None, None, None, None) => assert!(!avx512_detected()),
            _ => panic!("the kernels disagree on whether the CPU has AVX-512"),
        }
    }

    #[test]
    fn q4k_agrees_with_candle() {
        match q4k() {
            Some(dot) => agrees_with_candle::<BlockQ4K>(dot),
            None => assert!(!avx512_detected()),
        }
    }

    #[test]
    fn q6k_agrees_with_candle() {
        match q6k() {
            Some(dot) => agrees_with_candle::<BlockQ6K>(dot),
            None => assert!(!avx512_detected()),
        }
    }

    fn avx512_detected() -> bool {
        #[cfg(target_arch = "x86_64")]
        return avx512::available();
        #[allow(unreachable_code)]
        false
    }
}
