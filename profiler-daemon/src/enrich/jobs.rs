//! Which job a process belongs to: Slurm, Kubernetes, a container, a systemd unit or session,
//! else the launcher at the root of its process tree.
//!
//! The cgroup path decides first (it cannot be faked by the process and survives `setsid`); the
//! environment (`SLURM_JOB_ID`) is the fallback for Slurm set-ups without cgroup confinement
//! (the tasks then stay in `slurmd.service`'s cgroup, or a login session's); the process tree
//! is the last resort, so that the workers a `torchrun` started are one job. Every hierarchy
//! listed in `/proc/PID/cgroup` is looked at: Slurm's cgroup/v1 plugin and some container
//! set-ups confine a process in v1 controllers (memory, cpuset, freezer, devices) only, while
//! its v2 and `name=systemd` paths still name the daemon that started it. A Slurm job, pod or
//! container found in any of them wins; a systemd unit or session comes from the v2 path
//! (`0::`), else `name=systemd`'s, else the first listed.

use serde::{Deserialize, Serialize};
use std::fs;

/// A process's job. `kind` is one of `slurm`, `kubernetes`, `docker`, `podman`, `containerd`,
/// `crio`, `systemd`, `session`, `process_tree`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub kind: String,
    /// Slurm job id, pod UID, container id, unit name, session number, or root tgid.
    pub id: String,
    /// Slurm step (`0`, `batch`, `extern`, ...).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub step: Option<String>,
    /// Kubernetes: the container id inside the pod.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub container: Option<String>,
    /// A readable name when one is known (the pod's name, the launcher's comm).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    /// Kubernetes: the pod's namespace, when the container runtime exposes it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub namespace: Option<String>,
    /// The cgroup path the decision came from (empty for environment / process-tree jobs).
    pub cgroup: String,
}

impl Job {
    fn new(kind: &str, id: impl Into<String>, cgroup: &str) -> Job {
        Job {
            kind: kind.into(),
            id: id.into(),
            cgroup: cgroup.into(),
            ..Job::default()
        }
    }

    /// `kind:id`, the grouping key.
    pub fn key(&self) -> String {
        format!("{}:{}", self.kind, self.id)
    }

    /// One short label for tables: `slurm 1234.0`, `kubernetes pod 5b1d…`, `docker 3f2a…`.
    pub fn label(&self) -> String {
        let short = |s: &str| s.chars().take(12).collect::<String>();
        match self.kind.as_str() {
            "slurm" => {
                let step = self
                    .step
                    .as_ref()
                    .map(|s| format!(".{s}"))
                    .unwrap_or_default();
                match &self.name {
                    // An array task: Slurm's own name for it, then its job id.
                    Some(n) => format!("slurm {n}{step} (job {})", self.id),
                    None => format!("slurm {}{step}", self.id),
                }
            }
            "kubernetes" => match (&self.namespace, &self.name) {
                (Some(ns), Some(n)) => format!("kubernetes {ns}/{n}"),
                _ => format!("kubernetes pod {}", short(&self.id)),
            },
            "docker" | "podman" | "containerd" | "crio" => {
                format!("{} {}", self.kind, short(&self.id))
            }
            "process_tree" => match &self.name {
                Some(n) => format!("{n} ({})", self.id),
                None => format!("process tree {}", self.id),
            },
            _ => format!("{} {}", self.kind, self.id),
        }
    }
}

/// The cgroup path of a process from the text of `/proc/PID/cgroup`.
pub fn cgroup_path(text: &str) -> Option<String> {
    let mut first = None;
    let mut systemd = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrl.is_empty() {
            return Some(path.to_owned());
        }
        if ctrl == "name=systemd" {
            systemd = Some(path.to_owned());
        }
        first.get_or_insert_with(|| path.to_owned());
    }
    systemd.or(first)
}

