//! A process's sampled call stacks: samples per distinct stack, scaled by the sampling period,
//! bounded per process; and the code rows the report shows (stacks named and merged).
use super::snapshot::{CodeKernel, CodeReport, StackSummary};
use crate::enrich::stacks::{StackKey, StackResolver};
use profiler_common::{StackBody, kind, stackflags};
use std::collections::HashMap;

/// What was sampled on one stack.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackStat {
    pub samples: u64,
    /// Estimated calls: each sample stands for `period` calls.
    pub calls: u64,
    pub launches: u64,
    pub syncs: u64,
    pub copies: u64,
    /// Estimated CPU time blocked (sampled duration × period).
    pub blocked_ns: u64,
    /// Launched function handle and API → estimated launches.
    pub funcs: HashMap<(u32, u64), u64>,
    /// GPU time CUPTI measured for the kernels of the sampled launches on this stack (joined
    /// through their launch calls, `model::gpu_join`), and scaled by the period like `launches`.
    pub gpu_measured_ns: u64,
    pub gpu_ns: u64,
}

/// A native stack naming fewer frames than this is "shallow" (see `StackSummary::shallow`).
pub const SHALLOW_FRAMES: usize = 3;

/// Distinct stacks kept per process; samples on further stacks are counted in
/// [`ProcStacks::dropped`].
pub const MAX_STACKS_PER_PROCESS: usize = 4096;

/// A process's sampled stacks.
#[derive(Clone, Debug, Default)]
pub struct ProcStacks {
    pub by_stack: HashMap<StackKey, StackStat>,
    pub samples: u64,
    /// Samples on stacks beyond [`MAX_STACKS_PER_PROCESS`].
    pub dropped: u64,
    /// Samples whose native walk was cut at [`profiler_common::STACK_NATIVE_MAX`] frames.
    pub truncated: u64,
    /// Samples of a Python process taken on a thread without a Python thread state.
    pub py_no_thread: u64,
    /// Samples whose Python frames could not all be read.
    pub py_fault: u64,
}

impl ProcStacks {
    pub fn apply(&mut self, api: u32, st: &StackBody) {
        let period = u64::from(st.period.max(1));
        self.samples += 1;
        if st.flags & (stackflags::NATIVE_TRUNCATED | stackflags::PY_TRUNCATED) != 0 {
            self.truncated += 1;
        }
        if st.flags & stackflags::PY_NO_THREAD != 0 {
            self.py_no_thread += 1;
        }
        if st.flags & stackflags::PY_FAULT != 0 {
            self.py_fault += 1;
        }
        let key = StackKey::of(st);
        let full = self.by_stack.len() >= MAX_STACKS_PER_PROCESS;
        let s = match self.by_stack.get_mut(&key) {
            Some(s) => s,
            None if full => {
                self.dropped += 1;
                return;
            }
            None => self.by_stack.entry(key).or_default(),
        };
        s.samples += 1;
        s.calls += period;
        match st.of_kind {
            kind::LAUNCH => {
                s.launches += period;
                *s.funcs.entry((api, st.handle)).or_default() += period;
            }
            kind::SYNC => {
                s.syncs += period;
                s.blocked_ns += st.dur_ns.saturating_mul(period);
            }
            kind::COPY => {
                s.copies += period;
                s.blocked_ns += st.dur_ns.saturating_mul(period);
            }
            _ => {}
        }
    }
}

impl ProcStacks {
    /// A kernel of a launch sampled on stack `key` (standing for `period` launches) ran `ns`
    /// on the GPU. A stack not kept (past the bound) gets nothing.
    pub fn gpu(&mut self, key: &StackKey, ns: u64, period: u32) {
        if let Some(s) = self.by_stack.get_mut(key) {
            s.gpu_measured_ns = s.gpu_measured_ns.saturating_add(ns);
            s.gpu_ns = s
                .gpu_ns
                .saturating_add(ns.saturating_mul(u64::from(period)));
        }
    }
}

