//! The per-second time series of a run and what it says about steady state and saturation.
//!
//! Second `k` covers offsets `[k, k+1)` s of the measured phase. Per second: requests
//! started (sent), requests ended, completed requests, output tokens of completed requests
//! (counted in the second they ended), requests in flight at the start of the second
//! (sent before it, not ended before it), the mean TTFT of requests whose first token
//! arrived in it, and the mean of the gaps between tokens that ended in it (completed
//! requests).

use serde::{Deserialize, Serialize};

use crate::steady::{filled, mser, Method, NoWindow, Signal, Truncation, MSER_BATCH};
use crate::RequestRecord;

/// One second of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    pub t_s: u64,
    pub sent: u64,
    pub ended: u64,
    pub completed: u64,
    pub output_tokens: u64,
    pub in_flight: u64,
    pub ttft_mean_ms: Option<f64>,
    /// Mean of the gaps between tokens of completed requests whose later token arrived in
    /// this second (absent in series written before schema 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_mean_ms: Option<f64>,
}

/// Accumulates the series as records arrive (any order).
#[derive(Debug, Clone, Default)]
pub struct SeriesBuilder {
    sent: Vec<u64>,
    ended: Vec<u64>,
    completed: Vec<u64>,
    tokens: Vec<u64>,
    ttft_sum: Vec<f64>,
    ttft_n: Vec<u64>,
    itl_sum_us: Vec<u64>,
    itl_n: Vec<u64>,
    last_sent_s: Option<u64>,
}

fn bump<T: Default + Clone>(v: &mut Vec<T>, k: usize) -> &mut T {
    if v.len() <= k {
        v.resize(k + 1, T::default());
    }
    &mut v[k]
}

/// The steady state and saturation verdict of a series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Steadiness {
    /// The steady window (seconds, inclusive): from the end of the warm-up MSER-5 finds to
    /// the last whole second of the sending phase; absent when `no_window` says why.
    pub steady_from_s: Option<u64>,
    pub steady_to_s: Option<u64>,
    /// How the window was found (absent in summaries written before it was MSER-5's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    /// Why there is no steady window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_window: Option<NoWindow>,
    /// The signal whose warm-up ended last (its cut set the window's start); requests in
    /// flight for an over-saturated run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<Signal>,
    /// Mean requests in flight over the first and the second half of the sending phase
    /// after its ramp-up (from the first second at 90 % of the median in flight).
    pub in_flight_first_half: f64,
    pub in_flight_second_half: f64,
    /// Requests in flight still rising from the first to the second half (by over 20 % and
    /// at least 2): the server cannot keep up with the offered load.
    pub over_saturated: bool,
}

impl Steadiness {
    /// The steady window as offsets of the measured phase, ms: `[from, to)`.
    pub fn window_ms(&self) -> Option<(f64, f64)> {
        match (self.steady_from_s, self.steady_to_s) {
            (Some(a), Some(b)) if b >= a => Some((a as f64 * 1e3, (b + 1) as f64 * 1e3)),
            _ => None,
        }
    }
}

/// The steady window of a sending phase's seconds (all but the last, part, second): the
/// latest MSER-5 cut over the signals, or why there is none.
fn mser_window(phase: &[Second]) -> Result<(u64, u64, Signal), (NoWindow, Option<Signal>)> {
    let whole = &phase[..phase.len().saturating_sub(1)];
    // in flight at the end of each second: second 0 starts empty whatever the load
    let in_flight: Vec<f64> =
        whole.iter().map(|x| (x.in_flight + x.sent).saturating_sub(x.ended) as f64).collect();
    let ttft: Vec<Option<f64>> = whole.iter().map(|x| x.ttft_mean_ms).collect();
    let itl: Vec<Option<f64>> = whole.iter().map(|x| x.itl_mean_ms).collect();
    let signals = [
        (Signal::InFlight, Some(in_flight)),
        (Signal::Ttft, filled(&ttft)),
        (Signal::Itl, filled(&itl)),
    ];
    let mut cut = (0usize, Signal::InFlight);
    for (signal, values) in signals {
        let Some(v) = values else { continue };
        match mser(&v, MSER_BATCH) {
            Truncation::Cut(d) if d > cut.0 => cut = (d, signal),
            Truncation::Cut(_) => {}
            Truncation::TooShort => return Err((NoWindow::TooShort, None)),
        }
    }
    Ok((cut.0 as u64, whole.len() as u64 - 1, cut.1))
}

