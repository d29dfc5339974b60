//! A cgroup that holds the processes put into it to a share of one CPU (the CFS bandwidth
//! controller: `cpu.max` on cgroup v2, `cpu.cfs_quota_us` on v1), for the benchmark that finds
//! where a daemon with a bounded CPU budget starts to lose records — what an operator who caps
//! the service (`CPUQuota=` in a drop-in) gets.

use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};

/// The CFS period the quota is a share of.
const PERIOD_US: u64 = 100_000;

pub struct CpuCap {
    dir: PathBuf,
    /// Which hierarchy, for the report: "cgroup v2" or "cgroup v1".
    pub kind: &'static str,
}

/// The mount point of the cgroup v2 hierarchy, or of the v1 hierarchy with the cpu controller.
fn mounts() -> (Option<PathBuf>, Option<PathBuf>) {
    parse_mounts(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

fn parse_mounts(info: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    let (mut v2, mut v1) = (None, None);
    for l in info.lines() {
        // id parent major:minor root mountpoint options [optional...] - fstype source superopts
        let Some((left, right)) = l.split_once(" - ") else {
            continue;
        };
        let point = left.split(' ').nth(4).map(PathBuf::from);
        let mut r = right.split(' ');
        let (fstype, superopts) = (r.next(), r.nth(1).unwrap_or(""));
        match fstype {
            Some("cgroup2") => v2 = v2.or(point),
            Some("cgroup") if superopts.split(',').any(|o| o == "cpu") => v1 = v1.or(point),
            _ => {}
        }
    }
    (v2, v1)
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).with_context(|| format!("write {value:?} to {}", path.display()))
}

impl CpuCap {
    /// A new cgroup holding its processes to `share_pct` percent of one CPU. Fails, saying why,
    /// where neither hierarchy offers the cpu controller to this process.
    pub fn new(name: &str, share_pct: u32) -> Result<CpuCap> {
        let quota = PERIOD_US * u64::from(share_pct) / 100;
        if quota < 1000 {
            bail!("a quota under 1 ms per period is refused by the kernel");
        }
        let (v2, v1) = mounts();
        // cgroup v2 where it has the cpu controller (pure v2 and most current distributions).
        if let Some(root) = v2.filter(|r| {
            std::fs::read_to_string(r.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|w| w == "cpu"))
        }) {
            let enabled =
                std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|w| w == "cpu") {
                write(&root.join("cgroup.subtree_control"), "+cpu")?;
            }
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
            let cap = CpuCap {
                dir,
                kind: "cgroup v2",
            };
            write(&cap.dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"))?;
            return Ok(cap);
        }
        let Some(root) = v1 else {
            bail!("no cgroup hierarchy with the cpu controller is mounted");
        };
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let cap = CpuCap {
            dir,
            kind: "cgroup v1",
        };
        write(&cap.dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
        write(&cap.dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
        Ok(cap)
    }

    /// Moves process `pid`, every thread of it, into the cgroup.
    pub fn add(&self, pid: u32) -> Result<()> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }
}

impl Drop for CpuCap {
    /// Removes the cgroup; the kernel refuses while a process is still in it, which only a
    /// benchmark that failed half-way leaves behind.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn the_cpu_controller_is_found_in_hybrid_v1_and_pure_v2_layouts() {
        // A hybrid layout (this project's CI machines): cpu on its own v1 hierarchy, cpuacct
        // beside it, an empty v2 hierarchy under unified/.
        let hybrid = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            super::parse_mounts(hybrid),
            (
                Some(PathBuf::from("/sys/fs/cgroup/unified")),
                Some(PathBuf::from("/sys/fs/cgroup/cpu"))
            )
        );
        // systemd's older layout: cpu and cpuacct co-mounted; optional fields before the dash.
        let comounted = "25 20 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup \
cgroup rw,cpu,cpuacct
";
        assert_eq!(
            super::parse_mounts(comounted),
            (None, Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")))
        );
        // Pure v2; a cpuset-only v1 mount is not the cpu controller.
        let v2 = "24 21 0:21 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 \
rw,nsdelegate,memory_recursiveprot
30 21 0:25 / /mnt/cs rw - cgroup cgroup rw,cpuset
";
        assert_eq!(
            super::parse_mounts(v2),
            (Some(PathBuf::from("/sys/fs/cgroup")), None)
        );
    }
}