/// The code rows of a process: stacks named and merged where they name alike, most calls
/// first. `kernel` names a launched function (API id, handle).
pub fn code_report(
    names: &StackResolver,
    tgid: u32,
    ps: &ProcStacks,
    kernel: &mut dyn FnMut(u32, u64) -> String,
) -> (Vec<CodeReport>, StackSummary) {
    let mut rows: HashMap<Vec<String>, (CodeReport, HashMap<String, u64>)> = HashMap::new();
    let mut shallow = 0;
    for (key, s) in &ps.by_stack {
        let stack = names.labels(tgid, key);
        if key.py.is_empty() && stack.len() < SHALLOW_FRAMES {
            shallow += s.samples;
        }
        let caller = names.caller_module(tgid, key);
        let (r, k) = rows.entry(stack.clone()).or_insert_with(|| {
            (
                CodeReport {
                    stack,
                    caller,
                    ..Default::default()
                },
                HashMap::new(),
            )
        });
        r.samples += s.samples;
        r.calls += s.calls;
        r.launches += s.launches;
        r.syncs += s.syncs;
        r.copies += s.copies;
        r.blocked_ns += s.blocked_ns;
        r.gpu_ns += s.gpu_ns;
        r.gpu_measured_ns += s.gpu_measured_ns;
        for (&(api, func), &n) in &s.funcs {
            *k.entry(kernel(api, func)).or_default() += n;
        }
    }
    let mut out: Vec<CodeReport> = rows
        .into_values()
        .map(|(mut r, k)| {
            let mut ks: Vec<CodeKernel> = k
                .into_iter()
                .map(|(name, launches)| CodeKernel { name, launches })
                .collect();
            ks.sort_by(|a, b| b.launches.cmp(&a.launches).then(a.name.cmp(&b.name)));
            r.kernels = ks;
            r
        })
        .collect();
    out.sort_by(|a, b| {
        b.calls
            .cmp(&a.calls)
            .then(b.blocked_ns.cmp(&a.blocked_ns))
            .then_with(|| a.stack.cmp(&b.stack))
    });
    let summary = StackSummary {
        samples: ps.samples,
        dropped: ps.dropped,
        truncated: ps.truncated,
        python: names.python_of(tgid),
        python_no_thread: ps.py_no_thread,
        python_fault: ps.py_fault,
        shallow,
    };
    (out, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enrich::stacks::StackSym;
    use crate::enrich::stacks::tests::{frame, stack};

    #[test]
    fn samples_scaled_by_their_period_and_bounded() {
        let mut ps = ProcStacks::default();
        ps.apply(3, &stack(&[0x10, 0x20], &[], kind::LAUNCH, 4));
        ps.apply(3, &stack(&[0x10, 0x20], &[], kind::LAUNCH, 4));
        ps.apply(5, &stack(&[0x30], &[], kind::SYNC, 4));
        assert_eq!(ps.samples, 3);
        let s = &ps.by_stack[&StackKey::of(&stack(&[0x10, 0x20], &[], kind::LAUNCH, 4))];
        assert_eq!((s.samples, s.calls, s.launches, s.blocked_ns), (2, 8, 8, 0));
        assert_eq!(s.funcs[&(3, 0x77)], 8);
        let s = &ps.by_stack[&StackKey::of(&stack(&[0x30], &[], kind::SYNC, 4))];
        assert_eq!((s.syncs, s.blocked_ns), (4, 4_000));
        // Past the bound, samples are counted, not kept.
        let mut ps = ProcStacks::default();
        for i in 0..MAX_STACKS_PER_PROCESS as u64 + 5 {
            ps.apply(3, &stack(&[0x1000 + i], &[], kind::LAUNCH, 1));
        }
        assert_eq!(ps.by_stack.len(), MAX_STACKS_PER_PROCESS);
        assert_eq!(ps.dropped, 5);
    }

    #[test]
    fn code_rows_merge_stacks_that_name_alike() {
        let mut r = StackResolver::replay();
        r.learn(vec![
            StackSym::Native {
                tgid: 1,
                addr: 0x10,
                frame: frame("app", "f"),
            },
            StackSym::Native {
                tgid: 1,
                addr: 0x11,
                frame: frame("app", "f"),
            },
            StackSym::Native {
                tgid: 1,
                addr: 0x20,
                frame: frame("app", "main"),
            },
        ]);
        let mut ps = ProcStacks::default();
        ps.apply(0, &stack(&[0x10, 0x20], &[], kind::LAUNCH, 1));
        ps.apply(0, &stack(&[0x11, 0x20], &[], kind::LAUNCH, 1));
        ps.apply(0, &stack(&[0x11, 0x20], &[], kind::COPY, 1));
        let (rows, sum) = code_report(&r, 1, &ps, &mut |_, h| format!("k{h:x}"));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].stack, ["main (app)", "f (app)"]);
        assert_eq!(
            (
                rows[0].calls,
                rows[0].launches,
                rows[0].copies,
                rows[0].blocked_ns
            ),
            (3, 2, 1, 1_000)
        );
        assert_eq!(rows[0].kernels.len(), 1);
        assert_eq!(
            (
                rows[0].kernels[0].name.as_str(),
                rows[0].kernels[0].launches
            ),
            ("k77", 2)
        );
        assert_eq!((sum.samples, sum.shallow), (3, 3));
    }
}
