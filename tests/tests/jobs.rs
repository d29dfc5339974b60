//! Job attribution from real cgroups on this machine: Slurm, Kubernetes (systemd driver) and
//! Docker layouts created under the cgroup v2 mount, workloads placed in them before exec.

use gpuprofd_tests::*;
use serde_json::{Value, json};

const POD_UID: &str = "5b1d2f3a-7c6e-4d2b-9a1e-0f2b3c4d5e6f";
const CTR: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const DOCKER: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

fn job_entry<'a>(r: &'a Value, kind: &str, id: &str) -> &'a Value {
    r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["kind"] == kind && j["id"] == id)
        .unwrap_or_else(|| panic!("no {kind} job {id} in {}", r["jobs"]))
}

#[test]
fn processes_are_attributed_to_their_jobs() {
    require_bpf();
    let step0 = Cgroup::new("job_77/step_0/user/task_0");
    let step1 = Cgroup::new("job_77/step_1");
    let pod = Cgroup::new(&format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CTR}.scope",
        POD_UID.replace('-', "_")
    ));
    let docker = Cgroup::new(&format!("system.slice/docker-{DOCKER}.scope"));

    let d = Daemon::all_jobs();
    let mut a = Workload::spawn_in("workload", &step0);
    let mut b = Workload::spawn_in("workload", &step1);
    let mut k = Workload::spawn_in("workload_drv", &pod);
    let mut c = Workload::spawn_in("workload", &docker);
    a.cmd("rt_launch vecAdd 3 1 1 1 32 1 1 0 0");
    b.cmd("rt_launch relu 2 1 1 1 32 1 1 0 0");
    k.cmd("drv_launch cupy_scale 4 1 1 1 32 1 1 0 0");
    c.script(&["rt_memcpy h2d 100 2", "rt_malloc 4096 1"]);
    let ids = (a.tgid, b.tgid, k.tgid, c.tgid);
    let r = d.stop().report;

    assert_eq!(
        process(&r, ids.0)["job"],
        json!({"kind": "slurm", "id": "77", "step": "0", "cgroup": step0.rel()})
    );
    assert_eq!(process(&r, ids.1)["job"]["step"], "1");
    let kj = &process(&r, ids.2)["job"];
    assert_eq!(
        (&kj["kind"], &kj["id"], &kj["container"], &kj["cgroup"]),
        (
            &json!("kubernetes"),
            &json!(POD_UID),
            &json!(CTR),
            &json!(pod.rel())
        )
    );
    assert_eq!(
        process(&r, ids.3)["job"],
        json!({"kind": "docker", "id": DOCKER, "cgroup": docker.rel()})
    );

    let slurm = job_entry(&r, "slurm", "77");
    assert_eq!(slurm["steps"], json!(["0", "1"]));
    let mut procs = vec![ids.0, ids.1];
    procs.sort_unstable();
    assert_eq!(slurm["processes"], json!(procs));
    assert_eq!(slurm["launches"], 5);
    let kube = job_entry(&r, "kubernetes", POD_UID);
    assert_eq!(
        (&kube["processes"], &kube["launches"]),
        (&json!([ids.2]), &json!(4))
    );
    let dock = job_entry(&r, "docker", DOCKER);
    assert_eq!(
        (&dock["launches"], &dock["copy_bytes"], &dock["alloc_bytes"]),
        (&json!(0), &json!(200), &json!(4096))
    );
    a.exit();
    b.exit();
    k.exit();
    c.exit();
}

fn start_filtered(args: &[&str]) -> Daemon {
    let lib = fakecuda().join("lib");
    let mut a = vec!["--no-system-libs", "--lib", lib.to_str().unwrap()];
    a.extend_from_slice(args);
    Daemon::start(&a)
}

