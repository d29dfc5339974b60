//! GPM figures (measured device activity) per GPU over the run, and who held each GPU while
//! they were measured: a GPU that only one job's processes held in a round gives that round's
//! figures to the job; a GPU that processes of several jobs (or of a job gpuprofd could not
//! tell) held is shared, and its figures are not split between them.

use crate::model::snapshot::{GpmJobReport, GpmReport};
use crate::nvml::gpm::{DeviceGpm, FIELDS, Figures, State};
use std::collections::BTreeMap;

/// A running mean and maximum of a figure.
#[derive(Clone, Copy, Debug, Default)]
struct FStat {
    sum: f64,
    n: u64,
    max: f64,
}

impl FStat {
    fn add(&mut self, v: Option<f64>) {
        if let Some(v) = v {
            self.sum += v;
            self.max = if self.n == 0 { v } else { self.max.max(v) };
            self.n += 1;
        }
    }

    fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| round1(self.sum / self.n as f64))
    }

    fn max(&self) -> Option<f64> {
        (self.n > 0).then(|| round1(self.max))
    }
}

/// `v` rounded to 0.1 (the precision every NVML figure of the report has).
fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Means and maxima of every figure over some rounds.
#[derive(Clone, Debug, Default)]
struct Stats {
    rounds: u64,
    scalars: [FStat; FIELDS.len()],
    /// Per link: (tx, rx).
    links: BTreeMap<u32, (FStat, FStat)>,
}

impl Stats {
    fn add(&mut self, f: &Figures) {
        self.rounds += 1;
        for (s, v) in self.scalars.iter_mut().zip(f.scalars()) {
            s.add(v);
        }
        for l in &f.nvlink_links {
            let e = self.links.entry(l.link).or_default();
            e.0.add(l.tx_mib_per_s);
            e.1.add(l.rx_mib_per_s);
        }
    }

    fn figures(&self, pick: fn(&FStat) -> Option<f64>) -> Figures {
        let mut f = Figures::default();
        for (i, s) in self.scalars.iter().enumerate() {
            if let Some(field) = f.scalar_mut(i) {
                *field = pick(s);
            }
        }
        f.nvlink_links = self
            .links
            .iter()
            .map(|(&link, (tx, rx))| crate::nvml::gpm::Link {
                link,
                tx_mib_per_s: pick(tx),
                rx_mib_per_s: pick(rx),
            })
            .collect();
        f
    }
}

/// Who held a GPU in one round, from NVML's process list of the same round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// No process listed.
    Idle,
    /// Processes of this one job (`kind:id`) only.
    Job(String),
    /// Processes of more than one job, or of one gpuprofd could not tell (a process it saw no
    /// CUDA call of, or whose job it could not read) beside others.
    Shared,
    /// One or more processes, none of whose job gpuprofd knows.
    Unattributed,
}

impl Holder {
    /// The holder of a GPU whose processes belong to `jobs` (`None`: not known).
    pub fn of(jobs: impl IntoIterator<Item = Option<String>>) -> Holder {
        let mut one: Option<String> = None;
        let mut any = false;
        let mut unknown = false;
        for j in jobs {
            any = true;
            match j {
                None => unknown = true,
                Some(j) => match &one {
                    None => one = Some(j),
                    Some(o) if *o == j => {}
                    Some(_) => return Holder::Shared,
                },
            }
        }
        match (any, one, unknown) {
            (false, _, _) => Holder::Idle,
            (true, Some(j), false) => Holder::Job(j),
            (true, Some(_), true) => Holder::Shared,
            (true, None, _) => Holder::Unattributed,
        }
    }

