//! The install kit of `cargo xtask dist`: what it holds, what install.sh puts where, the
//! systemd units as systemd-analyze reads them, and the daemon capturing under exactly the
//! capabilities the unit leaves it.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`; it builds the kit and sets
//! GPUPROFD_DIST).

use gpuprofd_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn kit() -> PathBuf {
    let p = PathBuf::from(std::env::var_os("GPUPROFD_DIST").expect(
        "GPUPROFD_DIST is not set: run the privileged tests through `cargo xtask test` (it builds the kit)",
    ));
    assert!(
        p.join("bin/gpuprofd").exists(),
        "{} has no bin/gpuprofd",
        p.display()
    );
    p
}

fn output(c: &mut Command) -> (i32, String) {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), s)
}

fn install(dest: &Path) -> String {
    let (rc, out) = output(Command::new(kit().join("install.sh")).env("DESTDIR", dest));
    assert_eq!(rc, 0, "{out}");
    out
}

#[test]
fn the_kit_installs_where_the_unit_expects_it() {
    let kit = kit();
    let mut files: Vec<String> = std::fs::read_dir(&kit)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "README.md",
            "bin",
            "config.toml",
            "deploy",
            "docs",
            "gpuprofd-metrics.socket",
            "gpuprofd.1",
            "gpuprofd.service",
            "gpuprofd.socket",
            "grafana",
            "install.sh",
            "least-privilege.conf",
            "lib"
        ]
    );
    // The Grafana dashboards and their provisioning files, as in the source tree
    // (docs/DASHBOARDS.md).
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana");
    for rel in [
        "dashboards/gpuprofd-job.json",
        "dashboards/gpuprofd-node.json",
        "provisioning/dashboards/gpuprofd.yaml",
        "provisioning/datasources/prometheus.yaml",
    ] {
        assert_eq!(
            std::fs::read(kit.join("grafana").join(rel)).unwrap(),
            std::fs::read(source.join(rel)).unwrap(),
            "{rel}"
        );
    }
    // The kit's configuration is the binary's default, and the binary accepts it.
    let (rc, default) =
        output(Command::new(kit.join("bin/gpuprofd")).args(["serve", "--print-default-config"]));
    assert_eq!(rc, 0);
    assert_eq!(
        std::fs::read_to_string(kit.join("config.toml")).unwrap(),
        default
    );

    let dir = TempDir::new("dist");
    let root = dir.path();
    install(root);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &str| {
        std::fs::metadata(root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("usr/local/bin/gpuprofd"), 0o755);
    // The injection library, the same file as the kit's.
    assert_eq!(mode("usr/local/lib/gpuprofd/libgpuprofd_inject.so"), 0o644);
    assert_eq!(
        std::fs::read(root.join("usr/local/lib/gpuprofd/libgpuprofd_inject.so")).unwrap(),
        std::fs::read(kit.join("lib/libgpuprofd_inject.so")).unwrap()
    );
    assert_eq!(
        std::fs::read_dir(kit.join("lib"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect::<Vec<_>>(),
        ["libgpuprofd_inject.so"]
    );
    assert_eq!(mode("etc/systemd/system/gpuprofd.service"), 0o644);
    assert_eq!(mode("etc/systemd/system/gpuprofd.socket"), 0o644);
    assert_eq!(mode("etc/systemd/system/gpuprofd-metrics.socket"), 0o644);
    assert_eq!(mode("etc/gpuprofd/config.toml"), 0o644);
    // The manual page is the binary's own command line.
    let (_, man) = output(Command::new(kit.join("bin/gpuprofd")).arg("man"));
    assert_eq!(
        std::fs::read_to_string(root.join("usr/local/share/man/man1/gpuprofd.1")).unwrap(),
        man
    );
    assert!(man.contains(".SH NAME\ngpuprofd \\- "), "{man}");
    // The installed README's links into docs/ lead to installed files (the unit's
    // Documentation= names the README).
    let doc = root.join("usr/local/share/doc/gpuprofd");
    let readme = std::fs::read_to_string(doc.join("README.md")).unwrap();
    let links: Vec<&str> = readme
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split([')', '#']).next())
        .filter(|l| l.starts_with("docs/"))
        .collect();
    assert!(links.len() >= 10, "{links:?}");
    for l in links {
        assert_eq!(
            mode(&format!("usr/local/share/doc/gpuprofd/{l}")),
            0o644,
            "{l}"
        );
    }
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/gpuprofd.service")).unwrap();
    assert!(!unit.contains('@'), "every placeholder filled: {unit}");
    let exec: Vec<&str> = unit
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(
        exec,
        ["ExecStart=/usr/local/bin/gpuprofd serve --config /etc/gpuprofd/config.toml"]
    );
    for line in [
        "Type=notify",
        "WatchdogSec=30s",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ProtectSystem=strict",
        "StateDirectory=gpuprofd",
        "CapabilityBoundingSet=CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_SYS_RESOURCE CAP_SYS_PTRACE CAP_DAC_READ_SEARCH",
        "RestartPreventExitStatus=6 14",
        // Ceilings sized from docs/PERFORMANCE.md (the unit says how).
        "CPUQuota=50%",
        "MemoryHigh=512M",
        "MemoryMax=1G",
    ] {
        assert!(
            unit.lines().any(|l| l == line),
            "{line} missing from the unit"
        );
    }
    // Stop means stop: both sockets stop with the service, so that neither a scrape nor a
    // `gpuprofd ctl` starts a daemon an admin stopped; the metrics port is not dcgm-exporter's.
    let socket_unit =
        |name: &str| std::fs::read_to_string(root.join("etc/systemd/system").join(name)).unwrap();
    let metrics_socket = socket_unit("gpuprofd-metrics.socket");
    let keys = |text: &str, prefix: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        keys(&metrics_socket, "PartOf="),
        ["PartOf=gpuprofd.service"]
    );
    assert_eq!(
        keys(&metrics_socket, "ListenStream="),
        ["ListenStream=127.0.0.1:19400"]
    );
    assert_eq!(
        keys(&socket_unit("gpuprofd.socket"), "PartOf="),
        ["PartOf=gpuprofd.service"]
    );
    // An edited configuration survives a reinstall; the new default goes beside it.
    std::fs::write(
        root.join("etc/gpuprofd/config.toml"),
        "[log]\nlevel = \"warn\"\n",
    )
    .unwrap();
    let out = install(root);
    assert!(
        out.contains("kept the existing /etc/gpuprofd/config.toml"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/gpuprofd/config.toml")).unwrap(),
        "[log]\nlevel = \"warn\"\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("etc/gpuprofd/config.toml.default")).unwrap(),
        default
    );

    // systemd's own reading of the units: no unknown key, no bad value, the binary found.
    // (The unit points at /usr/local/bin; here it is checked against the staged binary.)
    let units = TempDir::new("units");
    let staged = root.join("usr/local/bin/gpuprofd");
    std::fs::write(
        units.path().join("gpuprofd.service"),
        unit.replace("/usr/local/bin/gpuprofd", staged.to_str().unwrap()),
    )
    .unwrap();
    for socket in ["gpuprofd.socket", "gpuprofd-metrics.socket"] {
        std::fs::copy(
            root.join("etc/systemd/system").join(socket),
            units.path().join(socket),
        )
        .unwrap();
    }
    let (rc, out) = output(
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(units.path().join("gpuprofd.service"))
            .arg(units.path().join("gpuprofd.socket"))
            .arg(units.path().join("gpuprofd-metrics.socket")),
    );
    assert_eq!((rc, out.as_str()), (0, ""), "systemd-analyze verify");
}

/// `CapabilityBoundingSet=` of the unit, as setpriv's list (`+bpf,+perfmon,...`).
fn unit_caps(unit: &str) -> String {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit bounds the capabilities");
    line.split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A service configuration in `dir`: these libraries (none: the daemon finds them in the
/// processes' memory maps), no NVML, no metrics, the control socket in `dir`.
fn service_config(dir: &Path, libs: &[PathBuf]) -> PathBuf {
    let config = dir.join("config.toml");
    let libs: Vec<String> = libs
        .iter()
        .map(|l| format!("\"{}\"", l.display()))
        .collect();
    std::fs::write(
        &config,
        format!(
            "[capture]\nlibs = [{}]\nsystem_libs = false\n[nvml]\nenabled = false\n\
             [metrics]\nenabled = false\n[control]\nsocket = \"{}\"\n",
            libs.join(", "),
            dir.join("ctl.sock").display()
        ),
    )
    .unwrap();
    config
}

/// The kit's gpuprofd with `args`, started as systemd starts the unit: root, every capability
/// but `caps` out of the bounding set, no new privileges. `bounded`: under `timeout 60` (a
/// daemon that should have stopped and did not then exits 124).
fn as_unit(caps: &str, bounded: bool, args: &[&str]) -> Command {
    let mut c = if bounded {
        let mut c = Command::new("timeout");
        c.args(["60", "setpriv"]);
        c
    } else {
        Command::new("setpriv")
    };
    c.arg(format!("--bounding-set=-all,{caps}"))
        .args(["--inh-caps=-all", "--no-new-privs", "--"])
        .arg(kit().join("bin/gpuprofd"))
        .args(args);
    c
}

#[test]
fn the_service_captures_with_only_the_units_capabilities() {
    require_bpf();
    let unit = std::fs::read_to_string(kit().join("gpuprofd.service")).unwrap();
    let caps = unit_caps(&unit);
    assert_eq!(
        caps,
        "+bpf,+perfmon,+sys_admin,+sys_resource,+sys_ptrace,+dac_read_search"
    );
    // Why CAP_SYS_ADMIN is in the set: without it the kernel's uprobe PMU refuses the
    // perf-event uprobes gpuprofd falls back to before Linux 6.6 (doctor's real round trip
    // fails). A uprobe_multi link (6.6+, this kernel) needs only CAP_BPF and CAP_PERFMON.
    let without = caps.replace("+sys_admin,", "");
    let doctor = |multi: &str| {
        output(
            as_unit(&without, true, &["doctor", "--no-system-libs"])
                .env("GPUPROFD_UPROBE_MULTI", multi),
        )
    };
    let (rc, out) = doctor("0");
    assert_eq!(rc, 9, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("FAIL bpf_round_trip")
            && l.contains("`perf_event_open` failed")),
        "{out}"
    );
    let (rc, out) = doctor("1");
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok   bpf_round_trip  3 calls, 3 records")
                && l.contains("(uprobe_multi link at ")),
        "{out}"
    );
    serve_under(&caps, &[2, 19, 21, 24, 38, 39]);
}

