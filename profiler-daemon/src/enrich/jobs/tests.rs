use super::*;

fn j(path: &str) -> Option<(String, String, Option<String>, Option<String>)> {
    job_from_cgroup(path).map(|j| (j.kind, j.id, j.step, j.container))
}
fn s(x: &str) -> String {
    x.to_owned()
}

#[test]
fn cgroup_file_v2_hybrid_and_v1() {
    assert_eq!(
        cgroup_path("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n"),
        Some(s(
            "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"
        ))
    );
    // hybrid: v1 controllers plus the v2 line
    let hybrid = "12:cpu,cpuacct:/docker/abc\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n0::/user.slice/user-0.slice/session-3.scope\n";
    assert_eq!(
        cgroup_path(hybrid),
        Some(s("/user.slice/user-0.slice/session-3.scope"))
    );
    let v1 =
        "11:memory:/slurm/uid_1000/job_7/step_batch\n1:name=systemd:/system.slice/slurmd.service\n";
    assert_eq!(cgroup_path(v1), Some(s("/system.slice/slurmd.service")));
    assert_eq!(cgroup_path("garbage"), None);
}

fn from_file(text: &str) -> (Option<(String, String, Option<String>)>, String) {
    let (j, main) = job_from_cgroup_file(text);
    (j.map(|j| (j.kind, j.id, j.step)), main)
}

/// Slurm's cgroup/v1 plugin confines tasks in v1 controllers only: their v2 and
/// `name=systemd` paths still name slurmd. The job is found in any hierarchy; a unit or
/// session only in the main one.
#[test]
fn every_hierarchy_is_looked_at() {
    let v1 = "11:memory:/slurm/uid_1000/job_7/step_batch\n4:freezer:/slurm/uid_1000/job_7/step_batch\n1:name=systemd:/system.slice/slurmd.service\n";
    assert_eq!(
        from_file(v1),
        (
            Some((s("slurm"), s("7"), Some(s("batch")))),
            s("/system.slice/slurmd.service")
        )
    );
    let hybrid = "11:memory:/slurm/uid_1000/job_7/step_extern\n1:name=systemd:/user.slice/user-1000.slice/session-4.scope\n0::/user.slice/user-1000.slice/session-4.scope\n";
    assert_eq!(
        from_file(hybrid),
        (
            Some((s("slurm"), s("7"), Some(s("extern")))),
            s("/user.slice/user-1000.slice/session-4.scope")
        )
    );
    // Nothing stronger anywhere: the main path's session, not a v1 controller's unit.
    let plain = "12:cpu,cpuacct:/system.slice/other.service\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n0::/user.slice/user-0.slice/session-3.scope\n";
    assert_eq!(
        from_file(plain),
        (
            Some((s("session"), s("3"), None)),
            s("/user.slice/user-0.slice/session-3.scope")
        )
    );
    assert_eq!(
        cgroup_paths(plain),
        [
            "/user.slice/user-0.slice/session-3.scope",
            "/system.slice/other.service"
        ]
    );
    assert_eq!(from_file("0::/\n"), (None, s("/")));
    assert_eq!(from_file(""), (None, s("")));
}

#[test]
fn array_tasks_and_their_names() {
    let env = b"PATH=/bin\0SLURM_JOB_ID=1240\0SLURM_ARRAY_JOB_ID=1234\0SLURM_ARRAY_TASK_ID=5\0";
    assert_eq!(slurm_from_environ(env), Some((s("1240"), None)));
    assert_eq!(slurm_array_from_environ(env), Some(s("1234_5")));
    assert_eq!(slurm_array_from_environ(b"SLURM_ARRAY_JOB_ID=1234\0"), None);
    // A variable whose name only starts like it is not it; an empty value is none.
    assert_eq!(
        slurm_from_environ(b"SLURM_JOB_ID_X=9\0SLURM_JOB_ID=\0"),
        None
    );
    let mut j = job_from_cgroup("/system.slice/slurmstepd.scope/job_1240/step_0").unwrap();
    assert_eq!(j.label(), "slurm 1240.0");
    j.name = slurm_array_from_environ(env);
    assert_eq!(j.label(), "slurm 1234_5.0 (job 1240)");
    assert!(job_matches(&j, "1240") && job_matches(&j, "1234_5"));
    assert!(!job_matches(&j, "1234") && !job_matches(&j, "1234_6"));
}

#[test]
fn slurm_v2_and_v1() {
    assert_eq!(
        j("/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0"),
        Some((s("slurm"), s("1234"), Some(s("0")), None))
    );
    assert_eq!(
        j("/slurm/uid_1000/job_7/step_batch/task_0"),
        Some((s("slurm"), s("7"), Some(s("batch")), None))
    );
    assert_eq!(
        j("/system.slice/slurmstepd.scope/job_99"),
        Some((s("slurm"), s("99"), None, None))
    );
    // not a Slurm job id
    assert_eq!(j("/job_x/step_0"), None);
}

