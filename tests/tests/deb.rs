//! The Debian package of `cargo xtask dist`: installed with dpkg on this machine, every file
//! where it belongs with the kit's bytes, the installed units as systemd-analyze reads them,
//! then removed (the configuration stays, as dpkg keeps conffiles) and purged (it goes).
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`; it builds the kit and the .deb
//! beside it, and sets GPUPROFD_DIST).

use gpuprofd_tests::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn kit() -> PathBuf {
    PathBuf::from(std::env::var_os("GPUPROFD_DIST").expect(
        "GPUPROFD_DIST is not set: run the privileged tests through `cargo xtask test` (it builds the kit)",
    ))
}

fn output(c: &mut Command) -> (i32, String) {
    let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), s)
}

fn dpkg(args: &[&str]) -> (i32, String) {
    output(Command::new("dpkg").args(args))
}

/// dpkg's state of the package: `ii` installed, `rc` removed with its conffiles left, `None`
/// when dpkg knows nothing of it (purged).
fn state() -> Option<String> {
    let o = Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Abbrev}", "gpuprofd"])
        .output()
        .unwrap();
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

const UNITS: &str = "/usr/lib/systemd/system";
const DOC: &str = "/usr/share/doc/gpuprofd";
const CONFIG: &str = "/etc/gpuprofd/config.toml";

/// Every file the package installs, its mode, and the kit's file it is a copy of (`None`: the
/// unit, whose placeholders are filled).
fn expected() -> Vec<(String, u32, Option<PathBuf>)> {
    let kit = kit();
    let mut files = vec![
        (
            "/usr/bin/gpuprofd".to_owned(),
            0o755,
            Some(kit.join("bin/gpuprofd")),
        ),
        (
            "/usr/lib/gpuprofd/libgpuprofd_inject.so".to_owned(),
            0o644,
            Some(kit.join("lib/libgpuprofd_inject.so")),
        ),
        (CONFIG.into(), 0o644, Some(kit.join("config.toml"))),
        (format!("{UNITS}/gpuprofd.service"), 0o644, None),
        (
            format!("{UNITS}/gpuprofd.socket"),
            0o644,
            Some(kit.join("gpuprofd.socket")),
        ),
        (
            format!("{UNITS}/gpuprofd-metrics.socket"),
            0o644,
            Some(kit.join("gpuprofd-metrics.socket")),
        ),
        (
            "/usr/share/gpuprofd/least-privilege.conf".into(),
            0o644,
            Some(kit.join("least-privilege.conf")),
        ),
        (
            format!("{DOC}/README.md"),
            0o644,
            Some(kit.join("README.md")),
        ),
        // Debian policy's two (made by xtask, checked below and by lintian).
        (format!("{DOC}/copyright"), 0o644, None),
        (format!("{DOC}/changelog.gz"), 0o644, None),
        ("/usr/share/man/man1/gpuprofd.1.gz".into(), 0o644, None),
    ];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(kit.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    docs.sort();
    assert!(docs.len() >= 10, "{docs:?}");
    for d in docs {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        files.push((format!("{DOC}/docs/{name}"), 0o644, Some(d)));
    }
    // The Grafana dashboards and their provisioning files, as in the source tree.
    for rel in [
        "dashboards/gpuprofd-job.json",
        "dashboards/gpuprofd-node.json",
        "provisioning/dashboards/gpuprofd.yaml",
        "provisioning/datasources/prometheus.yaml",
    ] {
        files.push((
            format!("/usr/share/gpuprofd/grafana/{rel}"),
            0o644,
            Some(kit.join("grafana").join(rel)),
        ));
    }
    files.sort();
    files
}

#[test]
fn the_deb_installs_verifies_removes_and_purges() {
    require_bpf(); // (root: dpkg installs on this machine)
    let deb = kit().parent().unwrap().join(concat!(
        "gpuprofd_",
        env!("CARGO_PKG_VERSION"),
        "_amd64.deb"
    ));
    assert!(
        deb.exists(),
        "{} is missing: `cargo xtask dist` builds it",
        deb.display()
    );
    let wants = Path::new("/etc/systemd/system/multi-user.target.wants/gpuprofd.service");
    // What a run that failed half-way may have left.
    dpkg(&["--purge", "gpuprofd"]);
    let _ = std::fs::remove_file(wants);
    assert_eq!(state(), None);
    for (path, _, _) in expected() {
        assert!(
            !Path::new(&path).exists(),
            "{path} exists before the install"
        );
    }

    let (rc, out) = dpkg(&["--install", deb.to_str().unwrap()]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(state().as_deref(), Some("ii"));
    // dpkg's own list, less the directories, is exactly the expected files.
    let (rc, listed) = dpkg(&["-L", "gpuprofd"]);
    assert_eq!(rc, 0, "{listed}");
    let mut files: Vec<&str> = listed.lines().filter(|l| Path::new(l).is_file()).collect();
    files.sort();
    let expected = expected();
    assert_eq!(
        files,
        expected
            .iter()
            .map(|(p, _, _)| p.as_str())
            .collect::<Vec<_>>()
    );
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    for (path, mode, from) in &expected {
        let meta = std::fs::metadata(path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, *mode, "{path}");
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{path}");
        if let Some(from) = from {
            assert!(
                std::fs::read(path).unwrap() == std::fs::read(from).unwrap(),
                "{path} differs from the kit's {}",
                from.display()
            );
        }
    }
    let unit = std::fs::read_to_string(format!("{UNITS}/gpuprofd.service")).unwrap();
    let kit_unit = std::fs::read_to_string(kit().join("gpuprofd.service")).unwrap();
    assert_eq!(
        unit,
        kit_unit
            .replace("@BINDIR@", "/usr/bin")
            .replace("@DOCDIR@", DOC)
    );
    assert!(
        unit.lines()
            .any(|l| l == "ExecStart=/usr/bin/gpuprofd serve --config /etc/gpuprofd/config.toml"),
        "{unit}"
    );
    assert!(
        unit.lines()
            .any(|l| l == "Documentation=file:///usr/share/doc/gpuprofd/README.md"),
        "{unit}"
    );
    // The configuration is a conffile (kept on remove, asked about on upgrade) and commented:
    // the binary's documented default.
    let (rc, conffiles) =
        output(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "gpuprofd"]));
    assert_eq!(rc, 0, "{conffiles}");
    let conffiles: Vec<&str> = conffiles
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(conffiles, [CONFIG]);
    let config = std::fs::read_to_string(CONFIG).unwrap();
    assert!(
        config.starts_with("# gpuprofd service configuration"),
        "{config}"
    );
    // The package leaves the service off: nothing enabled it.
    assert!(!wants.exists());

    // systemd's reading of the installed units, where systemd looks for them.
    let (rc, out) = output(
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(format!("{UNITS}/gpuprofd.service"))
            .arg(format!("{UNITS}/gpuprofd.socket"))
            .arg(format!("{UNITS}/gpuprofd-metrics.socket")),
    );
    assert_eq!((rc, out.as_str()), (0, ""), "systemd-analyze verify");
    // The installed binary runs, and takes the installed configuration.
    let (rc, out) = output(Command::new("/usr/bin/gpuprofd").arg("--version"));
    assert_eq!(
        (rc, out.as_str()),
        (0, concat!("gpuprofd ", env!("CARGO_PKG_VERSION"), "\n"))
    );
    let (rc, out) =
        output(Command::new("/usr/bin/gpuprofd").args(["serve", "--print-default-config"]));
    assert_eq!((rc, out.as_str()), (0, config.as_str()));

    // Remove: everything goes but the edited configuration.
    let edited = format!("{config}# edited on this node\n");
    std::fs::write(CONFIG, &edited).unwrap();
    let (rc, out) = dpkg(&["--remove", "gpuprofd"]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(state().as_deref(), Some("rc"));
    for (path, _, _) in &expected {
        if path != CONFIG {
            assert!(!Path::new(path).exists(), "{path} left after dpkg --remove");
        }
    }
    for dir in [DOC, "/usr/share/gpuprofd"] {
        assert!(!Path::new(dir).exists(), "{dir} left after dpkg --remove");
    }
    assert_eq!(std::fs::read_to_string(CONFIG).unwrap(), edited);

    // Purge: the configuration goes, and so do the links `systemctl enable` would have made.
    std::fs::create_dir_all(wants.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(format!("{UNITS}/gpuprofd.service"), wants).unwrap();
    let (rc, out) = dpkg(&["--purge", "gpuprofd"]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(state(), None);
    assert!(
        !Path::new(CONFIG).exists(),
        "{CONFIG} left after dpkg --purge"
    );
    assert!(
        !Path::new("/etc/gpuprofd").exists(),
        "/etc/gpuprofd left after dpkg --purge"
    );
    assert!(
        std::fs::symlink_metadata(wants).is_err(),
        "{} left after dpkg --purge",
        wants.display()
    );
}

/// Debian's own checker finds nothing wrong with the package but the tags listed here, each
/// for a stated reason; the copyright file is DEP-5 and names the crates in the binary.
#[test]
fn the_deb_passes_lintian() {
    let deb = kit().parent().unwrap().join(concat!(
        "gpuprofd_",
        env!("CARGO_PKG_VERSION"),
        "_amd64.deb"
    ));
    let (rc, out) = output(
        Command::new("lintian")
            .args(["--no-cfg", "--allow-root", "--fail-on", "error,warning"])
            .args(["--suppress-tags", ACCEPTED.join(",").as_str()])
            .arg(&deb),
    );
    assert_eq!((rc, out.as_str()), (0, ""), "lintian {}", deb.display());

    // The copyright file as dpkg-deb unpacks it.
    let dir = TempDir::new("deb-x");
    let (rc, out) = output(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(dir.path()));
    assert_eq!(rc, 0, "{out}");
    let copyright =
        std::fs::read_to_string(dir.path().join("usr/share/doc/gpuprofd/copyright")).unwrap();
    assert!(copyright.starts_with(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
    ));
    // Crates in the binary, at the versions Cargo.lock pins, with their declared licences.
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    for (name, licence) in [("tokio", "MIT"), ("aya", "MIT OR Apache-2.0")] {
        let version = lock
            .split("[[package]]")
            .find_map(|p| {
                p.contains(&format!("\nname = \"{name}\"\n")).then(|| {
                    p.lines()
                        .find_map(|l| l.strip_prefix("version = \""))
                        .unwrap()
                        .trim_end_matches('"')
                        .to_owned()
                })
            })
            .unwrap();
        let line = format!("\n {name} v{version}: {licence}\n");
        assert!(copyright.contains(&line), "no {line:?} in\n{copyright}");
    }
}

/// lintian tags the package is allowed, and why.
const ACCEPTED: &[&str] = &[];
