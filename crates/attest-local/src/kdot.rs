//! Dot products of Q4_K and Q6_K weight rows with an input quantized to
//! Q8_K, in AVX-512 (BW, VL, VNNI), for machines that have it.
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

    /// Q4_K: 256 weights in 8 sub-blocks of 32, each with a 6-bit scale and
    /// a 6-bit minimum; weight = d·scale·q − dmin·min, q in 0..16.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn q4k(ws: &[Q4K], xs: &[Q8K]) -> f32 {
        assert_eq!(ws.len(), xs.len());
        let low4 = _mm512_set1_epi8(0x0F);
        // A chunk's 32 bytes hold 64 weights: the low nibbles are the first
        // 32, the high nibbles the next 32; loaded into both halves of a
        // register, the upper half is shifted down by 4.
        let nibble_shift = halves16(0, 4);
        // The 16-bit scale for each product pair of chunk j: sub-blocks 2j
        // and 2j+1.
        let scale_index = [
            halves16(0, 1),
            halves16(2, 3),
            halves16(4, 5),
            halves16(6, 7),
        ];
        // Each minimum covers two of the input's 16-value sums.
        let min_index =
            _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
        let mut acc = _mm512_setzero_ps();
        let mut acc_min = _mm256_setzero_ps();
        for (w, x) in ws.iter().zip(xs) {
            let d = x.d * f16::from_bits(w.d).to_f32();
            let dmin = -x.d * f16::from_bits(w.dmin).to_f32();
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
            let bsums = _mm256_loadu_si256(x.bsums.as_ptr().cast());
            let mins = _mm256_permutexvar_epi16(min_index, scales_mins);
            let min_sums = _mm256_madd_epi16(mins, bsums);
            acc_min = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(min_sums), acc_min);

            let scales = _mm512_castsi256_si512(scales_mins);
            let mut sum = _mm512_setzero_si512();
            for (j, index) in scale_index.iter().enumerate() {
                let packed = _mm256_loadu_si256(w.qs.as_ptr().add(32 * j).cast());
                let q4 = _mm512_and_si512(
                    _mm512_srlv_epi16(_mm512_broadcast_i64x4(packed), nibble_shift),
                    low4,
                );
                let q8 = _mm512_loadu_si512(x.qs.as_ptr().add(64 * j).cast());
                let pairs = _mm512_maddubs_epi16(q4, q8);
                let scale = _mm512_permutexvar_epi16(*index, scales);
                sum = _mm512_dpwssd_epi32(sum, pairs, scale);
            }
            acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sum), acc);
        }
        _mm512_reduce_add_ps(acc) + reduce256(acc_min)
    }

    /// Q6_K: 256 weights in 16 sub-blocks of 16, each with an 8-bit signed
    /// scale; weight = d·scale·(q − 32), q in 0..64 from 4 low bits (`ql`)
    /// and 2 high bits (`qh`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn q6k(ws: &[Q6K], xs: &[Q8K]) -> f32 {
        assert_eq!(ws.len(), xs.len());
        let low4 = _mm512_set1_epi8(0x0F);
        let bits45 = _mm512_set1_epi8(0x30);
        // In each half of 128 weights, `qh` byte l holds the high bits of
        // weights l, l+32, l+64, l+96 in its bit pairs 0, 2, 4, 6; these
        // shifts bring each pair to bits 4..6.
        let first_high = halves16(4, 2); // left: weights l and l+32
        let second_high = halves16(0, 2); // right: weights l+64 and l+96
        let scale_index = [eighths16(0), eighths16(4), eighths16(8), eighths16(12)];
        let mut acc = _mm512_setzero_ps();
        for (w, x) in ws.iter().zip(xs) {
            let d = x.d * f16::from_bits(w.d).to_f32();
            let scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(w.scales.as_ptr().cast()));
            // The −32 in every weight: Σ scale·32·(sum of 16 inputs),
            // taken off in integers, where it is exact (in floats it
            // cancels most of the sum and leaves rounding error).
            let bsums = _mm256_loadu_si256(x.bsums.as_ptr().cast());
            let offsets = _mm256_slli_epi32::<5>(_mm256_madd_epi16(scales16, bsums));

            let scales = _mm512_castsi256_si512(scales16);
            let mut sum = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_zextsi256_si512(offsets));
            for half in 0..2 {
                let ql = _mm512_loadu_si512(w.ql.as_ptr().add(64 * half).cast());
                let qh =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(w.qh.as_ptr().add(32 * half).cast()));
                let first = _mm512_or_si512(
                    _mm512_and_si512(ql, low4),
                    _mm512_and_si512(_mm512_sllv_epi16(qh, first_high), bits45),
                );
                let second = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16::<4>(ql), low4),
                    _mm512_and_si512(_mm512_srlv_epi16(qh, second_high), bits45),
                );
                let q8 = x.qs.as_ptr().add(128 * half);
                let p_first = _mm512_maddubs_epi16(first, _mm512_loadu_si512(q8.cast()));
                let p_second = _mm512_maddubs_epi16(second, _mm512_loadu_si512(q8.add(64).cast()));
                let s_first = _mm512_permutexvar_epi16(scale_index[2 * half], scales);
                let s_second = _mm512_permutexvar_epi16(scale_index[2 * half + 1], scales);
                sum = _mm512_dpwssd_epi32(sum, p_first, s_first);
                sum = _mm512_dpwssd_epi32(sum, p_second, s_second);
            }
            acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sum), acc);
        }
        _mm512_reduce_add_ps(acc)
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
