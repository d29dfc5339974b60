//! `--cgroup` / `--job`: which cgroups the capture selects, and which joined since the last look
//! (a job's cgroups appear while it runs; the in-kernel filter takes each new one).

use super::{CaptureOptions, SessionError};
use crate::enrich::jobs::SelectedCgroup;
use std::collections::HashSet;
use std::path::PathBuf;

/// The `--cgroup` / `--job` selection: which cgroups are in it, and which were added since.
pub(super) struct Selection {
    root: Option<PathBuf>,
    jobs: Vec<String>,
    known: HashSet<u64>,
    fixed: Vec<SelectedCgroup>,
    announced_empty: bool,
}

impl Selection {
    pub fn new(opts: &CaptureOptions) -> Result<Selection, SessionError> {
        let mut s = Selection {
            root: None,
            jobs: opts.jobs.clone(),
            known: HashSet::new(),
            fixed: Vec::new(),
            announced_empty: false,
        };
        if opts.cgroups.is_empty() && opts.jobs.is_empty() {
            return Ok(s);
        }
        let root = crate::enrich::jobs::cgroup2_root().ok_or(SessionError::NoCgroup2)?;
        for c in &opts.cgroups {
            s.fixed
                .push(crate::enrich::jobs::resolve_cgroup_arg(&root, c)?);
        }
        s.root = Some(root);
        Ok(s)
    }

    pub fn active(&self) -> bool {
        self.root.is_some()
    }

    /// Cgroups selected now that were not before (all of them on the first call).
    pub fn refresh(&mut self) -> Vec<SelectedCgroup> {
        let Some(root) = &self.root else {
            return Vec::new();
        };
        let mut all = self.fixed.clone();
        if !self.jobs.is_empty() {
            all.extend(crate::enrich::jobs::job_cgroups(root, &self.jobs));
        }
        let fresh: Vec<_> = all
            .into_iter()
            .filter(|c| self.known.insert(c.id))
            .collect();
        for c in &fresh {
            super::console::say(format_args!("selecting cgroup {} (id {})", c.rel, c.id));
        }
        if self.known.is_empty() && !self.announced_empty {
            self.announced_empty = true;
            super::console::say(format_args!(
                "no cgroup of job {} exists yet; waiting for it (checked every second; a Slurm \
                 job confined in cgroup v1 controllers only never has one: use --pid)",
                self.jobs.join(", ")
            ));
        }
        fresh
    }
}