/// Every cgroup path of a process in the text of `/proc/PID/cgroup`, [`cgroup_path`]'s first
/// (duplicates left out).
pub fn cgroup_paths(text: &str) -> Vec<String> {
    let mut out: Vec<String> = cgroup_path(text).into_iter().collect();
    for line in text.lines() {
        if let Some(path) = line.splitn(3, ':').nth(2)
            && !out.iter().any(|p| p == path)
        {
            out.push(path.to_owned());
        }
    }
    out
}

/// The job the cgroup file text `/proc/PID/cgroup` names (see the module's comment), and the
/// process's main cgroup path ([`cgroup_path`]).
pub fn job_from_cgroup_file(text: &str) -> (Option<Job>, String) {
    let paths = cgroup_paths(text);
    let jobs: Vec<Option<Job>> = paths.iter().map(|p| job_from_cgroup(p)).collect();
    let strong = jobs
        .iter()
        .flatten()
        .find(|j| !matches!(j.kind.as_str(), "systemd" | "session"))
        .cloned();
    // The strong one, else the main path's (the first).
    let job = strong.or_else(|| jobs.into_iter().next().flatten());
    (job, paths.into_iter().next().unwrap_or_default())
}

fn is_hex_id(s: &str) -> bool {
    s.len() >= 12 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `prefix<id>suffix` → id.
fn between<'a>(c: &'a str, prefix: &str, suffix: &str) -> Option<&'a str> {
    c.strip_prefix(prefix)?.strip_suffix(suffix)
}

/// A container id from one cgroup path component, with its runtime.
fn container_of(c: &str) -> Option<(&'static str, String)> {
    for (prefix, kind) in [
        ("docker-", "docker"),
        ("libpod-", "podman"),
        ("cri-containerd-", "containerd"),
        ("crio-", "crio"),
    ] {
        // `.scope` under systemd's cgroup driver; none under cgroupfs (CRI-O: `crio-<id>`).
        if let Some(id) = c.strip_prefix(prefix)
            && let id = id.strip_suffix(".scope").unwrap_or(id)
            && is_hex_id(id)
        {
            return Some((kind, id.to_owned()));
        }
    }
    None
}

/// The job that a cgroup path names, if any. Pure: unit-tested on real samples.
pub fn job_from_cgroup(path: &str) -> Option<Job> {
    // A cgroup removed while the process is still in it (rare) is shown with this suffix.
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();

    // Slurm: .../job_<id>/step_<step>/... (cgroup v2: under slurmstepd.scope; v1: /slurm/uid_N/)
    if let Some(i) = comps.iter().position(|c| {
        c.strip_prefix("job_")
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
    }) {
        let mut j = Job::new("slurm", &comps[i][4..], path);
        j.step = comps
            .get(i + 1)
            .and_then(|c| c.strip_prefix("step_"))
            .map(str::to_owned);
        return Some(j);
    }

    // Kubernetes, systemd driver: kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/<ctr>.scope
    // cgroupfs driver: /kubepods/<qos>/pod<uid>/<container id>  (or /kubepods/pod<uid>/<id>)
    // (Anywhere in the path: a node agent that nests kubelet's hierarchy under its own cgroup
    // still yields a kubepods subtree; and with a cgroup root of its own, as kind gives
    // kubelet, the slices are `kubelet-kubepods…`.)
    if let Some(k) = comps.iter().position(|c| c.contains("kubepods")) {
        for (i, c) in comps.iter().enumerate().skip(k) {
            let uid = if let Some(rest) = c.strip_suffix(".slice") {
                rest.rfind("-pod").map(|p| rest[p + 4..].replace('_', "-"))
            } else {
                c.strip_prefix("pod").map(str::to_owned)
            };
            if let Some(uid) = uid.filter(|u| !u.is_empty()) {
                let mut j = Job::new("kubernetes", uid, path);
                j.container = comps.get(i + 1).map(|n| {
                    container_of(n)
                        .map(|(_, id)| id)
                        .unwrap_or_else(|| (*n).to_owned())
                });
                return Some(j);
            }
        }
    }

    // Containers outside Kubernetes.
    for (i, c) in comps.iter().enumerate() {
        if let Some((kind, id)) = container_of(c) {
            return Some(Job::new(kind, id, path));
        }
        // cgroupfs layouts: /docker/<id>, /libpod_parent/libpod-<id>
        if let Some(next) = comps.get(i + 1) {
            if *c == "docker" && is_hex_id(next) {
                return Some(Job::new("docker", *next, path));
            }
            if *c == "libpod_parent"
                && let Some(id) = next.strip_prefix("libpod-")
                && is_hex_id(id)
            {
                return Some(Job::new("podman", id, path));
            }
        }
    }

    // systemd: a login session, else the innermost service.
    if let Some(s) = comps
        .iter()
        .rev()
        .find_map(|c| between(c, "session-", ".scope"))
    {
        return Some(Job::new("session", s, path));
    }
    if let Some(unit) = comps.iter().rev().find(|c| {
        c.ends_with(".service") && !c.starts_with("user@") && !c.starts_with("user-runtime-dir@")
    }) {
        return Some(Job::new("systemd", *unit, path));
    }
    None
}