/// `gpuprofd serve` started as systemd starts it (root, every capability but `caps` out of the
/// bounding set, no new privileges) captures launches (counted in the kernel), copies (through
/// the ring) and synchronisations (entry and return probes) of a workload, exactly. `bits`:
/// the capability numbers of `caps` (CAP_DAC_READ_SEARCH 2, SYS_PTRACE 19, SYS_ADMIN 21,
/// SYS_RESOURCE 24, PERFMON 38, BPF 39).
///
/// No library is named in the configuration: the daemon finds the fake CUDA libraries in the
/// running workload's memory maps, through /proc/PID/map_files, as it finds a job's on a node.
fn serve_under(caps: &str, bits: &[u32]) {
    let dir = TempDir::new("caps");
    let socket = dir.path().join("ctl.sock");
    let config = service_config(dir.path(), &[]);
    let mut w = Workload::start();
    // As systemd starts it: root, every other capability out of the bounding set, no new
    // privileges.
    let mut child = as_unit(
        caps,
        false,
        &["serve", "--config", config.to_str().unwrap()],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut err = Lines::new(child.stderr.take().unwrap());
    err.wait_for("the ready line", |l| {
        l.contains("gpuprofd: ready: 140 probes")
    });
    assert!(
        !err.seen.iter().any(|l| l.contains("warning")),
        "{}",
        err.seen.join("\n")
    );
    let bounding = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let hex = status
            .lines()
            .find_map(|l| l.strip_prefix("CapBnd:"))
            .unwrap();
        u64::from_str_radix(hex.trim(), 16).unwrap()
    };
    // (Less whatever this machine withholds from the tests too: some lack CAP_SYS_RESOURCE.)
    let unit_set: u64 = bits.iter().map(|b| 1u64 << b).sum();
    assert_eq!(
        bounding(child.id()),
        unit_set & bounding(std::process::id()),
        "the daemon runs with the unit's capabilities and no other"
    );
    w.script(&[
        "rt_launch gemm 6 1 1 1 32 1 1 0 0",
        "rt_memcpy h2d 1024 3",
        "rt_sync_device 2",
    ]);
    // The launches are counted in the kernel, the copies and syncs come through the ring.
    let snap = snapshot_until(
        &daemon_bin(),
        &socket,
        "6 launches, the copies and the syncs",
        |snap| {
            has_process(snap, w.tgid)
                && process(snap, w.tgid)["launches"] == 6
                && copies(process(snap, w.tgid), "h2d").is_some_and(|c| c["calls"] == 3)
                && api_calls(process(snap, w.tgid), "cudaDeviceSynchronize") == 2
        },
    );
    let p = process(&snap, w.tgid);
    assert_eq!(kernel_calls(p, GEMM), 6);
    assert_eq!(copies(p, "h2d").unwrap()["bytes"], 3072);
    assert_eq!(api_calls(p, "cudaDeviceSynchronize"), 2);
    assert_eq!(
        p["comm"], "workload",
        "procfs readable under the bounding set"
    );
    w.exit();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = wait_bounded(&mut child);
    assert!(st.success(), "{st}: {}", err.rest().join("\n"));
}

