//! Interval estimates and pass@k / pass^k, in plain `f64` arithmetic that
//! cannot overflow: binomial ratios are products of ratios, never
//! factorials.

use serde::{Deserialize, Serialize};

/// The two-sided 95% normal quantile.
pub const Z95: f64 = 1.959_963_984_540_054;

/// A closed interval `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }

    /// True when the interval lies entirely on one side of zero.
    pub fn excludes_zero(&self) -> bool {
        self.lo > 0.0 || self.hi < 0.0
    }
}

/// The Wilson score interval for `successes` out of `n` at 95%; `None`
/// when `n` is 0. Always `0 <= lo <= successes/n <= hi <= 1`.
pub fn wilson(successes: u64, n: u64) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let successes = successes.min(n);
    let nf = n as f64;
    let p = successes as f64 / nf;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / nf;
    let center = (p + z2 / (2.0 * nf)) / denom;
    let half = Z95 * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denom;
    // Rounding can push a bound a hair past the point estimate or the unit
    // interval; the exact bounds at 0 and n are 0 and 1.
    let lo = if successes == 0 {
        0.0
    } else {
        (center - half).clamp(0.0, p)
    };
    let hi = if successes == n {
        1.0
    } else {
        (center + half).clamp(p, 1.0)
    };
    Some(Interval { lo, hi })
}

/// Newcombe's hybrid score interval (his method 10) for the difference
/// `p_b - p_a` of two independent proportions, built from their Wilson
/// intervals. `None` when either sample is empty.
pub fn newcombe_difference(a: (u64, u64), b: (u64, u64)) -> Option<(f64, Interval)> {
    let wa = wilson(a.0, a.1)?;
    let wb = wilson(b.0, b.1)?;
    let pa = a.0.min(a.1) as f64 / a.1 as f64;
    let pb = b.0.min(b.1) as f64 / b.1 as f64;
    let d = pb - pa;
    let below = ((pb - wb.lo).powi(2) + (wa.hi - pa).powi(2)).sqrt();
    let above = ((wb.hi - pb).powi(2) + (pa - wa.lo).powi(2)).sqrt();
    Some((
        d,
        Interval {
            lo: (d - below).max(-1.0),
            hi: (d + above).min(1.0),
        },
    ))
}

/// Mean, sample standard deviation and count of a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub mean: f64,
    /// `None` below two observations.
    pub sd: Option<f64>,
    pub n: u64,
}

pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let sd = (values.len() >= 2).then(|| {
        let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
        (ss / (n - 1.0)).sqrt()
    });
    Some(Summary {
        mean,
        sd,
        n: values.len() as u64,
    })
}

/// The normal-approximation 95% interval of a mean; `None` without a
/// standard deviation.
pub fn mean_interval(s: &Summary) -> Option<Interval> {
    let sd = s.sd?;
    let half = Z95 * sd / (s.n as f64).sqrt();
    Some(Interval {
        lo: s.mean - half,
        hi: s.mean + half,
    })
}

/// The Welch-style normal 95% interval of `mean_b - mean_a`.
pub fn mean_difference(a: &Summary, b: &Summary) -> Option<(f64, Interval)> {
    let (sa, sb) = (a.sd?, b.sd?);
    let d = b.mean - a.mean;
    let se = (sa * sa / a.n as f64 + sb * sb / b.n as f64).sqrt();
    Some((
        d,
        Interval {
            lo: d - Z95 * se,
            hi: d + Z95 * se,
        },
    ))
}

/// `C(m, k) / C(n, k)` for `m <= n`, as a product of ratios.
fn binomial_ratio(m: u64, n: u64, k: u64) -> f64 {
    if k > m {
        return 0.0;
    }
    (0..k).map(|i| (m - i) as f64 / (n - i) as f64).product()
}

/// The unbiased pass@k estimator (Chen et al. 2021): the chance that at
/// least one of `k` attempts drawn without replacement from `n`, `c` of
/// them passing, passes: `1 - C(n-c, k) / C(n, k)`. `None` when `n < k`
/// or `k == 0`.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || n < k {
        return None;
    }
    let c = c.min(n);
    Some(1.0 - binomial_ratio(n - c, n, k))
}