/// The pod (namespace, name) of a Kubernetes container, from the annotations in its OCI bundle
/// (`config.json`) as containerd and CRI-O keep it under `root`.
pub fn pod_of_container(root: &std::path::Path, container: &str) -> Option<(String, String)> {
    if container.is_empty() || container.contains('/') || container.contains("..") {
        return None;
    }
    let candidates = [
        format!("run/containerd/io.containerd.runtime.v2.task/k8s.io/{container}/config.json"),
        format!("run/containers/storage/overlay-containers/{container}/userdata/config.json"),
    ];
    for rel in candidates {
        let Ok(f) = fs::File::open(root.join(rel)) else {
            continue;
        };
        // Bounded: bundles are a few KiB; a hostile or huge file is not read whole.
        let mut text = String::new();
        use std::io::Read;
        if f.take(4 << 20).read_to_string(&mut text).is_err() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let a = &v["annotations"];
        let get = |keys: &[&str]| keys.iter().find_map(|k| a[*k].as_str().map(str::to_owned));
        let ns = get(&[
            "io.kubernetes.cri.sandbox-namespace",
            "io.kubernetes.pod.namespace",
        ]);
        let name = get(&["io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"]);
        if let (Some(ns), Some(name)) = (ns, name) {
            return Some((ns, name));
        }
    }
    None
}

/// `SLURM_JOB_ID` / `SLURM_STEP_ID` from the NUL-separated text of `/proc/PID/environ`.
pub fn slurm_from_environ(env: &[u8]) -> Option<(String, Option<String>)> {
    let job = environ_var(env, b"SLURM_JOB_ID")?;
    Some((job, environ_var(env, b"SLURM_STEP_ID")))
}

/// An array job's name as Slurm shows it (`squeue`, `sacct`): `<array job id>_<task id>`, from
/// `SLURM_ARRAY_JOB_ID` and `SLURM_ARRAY_TASK_ID` (each task is a job of its own id).
pub fn slurm_array_from_environ(env: &[u8]) -> Option<String> {
    let a = environ_var(env, b"SLURM_ARRAY_JOB_ID")?;
    let t = environ_var(env, b"SLURM_ARRAY_TASK_ID")?;
    Some(format!("{a}_{t}"))
}

/// The NUL-separated text of `/proc/PID/environ` (bounded), if readable.
fn environ_of(pid: u32) -> Option<Vec<u8>> {
    super::process::read_head(&format!("/proc/{pid}/environ"), super::process::MAX_ENVIRON).ok()
}