impl SeriesBuilder {
    pub fn add(&mut self, r: &RequestRecord) {
        let sec = |ms: f64| (ms.max(0.0) / 1e3) as usize;
        if let Some(s) = r.sent_offset_ms {
            *bump(&mut self.sent, sec(s)) += 1;
            self.last_sent_s =
                Some(self.last_sent_s.map_or(sec(s) as u64, |l| l.max(sec(s) as u64)));
        }
        let e = sec(r.end_offset_ms);
        *bump(&mut self.ended, e) += 1;
        if r.ok() {
            *bump(&mut self.completed, e) += 1;
            let t = bump(&mut self.tokens, e);
            *t = t.saturating_add(r.output_tokens.unwrap_or(0));
        }
        if let (Some(t), Some(f)) = (r.ttft_ms, r.first_token_offset_ms) {
            *bump(&mut self.ttft_sum, sec(f)) += t;
            *bump(&mut self.ttft_n, sec(f)) += 1;
        }
        if let (true, Some(f)) = (r.ok(), r.first_token_offset_ms) {
            // each gap in the second its later token arrived (never after the request's end),
            // added up per second before it is counted
            let mut at_us = (f.max(0.0) * 1e3).round() as u64;
            let (mut k, mut sum, mut n) = (usize::MAX, 0u64, 0u64);
            for &g in &r.itl_us {
                at_us += u64::from(g);
                let here = ((at_us / 1_000_000) as usize).min(e);
                if here != k {
                    self.add_gaps(k, sum, n);
                    (k, sum, n) = (here, 0, 0);
                }
                sum += u64::from(g);
                n += 1;
            }
            self.add_gaps(k, sum, n);
        }
    }

    fn add_gaps(&mut self, k: usize, sum_us: u64, n: u64) {
        if n > 0 {
            *bump(&mut self.itl_sum_us, k) += sum_us;
            *bump(&mut self.itl_n, k) += n;
        }
    }

    /// Add another builder's records (another part of the same run's records).
    pub fn merge(&mut self, o: &SeriesBuilder) {
        let add = |a: &mut Vec<u64>, b: &[u64]| {
            if a.len() < b.len() {
                a.resize(b.len(), 0);
            }
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.saturating_add(*y);
            }
        };
        add(&mut self.sent, &o.sent);
        add(&mut self.ended, &o.ended);
        add(&mut self.completed, &o.completed);
        add(&mut self.tokens, &o.tokens);
        add(&mut self.ttft_n, &o.ttft_n);
        add(&mut self.itl_sum_us, &o.itl_sum_us);
        add(&mut self.itl_n, &o.itl_n);
        if self.ttft_sum.len() < o.ttft_sum.len() {
            self.ttft_sum.resize(o.ttft_sum.len(), 0.0);
        }
        for (x, y) in self.ttft_sum.iter_mut().zip(&o.ttft_sum) {
            *x += y;
        }
        self.last_sent_s = match (self.last_sent_s, o.last_sent_s) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// The series, one entry per second from 0 to the last event.
    pub fn finish(&self) -> Vec<Second> {
        let n = self.sent.len().max(self.ended.len()).max(self.ttft_n.len());
        let g = |v: &[u64], k: usize| v.get(k).copied().unwrap_or(0);
        let mut out = Vec::with_capacity(n);
        let (mut started, mut ended) = (0u64, 0u64);
        for k in 0..n {
            let in_flight = started.saturating_sub(ended);
            let c = g(&self.ttft_n, k);
            let gaps = g(&self.itl_n, k);
            out.push(Second {
                t_s: k as u64,
                sent: g(&self.sent, k),
                ended: g(&self.ended, k),
                completed: g(&self.completed, k),
                output_tokens: g(&self.tokens, k),
                in_flight,
                ttft_mean_ms: (c > 0).then(|| (self.ttft_sum[k] / c as f64 * 1e3).round() / 1e3),
                itl_mean_ms: (gaps > 0)
                    .then(|| (self.itl_sum_us[k] as f64 / gaps as f64).round() / 1e3),
            });
            started += g(&self.sent, k);
            ended += g(&self.ended, k);
        }
        out
    }

