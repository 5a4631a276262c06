//! Where a run's warm-up ends: MSER-5 truncation (docs/METRICS.md, Steady state).
//!
//! MSER (White, 1997, "An effective truncation heuristic for bias reduction in simulation
//! output", *Simulation* 69(6); MSER-5 as compared by White, Cobb and Spratt, 2000, and by
//! Hoad, Robinson and Davies, 2010) cuts the first `d` observations of a series where the
//! marginal standard error of the rest, `Σ (Y_i − Ȳ_d)² / (n − d)²`, is least. MSER-5 applies
//! it to the means of consecutive batches of 5 observations. The search runs over the first
//! half of the batches, as is usual: over all of them, the last few batches' chance
//! agreement wins too often (on stationary noise, 29-45 % of runs of 5 to 40 batches put the
//! least statistic beyond the half; `docs/METRICS.md`).

use serde::{Deserialize, Serialize};

/// Observations per batch of MSER-5.
pub const MSER_BATCH: usize = 5;

/// Fewest whole batches a series needs for a truncation point: the search runs over the
/// first half and leaves at least two batches.
pub const MSER_MIN_BATCHES: usize = 4;

/// What MSER-m says of one series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncation {
    /// Cut this many leading observations (a whole number of batches).
    Cut(usize),
    /// Fewer than [`MSER_MIN_BATCHES`] whole batches.
    TooShort,
}

/// MSER-`m` on `values`: how many leading observations to cut, searched over the first half
/// of the batches. A trailing part batch is left out (it counts in no batch mean).
pub fn mser(values: &[f64], m: usize) -> Truncation {
    let m = m.max(1);
    let k = values.len() / m;
    if k < MSER_MIN_BATCHES {
        return Truncation::TooShort;
    }
    let z: Vec<f64> = values.chunks_exact(m).map(|c| c.iter().sum::<f64>() / m as f64).collect();
    // suffix sums give each d's mean and sum of squares in one pass from the end
    let (mut s, mut s2) = (0.0, 0.0);
    let mut stats = vec![0.0; k];
    for d in (0..k).rev() {
        s += z[d];
        s2 += z[d] * z[d];
        let n = (k - d) as f64;
        stats[d] = ((s2 - s * s / n).max(0.0)) / (n * n);
    }
    // ties (within rounding) go to the earliest cut
    let mut best = (stats[0], 0usize);
    for (d, &v) in stats.iter().enumerate().take(k / 2 + 1).skip(1) {
        if v < best.0 * (1.0 - 1e-9) {
            best = (v, d);
        }
    }
    Truncation::Cut(best.1 * m)
}

/// The per-second series a steady window is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Signal {
    /// Requests in flight at the end of each second.
    InFlight,
    /// Mean TTFT of the first tokens that arrived in each second.
    Ttft,
    /// Mean gap between tokens that arrived in each second.
    Itl,
}

/// How a steady window was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Method {
    /// MSER-5 on each signal's per-second series of the sending phase; the latest cut wins.
    #[serde(rename = "mser-5")]
    Mser5,
}

/// Why a run has no steady window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NoWindow {
    /// The sending phase has fewer whole seconds than MSER-5 needs
    /// ([`MSER_MIN_BATCHES`] × [`MSER_BATCH`]).
    TooShort,
    /// Requests in flight kept rising: the server does not keep up with the offered load.
    OverSaturated,
}

impl NoWindow {
    /// The reason in words, for the terminal and the reports.
    pub fn words(self) -> &'static str {
        match self {
            NoWindow::TooShort => "too short to judge (under 20 s of sending)",
            NoWindow::OverSaturated => "over-saturated: requests in flight kept rising",
            #[allow(unreachable_patterns)]
            _ => "unknown",
        }
    }
}

/// Fill gaps in a per-second series: a missing second takes the last value before it (the
/// first values, the first value there is). `None` when the series has no value at all.
pub(crate) fn filled(v: &[Option<f64>]) -> Option<Vec<f64>> {
    let first = v.iter().flatten().next().copied()?;
    let mut last = first;
    Some(
        v.iter()
            .map(|x| {
                if let Some(x) = x {
                    last = *x;
                }
                last
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MSER's statistic by its definition, for each d, computed the slow way.
    fn by_definition(z: &[f64], d: usize) -> f64 {
        let rest = &z[d..];
        let n = rest.len() as f64;
        let mean = rest.iter().sum::<f64>() / n;
        rest.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n * n)
    }

    #[test]
    fn cuts_a_warm_up_at_its_batch() {
        // 8 s slow, then 32 s steady with a small wobble: batches 0 and 1 are high
        let v: Vec<f64> =
            (0..40).map(|i| if i < 8 { 80.0 } else { 20.0 + f64::from(i % 3) }).collect();
        assert_eq!(mser(&v, MSER_BATCH), Truncation::Cut(10));
        // the argmin agrees with the statistic computed from its definition
        let z: Vec<f64> = v.chunks_exact(5).map(|c| c.iter().sum::<f64>() / 5.0).collect();
        let argmin = (0..z.len() - 1)
            .min_by(|&a, &b| by_definition(&z, a).total_cmp(&by_definition(&z, b)))
            .unwrap();
        assert_eq!(argmin * 5, 10);
    }

    #[test]
    fn a_flat_series_is_not_cut_and_a_rising_one_is_cut_at_its_half() {
        let flat = vec![5.0; 30];
        assert_eq!(mser(&flat, MSER_BATCH), Truncation::Cut(0));
        let rising: Vec<f64> = (0..40).map(f64::from).collect();
        assert_eq!(mser(&rising, MSER_BATCH), Truncation::Cut(20));
        assert_eq!(mser(&flat[..19], MSER_BATCH), Truncation::TooShort);
        assert_eq!(mser(&flat[..20], MSER_BATCH), Truncation::Cut(0));
    }

    /// The search stays in the first half: on stationary noise a cut beyond it would only be
    /// the last batches agreeing by chance.
    #[test]
    fn noise_in_the_last_batches_does_not_move_the_cut() {
        // the quick test run's ITL: 2 slow batches, then 5.001-5.004 ms
        let z = [20.0, 8.0, 5.0014, 5.0034, 5.0044];
        let v: Vec<f64> = z.iter().flat_map(|&x| [x; 5]).collect();
        assert_eq!(mser(&v, MSER_BATCH), Truncation::Cut(10));
        // over all the batches, the last two would have won
        assert!(by_definition(&z, 3) < by_definition(&z, 2));
    }

    #[test]
    fn gaps_take_the_value_before_them() {
        assert_eq!(filled(&[None, Some(2.0), None, Some(4.0)]), Some(vec![2.0, 2.0, 2.0, 4.0]));
        assert_eq!(filled(&[None, None]), None);
    }
}