#[test]
fn kubernetes_systemd_and_cgroupfs_drivers() {
    let cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    assert_eq!(
        j(&format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5b1d2f3a_7c6e_4d2b_9a1e_0f2b3c4d5e6f.slice/cri-containerd-{cid}.scope"
        )),
        Some((
            s("kubernetes"),
            s("5b1d2f3a-7c6e-4d2b-9a1e-0f2b3c4d5e6f"),
            None,
            Some(s(cid))
        ))
    );
    assert_eq!(
        j(&format!(
            "/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555.slice/crio-{cid}.scope"
        )),
        Some((
            s("kubernetes"),
            s("11111111-2222-3333-4444-555555555555"),
            None,
            Some(s(cid))
        ))
    );
    assert_eq!(
        j(&format!(
            "/kubepods/besteffort/pod5b1d2f3a-7c6e-4d2b-9a1e-0f2b3c4d5e6f/{cid}"
        )),
        Some((
            s("kubernetes"),
            s("5b1d2f3a-7c6e-4d2b-9a1e-0f2b3c4d5e6f"),
            None,
            Some(s(cid))
        ))
    );
}

/// kind (kubelet with a cgroup root of its own, inside a node container), CRI-O's cgroupfs
/// manager (no `.scope`), a cgroup removed under a live process.
#[test]
fn kubelet_cgroup_root_crio_cgroupfs_and_deleted_cgroups() {
    let cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let node = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    let uid = "5b1d2f3a-7c6e-4d2b-9a1e-0f2b3c4d5e6f";
    let want = Some((s("kubernetes"), s(uid), None, Some(s(cid))));
    assert_eq!(
        j(&format!(
            "/system.slice/docker-{node}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{}.slice/cri-containerd-{cid}.scope",
            uid.replace('-', "_")
        )),
        want
    );
    // The same seen from inside the node container (its own cgroup namespace).
    assert_eq!(
        j(&format!(
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{}.slice/cri-containerd-{cid}.scope",
            uid.replace('-', "_")
        )),
        want
    );
    assert_eq!(j(&format!("/kubepods/burstable/pod{uid}/crio-{cid}")), want);
    assert_eq!(
        j(&format!("/system.slice/crio-{cid}")),
        Some((s("crio"), s(cid), None, None))
    );
    // conmon is not the container
    assert_eq!(j(&format!("/system.slice/crio-conmon-{cid}.scope")), None);
    assert_eq!(
        j(&format!("/system.slice/docker-{cid}.scope (deleted)")),
        Some((s("docker"), s(cid), None, None))
    );
}

#[test]
fn containers_and_systemd() {
    let cid = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
    assert_eq!(
        j(&format!("/system.slice/docker-{cid}.scope")),
        Some((s("docker"), s(cid), None, None))
    );
    assert_eq!(
        j(&format!("/docker/{cid}")),
        Some((s("docker"), s(cid), None, None))
    );
    assert_eq!(
        j(&format!(
            "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{cid}.scope/container"
        )),
        Some((s("podman"), s(cid), None, None))
    );
    assert_eq!(
        j(&format!("/machine.slice/libpod-{cid}.scope")),
        Some((s("podman"), s(cid), None, None))
    );
    assert_eq!(
        j(&format!("/system.slice/cri-containerd-{cid}.scope")),
        Some((s("containerd"), s(cid), None, None))
    );
    assert_eq!(
        j("/system.slice/train-resnet.service"),
        Some((s("systemd"), s("train-resnet.service"), None, None))
    );
    assert_eq!(
        j("/user.slice/user-1000.slice/session-12.scope"),
        Some((s("session"), s("12"), None, None))
    );
    // a user manager itself is no job; an app service in it is
    assert_eq!(
        j("/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service"),
        Some((s("systemd"), s("jupyter.service"), None, None))
    );
    assert_eq!(j("/user.slice/user-1000.slice/user@1000.service"), None);
    assert_eq!(j("/"), None);
    assert_eq!(j(""), None);
}