/// The drop-in's `CapabilityBoundingSet=` (after the line that empties it), as setpriv's list.
fn drop_in_caps(conf: &str) -> String {
    let sets: Vec<&str> = conf
        .lines()
        .filter_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .collect();
    assert_eq!(sets.len(), 2, "an empty assignment, then the set: {conf}");
    assert_eq!(
        sets[0], "",
        "the unit's set is reset first, not added to: {conf}"
    );
    unit_caps(&format!("CapabilityBoundingSet={}", sets[1]))
}

#[test]
fn the_service_captures_without_cap_sys_admin_where_links_attach() {
    require_bpf();
    let unit = std::fs::read_to_string(kit().join("gpuprofd.service")).unwrap();
    let conf = std::fs::read_to_string(kit().join("least-privilege.conf")).unwrap();
    let small = drop_in_caps(&conf);
    // CAP_CHECKPOINT_RESTORE in CAP_SYS_ADMIN's place: /proc/PID/map_files needs one of them.
    assert_eq!(
        small,
        unit_caps(&unit).replace("+sys_admin,", "") + ",+checkpoint_restore"
    );
    // With uprobe_multi links (6.6+, this kernel), the whole service runs without it.
    serve_under(&small, &[2, 19, 24, 38, 39, 40]);
    // Without CAP_CHECKPOINT_RESTORE as well, the workload's libraries cannot be found: the
    // daemon says why at start (and, with nothing else to attach, stops).
    let bare = small.replace(",+checkpoint_restore", "");
    let (rc, out) = output(&mut as_unit(&bare, true, &["doctor", "--no-system-libs"]));
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("warn process_maps ")
            && l.contains("Operation not permitted")
            && l.contains("needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN")),
        "{out}"
    );
    let w = Workload::start();
    let dir = TempDir::new("nomaps");
    let config = service_config(dir.path(), &[]);
    let serve = ["serve", "--config", config.to_str().unwrap()];
    let (rc, out) = output(as_unit(&bare, true, &serve).stdin(Stdio::null()));
    assert_eq!(rc, 5, "{out}");
    let warned = out
        .lines()
        .position(|l| {
            l.starts_with("gpuprofd: warning: /proc/")
                && l.contains("map_files needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN")
        })
        .unwrap_or_else(|| panic!("no map_files warning: {out}"));
    let failed = out
        .lines()
        .position(|l| l.starts_with("gpuprofd: error: no CUDA library to attach to"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(warned < failed, "the cause comes first: {out}");
    w.exit();
    // Without links (GPUPROFD_UPROBE_MULTI=0 stands in for a kernel before 6.6) the kernel
    // refuses every probe: the service stops at once, says what to do, and exits 6, which the
    // unit does not restart on (RestartPreventExitStatus=6), instead of reporting "ready" with
    // no probe.
    let dir = TempDir::new("nolinks");
    let config = service_config(dir.path(), &[fakecuda().join("lib")]);
    // (Bounded: a daemon that went on instead would run until killed, exit 124.)
    let serve = ["serve", "--config", config.to_str().unwrap()];
    let (rc, out) = output(
        as_unit(&small, true, &serve)
            .env("GPUPROFD_UPROBE_MULTI", "0")
            .stdin(Stdio::null()),
    );
    assert_eq!(rc, 6, "{out}");
    assert!(!out.contains("gpuprofd: ready"), "{out}");
    let lib = fakecuda().join("lib/libcuda.so.1");
    let err = out
        .lines()
        .find(|l| l.starts_with("gpuprofd: error: "))
        .unwrap_or_else(|| panic!("no error line: {out}"));
    assert!(
        err.starts_with(&format!(
            "gpuprofd: error: cannot attach any uprobe to \"{}\": ",
            lib.display()
        )) && err.contains("Permission denied")
            && err.contains("CAP_SYS_ADMIN")
            && err.contains("/etc/systemd/system/gpuprofd.service.d/least-privilege.conf"),
        "{err}"
    );
}

#[test]
fn install_adds_the_least_privilege_drop_in_only_where_it_works() {
    require_bpf();
    let conf = std::fs::read_to_string(kit().join("least-privilege.conf")).unwrap();
    let dir = TempDir::new("least");
    let root = dir.path();
    let dropin = root.join("etc/systemd/system/gpuprofd.service.d/least-privilege.conf");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new(kit().join("install.sh"));
        c.args(args).env("DESTDIR", root);
        for (k, v) in env {
            c.env(k, v);
        }
        output(&mut c)
    };
    // Staged (DESTDIR) with the default, auto: the target node is not this one; not checked.
    let (rc, out) = run(&[], &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(!dropin.exists(), "{out}");
    assert!(
        out.contains("the service keeps CAP_SYS_ADMIN: staged under DESTDIR"),
        "{out}"
    );
    // Asked for.
    let (rc, out) = run(&["--least-privilege", "yes"], &[]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(std::fs::read_to_string(&dropin).unwrap(), conf);
    // Declined: a drop-in left by an earlier install goes.
    let (rc, out) = run(&["--least-privilege", "no"], &[]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        !dropin.exists() && !dropin.parent().unwrap().exists(),
        "{out}"
    );
    // auto, checked on this machine: doctor's probe round trip without CAP_SYS_ADMIN passes
    // through a uprobe_multi link here ...
    let check = ("GPUPROFD_CHECK_UNDER_DESTDIR", "1");
    let (rc, out) = run(&["--least-privilege", "auto"], &[check]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(std::fs::read_to_string(&dropin).unwrap(), conf, "{out}");
    assert!(
        out.contains("gpuprofd's probes attach without CAP_SYS_ADMIN here: 3 calls, 3 records"),
        "{out}"
    );
    // ... and fails without links (as before 6.6), which removes the drop-in again.
    let (rc, out) = run(&[], &[check, ("GPUPROFD_UPROBE_MULTI", "0")]);
    assert_eq!(rc, 0, "{out}");
    assert!(!dropin.exists(), "{out}");
    assert!(
        out.contains("removed /etc/systemd/system/gpuprofd.service.d/least-privilege.conf"),
        "{out}"
    );
    let (rc, out) = run(&["--least-privilege", "maybe"], &[]);
    assert_eq!(
        (rc, out.trim()),
        (
            2,
            "install.sh: --least-privilege takes auto, yes or no, not \"maybe\""
        )
    );

    // systemd reads the drop-in over the unit: CAP_SYS_ADMIN is out of the set.
    run(&["--least-privilege", "yes"], &[]);
    let sys_admin = |units: &Path| {
        let (rc, out) = output(
            Command::new("systemd-analyze")
                .args(["security", "--offline=true", "--no-pager"])
                .arg(units.join("gpuprofd.service")),
        );
        assert_eq!(rc, 0, "{out}");
        out.lines()
            .find(|l| l.contains("CapabilityBoundingSet=~CAP_SYS_ADMIN "))
            .unwrap_or_else(|| panic!("{out}"))
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let units = root.join("etc/systemd/system");
    assert_eq!(sys_admin(&units), "✓");
    std::fs::remove_file(&dropin).unwrap();
    assert_eq!(sys_admin(&units), "✗");
}

/// The `GLIBC_x.y[.z]` symbol versions `bin`'s dynamic symbols need (`objdump -T`), as numbers;
/// `GLIBC_PRIVATE` and the like as `None`.
fn glibc_versions(bin: &Path) -> Vec<Option<Vec<u32>>> {
    let (rc, dynsyms) = output(Command::new("objdump").arg("-T").arg(bin));
    assert_eq!(rc, 0, "objdump -T {}: {dynsyms}", bin.display());
    dynsyms
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .map(|v| v.split('.').map(|n| n.parse().ok()).collect())
        .collect()
}

#[test]
fn the_kits_binary_runs_on_glibc_2_28() {
    // The injection library is loaded into users' processes: the same floor.
    let lib = kit().join("lib/libgpuprofd_inject.so");
    let newest = glibc_versions(&lib).into_iter().flatten().max();
    assert!(
        newest >= Some(vec![2, 2, 5]) && newest <= Some(vec![2, 28]),
        "{} needs {newest:?}",
        lib.display()
    );
    let bin = kit().join("bin/gpuprofd");
    let versions = glibc_versions(&bin);
    assert!(
        versions.iter().all(Option::is_some),
        "the binary needs a private glibc symbol: it would run on this glibc only"
    );
    let newest = versions.into_iter().flatten().max();
    // Dynamically linked against glibc (2.2.5 is x86-64's first symbol version) ...
    assert!(newest >= Some(vec![2, 2, 5]), "{newest:?}");
    // ... and nothing newer than RHEL 8's, Ubuntu 20.04's and Debian 11's glibc 2.28 (README,
    // Requirements).
    assert!(
        newest <= Some(vec![2, 28]),
        "{} needs GLIBC_{}: built without `cargo xtask build` (cargo-zigbuild for glibc 2.28)?",
        bin.display(),
        newest
            .unwrap()
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(".")
    );
    // It still runs here, with its eBPF object: doctor's probe round trip goes through it.
    let (rc, out) = output(Command::new(&bin).arg("--version"));
    assert_eq!(
        (rc, out.as_str()),
        (0, concat!("gpuprofd ", env!("CARGO_PKG_VERSION"), "\n"))
    );
    require_bpf();
    let (rc, out) = output(Command::new(&bin).args(["doctor", "--no-system-libs"]));
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok   bpf_round_trip  3 calls, 3 records")),
        "{out}"
    );
}
