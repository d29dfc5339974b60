//! Launch totals under a duty cycle: the launch probes are attached for a window out of each
//! period, the launches inside the windows are counted exactly, and a process's total is
//! estimated from them.
//!
//! The estimator: a window of `W` ns out of a period of `P` ns, its start drawn at random in
//! the period, sees launches at the rate the period had on average — a window's count `c`
//! times `P/W` estimates the period's launches without bias. A process's total is the sum of
//! those, `N̂ = Σ cᵢ·Pᵢ/Wᵢ` over the windows it was alive for, plus the launches of periods a
//! deep capture held the probes attached for (exact), plus the launches of periods no window
//! sampled (an attach failed, or the capture stopped before the period's window), imputed at
//! the process's mean scaled count per period.
//!
//! Its standard error has three terms, `SE² = K·s² + ȳ²·Σ f(1−f) + (Î/2)²`:
//! - the spread of the windows' scaled counts, `K·s²` over the `K` sampled windows (`s²` their
//!   sample variance). It also holds the process's real changes of rate from one period to the
//!   next, so for a process whose rate changes it is an upper bound; for a steady one it is 0.
//! - the edges of the process's life. A period the process was alive for only a part `f` of
//!   (it started or ended inside it) is scaled as a whole one, so its window holds the
//!   process's launches or not depending on where it fell: about a coin of probability `f`
//!   worth the mean scaled count `ȳ`, variance `f(1−f)·ȳ²`. Without this term a steady process
//!   read 11,951 ± 13 for 12,000 launches (CI, 2026-11-27), where one period more or less
//!   (±1,000 there) was the real uncertainty.
//! - the imputed launches `Î`: the rate in a period nobody sampled is unknown, so half of
//!   what was imputed is allowed as one standard error.
//!
//! A process seen in fewer than two sampled windows has no error estimate (`None`).

use profiler_common::{WindowBody, window};

/// One process's launches under the duty cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampling {
    /// Launches counted since the last window record (they belong to the window it closes).
    pending: u64,
    /// Launches counted in sampled windows.
    pub counted: u64,
    /// Launches counted in held periods (exact).
    pub exact: u64,
    /// Sampled windows the process was alive for.
    pub windows: u64,
    /// Welford's running mean and sum of squared deviations of the scaled counts `c·P/W`.
    mean: f64,
    m2: f64,
    /// Time the probes were attached and time observed, over the windows above (ns).
    pub attached_ns: u64,
    pub observed_ns: u64,
    /// When the process's first record came and when it ended (monotonic ns): the part of a
    /// period it was alive for.
    born_ns: Option<u64>,
    ended_ns: Option<u64>,
    /// Σ f(1−f) over the sampled periods the process was alive for a part `f` of.
    edge: f64,
    /// The process's alive time in periods no window sampled (ns).
    pub unsampled_ns: u64,
}

impl Sampling {
    /// Counted launches of the window in progress.
    pub fn add(&mut self, n: u64) {
        self.pending += n;
    }

    /// Whether launches were counted since the last window closed.
    pub fn has_pending(&self) -> bool {
        self.pending > 0
    }

    /// The process's first record, at `ts_ns` (monotonic): it was not alive before.
    pub fn seen(&mut self, ts_ns: u64) {
        self.born_ns.get_or_insert(ts_ns);
    }

    /// The process ended at `ts_ns` (monotonic).
    pub fn ended(&mut self, ts_ns: u64) {
        self.ended_ns.get_or_insert(ts_ns);
    }

    /// Closes the window `w`, which the process was alive for.
    pub fn close(&mut self, w: &WindowBody) {
        let c = std::mem::take(&mut self.pending);
        let attached = w.end_ns.saturating_sub(w.start_ns);
        if w.flags & window::HELD != 0 || attached >= w.period_ns {
            self.exact += c;
            return;
        }
        // The part of the period the process was alive for.
        let (start, end) = (w.end_ns.saturating_sub(w.period_ns), w.end_ns);
        let from = self.born_ns.map_or(start, |b| b.clamp(start, end));
        let to = self.ended_ns.map_or(end, |e| e.clamp(from, end));
        let alive = to - from;
        if attached == 0 {
            // A window the kernel never attached (the attach failed, or the capture stopped
            // before it): no sample; the period's launches are imputed. Those counted anyway
            // (a read raced the detach) stay exact counts.
            self.exact += c;
            self.unsampled_ns += alive;
            return;
        }
        let f = (alive as f64 / w.period_ns as f64).min(1.0);
        self.edge += f * (1.0 - f);
        let y = c as f64 * w.period_ns as f64 / attached as f64;
        self.counted += c;
        self.windows += 1;
        let d = y - self.mean;
        self.mean += d / self.windows as f64;
        self.m2 += d * (y - self.mean);
        self.attached_ns += attached;
        self.observed_ns += w.period_ns;
    }

    /// The estimated total: the exact launches, the sampled windows scaled up, and the
    /// unsampled periods' imputed launches.
    pub fn estimate(&self) -> f64 {
        self.exact as f64 + self.mean * self.windows as f64 + self.imputed()
    }

    /// Launches imputed to the periods no window sampled, at the mean scaled count per period.
    fn imputed(&self) -> f64 {
        if self.windows == 0 || self.observed_ns == 0 {
            return 0.0;
        }
        let mean_period = self.observed_ns as f64 / self.windows as f64;
        self.mean * self.unsampled_ns as f64 / mean_period
    }