#[test]
fn pod_names_from_containerd_and_crio_bundles() {
    let root = std::env::temp_dir().join(format!("gpuprofd-pod-{}", std::process::id()));
    let c1 = "aaaaaaaaaaaa1111";
    let d1 = root.join(format!(
        "run/containerd/io.containerd.runtime.v2.task/k8s.io/{c1}"
    ));
    fs::create_dir_all(&d1).unwrap();
    fs::write(
        d1.join("config.json"),
        r#"{"annotations":{"io.kubernetes.cri.sandbox-namespace":"ml","io.kubernetes.cri.sandbox-name":"trainer-0"}}"#,
    )
    .unwrap();
    let c2 = "bbbbbbbbbbbb2222";
    let d2 = root.join(format!(
        "run/containers/storage/overlay-containers/{c2}/userdata"
    ));
    fs::create_dir_all(&d2).unwrap();
    fs::write(
        d2.join("config.json"),
        r#"{"annotations":{"io.kubernetes.pod.namespace":"default","io.kubernetes.pod.name":"bert"}}"#,
    )
    .unwrap();
    assert_eq!(pod_of_container(&root, c1), Some((s("ml"), s("trainer-0"))));
    assert_eq!(pod_of_container(&root, c2), Some((s("default"), s("bert"))));
    assert_eq!(pod_of_container(&root, "cccc"), None);
    assert_eq!(pod_of_container(&root, "../../etc"), None);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn slurm_environment() {
    let env = b"PATH=/usr/bin\0SLURM_JOB_ID=5150\0SLURM_STEP_ID=3\0HOME=/root\0";
    assert_eq!(slurm_from_environ(env), Some((s("5150"), Some(s("3")))));
    assert_eq!(slurm_from_environ(b"SLURM_JOB_ID=\0"), None);
    assert_eq!(slurm_from_environ(b"HOME=/\0"), None);
}

#[test]
fn job_of_reads_procfs() {
    let own = cgroup_path(&fs::read_to_string("/proc/self/cgroup").unwrap()).unwrap();
    let j = job_of(std::process::id()).expect("our own job");
    assert_eq!(j.cgroup, own);
    assert_eq!(job_of(u32::MAX), None);
}

#[test]
fn job_ids_match_exactly_or_by_container_prefix() {
    let d = Job::new("docker", "3f2a9c1b7d4e5f60718293a4", "");
    assert!(job_matches(&d, "3f2a9c1b7d4e"));
    assert!(!job_matches(&d, "3f2a9c"), "short prefixes are ambiguous");
    assert!(job_matches(&Job::new("slurm", "77", ""), "77"));
    assert!(!job_matches(&Job::new("slurm", "771", ""), "77"));
}

#[test]
fn cgroup_tree_walk_finds_job_tops() {
    let root = std::env::temp_dir().join(format!("gpuprofd-cg-{}", std::process::id()));
    for d in [
        "system.slice/slurmstepd.scope/job_77/step_0/user",
        "system.slice/slurmstepd.scope/job_77/step_1",
        "system.slice/slurmstepd.scope/job_78/step_0",
        "system.slice/docker-3f2a9c1b7d4e5f60718293a4b5c6d7e8.scope",
    ] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    let rels = |ids: &[&str]| {
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        job_cgroups(&root, &ids)
            .into_iter()
            .map(|c| c.rel)
            .collect::<Vec<_>>()
    };
    assert_eq!(rels(&["77"]), ["/system.slice/slurmstepd.scope/job_77"]);
    assert_eq!(
        rels(&["78", "3f2a9c1b7d4e"]),
        [
            "/system.slice/docker-3f2a9c1b7d4e5f60718293a4b5c6d7e8.scope",
            "/system.slice/slurmstepd.scope/job_78"
        ]
    );
    assert!(rels(&["79"]).is_empty());
    let c = resolve_cgroup_arg(&root, "/system.slice/slurmstepd.scope/job_78").unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        c.id,
        fs::metadata(root.join("system.slice/slurmstepd.scope/job_78"))
            .unwrap()
            .ino()
    );
    assert!(
        resolve_cgroup_arg(&root, "/nope")
            .unwrap_err()
            .to_string()
            .contains("no such cgroup")
    );
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn labels() {
    let mut a = Job::new("slurm", "12", "");
    a.step = Some("0".into());
    assert_eq!(a.label(), "slurm 12.0");
    assert_eq!(
        Job::new("docker", "3f2a9c1b7d4e5f6071", "").label(),
        "docker 3f2a9c1b7d4e"
    );
    assert_eq!(a.key(), "slurm:12");
}

/// Another pod as the DaemonSet's daemon sees it (deploy/kubernetes): on cgroup v2 a container
/// has a cgroup namespace of its own, so other pods' paths are relative to the daemon's own
/// container, `..` first. With the systemd cgroup driver the slice names still carry the pod's
/// uid, whether the pod is of another QoS class or of the same one.
#[test]
fn another_pod_seen_from_the_daemonsets_cgroup_namespace() {
    let cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let uid = "5b1d2f3a-7c6e-4d2b-9a1e-0f2b3c4d5e6f";
    let u = uid.replace('-', "_");
    let want = Some((s("kubernetes"), s(uid), None, Some(s(cid))));
    assert_eq!(
        j(&format!(
            "/../../../kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{cid}.scope"
        )),
        want
    );
    assert_eq!(
        j(&format!(
            "/../../kubepods-besteffort-pod{u}.slice/cri-containerd-{cid}.scope"
        )),
        want
    );
}