/// The non-empty value of `name` in NUL-separated environ text.
fn environ_var(env: &[u8], name: &[u8]) -> Option<String> {
    env.split(|&b| b == 0)
        .filter_map(|kv| kv.strip_prefix(name)?.strip_prefix(b"="))
        .next_back()
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Processes whose children are separate jobs (shells, terminal multiplexers, init, sshd).
fn is_job_boundary(comm: &str) -> bool {
    matches!(
        comm,
        "bash"
            | "sh"
            | "dash"
            | "zsh"
            | "fish"
            | "ksh"
            | "tcsh"
            | "csh"
            | "sshd"
            | "login"
            | "su"
            | "sudo"
            | "tmux: server"
            | "screen"
            | "SCREEN"
            | "systemd"
            | "init"
            | "containerd-shim"
            | "slurmstepd"
            | "gpuprofd"
    ) || comm.starts_with("containerd-shim")
}

fn stat_ppid_comm(tgid: u32) -> Option<(u32, String)> {
    crate::enrich::process::read_stat(tgid).map(|s| (s.ppid, s.comm))
}

/// The launcher at the root of `tgid`'s process tree: the highest ancestor whose parent is a
/// shell, init, sshd or similar (so `torchrun`'s workers share `torchrun`'s tgid).
pub fn process_tree_root(tgid: u32) -> Option<(u32, String)> {
    let (mut ppid, mut comm) = stat_ppid_comm(tgid)?;
    let mut cur = tgid;
    for _ in 0..64 {
        if ppid <= 1 {
            break;
        }
        let Some((pp, pcomm)) = stat_ppid_comm(ppid) else {
            break;
        };
        if is_job_boundary(&pcomm) {
            break;
        }
        cur = ppid;
        comm = pcomm;
        ppid = pp;
    }
    Some((cur, comm))
}

/// The job of a running process (`None` when it is gone).
pub fn job_of(tgid: u32) -> Option<Job> {
    let (found, cg) = job_from_cgroup_file(
        &fs::read_to_string(format!("/proc/{tgid}/cgroup")).unwrap_or_default(),
    );
    // Read once, when first needed (most jobs are decided by the cgroup alone).
    let env = std::cell::OnceCell::new();
    let environ = || env.get_or_init(|| environ_of(tgid)).as_deref();
    // Slurm without cgroup confinement leaves its tasks in slurmd's (or a session's) cgroup:
    // there the environment knows better than the unit.
    let found = found.filter(|j| {
        !matches!(j.kind.as_str(), "systemd" | "session")
            || environ().and_then(slurm_from_environ).is_none()
    });
    if let Some(mut j) = found {
        if j.kind == "slurm" {
            j.name = environ().and_then(slurm_array_from_environ);
        }
        if j.kind == "kubernetes" {
            // The container runtime's bundle says the pod's namespace and name; else the
            // pod's hostname (its name by default), when the environment is readable.
            if let Some((ns, name)) = j
                .container
                .as_deref()
                .and_then(|c| pod_of_container(std::path::Path::new("/"), c))
            {
                j.namespace = Some(ns);
                j.name = Some(name);
            } else if let Some(env) = environ() {
                j.name = env.split(|&b| b == 0).find_map(|kv| {
                    kv.strip_prefix(b"HOSTNAME=")
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                });
            }
        }
        return Some(j);
    }
    if let Some(env) = environ()
        && let Some((id, step)) = slurm_from_environ(env)
    {
        let mut j = Job::new("slurm", id, &cg);
        j.step = step;
        j.name = slurm_array_from_environ(env);
        return Some(j);
    }
    let (root, comm) = process_tree_root(tgid)?;
    let mut j = Job::new("process_tree", root.to_string(), &cg);
    j.name = Some(comm);
    Some(j)
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on
/// hybrid hosts), from `/proc/self/mountinfo`.
pub fn cgroup2_root() -> Option<std::path::PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next() == Some("cgroup2"))
            .then(|| left.split_whitespace().nth(4).map(std::path::PathBuf::from))
            .flatten()
    })
}

