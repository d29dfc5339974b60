//! The export's size guard: a trace the Perfetto UI can open. When the whole capture's trace
//! would pass `--max-size`, `export` writes the window that fits around the most informative
//! moment — the slowest training step found, else the busiest moment — and says what it left
//! out and how to get it.
//!
//! The size is estimated before anything is written, from the number of records and
//! [`BYTES_PER_RECORD`]: one pass counts the records per [`BIN_NS`] of capture time. Several
//! captures of one job (`export A B …`) are sized together, on the job's wall-clock axis.

use crate::store;
use std::path::Path;

/// About how many bytes one record takes in Perfetto's format, erring on the large side: a
/// launch (an instant on its thread with its arguments, its name on its stream's track) took 68
/// on a capture of launches (`gpuprofd bench-pipeline --capture`, then `export … .pftrace`); a
/// timed copy (a slice's begin and end with five arguments, and its stream's instant) takes a
/// little more, a sync or an allocation less.
pub const BYTES_PER_RECORD: u64 = 80;
/// The default `--max-size`: traces past about 1 GiB do not load in the Perfetto UI.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// The histogram's bin.
const BIN_NS: u64 = 100_000_000;

/// The window to write instead of the whole capture.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// Seconds after the capture's start (`--from`, `--to`).
    pub from_s: f64,
    pub to_s: f64,
    /// Records in the capture, and in the window.
    pub records: u64,
    pub kept: u64,
    /// What the window is centred on.
    pub around: String,
}

/// One capture the guard sizes: where its trace starts on the trace's axis and which of its
/// processes it keeps.
pub struct Source<'a> {
    pub path: &'a Path,
    /// Ns from the trace's origin to the capture's start (0 for one capture; several merged:
    /// its place on the job's wall-clock axis).
    pub shift_ns: u64,
    /// Only these processes, when given (`--pid`, `--rank`).
    pub only: Option<&'a std::collections::HashSet<u32>>,
    /// How its processes are named in the window's description (`""` for one capture; a
    /// node's name with several).
    pub label: String,
}

/// The window to write when the whole trace of `path` (of only the processes `only` names,
/// when given) would pass `max_bytes`; `None` when it fits.
pub fn choose(
    path: &Path,
    max_bytes: u64,
    only: Option<&std::collections::HashSet<u32>>,
) -> Result<Option<Window>, store::StoreError> {
    let one = Source {
        path,
        shift_ns: 0,
        only,
        label: String::new(),
    };
    choose_of(&[one], max_bytes)
}

/// [`choose`] for several captures on one axis (`export A B …`): their records binned by
/// their time on it, the slowest step of any of them, the window in seconds after the origin.
pub fn choose_of(sources: &[Source], max_bytes: u64) -> Result<Option<Window>, store::StoreError> {
    let mut bins: Vec<u64> = Vec::new();
    let mut slowest: Option<(u64, String, u64)> = None;
    for src in sources {
        let keeps = |tgid: u32| src.only.is_none_or(|o| o.contains(&tgid));
        let mut r = store::Reader::open(src.path)?.without_records();
        let t0 = match r.next_frame() {
            Some(store::Frame::Header(h)) => h.started_at_monotonic_ns,
            _ => continue,
        };
        drop(r);
        let _ = store::for_each_record(src.path, |_, _, ev| {
            if !keeps(ev.header().tgid) {
                return Ok(());
            }
            let at = ev.header().ts_ns.saturating_sub(t0) + src.shift_ns;
            let i = (at / BIN_NS) as usize;
            if i >= bins.len() {
                bins.resize(i + 1, 0);
            }
            bins[i] += 1;
            Ok::<(), std::convert::Infallible>(())
        });
        // The slowest step found, in the capture's own numbering.
        let of = |tgid: u32| match src.label.as_str() {
            "" => format!("pid {tgid}"),
            node => format!("pid {tgid} on {node}"),
        };
        for p in crate::analysis::steps::find(src.path, t0)? {
            if !keeps(p.tgid) {
                continue;
            }
            for (i, s) in p.steps.iter().enumerate() {
                // On a tie, the later one (the later step, the later capture).
                if slowest.as_ref().is_none_or(|(w, _, _)| s.wall_ns >= *w) {
                    let what = format!(
                        "the slowest step (step {} of {}, {} ms)",
                        i + 1,
                        of(p.tgid),
                        crate::sys::units::ms(s.wall_ns)
                    );
                    slowest = Some((s.wall_ns, what, src.shift_ns + s.start_ns + s.wall_ns / 2));
                }
            }
        }
    }
    let total: u64 = bins.iter().sum();
    let budget = max_bytes / BYTES_PER_RECORD;
    if total <= budget {
        return Ok(None);
    }
    // The slowest step found, else the busiest bin.
    let (centre_ns, around) = match slowest {
        Some((_, what, centre)) => (centre, what),
        None => {
            let busiest = (0..bins.len()).max_by_key(|&i| (bins[i], std::cmp::Reverse(i)));
            (
                busiest.map_or(0, |i| i as u64 * BIN_NS + BIN_NS / 2),
                "the busiest moment (no training steps found)".to_owned(),
            )
        }
    };
    let (lo, hi, kept) = grow(&bins, (centre_ns / BIN_NS) as usize, budget);
    Ok(Some(Window {
        from_s: (lo as u64 * BIN_NS) as f64 / 1e9,
        to_s: ((hi as u64 + 1) * BIN_NS) as f64 / 1e9,
        records: total,
        kept,
        around,
    }))
}

/// The bins `lo..=hi` around `centre` whose records fit `budget`, grown one bin at a time on
/// the side with fewer records; the centre bin always (even alone over the budget). Returns
/// the records kept too.
fn grow(bins: &[u64], centre: usize, budget: u64) -> (usize, usize, u64) {
    let centre = centre.min(bins.len().saturating_sub(1));
    let (mut lo, mut hi) = (centre, centre);
    let mut kept = bins.get(centre).copied().unwrap_or(0);
    loop {
        let left = (lo > 0).then(|| bins[lo - 1]);
        let right = (hi + 1 < bins.len()).then(|| bins[hi + 1]);
        let pick = match (left, right) {
            (Some(l), Some(r)) if l <= r => Some((true, l)),
            (Some(_), Some(r)) => Some((false, r)),
            (Some(l), None) => Some((true, l)),
            (None, Some(r)) => Some((false, r)),
            (None, None) => None,
        };
        match pick {
            Some((left, n)) if kept + n <= budget => {
                kept += n;
                if left {
                    lo -= 1;
                } else {
                    hi += 1;
                }
            }
            _ => return (lo, hi, kept),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_grows_around_the_centre_on_its_lighter_side_within_the_budget() {
        let bins = [5, 1, 9, 2, 2, 50, 3];
        // From bin 3 (2): right 2 → 4, left 9 vs right 50: left → 13, left 1 → 14, left 5 → 19;
        // then only 50 is left: over 20.
        assert_eq!(grow(&bins, 3, 20), (0, 4, 19));
        // The centre alone over the budget: kept all the same.
        assert_eq!(grow(&bins, 5, 10), (5, 5, 50));
        // Everything fits.
        assert_eq!(grow(&bins, 6, 1000), (0, 6, 72));
        // A centre past the end is the last bin.
        assert_eq!(grow(&bins, 99, 3), (6, 6, 3));
    }
}