/// tau-bench's pass^k: the chance that all of `k` attempts drawn without
/// replacement pass, `C(c, k) / C(n, k)`. `None` when `n < k` or `k == 0`.
pub fn pass_hat_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || n < k {
        return None;
    }
    Some(binomial_ratio(c.min(n), n, k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wilson_matches_published_values() {
        // Newcombe (1998), table I: 81/263 → 0.2553 to 0.3662.
        let w = wilson(81, 263).unwrap();
        assert!((w.lo - 0.2553).abs() < 5e-4, "{w:?}");
        assert!((w.hi - 0.3662).abs() < 5e-4, "{w:?}");
        // 0/10 → 0 to 0.2775; 10/10 → 0.7225 to 1.
        let w = wilson(0, 10).unwrap();
        assert_eq!(w.lo, 0.0);
        assert!((w.hi - 0.2775).abs() < 5e-4, "{w:?}");
        let w = wilson(10, 10).unwrap();
        assert_eq!(w.hi, 1.0);
        assert!((w.lo - 0.7225).abs() < 5e-4, "{w:?}");
        assert_eq!(wilson(0, 0), None);
    }

    #[test]
    fn newcombe_matches_the_published_example() {
        // Newcombe (1998), table II, example (a): 56/70 vs 48/80, difference
        // 0.2 with hybrid score limits 0.0524 to 0.3339.
        let (d, ci) = newcombe_difference((48, 80), (56, 70)).unwrap();
        assert!((d - 0.2).abs() < 1e-12);
        assert!((ci.lo - 0.0524).abs() < 5e-4, "{ci:?}");
        assert!((ci.hi - 0.3339).abs() < 5e-4, "{ci:?}");
        assert!(ci.excludes_zero());
        let (_, same) = newcombe_difference((5, 10), (5, 10)).unwrap();
        assert!(!same.excludes_zero());
    }

    #[test]
    fn pass_at_k_and_pass_hat_k_known_values() {
        // n = 10, c = 8 (seed 002's experiment).
        assert_eq!(pass_at_k(10, 8, 1), Some(1.0 - 0.2));
        assert!((pass_hat_k(10, 8, 1).unwrap() - 0.8).abs() < 1e-15);
        // C(8,3)/C(10,3) = 56/120.
        assert!((pass_hat_k(10, 8, 3).unwrap() - 56.0 / 120.0).abs() < 1e-12);
        // Fewer than k failures: some draw of k always passes.
        assert_eq!(pass_at_k(10, 8, 3), Some(1.0));
        assert_eq!(pass_hat_k(10, 0, 1), Some(0.0));
        assert_eq!(pass_at_k(10, 0, 4), Some(0.0));
        assert_eq!(pass_at_k(2, 1, 3), None);
        assert_eq!(pass_hat_k(2, 1, 0), None);
        // Large n stays finite: no factorials.
        let p = pass_hat_k(1_000_000, 999_000, 500).unwrap();
        assert!(p.is_finite() && p > 0.0 && p < 1.0);
    }

    #[test]
    fn mean_interval_needs_two_values() {
        let s = summarize(&[3.0]).unwrap();
        assert_eq!(s.sd, None);
        assert_eq!(mean_interval(&s), None);
        let s = summarize(&[1.0, 3.0]).unwrap();
        assert_eq!(s.mean, 2.0);
        let ci = mean_interval(&s).unwrap();
        assert!(ci.contains(2.0));
        assert!(summarize(&[]).is_none());
    }

    proptest! {
        #[test]
        fn wilson_bounds_hold(n in 1u64..5000, frac in 0.0f64..=1.0) {
            let c = ((n as f64) * frac).round() as u64;
            let w = wilson(c, n).unwrap();
            let p = c as f64 / n as f64;
            prop_assert!(0.0 <= w.lo, "{w:?}");
            prop_assert!(w.lo <= p, "{w:?} p={p}");
            prop_assert!(p <= w.hi, "{w:?} p={p}");
            prop_assert!(w.hi <= 1.0, "{w:?}");
        }

        #[test]
        fn newcombe_interval_contains_the_difference(
            na in 1u64..500, fa in 0.0f64..=1.0, nb in 1u64..500, fb in 0.0f64..=1.0
        ) {
            let ca = ((na as f64) * fa).round() as u64;
            let cb = ((nb as f64) * fb).round() as u64;
            let (d, ci) = newcombe_difference((ca, na), (cb, nb)).unwrap();
            prop_assert!(-1.0 <= ci.lo && ci.lo <= d + 1e-12 && d <= ci.hi + 1e-12 && ci.hi <= 1.0, "{d} {ci:?}");
        }

        #[test]
        fn pass_hat_k_never_exceeds_pass_at_k(n in 1u64..200, frac in 0.0f64..=1.0, kf in 0.0f64..=1.0) {
            let c = ((n as f64) * frac).round() as u64;
            let k = 1 + ((n - 1) as f64 * kf).round() as u64;
            let at = pass_at_k(n, c, k).unwrap();
            let hat = pass_hat_k(n, c, k).unwrap();
            prop_assert!((0.0..=1.0).contains(&at) && (0.0..=1.0).contains(&hat));
            // Equal at k = 1 up to rounding; Vandermonde's identity otherwise.
            prop_assert!(hat <= at + 1e-12, "n={n} c={c} k={k}: {hat} > {at}");
        }

        #[test]
        fn monotone_in_k(n in 2u64..200, frac in 0.0f64..=1.0) {
            let c = ((n as f64) * frac).round() as u64;
            for k in 1..n {
                let (at, at_next) = (pass_at_k(n, c, k).unwrap(), pass_at_k(n, c, k + 1).unwrap());
                let (hat, hat_next) = (pass_hat_k(n, c, k).unwrap(), pass_hat_k(n, c, k + 1).unwrap());
                prop_assert!(at_next + 1e-12 >= at, "pass@k fell: n={n} c={c} k={k}");
                prop_assert!(hat_next <= hat + 1e-12, "pass^k rose: n={n} c={c} k={k}");
            }
        }
    }
}
