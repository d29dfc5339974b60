//! Launch totals under a duty cycle: the launch probes are attached for a window out of each
//! period, the launches inside the windows are counted exactly, and a process's total is
//! estimated from them.
//!
//! The estimator: a window of `W` ns out of a period of `P` ns, its start drawn at random in
//! the period, sees launches at the rate the period had on average — a window's count `c`
//! times `P/W` estimates the period's launches without bias. A process's total is the sum of
//! those, `N̂ = Σ cᵢ·Pᵢ/Wᵢ` over the windows it was alive for, plus the launches of periods a
//! deep capture held the probes attached for (exact). Its standard error is estimated from the
//! spread of the windows' scaled counts: `SE = √(K · s²)` over the `K` sampled windows, `s²`
//! their sample variance. That spread also holds the process's real changes of rate from one
//! period to the next, so the error it gives is an upper bound for a process whose rate
//! changes, and 0 for one that launches steadily. A process seen in fewer than two sampled
//! windows has no error estimate (`None`).

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

    /// Closes the window `w`, which the process was alive for.
    pub fn close(&mut self, w: &WindowBody) {
        let c = std::mem::take(&mut self.pending);
        let attached = w.end_ns.saturating_sub(w.start_ns);
        if w.flags & window::HELD != 0 || attached >= w.period_ns {
            self.exact += c;
            return;
        }
        if attached == 0 {
            // A window the kernel never attached (the attach failed): no sample. Its launches,
            // if any were counted (a read raced the detach), stay exact counts.
            self.exact += c;
            return;
        }
        let y = c as f64 * w.period_ns as f64 / attached as f64;
        self.counted += c;
        self.windows += 1;
        let d = y - self.mean;
        self.mean += d / self.windows as f64;
        self.m2 += d * (y - self.mean);
        self.attached_ns += attached;
        self.observed_ns += w.period_ns;
    }

    /// The estimated total: the exact launches plus the sampled windows scaled up.
    pub fn estimate(&self) -> f64 {
        self.exact as f64 + self.mean * self.windows as f64
    }

    /// The estimate's standard error (`None` below two sampled windows).
    pub fn standard_error(&self) -> Option<f64> {
        (self.windows >= 2).then(|| {
            let var = self.m2 / (self.windows - 1) as f64;
            (self.windows as f64 * var).sqrt()
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
        for _ in 0..10 {
            s.add(25);
            s.close(&w(100, 200, 1000, 0)); // a tenth of each period
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
        for c in [25, 75] {
            s.add(c);
            s.close(&w(0, 250, 1000, 0));
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
