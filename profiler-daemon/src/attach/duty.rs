//! A duty cycle for the launch probes (service mode): attached for a window out of each
//! period, detached the rest of it, so that an always-on daemon costs a training job the traps
//! of a fraction of its launches.
//!
//! Why its own thread and links: attaching a `uprobe_multi` link writes a breakpoint into every
//! process that maps the library, and releasing one waits for the kernel's grace periods, so
//! each costs milliseconds that must not hold up the ring reader or the run loop. The launch
//! probes' sites (program, file, offsets, cookies) are kept here instead of being linked at
//! attach time; the file is held open and named through `/proc/self/fd` so that a library a
//! process mapped through `/proc/PID/map_files` can still be attached after that process ends.
//! Every other probe (copies, syncs, allocations, names, discovery) stays attached throughout:
//! a job that starts between windows is discovered and its kernels named as before.
//!
//! Each period the window's start is drawn at random (a launch pattern with the period's
//! rhythm cannot hide from it), the probes are attached, detached at the window's end, and the
//! window — when the links were in place, and the period — goes to the reader, which reads the
//! launch counters and passes a [`profiler_common::kind::WINDOW`] record on after the window's
//! counts. While a deep capture runs the probes are held attached (every launch is needed):
//! those periods are reported [`profiler_common::window::HELD`] and their counts are exact.

use profiler_common::{WindowBody, window};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The probes' gate on counted launches (the session gives the capture stage's): shut, a
/// launch that reaches a probe is let go uncounted. Opened once a window's links are all in
/// place and shut before they go, it makes a window last exactly from one write to the other,
/// whatever the attach and detach calls take (they had made the estimates read 8 % high: a
/// link's breakpoints go in and out somewhere inside calls of milliseconds).
pub trait Gate: Send {
    /// Opens or shuts it; the time it did (monotonic ns), taken so that the time between an
    /// opening and a shutting holds every launch counted.
    fn set(&mut self, open: bool) -> Result<u64, String>;
}

/// Window and period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DutyCycle {
    pub window: Duration,
    pub period: Duration,
}

impl DutyCycle {
    /// Parses `WINDOW/PERIOD` (`100ms/1s`), the window shorter than the period.
    pub fn parse(s: &str) -> Result<DutyCycle, String> {
        let (w, p) = s.split_once('/').ok_or_else(|| {
            format!("\"{s}\": write the duty cycle as WINDOW/PERIOD, e.g. 100ms/1s")
        })?;
        let d = |x: &str| {
            crate::sys::duration::parse_duration(x.trim()).map_err(|e| format!("\"{s}\": {e}"))
        };
        let (window, period) = (d(w)?, d(p)?);
        if period < Duration::from_millis(100) || period > Duration::from_secs(600) {
            return Err(format!("\"{s}\": the period must be between 100ms and 10m"));
        }
        if window < Duration::from_millis(10) || window >= period {
            return Err(format!(
                "\"{s}\": the window must be at least 10ms and shorter than the period \
                 (a window as long as the period is no duty cycle: leave it out)"
            ));
        }
        Ok(DutyCycle { window, period })
    }

    pub fn fraction(&self) -> f64 {
        self.window.as_secs_f64() / self.period.as_secs_f64()
    }
}

impl std::fmt::Display for DutyCycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = |x: Duration| match x.as_millis() {
            ms if ms.is_multiple_of(1000) => format!("{}s", ms / 1000),
            ms => format!("{ms}ms"),
        };
        write!(f, "{}/{}", d(self.window), d(self.period))
    }
}

/// One launch program's sites in one library.
struct Site {
    prog: OwnedFd,
    /// Held open: the link is made through `/proc/self/fd/N`.
    file: File,
    offsets: Vec<u64>,
    cookies: Vec<u64>,
    /// A runtime's launch entry (linked before, and unlinked after, the driver's: a runtime
    /// launch never passes the driver probe alone and gets counted as a driver launch).
    runtime: bool,
}

/// The launch probes' sites, shared by the attach (which adds a library's) and the cycle.
#[derive(Clone, Default)]
pub struct LaunchSites(Arc<Mutex<Vec<Site>>>);