    /// Steady state and saturation over the sending phase (second 0 to the last send).
    pub fn steadiness(&self, series: &[Second]) -> Option<Steadiness> {
        let last = self.last_sent_s? as usize;
        let phase = &series[..=last.min(series.len().saturating_sub(1))];
        if phase.len() < 4 {
            return None;
        }
        let mean = |s: &[Second]| {
            s.iter().map(|x| x.in_flight as f64).sum::<f64>() / s.len().max(1) as f64
        };
        let mut v: Vec<u64> = phase.iter().map(|x| x.in_flight).collect();
        v.sort_unstable();
        let med = v[v.len() / 2] as f64;
        // Compare the halves after the ramp-up: second 0 always starts empty, and an open
        // loop fills for about one latency before it can be steady. The ramp ends at the first
        // second at 90 % of the median; a server that does not keep up keeps rising after it.
        let ramp = phase.iter().position(|x| x.in_flight as f64 >= 0.9 * med).unwrap_or(0);
        let rest = &phase[ramp.min(phase.len() - 2)..];
        let half = rest.len() / 2;
        let (a, b) = (mean(&rest[..half]), mean(&rest[half..]));
        let over_saturated = b > a * 1.2 && b - a >= 2.0;
        let window = if over_saturated {
            Err((NoWindow::OverSaturated, Some(Signal::InFlight)))
        } else {
            mser_window(phase)
        };
        let (from, to, set_by, no_window) = match window {
            Ok((f, t, s)) => (Some(f), Some(t), Some(s), None),
            Err((why, s)) => (None, None, s, Some(why)),
        };
        Some(Steadiness {
            steady_from_s: from,
            steady_to_s: to,
            method: Some(Method::Mser5),
            no_window,
            set_by,
            in_flight_first_half: (a * 100.0).round() / 100.0,
            in_flight_second_half: (b * 100.0).round() / 100.0,
            over_saturated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Observation;
    use std::time::Duration;

    fn rec(sent_ms: u64, end_ms: u64) -> RequestRecord {
        let d = Duration::from_millis;
        RequestRecord::from_observation(Observation {
            intended: d(sent_ms),
            started: d(sent_ms),
            sent: Some(d(sent_ms)),
            first_token: Some(d(sent_ms + 50)),
            end: d(end_ms),
            streamed: true,
            token_chunks: 4,
            ..Observation::default()
        })
    }

    #[test]
    fn in_flight_and_saturation() {
        // Steady: one request per 100 ms, each 300 ms long, for 40 s: about 3 in flight.
        let mut s = SeriesBuilder::default();
        for i in 0..400 {
            s.add(&rec(i * 100 + 10, i * 100 + 310));
        }
        let series = s.finish();
        assert_eq!(series[5].sent, 10);
        assert_eq!(series[5].in_flight, 3);
        assert_eq!(series[5].ttft_mean_ms, Some(50.0));
        let st = s.steadiness(&series).unwrap();
        assert!(!st.over_saturated, "{st:?}");
        // nothing to cut; the last send's second (39, a part second) is left out
        assert_eq!((st.steady_from_s, st.steady_to_s), (Some(0), Some(38)), "{st:?}");
        assert_eq!(st.window_ms(), Some((0.0, 39_000.0)));
        // the same for 10 s: too short for MSER-5
        let mut s = SeriesBuilder::default();
        for i in 0..100 {
            s.add(&rec(i * 100 + 10, i * 100 + 310));
        }
        let st = s.steadiness(&s.finish()).unwrap();
        assert_eq!((st.steady_from_s, st.no_window), (None, Some(NoWindow::TooShort)), "{st:?}");
        // Saturated: one request per 100 ms, each lasting longer than the one before.
        let mut s = SeriesBuilder::default();
        for i in 0..100 {
            s.add(&rec(i * 100, i * 100 + 300 + i * 60));
        }
        let series = s.finish();
        let st = s.steadiness(&series).unwrap();
        assert!(st.over_saturated, "{st:?}");
        assert!(st.in_flight_second_half > st.in_flight_first_half * 1.2);
        assert_eq!((st.steady_from_s, st.no_window), (None, Some(NoWindow::OverSaturated)));
    }

    /// A server slow for its first 7 s (TTFT 400 ms, then 50 ms) at a steady 10 requests a
    /// second: TTFT and requests in flight (6.5, then 3) settle at the first batch after the
    /// slow seconds (second 10); the first signal listed names the cut.
    #[test]
    fn a_slow_start_is_cut_where_its_latency_settles() {
        let d = Duration::from_millis;
        let mut s = SeriesBuilder::default();
        for i in 0..400u64 {
            let (sent, ttft) = (i * 100, if i < 70 { 400 } else { 50 });
            s.add(&RequestRecord::from_observation(Observation {
                intended: d(sent),
                started: d(sent),
                sent: Some(d(sent)),
                first_token: Some(d(sent + ttft)),
                end: d(sent + ttft + 250),
                streamed: true,
                token_chunks: 4,
                ..Observation::default()
            }));
        }
        let series = s.finish();
        let st = s.steadiness(&series).unwrap();
        assert_eq!((st.steady_from_s, st.steady_to_s), (Some(10), Some(38)), "{st:?}");
        assert_eq!(st.set_by, Some(Signal::InFlight));
        assert_eq!(st.method, Some(Method::Mser5));
    }

    /// Each gap falls in the second its later token arrived; failed requests add none.
    #[test]
    fn itl_by_the_second_its_token_arrived() {
        let d = Duration::from_millis;
        let o = Observation {
            intended: d(0),
            started: d(0),
            sent: Some(d(0)),
            first_token: Some(d(850)),
            end: d(1250),
            streamed: true,
            token_chunks: 5,
            itl_us: vec![100_000, 100_000, 200_500, 99_500],
            ..Observation::default()
        };
        let mut s = SeriesBuilder::default();
        s.add(&RequestRecord::from_observation(o.clone()));
        s.add(&RequestRecord::from_observation(Observation {
            error: Some(quetta_engine::EngineError::Incomplete),
            itl_us: vec![1; 9],
            ..o
        }));
        let series = s.finish();
        // 950 ms in second 0; 1050, 1250.5 and 1350 (after the end: its second) in second 1
        assert_eq!(series[0].itl_mean_ms, Some(100.0));
        assert_eq!(series[1].itl_mean_ms, Some(133.333));
        assert_eq!(series.len(), 2);
    }

    /// A short closed loop (16 in flight from the start, 656 ms each, 100 requests: the
    /// README's first command) is not saturated, though second 0 starts with none in flight;
    /// nor is an open loop whose in-flight count fills for its first seconds and then holds.
    #[test]
    fn ramp_up_is_not_saturation() {
        let mut s = SeriesBuilder::default();
        for i in 0..100u64 {
            let start = (i / 16) * 656;
            s.add(&rec(start, start + 656));
        }
        let series = s.finish();
        assert_eq!(series[0].in_flight, 0);
        assert_eq!(series[1].in_flight, 16);
        let st = s.steadiness(&series).unwrap();
        assert!(!st.over_saturated, "{st:?}");
        // open loop: 10 req/s, each 3 s long, for 12 s: fills to 30 over 3 s, then holds
        let mut s = SeriesBuilder::default();
        for i in 0..120 {
            s.add(&rec(i * 100, i * 100 + 3000));
        }
        let series = s.finish();
        let st = s.steadiness(&series).unwrap();
        assert!(!st.over_saturated, "{st:?}");
        assert!((st.in_flight_first_half - st.in_flight_second_half).abs() < 2.0, "{st:?}");
    }
}