    /// How metrics and tables name it: the job's `kind:id`, `shared`, `idle`, `unattributed`.
    pub fn label(&self) -> &str {
        match self {
            Holder::Idle => "idle",
            Holder::Job(j) => j,
            Holder::Shared => "shared",
            Holder::Unattributed => "unattributed",
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Device {
    all: Stats,
    by_job: BTreeMap<String, Stats>,
    shared: u64,
    idle: u64,
    unattributed: u64,
    /// Rounds with the device's first sample only, and rounds that failed.
    first: u64,
    failed: u64,
    last_failure: Option<String>,
    unsupported: Option<String>,
    /// The latest round's figures and holder.
    now: Option<(Figures, Holder)>,
}

/// The latest GPM figures of a GPU and who held it then (the metrics show them).
#[derive(Clone, Debug, PartialEq)]
pub struct GpmNow {
    pub figures: Figures,
    pub holder: Holder,
}

/// GPM per GPU index.
#[derive(Clone, Debug, Default)]
pub struct Gpm {
    devices: BTreeMap<u32, Device>,
}

impl Gpm {
    /// One round's outcome on one device; `holder` who held it in the same round.
    pub fn apply(&mut self, d: &DeviceGpm, holder: Holder) {
        let e = self.devices.entry(d.index).or_default();
        match &d.state {
            State::Measured(f) => {
                e.all.add(f);
                match &holder {
                    Holder::Job(j) => e.by_job.entry(j.clone()).or_default().add(f),
                    Holder::Shared => e.shared += 1,
                    Holder::Idle => e.idle += 1,
                    Holder::Unattributed => e.unattributed += 1,
                }
                e.now = Some((Figures::clone(f), holder));
            }
            State::First => e.first += 1,
            State::Failed(why) => {
                e.failed += 1;
                e.last_failure = Some(why.clone());
                e.now = None;
            }
            State::Unsupported(why) => {
                e.unsupported = Some(why.clone());
                e.now = None;
            }
        }
    }

    /// The report's `gpm` of GPU `index` (`None`: no GPM outcome arrived for it, as in capture
    /// files from before GPM).
    pub fn report(&self, index: u32) -> Option<GpmReport> {
        let d = self.devices.get(&index)?;
        let (state, detail) = match (&d.unsupported, d.all.rounds, &d.last_failure) {
            (Some(why), 0, _) => ("unsupported", why.clone()),
            (Some(why), _, _) => ("failed", why.clone()),
            (None, 0, Some(why)) => ("failed", why.clone()),
            (None, 0, None) => (
                "pending",
                "GPM needs two samples: only one was taken before the capture ended".to_owned(),
            ),
            (None, _, Some(why)) => (
                "measured",
                format!("{} rounds failed, the last: {why}", d.failed),
            ),
            (None, _, None) => ("measured", String::new()),
        };
        let measured = d.all.rounds > 0;
        Some(GpmReport {
            state: state.to_owned(),
            detail,
            source: if measured { "measured" } else { "" }.to_owned(),
            samples: d.all.rounds,
            avg: measured.then(|| d.all.figures(FStat::mean)),
            max: measured.then(|| d.all.figures(FStat::max)),
            jobs: d
                .by_job
                .iter()
                .map(|(j, s)| GpmJobReport {
                    workload: j.clone(),
                    samples: s.rounds,
                    avg: s.figures(FStat::mean),
                })
                .collect(),
            shared_samples: d.shared,
            idle_samples: d.idle,
            unattributed_samples: d.unattributed,
        })
    }

    /// The latest round's figures and holder per GPU that GPM measured in it.
    pub fn now(&self) -> BTreeMap<u32, GpmNow> {
        self.devices
            .iter()
            .filter_map(|(&i, d)| {
                d.now.as_ref().map(|(f, h)| {
                    (
                        i,
                        GpmNow {
                            figures: f.clone(),
                            holder: h.clone(),
                        },
                    )
                })
            })
            .collect()
    }

    /// Whether GPU `index` is known not to do GPM (and why).
    pub fn unsupported(&self, index: u32) -> Option<&str> {
        self.devices
            .get(&index)
            .and_then(|d| d.unsupported.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::gpm::Link;

    fn measured(index: u32, sm: f64, tensor: Option<f64>, link0_tx: f64) -> DeviceGpm {
        DeviceGpm {
            index,
            state: State::Measured(Box::new(Figures {
                sm_activity_pct: Some(sm),
                tensor_activity_pct: tensor,
                pcie_tx_mib_per_s: Some(sm * 10.0),
                nvlink_links: vec![Link {
                    link: 0,
                    tx_mib_per_s: Some(link0_tx),
                    rx_mib_per_s: None,
                }],
                ..Figures::default()
            })),
        }
    }

    #[test]
    fn holder_rules() {
        let j = |s: &str| Some(s.to_owned());
        assert_eq!(Holder::of([]), Holder::Idle);
        assert_eq!(
            Holder::of([j("slurm:7"), j("slurm:7")]),
            Holder::Job("slurm:7".into())
        );
        assert_eq!(Holder::of([j("slurm:7"), j("slurm:8")]), Holder::Shared);
        // A process whose job is not known beside a known one: never given to the known one.
        assert_eq!(Holder::of([j("slurm:7"), None]), Holder::Shared);
        assert_eq!(Holder::of([None, j("slurm:7")]), Holder::Shared);
        assert_eq!(Holder::of([None, None]), Holder::Unattributed);
        assert_eq!(Holder::Job("k8s:ab".into()).label(), "k8s:ab");
        assert_eq!(Holder::Shared.label(), "shared");
    }

    #[test]
    fn means_maxima_and_attribution() {
        let mut g = Gpm::default();
        let job = || Holder::Job("slurm:7".into());
        g.apply(
            &DeviceGpm {
                index: 0,
                state: State::First,
            },
            job(),
        );
        g.apply(&measured(0, 60.0, Some(20.0), 100.0), job());
        g.apply(&measured(0, 80.0, None, 300.0), job());
        g.apply(&measured(0, 10.0, Some(50.0), 0.0), Holder::Shared);
        g.apply(&measured(0, 0.0, Some(0.0), 0.0), Holder::Idle);
        let r = g.report(0).unwrap();
        assert_eq!(
            (r.state.as_str(), r.detail.as_str(), r.source.as_str()),
            ("measured", "", "measured")
        );
        assert_eq!(r.samples, 4);
        let avg = r.avg.unwrap();
        // (60 + 80 + 10 + 0) / 4; tensor over the 3 rounds that had it: (20 + 50 + 0) / 3.
        assert_eq!(avg.sm_activity_pct, Some(37.5));
        assert_eq!(avg.tensor_activity_pct, Some(23.3));
        assert_eq!(avg.pcie_tx_mib_per_s, Some(375.0));
        assert_eq!(avg.sm_occupancy_pct, None);
        assert_eq!(
            avg.nvlink_links,
            vec![Link {
                link: 0,
                tx_mib_per_s: Some(100.0),
                rx_mib_per_s: None
            }]
        );
        let max = r.max.unwrap();
        assert_eq!(
            (max.sm_activity_pct, max.tensor_activity_pct),
            (Some(80.0), Some(50.0))
        );
        assert_eq!(
            (r.shared_samples, r.idle_samples, r.unattributed_samples),
            (1, 1, 0)
        );
        assert_eq!(r.jobs.len(), 1);
        assert_eq!(
            (r.jobs[0].workload.as_str(), r.jobs[0].samples),
            ("slurm:7", 2)
        );
        assert_eq!(r.jobs[0].avg.sm_activity_pct, Some(70.0));
        assert_eq!(r.jobs[0].avg.tensor_activity_pct, Some(20.0));
        // The latest round: idle, all zero.
        let now = g.now();
        assert_eq!(now[&0].holder, Holder::Idle);
        assert_eq!(now[&0].figures.sm_activity_pct, Some(0.0));
        assert!(g.report(1).is_none());
    }

    #[test]
    fn unsupported_pending_and_failed_say_why() {
        let mut g = Gpm::default();
        let un = |i| DeviceGpm {
            index: i,
            state: State::Unsupported("the device does not support GPM".into()),
        };
        g.apply(&un(0), Holder::Idle);
        g.apply(&un(0), Holder::Idle);
        g.apply(
            &DeviceGpm {
                index: 1,
                state: State::First,
            },
            Holder::Idle,
        );
        g.apply(
            &DeviceGpm {
                index: 2,
                state: State::Failed("nvmlGpmSampleGet failed: x".into()),
            },
            Holder::Idle,
        );
        let r = g.report(0).unwrap();
        assert_eq!(
            (r.state.as_str(), r.detail.as_str(), r.samples, &r.avg),
            ("unsupported", "the device does not support GPM", 0, &None)
        );
        assert_eq!(g.unsupported(0), Some("the device does not support GPM"));
        assert_eq!(g.report(1).unwrap().state, "pending");
        let f = g.report(2).unwrap();
        assert_eq!(
            (f.state.as_str(), f.detail.as_str()),
            ("failed", "nvmlGpmSampleGet failed: x")
        );
        assert!(g.now().is_empty());
        // Measured, then one failed round: still measured, the failure told.
        g.apply(&measured(2, 50.0, None, 0.0), Holder::Idle);
        let f = g.report(2).unwrap();
        assert_eq!(
            (f.state.as_str(), f.detail.as_str(), f.samples),
            (
                "measured",
                "1 rounds failed, the last: nvmlGpmSampleGet failed: x",
                1
            )
        );
    }
}
