//! Release artifacts from one build: the daemon linked against glibc 2.28 (cargo-zigbuild, Zig
//! from PyPI's `ziglang`), the install kit and its tarball, and the Debian package.
//!
//! Why Zig: a binary linked here against this machine's glibc needs its newest symbol versions
//! (2.34 today); Zig carries the symbol tables of every glibc release and links against the
//! version named in the target (`x86_64-unknown-linux-gnu.2.28`), with no sysroot to assemble.
//! The only -sys crate (nvml-wrapper-sys) is bindings only: NVML is opened at run time, so
//! nothing C is compiled. The eBPF object is built by profiler-daemon's build.rs (nightly +
//! bpf-linker, through aya-build) for `bpfel-unknown-none` and embedded as before: Zig only
//! links the host binary.
//!
//! Why `dpkg-deb` rather than cargo-deb: the package is the kit's own files laid out the Debian
//! way, so the tarball and the .deb cannot differ; dpkg is on every Debian machine, while
//! cargo-deb would be one more tool to build in CI, a second list of files in Cargo.toml, and a
//! second idea of how to build the binary.

use crate::{root, run};
use anyhow::{Context as _, Result, bail};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest glibc the release binary runs on (RHEL 8, Ubuntu 20.04, Debian 11).
pub const GLIBC_FLOOR: &str = "2.28";
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// Where scripts/setup.sh installs the pinned cargo-zigbuild and ziglang (`pip --target`):
/// `bin/cargo-zigbuild` and `ziglang/zig`. The versions live in setup.sh only.
fn zigbuild_dir() -> Result<PathBuf> {
    let home = std::env::var_os("HOME")
        .context("HOME is not set: scripts/setup.sh installs Zig under $HOME/.cache/gpuprofd")?;
    Ok(PathBuf::from(home).join(".cache/gpuprofd/zigbuild"))
}

/// Builds the release daemon against glibc [`GLIBC_FLOOR`] and copies it to
/// target/release/gpuprofd, where the tests, the benchmarks and scripts/gpu-validate.sh look
/// for it: the binary that is tested is the one that is shipped, built once.
pub fn build_release() -> Result<PathBuf> {
    let zb = zigbuild_dir()?;
    let zigbuild = zb.join("bin/cargo-zigbuild");
    if !zigbuild.exists() {
        bail!(
            "{} is missing: run scripts/setup.sh (cargo xtask setup), which installs it",
            zigbuild.display()
        );
    }
    let target = format!("{TRIPLE}.{GLIBC_FLOOR}");
    let mut c = Command::new(&zigbuild);
    c.current_dir(root())
        .args([
            "zigbuild",
            "--release",
            "-p",
            "profiler-daemon",
            // The injection library, in the same build: it is loaded into users' processes,
            // so it needs the same glibc floor as the daemon (docs/INJECTION.md).
            "-p",
            "profiler-inject",
            "--target",
            &target,
        ])
        .env("CARGO_ZIGBUILD_ZIG_PATH", zb.join("ziglang/zig"));
    run(&mut c)?;
    let built = root().join("target").join(TRIPLE).join("release/gpuprofd");
    let bin = root().join("target/release/gpuprofd");
    std::fs::create_dir_all(bin.parent().expect("a directory"))?;
    // Removed first: a plain `cargo build --release` leaves a hard link to its deps/ copy there,
    // which a copy onto it would overwrite.
    match std::fs::remove_file(&bin) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", bin.display()));
        }
        _ => {}
    }
    std::fs::copy(&built, &bin)
        .with_context(|| format!("copying {} to {}", built.display(), bin.display()))?;
    let lib = bin.with_file_name(INJECT_LIB);
    match std::fs::remove_file(&lib) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing {}", lib.display()));
        }
        _ => {}
    }
    copy(&built.with_file_name(INJECT_LIB), &lib)?;
    Ok(bin)
}

/// The injection library's file name (profiler-inject), next to the daemon in target/release,
/// in the kit's lib/ and in the Debian package's /usr/lib/gpuprofd.
pub const INJECT_LIB: &str = "libgpuprofd_inject.so";