    /// The estimate's standard error (`None` below two sampled windows).
    pub fn standard_error(&self) -> Option<f64> {
        (self.windows >= 2).then(|| {
            let var = self.m2 / (self.windows - 1) as f64;
            let spread = self.windows as f64 * var;
            let edges = self.mean * self.mean * self.edge;
            let imputed = (self.imputed() / 2.0).powi(2);
            (spread + edges + imputed).sqrt()
        })
    }

    /// The share of the observed time the probes were attached (1 when nothing was sampled).
    pub fn attached_fraction(&self) -> f64 {
        if self.observed_ns == 0 {
            1.0
        } else {
            self.attached_ns as f64 / self.observed_ns as f64
        }
    }
}

/// The node's duty cycle as the windows showed it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DutyStats {
    pub windows: u64,
    pub held: u64,
    pub attached_ns: u64,
    pub observed_ns: u64,
}

impl DutyStats {
    pub fn close(&mut self, w: &WindowBody) {
        self.windows += 1;
        if w.flags & window::HELD != 0 {
            self.held += 1;
        }
        self.attached_ns += w.end_ns.saturating_sub(w.start_ns).min(w.period_ns);
        self.observed_ns += w.period_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: u64, end: u64, period: u64, flags: u32) -> WindowBody {
        WindowBody {
            start_ns: start,
            end_ns: end,
            period_ns: period,
            flags,
            _pad: 0,
        }
    }

    #[test]
    fn a_steady_rate_is_estimated_exactly_with_no_error() {
        let mut s = Sampling::default();
        for i in 0..10 {
            s.add(25);
            s.close(&tenth(i));
        }
        assert_eq!(s.estimate(), 2500.0);
        assert_eq!(s.standard_error(), Some(0.0));
        assert_eq!((s.counted, s.windows, s.exact), (250, 10, 0));
        assert!((s.attached_fraction() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn the_error_follows_the_spread_of_the_windows() {
        let mut s = Sampling::default();
        // Scaled counts 100, 300 (quarter windows): mean 200, s² = 20000, SE = √(2·20000).
        for (i, c) in [25, 75].into_iter().enumerate() {
            let end = (i as u64 + 1) * 1000;
            s.add(c);
            s.close(&w(end - 250, end, 1000, 0));
        }
        assert_eq!(s.estimate(), 400.0);
        let se = s.standard_error().unwrap();
        assert!((se - (2.0f64 * 20000.0).sqrt()).abs() < 1e-9, "{se}");
    }

    #[test]
    fn held_periods_are_exact_and_one_window_has_no_error_estimate() {
        let mut s = Sampling::default();
        s.add(7);
        s.close(&w(0, 1000, 1000, window::HELD));
        s.add(3);
        s.close(&w(0, 500, 1000, 0));
        assert_eq!(s.estimate(), 7.0 + 6.0);
        assert_eq!(s.standard_error(), None);
        assert_eq!((s.exact, s.counted), (7, 3));
        // a window never attached is no sample
        s.close(&w(500, 500, 1000, 0));
        assert_eq!(s.windows, 1);
    }

    /// The window of period `i` (of 1000 ns): its last 100 ns.
    fn tenth(i: u64) -> WindowBody {
        w(i * 1000 + 900, (i + 1) * 1000, 1000, 0)
    }

    #[test]
    fn a_process_born_inside_a_period_has_that_edge_in_its_error() {
        let mut s = Sampling::default();
        // Born three quarters into the first period: alive for f = 1/4 of it.
        s.seen(750);
        s.seen(900); // only the first record counts
        for i in 0..4 {
            s.add(25);
            s.close(&tenth(i));
        }
        assert_eq!(s.estimate(), 1000.0);
        // ȳ = 250, f(1−f) = 3/16: SE = 250·√(3/16).
        let se = s.standard_error().unwrap();
        assert!((se - 250.0 * (3.0f64 / 16.0).sqrt()).abs() < 1e-9, "{se}");
        // Ending inside the last period adds that edge too: f = 1/2, another 1/4.
        s.ended(4500);
        s.add(25);
        s.close(&tenth(4));
        let se = s.standard_error().unwrap();
        assert!(
            (se - 250.0 * (3.0f64 / 16.0 + 0.25).sqrt()).abs() < 1e-9,
            "{se}"
        );
    }

    #[test]
    fn a_period_no_window_sampled_is_imputed_at_the_mean_rate() {
        let mut s = Sampling::default();
        for i in 0..4 {
            s.add(25);
            s.close(&tenth(i));
        }
        // The capture stopped half-way through the next period, before its window.
        s.close(&w(4500, 4500, 500, 0));
        assert_eq!((s.windows, s.unsampled_ns), (4, 500));
        // 4 × 250, and 125 for the half period nobody sampled, half of it allowed as error.
        assert_eq!(s.estimate(), 1125.0);
        assert_eq!(s.standard_error(), Some(62.5));
    }

    #[test]
    fn the_node_counts_its_windows_and_their_share() {
        let mut d = DutyStats::default();
        d.close(&w(0, 100, 1000, 0));
        d.close(&w(0, 1000, 1000, window::HELD));
        assert_eq!(
            d,
            DutyStats {
                windows: 2,
                held: 1,
                attached_ns: 1100,
                observed_ns: 2000
            }
        );
    }
}
