//! The kernels that `/metrics` and OTLP name one by one: per workload (or process), kernels
//! by name with their launch configurations summed, and the `top` most launched and the `top`
//! that took the most measured GPU time (only those with any). A kernel label per kernel
//! name would be unbounded; these are the bounded series (`metrics.top_kernels`).

use crate::model::snapshot::ProcessReport;
use std::collections::BTreeMap;

/// Kernel names with a figure each, most first.
pub type Ranked<'a> = Vec<(&'a str, u64)>;

/// One workload's kernels by name: (launches, measured GPU ns).
#[derive(Default)]
pub struct ByName(BTreeMap<String, (u64, u64)>);

impl ByName {
    /// Adds a process's kernels (its rows per launch configuration summed by name).
    pub fn add(&mut self, p: &ProcessReport) {
        for k in &p.kernels {
            let ns = k.gpu_time.as_ref().map_or(0, |g| g.total_ns);
            self.add_kernel(&k.name, k.calls, ns);
        }
    }

    /// Adds `calls` launches of kernel `name` and `gpu_ns` of its measured GPU time.
    pub fn add_kernel(&mut self, name: &str, calls: u64, gpu_ns: u64) {
        let e = match self.0.get_mut(name) {
            Some(e) => e,
            None => self.0.entry(name.to_owned()).or_default(),
        };
        e.0 += calls;
        e.1 += gpu_ns;
    }

    /// The `top` most launched `(name, launches)` and the `top` that took the most measured
    /// GPU time `(name, ns)`, most first, ties by name.
    pub fn top(&self, top: usize) -> (Ranked<'_>, Ranked<'_>) {
        let mut v: Vec<(&str, (u64, u64))> = self.0.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        v.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
        let launches = v.iter().take(top).map(|(n, (c, _))| (*n, *c)).collect();
        v.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(a.0.cmp(b.0)));
        let gpu = v
            .iter()
            .filter(|(_, (_, ns))| *ns > 0)
            .take(top)
            .map(|(n, (_, ns))| (*n, *ns))
            .collect();
        (launches, gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_sum_by_name_and_each_ranking_is_bounded_with_ties_by_name() {
        let mut b = ByName::default();
        // Two processes of a workload; gemm in two launch configurations.
        for _ in 0..2 {
            b.add_kernel("gemm", 5, 900);
            b.add_kernel("gemm", 5, 0);
            b.add_kernel("relu", 10, 100);
            b.add_kernel("copy", 3, 0);
            b.add_kernel("add", 10, 0);
        }
        let (launches, gpu) = b.top(2);
        assert_eq!(launches, [("add", 20), ("gemm", 20)]);
        // Only kernels with measured time are ranked by it.
        assert_eq!(gpu, [("gemm", 1800), ("relu", 200)]);
        assert_eq!(b.top(9).1.len(), 2);
    }
}
