//! The OCI image of `cargo xtask dist` and the Kubernetes manifests of deploy/kubernetes: the
//! layout read by umoci (which verifies every digest), the kit's very binary inside, the
//! Kustomize bases rendered by kubectl and validated against Kubernetes' JSON schemas, and the
//! image run with runc under exactly what the rendered DaemonSet grants (capabilities, host PID
//! namespace, mounts, read-only root): `gpuprofd doctor` passes its BPF checks inside, the
//! service in it counts a process of the host, and on a "node" without BTF (an empty directory
//! over /sys/kernel/btf) the service names what is missing and waits before it exits.
//!
//! Not run here: a kubelet (no cluster on the test machine), the NVIDIA container toolkit, the
//! `kernel-before-6.6` overlay on such a kernel (this one is newer; its set is run all the same).
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`; it builds the kit and the image
//! and `scripts/setup.sh --test-tools` installs umoci, runc, kubectl and kubernetes-validate).

use gpuprofd_tests::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const TOOLS: &str = "/opt/gpuprofd-test-tools";

fn kit() -> PathBuf {
    let p = PathBuf::from(std::env::var_os("GPUPROFD_DIST").expect(
        "GPUPROFD_DIST is not set: run the privileged tests through `cargo xtask test` (it builds the kit and the image)",
    ));
    assert!(
        p.join("bin/gpuprofd").exists(),
        "{} has no bin/gpuprofd",
        p.display()
    );
    p
}

/// The image layout `cargo xtask dist` writes beside the kit.
fn layout() -> PathBuf {
    let p = kit()
        .parent()
        .unwrap()
        .join(format!("gpuprofd-{VERSION}-oci"));
    assert!(
        p.join("index.json").exists(),
        "{} is missing: `cargo xtask dist` builds it",
        p.display()
    );
    p
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn output(c: &mut Command) -> (i32, String, String) {
    let o = c.output().unwrap_or_else(|e| {
        panic!("{c:?}: {e} (scripts/setup.sh --test-tools installs what this test runs)")
    });
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ok(c: &mut Command) -> String {
    let (rc, out, err) = output(c);
    assert_eq!(rc, 0, "{c:?}: {out}{err}");
    out
}

fn sha256(p: &Path) -> String {
    ok(Command::new("sha256sum").arg(p))
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout
        .join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").expect("a sha256 digest"))
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// Checks a descriptor against its blob (digest and size); returns the blob's path.
fn check_descriptor(layout: &Path, d: &Value) -> PathBuf {
    let digest = d["digest"].as_str().unwrap();
    let p = blob(layout, digest);
    assert_eq!(format!("sha256:{}", sha256(&p)), digest, "{}", p.display());
    assert_eq!(
        std::fs::metadata(&p).unwrap().len(),
        d["size"].as_u64().unwrap()
    );
    p
}

#[test]
fn the_image_layout_is_valid_and_carries_the_kits_binary() {
    let layout = layout();
    assert_eq!(
        std::fs::read_to_string(layout.join("oci-layout")).unwrap(),
        r#"{"imageLayoutVersion":"1.0.0"}"#
    );
    let index = read_json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1);
    let m = &manifests[0];
    assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(
        m["annotations"]["org.opencontainers.image.ref.name"],
        VERSION
    );
    assert_eq!(
        m["platform"],
        json!({"architecture": "amd64", "os": "linux"})
    );
    let manifest = read_json(&check_descriptor(&layout, m));
    let config = read_json(&check_descriptor(&layout, &manifest["config"]));
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let layer = check_descriptor(&layout, &layers[0]);
    // The config's diff_id is the digest of the uncompressed layer.
    let dir = TempDir::new("image-layer");
    let tar = dir.path().join("layer.tar");
    let st = Command::new("gzip")
        .arg("-dc")
        .arg(&layer)
        .stdout(std::fs::File::create(&tar).unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        config["rootfs"],
        json!({"type": "layers", "diff_ids": [format!("sha256:{}", sha256(&tar))]})
    );
    assert_eq!(
        (&config["architecture"], &config["os"]),
        (&json!("amd64"), &json!("linux"))
    );
    assert_eq!(config["config"]["Entrypoint"], json!(["/usr/bin/gpuprofd"]));
    assert_eq!(
        config["config"]["Cmd"],
        json!(["serve", "--config", "/etc/gpuprofd/config.toml"])
    );
    assert_eq!(
        config["config"]["Env"],
        json!([
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
            "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=utility"
        ])
    );

    // Every entry belongs to root; the top level is what the builder laid out.
    let listing = ok(Command::new("tar")
        .args(["--numeric-owner", "-tvf"])
        .arg(&tar));
    let entries: Vec<&str> = listing.lines().collect();
    let not_root: Vec<&&str> = entries
        .iter()
        .filter(|l| l.split_whitespace().nth(1) != Some("0/0"))
        .collect();
    assert!(
        not_root.is_empty(),
        "entries not owned by 0/0: {not_root:?}"
    );
    let names = ok(Command::new("tar").arg("-tf").arg(&tar));
    let mut top: Vec<&str> = names
        .lines()
        .filter(|n| !n.trim_end_matches('/').contains('/'))
        .map(|n| n.trim_end_matches('/'))
        .collect();
    top.sort();
    assert_eq!(
        top,
        [
            "dev", "etc", "lib", "lib64", "proc", "run", "sys", "tmp", "usr", "var"
        ]
    );

    // The kit's binary and configuration, byte for byte, and the binary's mode.
    ok(Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(dir.path())
        .args([
            "usr/bin/gpuprofd",
            "etc/gpuprofd/config.toml",
            "lib64/ld-linux-x86-64.so.2",
        ]));
    let kit = kit();
    assert_eq!(
        sha256(&dir.path().join("usr/bin/gpuprofd")),
        sha256(&kit.join("bin/gpuprofd"))
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("etc/gpuprofd/config.toml")).unwrap(),
        std::fs::read_to_string(kit.join("config.toml")).unwrap()
    );
    assert!(
        entries
            .iter()
            .any(|l| l.starts_with("-rwxr-xr-x 0/0") && l.ends_with(" usr/bin/gpuprofd"))
    );
    assert!(
        entries
            .iter()
            .any(|l| l.starts_with("drwxrwxrwt 0/0") && l.ends_with(" tmp/")),
        "tmp/ is 1777"
    );

    // The .tar beside it holds the same layout.
    let archive = layout.with_file_name(format!("gpuprofd-{VERSION}-oci.tar"));
    let mut in_archive: Vec<String> = ok(Command::new("tar").arg("-tf").arg(&archive))
        .lines()
        .map(str::to_owned)
        .collect();
    in_archive.sort();
    let mut want = vec![
        "blobs/".to_string(),
        "blobs/sha256/".into(),
        "index.json".into(),
        "oci-layout".into(),
    ];
    for d in [
        &m["digest"],
        &manifest["config"]["digest"],
        &layers[0]["digest"],
    ] {
        want.push(format!(
            "blobs/sha256/{}",
            d.as_str().unwrap().strip_prefix("sha256:").unwrap()
        ));
    }
    want.sort();
    assert_eq!(in_archive, want);

    // A third-party reader: umoci lists the tag and unpacks it, verifying each digest...
    assert_eq!(
        ok(Command::new("umoci").args(["ls", "--layout"]).arg(&layout)).trim(),
        VERSION
    );
    let bundle = dir.path().join("bundle");
    ok(Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:{VERSION}", layout.display()))
        .arg(&bundle));
    assert_eq!(
        sha256(&bundle.join("rootfs/usr/bin/gpuprofd")),
        sha256(&kit.join("bin/gpuprofd"))
    );
    // ... and refuses a copy whose layer was altered by one byte.
    let bad = dir.path().join("bad");
    ok(Command::new("cp").arg("-a").arg(&layout).arg(&bad));
    let bad_layer = blob(&bad, layers[0]["digest"].as_str().unwrap());
    let mut bytes = std::fs::read(&bad_layer).unwrap();
    let last = bytes.len() - 9; // inside the deflate stream, before gzip's trailer
    bytes[last] ^= 0xff;
    std::fs::write(&bad_layer, bytes).unwrap();
    let (rc, out, err) = output(
        Command::new("umoci")
            .args(["unpack", "--image"])
            .arg(format!("{}:{VERSION}", bad.display()))
            .arg(dir.path().join("bad-bundle")),
    );
    assert_ne!(rc, 0, "umoci unpacked an altered layer: {out}{err}");
    assert!(err.contains("digest") || err.contains("checksum"), "{err}");
}

/// The Kustomize base `dir` (relative to deploy/kubernetes) rendered by kubectl, as JSON.
fn render(dir: &str) -> Vec<Value> {
    let kubectl = Path::new(TOOLS).join("kubectl/kubectl");
    let yaml = ok(Command::new(&kubectl)
        .arg("kustomize")
        .arg(repo().join("deploy/kubernetes").join(dir)));
    let mut c = Command::new(Path::new(TOOLS).join("k8s/bin/python3"));
    c.args([
        "-c",
        "import sys, json, yaml; json.dump(list(yaml.safe_load_all(sys.stdin)), sys.stdout)",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    let mut child = c
        .spawn()
        .expect("the test tools' python (setup.sh --test-tools)");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    serde_json::from_slice(&o.stdout).unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let all: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(all.len(), 1, "one {kind}");
    all[0]
}

/// `kubernetes-validate --strict` of a rendering against Kubernetes `version`: (exit, output).
fn validate(yaml: &str, version: &str) -> (i32, String) {
    let dir = TempDir::new("k8s-validate");
    let f = dir.path().join("rendered.yaml");
    std::fs::write(&f, yaml).unwrap();
    let (rc, out, err) = output(
        Command::new(Path::new(TOOLS).join("k8s/bin/kubernetes-validate"))
            .args(["--strict", "-k", version])
            .arg(&f),
    );
    (rc, format!("{out}{err}"))
}

const BASE_CAPS: [&str; 5] = [
    "BPF",
    "PERFMON",
    "CHECKPOINT_RESTORE",
    "SYS_PTRACE",
    "DAC_READ_SEARCH",
];
const OLD_KERNEL_CAPS: [&str; 6] = [
    "BPF",
    "PERFMON",
    "SYS_ADMIN",
    "SYS_PTRACE",
    "DAC_READ_SEARCH",
    "SYS_RESOURCE",
];

#[test]
fn the_manifests_render_and_match_kubernetes_schemas() {
    let kubectl = Path::new(TOOLS).join("kubectl/kubectl");
    for (dir, caps) in [
        ("base", &BASE_CAPS[..]),
        ("kernel-before-6.6", &OLD_KERNEL_CAPS[..]),
    ] {
        let yaml = ok(Command::new(&kubectl)
            .arg("kustomize")
            .arg(repo().join("deploy/kubernetes").join(dir)));
        // The oldest release with the appArmorProfile field, and the newest the schemas know.
        for version in ["1.30.0", "1.37.0"] {
            let (rc, out) = validate(&yaml, version);
            assert_eq!(rc, 0, "{dir} against {version}: {out}");
            let short = version.trim_end_matches(".0");
            let passed: Vec<&str> = out
                .lines()
                .filter(|l| l.contains("passed for resource") && l.ends_with(short))
                .collect();
            assert_eq!(passed.len(), 5, "{dir} against {version}: {out}");
        }
        let docs = render(dir);
        let mut kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        kinds.sort();
        assert_eq!(
            kinds,
            [
                "ConfigMap",
                "DaemonSet",
                "Namespace",
                "Service",
                "ServiceAccount"
            ]
        );
        let ds = find(&docs, "DaemonSet");
        let pod = &ds["spec"]["template"]["spec"];
        assert_eq!(pod["hostPID"], true);
        assert_eq!(pod["hostNetwork"], Value::Null);
        assert_eq!(pod["automountServiceAccountToken"], false);
        let c = &pod["containers"][0];
        assert_eq!(c["image"], format!("localhost/gpuprofd:{VERSION}"));
        assert_eq!(
            c["args"],
            json!([
                "serve",
                "--config",
                "/etc/gpuprofd/config.toml",
                "--fail-delay",
                "60s"
            ])
        );
        let sc = &c["securityContext"];
        assert_eq!(sc["capabilities"], json!({"drop": ["ALL"], "add": caps}));
        assert_eq!(sc["privileged"], false);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(find(&docs, "Namespace")["metadata"]["name"], "gpuprofd");
        // The ConfigMap's configuration is one the binary accepts, listening on the pod IP.
        let cm = find(&docs, "ConfigMap");
        let dirp = TempDir::new("k8s-config");
        let f = dirp.path().join("config.toml");
        std::fs::write(&f, cm["data"]["config.toml"].as_str().unwrap()).unwrap();
        let printed = ok(Command::new(kit().join("bin/gpuprofd"))
            .args(["serve", "--print-config", "--config"])
            .arg(&f));
        assert!(printed.contains("listen = \"0.0.0.0:19400\""), "{printed}");
        assert!(printed.contains("system_libs = false"), "{printed}");
        let vol = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "config")
            .unwrap();
        assert_eq!(vol["configMap"]["name"], cm["metadata"]["name"]);
    }
    // The validator is not a rubber stamp: a mistyped field fails it.
    let yaml = ok(Command::new(&kubectl)
        .arg("kustomize")
        .arg(repo().join("deploy/kubernetes/base")))
    .replace(
        "readOnlyRootFilesystem: true",
        "readOnlyRootFilesystem: yes-please",
    );
    let (rc, out) = validate(&yaml, "1.37.0");
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("readOnlyRootFilesystem: 'yes-please' is not of type 'boolean'"),
        "{out}"
    );
}

/// This process's capability bounding set (the containers can hold no more).
fn own_bounding_set() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap()
        .trim();
    u64::from_str_radix(hex, 16).unwrap()
}

fn cap_number(name: &str) -> u32 {
    match name {
        "DAC_READ_SEARCH" => 2,
        "SYS_PTRACE" => 19,
        "SYS_ADMIN" => 21,
        "SYS_RESOURCE" => 24,
        "PERFMON" => 38,
        "BPF" => 39,
        "CHECKPOINT_RESTORE" => 40,
        other => panic!("the test does not know capability {other}"),
    }
}

/// A runc bundle of the image laid out as the rendered DaemonSet of `dir` asks for its one
/// container, with `args` after the entrypoint (None: the DaemonSet's) and `over` mounted
/// empty (tmpfs) on top. The host state directory is a temporary one, not the node's.
struct Bundle {
    dir: TempDir,
    /// The capabilities granted that this machine withholds from the tests too.
    withheld: Vec<String>,
    /// The capabilities the container runs with (granted and not withheld), without `CAP_`.
    held: Vec<String>,
    /// Containers run from it: deleted (killed first) when it goes, so that a failed test
    /// leaves no daemon behind with its probes attached.
    ids: std::cell::RefCell<Vec<String>>,
}

impl Drop for Bundle {
    fn drop(&mut self) {
        for id in self.ids.borrow().iter() {
            let _ = self.runc(&["delete", "-f", id]);
        }
    }
}

impl Bundle {
    fn new(dir_name: &str, args: Option<&[&str]>, over: &[&str]) -> Bundle {
        let docs = render(dir_name);
        let ds = find(&docs, "DaemonSet");
        let cm = find(&docs, "ConfigMap");
        let pod = &ds["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        let dir = TempDir::new("image-bundle");
        let bundle = dir.path().join("bundle");
        ok(Command::new("umoci")
            .args(["unpack", "--image"])
            .arg(format!("{}:{VERSION}", layout().display()))
            .arg(&bundle));
        let cfg_dir = dir.path().join("configmap");
        std::fs::create_dir_all(&cfg_dir).unwrap();
        for (k, v) in cm["data"].as_object().unwrap() {
            std::fs::write(cfg_dir.join(k), v.as_str().unwrap()).unwrap();
        }
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        // The DaemonSet mounts the node's tracefs, which systemd mounts at boot.
        if !Path::new("/sys/kernel/tracing/events").is_dir() {
            ok(Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]));
        }

        let mut spec = read_json(&bundle.join("config.json"));
        let p = &mut spec["process"];
        p["terminal"] = json!(false);
        let image_entry = p["args"][0].clone();
        let mut argv = vec![image_entry];
        match args {
            Some(a) => argv.extend(a.iter().map(|s| json!(s))),
            None => argv.extend(c["args"].as_array().unwrap().iter().cloned()),
        }
        p["args"] = json!(argv);
        for e in c["env"].as_array().unwrap() {
            let kv = format!(
                "{}={}",
                e["name"].as_str().unwrap(),
                e["value"].as_str().unwrap()
            );
            let env = p["env"].as_array_mut().unwrap();
            env.retain(|x| x.as_str().unwrap().split('=').next() != e["name"].as_str());
            env.push(json!(kv));
        }
        let sc = &c["securityContext"];
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        let bounding = own_bounding_set();
        let mut caps = Vec::new();
        let mut withheld = Vec::new();
        let mut held = Vec::new();
        for name in sc["capabilities"]["add"].as_array().unwrap() {
            let name = name.as_str().unwrap();
            if bounding & (1 << cap_number(name)) != 0 {
                held.push(name.to_owned());
                caps.push(format!("CAP_{name}"));
            } else {
                withheld.push(name.to_owned());
            }
        }
        p["capabilities"] = json!({"bounding": caps, "effective": caps, "permitted": caps});
        p["noNewPrivileges"] = json!(sc["allowPrivilegeEscalation"] == false);
        p["user"] = json!({"uid": sc["runAsUser"], "gid": 0});
        // As a container runtime gives (containerd: 1048576, where it may raise it; umoci's
        // bundle says 1024): this process's hard limit, which raising needs no CAP_SYS_RESOURCE.
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into a valid rlimit.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) }, 0);
        p["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "hard": rl.rlim_max, "soft": rl.rlim_max}]);
        spec["root"]["readonly"] = json!(sc["readOnlyRootFilesystem"] == true);
        // hostPID: the host's PID namespace (no pid namespace of its own); no hostNetwork: a
        // network namespace of its own, as a pod's.
        assert_eq!(pod["hostPID"], true);
        assert_eq!(pod["hostNetwork"], Value::Null);
        let ns = spec["linux"]["namespaces"].as_array_mut().unwrap();
        ns.retain(|n| n["type"] != "pid");
        // This host mixes cgroup v1 and v2 (runc places the container in v1 hierarchies): no
        // cgroup mount or limits inside; the limits are the kubelet's business.
        spec["linux"].as_object_mut().unwrap().remove("resources");
        let mounts = spec["mounts"].as_array_mut().unwrap();
        mounts.retain(|m| m["destination"] != "/sys/fs/cgroup");
        let volumes = pod["volumes"].as_array().unwrap();
        for vm in c["volumeMounts"].as_array().unwrap() {
            let v = volumes.iter().find(|v| v["name"] == vm["name"]).unwrap();
            let ro = vm["readOnly"] == true;
            let dest = vm["mountPath"].as_str().unwrap();
            let bind = |src: &Path| {
                let mut o = vec!["rbind", "nosuid", "nodev"];
                if ro {
                    o.push("ro");
                }
                json!({"destination": dest, "type": "bind", "source": src, "options": o})
            };
            let m = if v["configMap"].is_object() {
                bind(&cfg_dir)
            } else if v["emptyDir"].is_object() {
                json!({"destination": dest, "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", "mode=755", "size=1m"]})
            } else if vm["mountPath"] == "/var/lib/gpuprofd" {
                assert_eq!(v["hostPath"]["path"], "/var/lib/gpuprofd");
                bind(&state)
            } else {
                bind(Path::new(v["hostPath"]["path"].as_str().unwrap()))
            };
            mounts.push(m);
        }
        for o in over {
            mounts.push(json!({"destination": o, "type": "tmpfs", "source": "tmpfs",
                               "options": ["nosuid", "nodev", "mode=755", "size=64k"]}));
        }
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&spec).unwrap(),
        )
        .unwrap();
        Bundle {
            dir,
            withheld,
            held,
            ids: Default::default(),
        }
    }

    fn bundle(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }

    /// `runc run` in the foreground, stdout and stderr piped; its own state directory.
    fn command(&self, id: &str) -> Command {
        self.ids.borrow_mut().push(id.to_owned());
        let mut c = Command::new("runc");
        c.arg("--root")
            .arg(self.dir.path().join("runc"))
            .args(["run", "--bundle"])
            .arg(self.bundle())
            .arg("--pid-file")
            .arg(self.dir.path().join("pid"))
            .arg(id)
            .stdin(Stdio::null());
        c
    }

    fn runc(&self, args: &[&str]) -> (i32, String, String) {
        output(
            Command::new("runc")
                .arg("--root")
                .arg(self.dir.path().join("runc"))
                .args(args),
        )
    }

    /// The container's first process as the host sees it.
    fn pid(&self) -> u32 {
        let f = self.dir.path().join("pid");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(p) = std::fs::read_to_string(&f)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return p;
            }
            assert!(Instant::now() < deadline, "runc wrote no pid file");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn container_id(tag: &str) -> String {
    format!("gpuprofd-{tag}-{}", std::process::id())
}

fn doctor_json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("doctor --json: {e}: {out}"))
}

fn check<'a>(doctor: &'a Value, name: &str) -> &'a Value {
    doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {doctor}"))
}

#[test]
fn doctor_passes_in_the_image_under_the_daemonsets_grants() {
    require_bpf();
    for (dir, sys_admin) in [("base", "no"), ("kernel-before-6.6", "yes")] {
        let b = Bundle::new(dir, Some(&["doctor", "--json", "--no-system-libs"]), &[]);
        if !b.withheld.is_empty() {
            eprintln!(
                "{dir}: this machine withholds {:?} from the tests: the container runs without",
                b.withheld
            );
        }
        let (rc, out, err) = output(&mut b.command(&container_id("doctor")));
        assert_eq!(rc, 0, "{dir}: doctor in the image: {out}{err}");
        let d = doctor_json(&out);
        assert_eq!(d["ok"], true, "{d}");
        for name in [
            "privileges",
            "btf",
            "uprobe_pmu",
            "process_maps",
            "bpf_round_trip",
        ] {
            assert_eq!(check(&d, name)["ok"], true, "{dir}: {name}: {d}");
        }
        // The capabilities doctor names: what the grants cover, and what they leave out (the
        // base grants no CAP_SYS_RESOURCE: it matters only before Linux 5.11).
        let head = if sys_admin == "yes" {
            "CAP_SYS_ADMIN (covers CAP_BPF, CAP_PERFMON, map_files)"
        } else {
            "CAP_BPF, CAP_PERFMON"
        };
        let want = if b.held.iter().any(|c| c == "SYS_RESOURCE") {
            format!("{head}: every capability gpuprofd uses")
        } else {
            format!(
                "{head}; without CAP_SYS_RESOURCE (raise the memlock and open-file limits \
                 (kernels before 5.11 charge BPF maps to memlock))"
            )
        };
        assert_eq!(check(&d, "privileges")["detail"], want, "{dir}");
        // The round trip probed the image's own binary, inside the container.
        let rt = check(&d, "bpf_round_trip")["detail"].as_str().unwrap();
        assert!(
            rt.starts_with("3 calls, 3 records through the ring buffer (uprobe_multi link at /usr/bin/gpuprofd+0x"),
            "{rt}"
        );
        // No NVIDIA driver on the test machine, nor the toolkit that would mount NVML in.
        assert_eq!(check(&d, "nvml")["ok"], false);
    }
}

#[test]
fn the_service_in_the_image_counts_a_host_process() {
    require_bpf();
    let b = Bundle::new("base", None, &[]);
    let id = container_id("serve");
    let mut child = b
        .command(&id)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runc");
    let mut err = Lines::new(child.stderr.take().unwrap());
    err.wait_for("the service's ready line", |l| l.contains("ready:"));
    let pid = b.pid();
    // A process of the host, outside the container: its libraries are found through
    // /proc/PID/map_files (the configuration reads no linker cache), attached once it maps
    // them; its calls after that are counted.
    let mut w = Workload::start();
    let socket = PathBuf::from(format!("/proc/{pid}/root/run/gpuprofd.sock"));
    let libs: Vec<String> = ["libcuda.so.1", "libcudart.so.12"]
        .iter()
        .map(|l| fakecuda().join("lib").join(l).display().to_string())
        .collect();
    snapshot_until(
        &daemon_bin(),
        &socket,
        "the workload's libraries attached",
        |s| {
            libs.iter().all(|l| {
                s["libraries"].as_array().is_some_and(|a| {
                    a.iter()
                        .any(|x| x["path"] == l.as_str() && x["probes"].as_u64() > Some(0))
                })
            })
        },
    );
    w.script(&["rt_launch gemm 7 1 1 1 32 1 1 0 0", "rt_memcpy h2d 4096 2"]);
    let snap = snapshot_when(&daemon_bin(), &socket, w.tgid, 7);
    let p = process(&snap, w.tgid);
    assert_eq!(kernel_calls(p, GEMM), 7);
    assert_eq!(copies(p, "h2d").unwrap()["bytes"], 8192);
    // The readiness probe's request, from inside the pod's network namespace.
    let code = ok(Command::new("nsenter")
        .args([
            "-t",
            &pid.to_string(),
            "-n",
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg("http://127.0.0.1:19400/metrics"));
    assert_eq!(code, "200");
    w.exit();
    let (rc, out, e) = b.runc(&["kill", &id, "TERM"]);
    assert_eq!(rc, 0, "{out}{e}");
    let st = wait_bounded(&mut child);
    assert_eq!(st.code(), Some(0), "{:?}", err.rest());
}

#[test]
fn a_node_without_btf_is_named_in_the_log_and_the_exit_waits() {
    require_bpf();
    let missing = "this node lacks /sys/kernel/btf/vmlinux (the kernel's BTF type information)";
    // The DaemonSet's service with a short delay: the log names what is missing; status 14
    // after the delay.
    let b = Bundle::new(
        "base",
        Some(&[
            "serve",
            "--config",
            "/etc/gpuprofd/config.toml",
            "--fail-delay",
            "2s",
        ]),
        &["/sys/kernel/btf"],
    );
    let t = Instant::now();
    let (rc, out, err) = output(&mut b.command(&container_id("nobtf")));
    let took = t.elapsed();
    assert_eq!(rc, 14, "{out}{err}");
    assert!(err.contains(missing), "{err}");
    assert!(err.contains("check=\"btf\""), "{err}");
    assert!(!err.contains("check=\"uprobe_pmu\""), "{err}");
    assert!(
        took >= Duration::from_secs(2),
        "exited after {took:?}, before its 2 s delay"
    );

    // The DaemonSet's own 60 s: a pod deleted meanwhile (SIGTERM) exits at once, still 14.
    let b = Bundle::new("base", None, &["/sys/kernel/btf"]);
    let id = container_id("nobtf-term");
    let mut child = b
        .command(&id)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runc");
    let mut lines = Lines::new(child.stderr.take().unwrap());
    lines.wait_for("the exit line", |l| {
        l.contains("cannot capture on this node")
    });
    let t = Instant::now();
    let (rc, out, e) = b.runc(&["kill", &id, "TERM"]);
    assert_eq!(rc, 0, "{out}{e}");
    let st = wait_bounded(&mut child);
    assert_eq!(st.code(), Some(14));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());

    // doctor in the same container says the same.
    let b = Bundle::new(
        "base",
        Some(&["doctor", "--json", "--no-system-libs"]),
        &["/sys/kernel/btf"],
    );
    let (_, out, _) = output(&mut b.command(&container_id("nobtf-doctor")));
    let d = doctor_json(&out);
    assert_eq!(check(&d, "btf")["ok"], false, "{d}");
    assert_eq!(
        check(&d, "btf")["detail"],
        "no /sys/kernel/btf/vmlinux (kernel without CONFIG_DEBUG_INFO_BTF)"
    );
}