impl LaunchSites {
    /// Keeps `prog` at `offsets` of the file at `path` for the windows.
    pub fn add(
        &self,
        prog: std::os::fd::BorrowedFd<'_>,
        path: &std::path::Path,
        offsets: Vec<u64>,
        cookies: Vec<u64>,
        runtime: bool,
    ) -> std::io::Result<()> {
        let site = Site {
            prog: prog.try_clone_to_owned()?,
            file: File::open(path)?,
            offsets,
            cookies,
            runtime,
        };
        self.0.lock().expect("launch sites poisoned").push(site);
        Ok(())
    }

    /// Links every site: the runtime's entries first, then the driver's, each group at once
    /// from threads of its own (the window opens when the last is in place: made one after
    /// another, they would take the sum of their times). The links made, with whether each
    /// is a runtime's, and the errors (a site that failed is retried next window).
    fn attach(&self) -> (Links, Vec<String>) {
        let sites = self.0.lock().expect("launch sites poisoned");
        let mut links = Links::default();
        let mut errors = Vec::new();
        for runtime in [true, false] {
            let group: Vec<&Site> = sites.iter().filter(|s| s.runtime == runtime).collect();
            let made: Vec<Result<OwnedFd, String>> = std::thread::scope(|sc| {
                let handles: Vec<_> = group
                    .iter()
                    .map(|s| {
                        sc.spawn(move || {
                            let path =
                                PathBuf::from(format!("/proc/self/fd/{}", s.file.as_raw_fd()));
                            super::multi::attach(
                                s.prog.as_fd(),
                                &path,
                                &s.offsets,
                                &s.cookies,
                                false,
                                0,
                            )
                            .map_err(|e| e.to_string())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err("attach thread panicked".into()))
                    })
                    .collect()
            });
            for m in made {
                match m {
                    Ok(l) => links.0.push((l, runtime)),
                    Err(e) => errors.push(e),
                }
            }
        }
        (links, errors)
    }

    pub fn len(&self) -> usize {
        self.0.lock().expect("launch sites poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The launch links of a window: each with whether it is a runtime's.
#[derive(Default)]
struct Links(Vec<(OwnedFd, bool)>);

impl Links {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Unlinks every link: the driver's all at once (each close removes its breakpoints at
    /// once, then waits for the kernel's grace periods: closed one after another, a link would
    /// stay in place for the others' waits), then the runtime's, so a runtime launch never
    /// passes the driver probe alone.
    fn unlink(&mut self) {
        let (rt, drv): (Vec<_>, Vec<_>) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|(_, runtime)| *runtime);
        super::multi::release(drv.into_iter().map(|(l, _)| l).collect());
        super::multi::release(rt.into_iter().map(|(l, _)| l).collect());
    }
}

/// What the cycle measured of itself: the time one attach and one detach of every launch link
/// took (the last [`KEPT`] of each), and windows whose attach failed.
#[derive(Clone, Debug, Default)]
pub struct CycleCost {
    pub attach_us: Vec<u64>,
    pub detach_us: Vec<u64>,
    pub failed_attaches: u64,
}

/// Attach and detach times kept.
pub const KEPT: usize = 256;

impl CycleCost {
    fn push(v: &mut Vec<u64>, d: Duration) {
        if v.len() == KEPT {
            v.remove(0);
        }
        v.push(d.as_micros() as u64);
    }

    /// The median of `v` (µs), `None` when empty.
    pub fn median(v: &[u64]) -> Option<u64> {
        let mut s = v.to_vec();
        s.sort_unstable();
        s.get(s.len() / 2).copied()
    }
}

/// What the cycle shares with the session.
#[derive(Clone, Default)]
pub struct DutyControl {
    /// Keep the probes attached (a deep capture is running).
    pub hold: Arc<AtomicBool>,
    /// The launch links are in place now.
    pub attached: Arc<AtomicBool>,
    pub cost: Arc<Mutex<CycleCost>>,
}

impl DutyControl {
    /// Asks for the probes for a deep capture (`true`) or gives them back; when asking, waits
    /// until they are in place (the cycle attaches within a few milliseconds), at most `within`:
    /// a deep capture has every launch from its start. Whether they are in place.
    pub fn hold_now(&self, on: bool, within: Duration) -> bool {
        self.hold.store(on, Ordering::Relaxed);
        if !on {
            return false;
        }
        let until = Instant::now() + within;
        while !self.attached.load(Ordering::Relaxed) {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

/// A small generator for the windows' phases (xorshift64*: the phase needs no more, and the
/// daemon has no random-number crate otherwise).
struct Phase(u64);

impl Phase {
    fn new() -> Phase {
        let seed = crate::sys::clock::monotonic_ns() ^ u64::from(std::process::id()) << 32;
        Phase(seed | 1)
    }

    /// A value in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Runs the cycle until `stop` is set: each period, attach for the window (at a random
/// phase), detach, and hand the window to `windows`. On the way out the probes are left
/// detached.
pub fn run(
    duty: DutyCycle,
    sites: LaunchSites,
    control: DutyControl,
    windows: tokio::sync::mpsc::UnboundedSender<WindowBody>,
    stop: Arc<AtomicBool>,
    gate: Box<dyn Gate>,
) {
    let gate = std::cell::RefCell::new(gate);
    // Opens or shuts the gate: when. (A gate that cannot be set is warned about once; the
    // window then counts from the daemon's side of the calls, as the time read here.)
    let warned = std::cell::Cell::new(false);
    let set_gate = |open: bool| -> u64 {
        gate.borrow_mut().set(open).unwrap_or_else(|e| {
            if !warned.replace(true) {
                tracing::warn!(
                    "the launch probes' gate cannot be set ({e}): the windows' \
                                lengths include their links' attach and detach times"
                );
            }
            crate::sys::clock::monotonic_ns()
        })
    };
    let mut phase = Phase::new();
    let mut links = Links::default();
    let slack = duty.period - duty.window;
    let tick = Duration::from_millis(5);
    let hold = || control.hold.load(Ordering::Relaxed);
    // Sleeps until `t`; wakes early to stop, or (with `watch`) when a deep capture asks for
    // the probes.
    let sleep_until = |t: Instant, watch: bool| -> Woke {
        loop {
            if stop.load(Ordering::Relaxed) {
                return Woke::Stop;
            }
            if watch && hold() {
                return Woke::Hold;
            }
            let now = Instant::now();
            if now >= t {
                return Woke::Time;
            }
            std::thread::sleep((t - now).min(tick));
        }
    };
    let link = |links: &mut Links| {
        let t = Instant::now();
        set_gate(false);
        let (made, errors) = sites.attach();
        let mut cost = control.cost.lock().expect("cycle cost poisoned");
        CycleCost::push(&mut cost.attach_us, t.elapsed());
        if !errors.is_empty() {
            cost.failed_attaches += 1;
            tracing::warn!(errors = ?errors, "launch probes not attached for this window");
        }
        *links = made;
        let on = set_gate(true);
        control.attached.store(true, Ordering::Relaxed);
        on
    };
    let unlink_timed = |links: &mut Links| {
        let off = set_gate(false);
        control.attached.store(false, Ordering::Relaxed);
        let t = Instant::now();
        links.unlink();
        CycleCost::push(
            &mut control.cost.lock().expect("cycle cost poisoned").detach_us,
            t.elapsed(),
        );
        off
    };
    let mut period_start = Instant::now();
    let mut period_start_ns = crate::sys::clock::monotonic_ns();
    // Attached time of the period in progress (ns), and since when the links are in place.
    let mut attached_ns = 0u64;
    let mut on_ns: Option<u64> = None;
    // Whether the probes were attached the whole period (a deep capture held them).
    let mut whole = !links.is_empty();
    'periods: loop {
        let period_end = period_start + duty.period;
        if links.is_empty() {
            // Wait for the window's start, drawn at random in the period, unless a deep
            // capture asks for the probes first.
            let offset = Duration::from_nanos(phase.below(slack.as_nanos() as u64 + 1));
            let held_now = match sleep_until(period_start + offset, true) {
                Woke::Stop => break 'periods,
                Woke::Hold => true,
                Woke::Time => false,
            };
            on_ns = Some(link(&mut links));
            if !held_now {
                if sleep_until(period_start + offset + duty.window, false) == Woke::Stop {
                    break 'periods;
                }
                if !hold() {
                    let off = unlink_timed(&mut links);
                    attached_ns += off.saturating_sub(on_ns.take().unwrap_or(off));
                    // A deep capture that starts in the rest of the period gets the probes
                    // at once.
                    match sleep_until(period_end, true) {
                        Woke::Stop => break 'periods,
                        Woke::Hold => on_ns = Some(link(&mut links)),
                        Woke::Time => {}
                    }
                }
            }
        }
        if sleep_until(period_end, false) == Woke::Stop {
            break 'periods;
        }
        let now_ns = crate::sys::clock::monotonic_ns();
        // Held: stay attached into the next period, which then counts whole.
        if !links.is_empty() && !hold() {
            let off = unlink_timed(&mut links);
            attached_ns += off.saturating_sub(on_ns.take().unwrap_or(off));
        }
        if let Some(on) = on_ns.take() {
            attached_ns += now_ns.saturating_sub(on);
            if !links.is_empty() {
                on_ns = Some(now_ns);
            }
        }
        let w = window_of(period_start_ns, now_ns, attached_ns, whole);
        if windows.send(w).is_err() {
            return;
        }
        whole = !links.is_empty();
        attached_ns = 0;
        period_start = period_end;
        period_start_ns = now_ns;
    }
    // Stopped mid-period: the part of the period so far is the last window (its launches were
    // counted and are read after it).
    let still = !links.is_empty();
    let now_ns = if still {
        set_gate(false)
    } else {
        crate::sys::clock::monotonic_ns()
    };
    if let Some(on) = on_ns.take() {
        attached_ns += now_ns.saturating_sub(on);
    }
    control.attached.store(false, Ordering::Relaxed);
    links.unlink();
    let _ = windows.send(window_of(
        period_start_ns,
        now_ns,
        attached_ns,
        whole && still,
    ));
}

/// Why a wait of the cycle ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Woke {
    Time,
    Stop,
    Hold,
}

/// The window record of the period from `period_start_ns` to `now_ns` in which the probes
/// were attached for `attached_ns` in all (`whole`: all of it, a deep capture held them). The
/// estimator needs only how long they were attached: the interval it records ends at the
/// period's end and is that long (a period can hold a window and then a deep capture's start).
fn window_of(period_start_ns: u64, now_ns: u64, attached_ns: u64, whole: bool) -> WindowBody {
    let period_ns = now_ns.saturating_sub(period_start_ns).max(1);
    let attached = if whole {
        period_ns
    } else {
        attached_ns.min(period_ns)
    };
    WindowBody {
        start_ns: now_ns - attached,
        end_ns: now_ns,
        period_ns,
        flags: if whole { window::HELD } else { 0 },
        _pad: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duty_cycle_is_a_window_shorter_than_its_period() {
        let d = DutyCycle::parse("100ms/1s").unwrap();
        assert_eq!(
            (d.window, d.period),
            (Duration::from_millis(100), Duration::from_secs(1))
        );
        assert!((d.fraction() - 0.1).abs() < 1e-12);
        assert_eq!(d.to_string(), "100ms/1s");
        for bad in ["100ms", "1s/1s", "2s/1s", "5ms/1s", "10ms/50ms", "x/1s"] {
            assert!(DutyCycle::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn phases_cover_the_slack() {
        let mut p = Phase(42);
        let v: Vec<u64> = (0..1000).map(|_| p.below(10)).collect();
        for k in 0..10 {
            let n = v.iter().filter(|&&x| x == k).count();
            assert!((50..=150).contains(&n), "{k}: {n}");
        }
    }

    #[test]
    fn a_window_says_how_long_the_probes_were_attached_in_its_period() {
        let w = window_of(100, 1100, 100, false);
        assert_eq!(
            (w.start_ns, w.end_ns, w.period_ns, w.flags),
            (1000, 1100, 1000, 0)
        );
        // held the whole period; never attached; attached longer than measured (clamped)
        let h = window_of(100, 1100, 0, true);
        assert_eq!((h.start_ns, h.flags), (100, window::HELD));
        let never = window_of(100, 500, 0, false);
        assert_eq!(
            (never.start_ns, never.end_ns, never.period_ns),
            (500, 500, 400)
        );
        assert_eq!(window_of(100, 500, 9999, false).start_ns, 100);
    }

    #[test]
    fn the_median_of_the_cycle_costs() {
        assert_eq!(CycleCost::median(&[5, 1, 9]), Some(5));
        assert_eq!(CycleCost::median(&[]), None);
    }
}