/// A selected cgroup: its path relative to the cgroup2 root and its id (the directory's inode,
/// which is what `bpf_get_current_ancestor_cgroup_id` returns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectedCgroup {
    pub rel: String,
    pub id: u64,
}

fn selected(root: &std::path::Path, dir: &std::path::Path) -> Option<SelectedCgroup> {
    use std::os::unix::fs::MetadataExt;
    let md = fs::metadata(dir).ok()?;
    md.is_dir().then_some(())?;
    let rel = dir.strip_prefix(root).ok()?.to_string_lossy();
    Some(SelectedCgroup {
        rel: format!("/{}", rel.trim_start_matches('/')),
        id: md.ino(),
    })
}

/// A `--cgroup` argument that names no cgroup.
#[derive(Debug, thiserror::Error)]
#[error(
    "--cgroup \"{arg}\": no such cgroup under {} (give the path /proc/PID/cgroup shows, e.g. \
     /system.slice/docker-<id>.scope)",
    root.display()
)]
pub struct NoSuchCgroup {
    pub arg: String,
    pub root: std::path::PathBuf,
}

/// `--cgroup PATH`: absolute under the cgroup2 mount, or relative to it (as `/proc/PID/cgroup`
/// shows it).
pub fn resolve_cgroup_arg(
    root: &std::path::Path,
    arg: &str,
) -> Result<SelectedCgroup, NoSuchCgroup> {
    let p = std::path::Path::new(arg);
    let dir = if p.starts_with(root) {
        p.to_path_buf()
    } else {
        root.join(arg.trim_start_matches('/'))
    };
    selected(root, &dir).ok_or_else(|| NoSuchCgroup {
        arg: arg.into(),
        root: root.into(),
    })
}

/// Whether `job` is the job `--job ID` asks for: the same id, or a container id's prefix of at
/// least 12 characters (as `docker ps` shows it).
pub fn job_matches(job: &Job, id: &str) -> bool {
    job.id == id
        || (job.kind == "slurm" && job.name.as_deref() == Some(id))
        || (id.len() >= 12
            && matches!(
                job.kind.as_str(),
                "docker" | "podman" | "containerd" | "crio"
            )
            && job.id.starts_with(id))
}

/// The top-most cgroups of the jobs `ids` (a Slurm job's `job_N`, a pod's slice, a container's
/// scope), walking the hierarchy below `root` (bounded: depth 16, 200 000 directories).
pub fn job_cgroups(root: &std::path::Path, ids: &[String]) -> Vec<SelectedCgroup> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        seen += 1;
        if seen > 200_000 {
            break;
        }
        if dir != root
            && let Some(sel) = selected(root, &dir)
            && let Some(mut job) = job_from_cgroup(&sel.rel)
        {
            // An array task asked for by Slurm's name for it (`1234_5`): its processes'
            // environment says which task a `job_N` is.
            if job.kind == "slurm" && ids.iter().any(|id| id.contains('_')) {
                job.name = first_pid_below(&dir, 4)
                    .and_then(environ_of)
                    .and_then(|env| slurm_array_from_environ(&env));
            }
            if ids.iter().any(|id| job_matches(&job, id)) {
                out.push(sel); // the job's top: its sub-cgroups are covered in the kernel
                continue;
            }
            if job.kind == "slurm" {
                continue; // below a job_N: the same job, not another one
            }
        }
        if depth >= 16 {
            continue;
        }
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

/// A process in cgroup `dir` or below it (depth-first, at most `depth` levels down).
fn first_pid_below(dir: &std::path::Path, depth: usize) -> Option<u32> {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs"))
        && let Some(pid) = text.lines().find_map(|l| l.trim().parse().ok())
    {
        return Some(pid);
    }
    if depth == 0 {
        return None;
    }
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .find_map(|e| first_pid_below(&e.path(), depth - 1))
}

#[cfg(test)]
mod tests;