#[test]
fn job_filter_selects_in_the_kernel() {
    require_bpf();
    // Two jobs with two processes each; only job 7701 is asked for.
    let a0 = Cgroup::new("job_7701/step_0");
    let a1 = Cgroup::new("job_7701/step_1/task_0");
    let b0 = Cgroup::new("job_7802/step_0");
    let b1 = Cgroup::new("job_7802/step_1");
    let d = start_filtered(&["--job", "7701"]);
    let mut wa0 = Workload::spawn_in("workload", &a0);
    let mut wa1 = Workload::spawn_in("workload_drv", &a1);
    let mut wb0 = Workload::spawn_in("workload", &b0);
    let mut wb1 = Workload::spawn_in("workload", &b1);
    wa0.script(&["rt_launch vecAdd 3 1 1 1 32 1 1 0 0", "rt_memcpy h2d 10 1"]);
    wa1.cmd("drv_launch cupy_scale 2 1 1 1 32 1 1 0 0");
    wb0.script(&["rt_launch relu 1000 1 1 1 32 1 1 0 0", "rt_memcpy h2d 10 5"]);
    wb1.cmd("rt_launch gemm 500 1 1 1 32 1 1 0 0");
    let r = d.stop().report;
    let mut tgids: Vec<u64> = r["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tgid"].as_u64().unwrap())
        .collect();
    tgids.sort_unstable();
    let mut want = vec![wa0.tgid as u64, wa1.tgid as u64];
    want.sort_unstable();
    assert_eq!(tgids, want, "only job 7701's processes");
    // The other job's 1500 launches never reached the ring buffer.
    assert_eq!(r["submitted"]["launch"], 3 + 2);
    assert_eq!(r["submitted"]["copy"], 1);
    let j = job_entry(&r, "slurm", "7701");
    assert_eq!(
        (&j["launches"], &j["steps"]),
        (&json!(5), &json!(["0", "1"]))
    );
    assert_eq!(r["jobs"].as_array().unwrap().len(), 1);
    for w in [wa0, wa1, wb0, wb1] {
        w.exit();
    }
}

#[test]
fn job_that_starts_later_and_cgroup_paths() {
    require_bpf();
    let docker = Cgroup::new(&format!("system.slice/docker-{DOCKER}.scope"));
    let other = Cgroup::new("system.slice/other.scope");
    // Job 7903 does not exist yet when the daemon starts.
    let d = start_filtered(&["--job", "7903", "--cgroup", &docker.rel()]);
    let mut d = d;
    let late = Cgroup::new("job_7903/step_0");
    d.stderr.wait_for("the new job's cgroup selected", |l| {
        l.contains("selecting cgroup") && l.contains("/job_7903")
    });
    let mut wl = Workload::spawn_in("workload", &late);
    let mut wd = Workload::spawn_in("workload", &docker);
    let mut wo = Workload::spawn_in("workload", &other);
    wl.cmd("rt_launch vecAdd 4 1 1 1 32 1 1 0 0");
    wd.cmd("rt_launch relu 6 1 1 1 32 1 1 0 0");
    wo.cmd("rt_launch gemm 9 1 1 1 32 1 1 0 0");
    let r = d.stop().report;
    assert_eq!(process(&r, wl.tgid)["launches"], 4);
    assert_eq!(process(&r, wd.tgid)["launches"], 6);
    assert!(
        !has_process(&r, wo.tgid),
        "a process outside the selection was captured"
    );
    assert_eq!(r["submitted"]["launch"], 10);
    for w in [wl, wd, wo] {
        w.exit();
    }
}

#[test]
fn bad_selections_are_refused_before_attaching() {
    require_bpf();
    let (code, _o, err) = run_daemon(&["--cgroup", "/no/such/cgroup", "--duration", "1s"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--cgroup \"/no/such/cgroup\": no such cgroup"),
        "{err}"
    );
    assert!(!err.contains("gpuprofd: ready"), "{err}");
    let (code, _o, err) = run_daemon(&["--pid", "1", "--job", "77"]);
    assert_eq!(code, 2, "{err}");
}