fn copy(from: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// The docs the README links to: docs/*.md, sorted.
fn doc_files() -> Result<Vec<PathBuf>> {
    let mut docs = Vec::new();
    for e in std::fs::read_dir(root().join("docs"))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    docs.sort();
    Ok(docs)
}

/// The Grafana dashboards and their provisioning files (deploy/grafana, docs/DASHBOARDS.md):
/// each file and its path under deploy/grafana, sorted.
fn grafana_files() -> Result<Vec<(PathBuf, String)>> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(PathBuf, String)>) -> Result<()> {
        for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if e.file_type()?.is_dir() {
                walk(&e.path(), &rel, out)?;
            } else {
                out.push((e.path(), rel));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(&root().join("deploy/grafana"), "", &mut out)?;
    out.sort();
    Ok(out)
}

/// The install kit target/dist/gpuprofd-VERSION-x86_64-linux/ from `bin`, its .tar.gz beside
/// it, the .deb beside that ([`deb`]) and the OCI image ([`crate::image::image`]). Returns the
/// kit's directory.
pub fn dist(bin: &Path) -> Result<PathBuf> {
    let name = format!("gpuprofd-{}-x86_64-linux", env!("CARGO_PKG_VERSION"));
    let out = root().join("target/dist");
    let dir = out.join(&name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    copy(bin, &dir.join("bin/gpuprofd"))?;
    copy(
        &bin.with_file_name(INJECT_LIB),
        &dir.join("lib").join(INJECT_LIB),
    )?;
    for f in [
        "gpuprofd.service",
        "gpuprofd.socket",
        "gpuprofd-metrics.socket",
        "least-privilege.conf",
        "install.sh",
    ] {
        copy(&root().join("scripts/dist").join(f), &dir.join(f))?;
    }
    copy(&root().join("README.md"), &dir.join("README.md"))?;
    // The Kubernetes manifests, for `kubectl apply -k deploy/kubernetes/base` from the kit.
    run(Command::new("cp")
        .arg("-r")
        .arg(root().join("deploy"))
        .arg(dir.join("deploy")))?;
    // The README links into docs/: the kit carries them, to be installed beside it.
    for p in doc_files()? {
        copy(&p, &dir.join("docs").join(p.file_name().expect("a file")))?;
    }
    for (from, rel) in grafana_files()? {
        copy(&from, &dir.join("grafana").join(rel))?;
    }
    // The default configuration as the binary prints it: one source of truth.
    let cfg = Command::new(bin)
        .args(["serve", "--print-default-config"])
        .output()
        .context("running gpuprofd serve --print-default-config")?;
    if !cfg.status.success() {
        bail!(
            "gpuprofd serve --print-default-config failed: {}",
            cfg.status
        );
    }
    std::fs::write(dir.join("config.toml"), &cfg.stdout)?;
    // The manual page, from the binary's own command line: it cannot drift from --help.
    let man = Command::new(bin)
        .arg("man")
        .output()
        .context("running gpuprofd man")?;
    if !man.status.success() {
        bail!("gpuprofd man failed: {}", man.status);
    }
    std::fs::write(dir.join("gpuprofd.1"), &man.stdout)?;
    let tarball = out.join(format!("{name}.tar.gz"));
    run(Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(&out)
        .arg(&name))?;
    let deb = deb(&dir, &out)?;
    let image = crate::image::image(&dir, &out)?;
    eprintln!(
        "xtask: dist kit in {} and {}; install with `sudo {}/install.sh`, then \
         `systemctl enable --now gpuprofd`; Debian package {} (`sudo dpkg -i`); OCI image {} \
         (and .tar: deploy/kubernetes/ says how to use it)",
        dir.display(),
        tarball.display(),
        dir.display(),
        deb.display(),
        image.display()
    );
    Ok(dir)
}

/// Runs after unpacking: systemd reads the new units. The service is not enabled or started:
/// the administrator does that (README, "Install on a node").
const POSTINST: &str = "#!/bin/sh
set -e
if [ \"$1\" = configure ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
";

/// Before removal: a running daemon keeps its probes attached until it stops, so it is stopped
/// (an upgrade leaves it running; `systemctl restart gpuprofd` then picks up the new binary).
/// Through deb-systemd-invoke (init-system-helpers, essential in Debian and Ubuntu), which honours policy-rc.d in chroots and
/// image builds, as Debian policy asks of maintainer scripts.
const PRERM: &str = "#!/bin/sh
set -e
if [ \"$1\" = remove ] && [ -d /run/systemd/system ]; then
  deb-systemd-invoke stop gpuprofd.service gpuprofd.socket gpuprofd-metrics.socket >/dev/null || true
fi
";

/// After removal: systemd forgets the units. On purge, the links `systemctl enable` made go too
/// (what deb-systemd-helper does for packages built with debhelper); dpkg itself removes the
/// configuration file. Capture files under /var/lib/gpuprofd are data and are kept.
const POSTRM: &str = "#!/bin/sh
set -e
if [ \"$1\" = purge ]; then
  for u in gpuprofd.service gpuprofd.socket gpuprofd-metrics.socket; do
    rm -f /etc/systemd/system/*.wants/\"$u\"
  done
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload || true
fi
";

/// The Debian package of the kit in `kit`, written to `out`: /usr/bin/gpuprofd, the units in
/// /usr/lib/systemd/system, /etc/gpuprofd/config.toml as a conffile, the README and docs in
/// /usr/share/doc/gpuprofd, the least-privilege drop-in and the Grafana files in
/// /usr/share/gpuprofd.
pub fn deb(kit: &Path, out: &Path) -> Result<PathBuf> {
    let version = env!("CARGO_PKG_VERSION");
    let stage = out.join("deb-root");
    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    let doc = "/usr/share/doc/gpuprofd";
    let mut files: Vec<(PathBuf, String)> = vec![
        (kit.join("bin/gpuprofd"), "usr/bin/gpuprofd".into()),
        (
            kit.join("lib").join(INJECT_LIB),
            format!("usr/lib/gpuprofd/{INJECT_LIB}"),
        ),
        (kit.join("config.toml"), "etc/gpuprofd/config.toml".into()),
        (kit.join("README.md"), format!("{}/README.md", &doc[1..])),
        (
            kit.join("least-privilege.conf"),
            "usr/share/gpuprofd/least-privilege.conf".into(),
        ),
    ];
    for s in ["gpuprofd.socket", "gpuprofd-metrics.socket"] {
        files.push((kit.join(s), format!("usr/lib/systemd/system/{s}")));
    }
    for p in doc_files()? {
        let name = p
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned();
        files.push((
            kit.join("docs").join(&name),
            format!("{}/docs/{name}", &doc[1..]),
        ));
    }
    for (_, rel) in grafana_files()? {
        files.push((
            kit.join("grafana").join(&rel),
            format!("usr/share/gpuprofd/grafana/{rel}"),
        ));
    }
    for (from, to) in &files {
        copy(from, &stage.join(to))?;
    }
    // The unit's placeholders, as install.sh fills them for --prefix /usr.
    let unit = std::fs::read_to_string(kit.join("gpuprofd.service"))?
        .replace("@BINDIR@", "/usr/bin")
        .replace("@DOCDIR@", doc);
    let unit_path = "usr/lib/systemd/system/gpuprofd.service";
    std::fs::write(stage.join(unit_path), unit)?;
    files.push((PathBuf::new(), unit_path.into()));
    // Debian policy's two files in every package's doc directory (lintian checks both).
    let copyright = format!("{}/copyright", &doc[1..]);
    std::fs::write(stage.join(&copyright), crate::debian::copyright()?)?;
    files.push((PathBuf::new(), copyright));
    // A native package (no Debian revision): its changelog is changelog.gz.
    let changelog = format!("{}/changelog", &doc[1..]);
    std::fs::write(stage.join(&changelog), crate::debian::changelog(version)?)?;
    let man = "usr/share/man/man1/gpuprofd.1".to_owned();
    copy(&kit.join("gpuprofd.1"), &stage.join(&man))?;
    for f in [changelog, man] {
        // -n: no name or time in the header, so the package is the same for the same commit.
        run(Command::new("gzip").args(["-9nf"]).arg(stage.join(&f)))?;
        files.push((PathBuf::new(), format!("{f}.gz")));
    }

    let mut md5sums = String::new();
    let mut size = 0u64;
    use std::os::unix::fs::PermissionsExt as _;
    for (_, to) in &files {
        let p = stage.join(to);
        let mode = if to == "usr/bin/gpuprofd" {
            0o755
        } else {
            0o644
        };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
        size += std::fs::metadata(&p)?.len();
        let o = Command::new("md5sum")
            .arg(&p)
            .output()
            .context("running md5sum")?;
        if !o.status.success() {
            bail!("md5sum {} failed: {}", p.display(), o.status);
        }
        let sum = String::from_utf8_lossy(&o.stdout);
        let sum = sum.split_whitespace().next().unwrap_or_default();
        writeln!(md5sums, "{sum}  {to}")?;
    }
    let debian = stage.join("DEBIAN");
    std::fs::create_dir_all(&debian)?;
    let control = format!(
        "Package: gpuprofd\n\
         Version: {version}\n\
         Architecture: amd64\n\
         Maintainer: gpuprofd developers <gpuprofd@example.invalid>\n\
         Section: devel\n\
         Priority: optional\n\
         Depends: libc6 (>= {GLIBC_FLOOR})\n\
         Installed-Size: {}\n\
         Description: transparent system-wide GPU profiler daemon (eBPF uprobes on CUDA)\n \
         gpuprofd watches every CUDA process on a machine through eBPF uprobes on the\n \
         NVIDIA driver and CUDA runtimes, with no change to the profiled programs, and\n \
         serves Prometheus metrics, live views, captures and reports. The service is\n \
         installed but not enabled: systemctl enable --now gpuprofd.\n",
        size.div_ceil(1024)
    );
    std::fs::write(debian.join("control"), control)?;
    std::fs::write(debian.join("conffiles"), "/etc/gpuprofd/config.toml\n")?;
    std::fs::write(debian.join("md5sums"), md5sums)?;
    for (name, text) in [("postinst", POSTINST), ("prerm", PRERM), ("postrm", POSTRM)] {
        let p = debian.join(name);
        std::fs::write(&p, text)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    }
    // Directories 0755 whatever the umask.
    run(Command::new("find")
        .arg(&stage)
        .args(["-type", "d", "-exec", "chmod", "0755", "{}", "+"]))?;
    let deb = out.join(format!("gpuprofd_{version}_amd64.deb"));
    // gzip: every dpkg reads it, and it takes a second where xz takes ten (1.3 MB larger).
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zgzip", "--build"])
        .arg(&stage)
        .arg(&deb))?;
    std::fs::remove_dir_all(&stage)?;
    Ok(deb)
}
