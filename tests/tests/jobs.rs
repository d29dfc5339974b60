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
