//! Statistics over per-request values: the median, a two-sided Mann-Whitney U test and a
//! bootstrap confidence interval of a difference of medians (what `compare` reports).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// The median (the mean of the two middle values for an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 { s[m] } else { f64::midpoint(s[m - 1], s[m]) })
}

/// A uniform sample of at most `cap` values of a stream (reservoir sampling, Algorithm R):
/// every value while there are at most `cap`; then each value seen so far is kept with
/// probability `cap / seen`. Draws come from a ChaCha8 stream seeded at creation, so the same
/// values in the same order give the same sample.
#[derive(Debug, Clone)]
pub struct Reservoir {
    cap: usize,
    /// The values seen.
    pub seen: usize,
    /// The values kept: all of them, or the sample.
    pub kept: Vec<f64>,
    rng: ChaCha8Rng,
}

impl Reservoir {
    pub fn new(cap: usize, seed: u64) -> Self {
        Self { cap: cap.max(1), seen: 0, kept: Vec::new(), rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    pub fn push(&mut self, v: f64) {
        self.seen += 1;
        if self.kept.len() < self.cap {
            self.kept.push(v);
        } else {
            let j = self.rng.gen_range(0..self.seen);
            if j < self.cap {
                self.kept[j] = v;
            }
        }
    }

    /// Whether every value seen was kept.
    pub fn whole(&self) -> bool {
        self.seen == self.kept.len()
    }
}

/// The median of scratch values, reordering them (linear time).
fn median_in_place(s: &mut [f64]) -> f64 {
    let (n, m) = (s.len(), s.len() / 2);
    let (lo, hi, _) = s.select_nth_unstable_by(m, f64::total_cmp);
    let hi = *hi;
    if n % 2 == 1 {
        hi
    } else {
        // the largest of the lower half
        f64::midpoint(lo.iter().copied().fold(f64::NEG_INFINITY, f64::max), hi)
    }
}

/// Two-sided Mann-Whitney U test (normal approximation with tie correction): the p-value of
/// "a and b come from the same distribution". 1.0 when either sample is empty or all values
/// are tied.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    let mut all: Vec<(f64, bool)> =
        a.iter().map(|&x| (x, true)).chain(b.iter().map(|&x| (x, false))).collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let (mut r1, mut tie_term) = (0.0, 0.0);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        // every value of a tie group takes the group's mean rank
        let rank = (i + j) as f64 / 2.0 + 1.0;
        r1 += rank * all[i..=j].iter().filter(|x| x.1).count() as f64;
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let u1 = r1 - n1 * (n1 + 1.0) / 2.0;
    let mu = n1 * n2 / 2.0;
    let nn = n1 + n2;
    let sigma = (n1 * n2 / 12.0 * ((nn + 1.0) - tie_term / (nn * (nn - 1.0)))).sqrt();
    if sigma == 0.0 || !sigma.is_finite() {
        return 1.0;
    }
    let z = (u1 - mu).abs() / sigma;
    let norm = Normal::new(0.0, 1.0).expect("standard normal");
    (2.0 * (1.0 - norm.cdf(z))).min(1.0)
}

/// A 95 % bootstrap interval of median(b) − median(a): `resamples` resamples of each side
/// with replacement, from a ChaCha8 stream seeded with `seed` (the same inputs give the same
/// interval). `None` when either side is empty.
pub fn bootstrap_median_delta(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() || resamples == 0 {
        return None;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut ra = vec![0.0; a.len()];
    let mut rb = vec![0.0; b.len()];
    let mut d: Vec<f64> = (0..resamples)
        .map(|_| {
            for x in &mut ra {
                *x = a[rng.gen_range(0..a.len())];
            }
            for x in &mut rb {
                *x = b[rng.gen_range(0..b.len())];
            }
            median_in_place(&mut rb) - median_in_place(&mut ra)
        })
        .collect();
    d.sort_by(f64::total_cmp);
    let at = |q: f64| d[((resamples as f64 * q) as usize).min(resamples - 1)];
    Some((at(0.025), at(0.975)))
}

/// One figure across repeated runs (docs/METRICS.md, Repeated runs): its mean, sample
/// standard deviation (n − 1), coefficient of variation (stddev ÷ |mean|) and the Student-t
/// 95 % confidence interval of the mean, `mean ± t(0.975, n − 1) · stddev / √n`. With one
/// value there is no spread: those are absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcrossRuns {
    pub n: u32,
    pub mean: f64,
    pub stddev: Option<f64>,
    pub cv: Option<f64>,
    pub ci95_low: Option<f64>,
    pub ci95_high: Option<f64>,
}

impl AcrossRuns {
    /// Of these values (`None` when there are none).
    pub fn of(v: &[f64]) -> Option<Self> {
        if v.is_empty() {
            return None;
        }
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        if v.len() < 2 {
            let (stddev, cv, ci95_low, ci95_high) = (None, None, None, None);
            return Some(Self { n: 1, mean, stddev, cv, ci95_low, ci95_high });
        }
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let sd = var.sqrt();
        let t = StudentsT::new(0.0, 1.0, n - 1.0).map_or(f64::NAN, |d| d.inverse_cdf(0.975));
        let half = t * sd / n.sqrt();
        Some(Self {
            n: v.len() as u32,
            mean,
            stddev: Some(sd),
            cv: (mean != 0.0).then(|| sd / mean.abs()),
            ci95_low: Some(mean - half),
            ci95_high: Some(mean + half),
        })
    }
}

/// Welch's t-test of two independent samples with unequal variances: the two-sided p-value
/// of "the means are equal", with the Welch–Satterthwaite degrees of freedom. `None` with
/// fewer than 2 values on a side, or no spread on either.
pub fn welch_p(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let mv = |v: &[f64]| {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        (m, v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0), n)
    };
    let ((ma, va, na), (mb, vb, nb)) = (mv(a), mv(b));
    let (sa, sb) = (va / na, vb / nb);
    let se2 = sa + sb;
    if se2 <= 0.0 {
        return None;
    }
    let t = (mb - ma) / se2.sqrt();
    let df = se2 * se2 / (sa * sa / (na - 1.0) + sb * sb / (nb - 1.0));
    let d = StudentsT::new(0.0, 1.0, df).ok()?;
    Some((2.0 * (1.0 - d.cdf(t.abs()))).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    /// The t quantile from the published table (t(0.975, 4) = 2.776445), not statrs.
    #[test]
    fn across_runs_by_the_t_table() {
        let a = super::AcrossRuns::of(&[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let half = 2.776_445 * 2.5f64.sqrt() / 5f64.sqrt();
        assert_eq!((a.n, a.mean), (5, 3.0));
        assert!((a.stddev.unwrap() - 2.5f64.sqrt()).abs() < 1e-12);
        assert!((a.ci95_low.unwrap() - (3.0 - half)).abs() < 1e-5, "{a:?}");
        assert!((a.ci95_high.unwrap() - (3.0 + half)).abs() < 1e-5, "{a:?}");
        assert!((a.cv.unwrap() - 2.5f64.sqrt() / 3.0).abs() < 1e-12);
        let one = super::AcrossRuns::of(&[7.0]).unwrap();
        assert_eq!((one.mean, one.stddev, one.ci95_low), (7.0, None, None));
        assert!(super::AcrossRuns::of(&[]).is_none());
    }

    /// Welch's p-values computed independently (mpmath's regularised incomplete beta at 30
    /// digits: p = I(df / (df + t²); df/2, 1/2)).
    #[test]
    fn welch_by_the_incomplete_beta() {
        let a = [10.1, 10.4, 9.8, 10.3, 10.0];
        let b = [10.9, 11.2, 10.7, 11.4, 11.0];
        let p = super::welch_p(&a, &b).unwrap();
        assert!((p - 0.000_476_935_233).abs() < 1e-9, "{p}");
        let p = super::welch_p(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1.5, 2.5, 3.5, 4.5, 5.5, 6.5]);
        assert!((p.unwrap() - 0.361_796_816_230).abs() < 1e-9, "{p:?}");
        assert_eq!(super::welch_p(&[1.0], &[2.0, 3.0]), None);
        assert_eq!(super::welch_p(&[1.0, 1.0], &[2.0, 2.0]), None);
    }

    /// A proper coverage check: 10,000 seeded samples of 5 normal values (Box-Muller from
    /// ChaCha8): the interval holds the true mean in 95 % of them (binomial standard error
    /// 0.22 %: within 0.9 % is 4 standard errors).
    #[test]
    fn intervals_cover_the_mean_95_percent_of_the_time() {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut normal = || {
            let (u1, u2): (f64, f64) = (rng.gen::<f64>().max(1e-300), rng.gen());
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        };
        let n = 10_000;
        let covered = (0..n)
            .filter(|_| {
                let v: Vec<f64> = (0..5).map(|_| 10.0 + 2.0 * normal()).collect();
                let a = super::AcrossRuns::of(&v).unwrap();
                a.ci95_low.unwrap() <= 10.0 && 10.0 <= a.ci95_high.unwrap()
            })
            .count();
        let share = covered as f64 / f64::from(n);
        assert!((share - 0.95).abs() < 0.009, "coverage {share}");
    }

    use super::*;

    /// All values up to the cap, then a sample of the cap whose every part of the stream is
    /// kept in proportion; seeded.
    #[test]
    fn a_reservoir_keeps_a_uniform_seeded_sample() {
        let mut r = Reservoir::new(1000, 42);
        (0..1000).for_each(|i| r.push(f64::from(i)));
        assert!(r.whole());
        assert_eq!(r.kept, (0..1000).map(f64::from).collect::<Vec<_>>());
        (1000..100_000).for_each(|i| r.push(f64::from(i)));
        assert!(!r.whole());
        assert_eq!((r.seen, r.kept.len()), (100_000, 1000));
        // a tenth of the stream: about a tenth of the sample (binomial sd 9.5)
        for k in 0..10 {
            let lo = f64::from(k * 10_000);
            let n = r.kept.iter().filter(|&&x| x >= lo && x < lo + 10_000.0).count();
            assert!((60..=140).contains(&n), "tenth {k}: {n}");
        }
        let mut again = Reservoir::new(1000, 42);
        (0..100_000).for_each(|i| again.push(f64::from(i)));
        assert_eq!(again.kept, r.kept);
    }

    #[test]
    fn mann_whitney_and_bootstrap() {
        let a: Vec<f64> = (0..200).map(|i| 100.0 + f64::from(i % 10)).collect();
        assert!(mann_whitney(&a, &a) > 0.9);
        let b: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        assert!(mann_whitney(&a, &b) < 1e-6);
        let (lo, hi) = bootstrap_median_delta(&a, &b, 1000, 42).unwrap();
        assert!(lo > 15.0 && hi < 25.0, "[{lo}, {hi}]");
        assert_eq!(bootstrap_median_delta(&a, &b, 1000, 42), Some((lo, hi)), "seeded");
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(mann_whitney(&[], &a), 1.0);
        for v in
            [vec![3.0, 1.0, 2.0], vec![4.0, 1.0, 2.0, 3.0], vec![5.0], vec![2.0, 2.0, 1.0, 9.0]]
        {
            assert_eq!(Some(median_in_place(&mut v.clone())), median(&v), "{v:?}");
        }
        // by hand: a = [1, 2, 4], b = [3, 5, 6]: R1 = 7, U1 = 1, mean 4.5, sd sqrt(5.25), z = 1.5275, p = 0.1266
        let p = mann_whitney(&[1.0, 2.0, 4.0], &[3.0, 5.0, 6.0]);
        assert!((p - 0.1266).abs() < 1e-3, "{p}");
    }
}
