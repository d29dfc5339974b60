//! The OCI image of the install kit, built offline from Debian's archive: an OCI image layout
//! directory target/dist/gpuprofd-VERSION-oci/ and the same as a tar (what `skopeo copy
//! oci-archive:`, `podman load` and `ctr images import` read).
//!
//! What is in it: the Debian packages libc6 and what it depends on (libgcc-s1, gcc-*-base),
//! fetched with `apt-get download` (no image registry: this machine's own Debian sources) and
//! unpacked with `dpkg-deb -x`, plus the kit's binary and default configuration. The binary
//! needs glibc alone (its NEEDED list: libc, libm, libpthread, libdl, ld.so); NVML and the CUDA
//! libraries it probes are the host's, reached at run time (deploy/kubernetes/ says how).
//!
//! Why the layout is written here rather than with umoci or buildah: an image is one tar layer,
//! its sha256, and three small JSON documents (config, manifest, index) whose digests chain;
//! GNU tar with the reproducible-builds options (sorted names, one mtime, owner 0) and `gzip -n`
//! make the layer byte-for-byte repeatable, which umoci 0.4 (Debian 12) does not (it stamps the
//! current time into the config and history) and buildah needs a container storage set up. The
//! tests check the result with umoci, a third-party reader that verifies every digest, and run
//! it with crun (tests/tests/image.rs).

use crate::run;
use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The image's entrypoint and default arguments: the service with the configuration the image
/// carries (deploy/kubernetes/ mounts its own over it from a ConfigMap).
pub const ENTRYPOINT: &str = "/usr/bin/gpuprofd";
pub const CMD: [&str; 3] = ["serve", "--config", "/etc/gpuprofd/config.toml"];

/// The root of the Debian packages the image is made of; their dependencies come with them.
const ROOT_PACKAGES: [&str; 1] = ["libc6"];

/// Where downloaded .debs are kept between builds (by file name, which holds the version).
fn deb_cache() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    Ok(PathBuf::from(home).join(".cache/gpuprofd/image-debs"))
}

fn output(c: &mut Command) -> Result<String> {
    let o = c.output().with_context(|| format!("starting {c:?}"))?;
    if !o.status.success() {
        bail!(
            "{c:?} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// `roots` and everything they depend on (Depends and Pre-Depends, not Recommends), by
/// `apt-cache depends`, sorted.
fn closure(roots: &[&str]) -> Result<Vec<String>> {
    let mut seen: Vec<String> = Vec::new();
    let mut todo: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    while let Some(p) = todo.pop() {
        if seen.contains(&p) {
            continue;
        }
        let text = output(Command::new("apt-cache").args([
            "depends",
            "--no-recommends",
            "--no-suggests",
            "--no-conflicts",
            "--no-breaks",
            "--no-replaces",
            "--no-enhances",
            &p,
        ]))?;
        for line in text.lines() {
            let l = line.trim().trim_start_matches('|');
            if let Some(dep) = l
                .strip_prefix("Depends:")
                .or_else(|| l.strip_prefix("PreDepends:"))
            {
                let dep = dep.trim();
                // `<name>`: a virtual package, provided by one already listed.
                if !dep.starts_with('<') {
                    todo.push(dep.split(':').next().unwrap_or(dep).to_owned());
                }
            }
        }
        seen.push(p);
    }
    seen.sort();
    Ok(seen)
}

/// The .deb files of `pkgs` in the cache, downloading the missing ones.
fn debs(pkgs: &[String]) -> Result<Vec<PathBuf>> {
    let cache = deb_cache()?;
    std::fs::create_dir_all(&cache)?;
    let mut args = vec!["download".to_string(), "--print-uris".into()];
    args.extend(pkgs.iter().cloned());
    let uris = output(Command::new("apt-get").args(&args)).context(
        "asking apt which .debs make the image (`apt-get update` first if the lists are missing)",
    )?;
    // 'URI' FILE SIZE SHA256:HEX
    let files: Vec<String> = uris
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect();
    if files.len() != pkgs.len() {
        bail!(
            "apt-get download --print-uris {pkgs:?} named {files:?}: one file per package expected"
        );
    }
    let missing: Vec<&String> = pkgs
        .iter()
        .zip(&files)
        .filter(|(_, f)| !cache.join(f).exists())
        .map(|(p, _)| p)
        .collect();
    if !missing.is_empty() {
        run(Command::new("apt-get")
            .arg("download")
            .args(&missing)
            .current_dir(&cache))?;
    }
    Ok(files.iter().map(|f| cache.join(f)).collect())
}

/// `sha256sum` of a file, hex.
fn sha256(p: &Path) -> Result<String> {
    let o = output(Command::new("sha256sum").arg(p))?;
    Ok(o.split_whitespace().next().unwrap_or_default().to_owned())
}

/// Writes `bytes` as a blob of `layout`; its descriptor (digest and size).
fn blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Result<Value> {
    let tmp = layout.join("blobs/sha256/.tmp");
    std::fs::write(&tmp, bytes)?;
    let digest = sha256(&tmp)?;
    std::fs::rename(&tmp, layout.join("blobs/sha256").join(&digest))?;
    Ok(json!({"mediaType": media_type, "digest": format!("sha256:{digest}"), "size": bytes.len()}))
}

/// GNU tar with the reproducible-builds.org options: entries sorted by name, one mtime, owner
/// and group 0, no atime/ctime. `-C dir` then `names`.
fn reproducible_tar(out: &Path, dir: &Path, names: &[String], epoch: u64) -> Result<()> {
    run(Command::new("tar")
        .args([
            "--sort=name",
            &format!("--mtime=@{epoch}"),
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--format=gnu",
            "-cf",
        ])
        .arg(out)
        .arg("-C")
        .arg(dir)
        .args(names))
}

/// The time the image says it was made: $SOURCE_DATE_EPOCH, else the last commit's time, so
/// that the same commit gives the same image.
fn epoch() -> u64 {
    if let Some(e) = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return e;
    }
    output(
        Command::new("git")
            .args(["log", "-1", "--format=%ct"])
            .current_dir(crate::root()),
    )
    .ok()
    .and_then(|s| s.trim().parse().ok())
    .unwrap_or(0)
}

/// Builds the image of `kit` in `out`; returns the layout directory.
pub fn image(kit: &Path, out: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("gpuprofd-{version}-oci");
    let layout = out.join(&name);
    let rootfs = out.join("image-root");
    for d in [&layout, &rootfs] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
        }
    }
    // apt's package lists may be missing on a fresh machine: read them once, then try again.
    let fetch = || -> Result<(Vec<String>, Vec<PathBuf>)> {
        let pkgs = closure(&ROOT_PACKAGES)?;
        let files = debs(&pkgs)?;
        Ok((pkgs, files))
    };
    let (pkgs, files) = match fetch() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("xtask: {e:#}; running apt-get update and trying again");
            run(Command::new("apt-get").args(["update", "-q"]))?;
            fetch()?
        }
    };
    for deb in files {
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&rootfs))?;
    }
    let put = |to: &str, from: &Path, mode: u32| -> Result<()> {
        let p = rootfs.join(to);
        std::fs::create_dir_all(p.parent().expect("a directory"))?;
        std::fs::copy(from, &p)
            .with_context(|| format!("copying {} to {}", from.display(), p.display()))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
        Ok(())
    };
    put("usr/bin/gpuprofd", &kit.join("bin/gpuprofd"), 0o755)?;
    put("etc/gpuprofd/config.toml", &kit.join("config.toml"), 0o644)?;
    put(
        "usr/share/doc/gpuprofd/README.md",
        &kit.join("README.md"),
        0o644,
    )?;
    // Mount points and the state directory; /etc/passwd and /etc/group name root for what
    // looks a uid up (the control socket names its peers).
    for (d, mode) in [
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("run", 0o755),
        ("tmp", 0o1777),
        ("var/lib/gpuprofd", 0o750),
    ] {
        let p = rootfs.join(d);
        std::fs::create_dir_all(&p)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
    }
    std::fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0:root:/root:/usr/sbin/nologin\n",
    )?;
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\n")?;
    for f in ["etc/passwd", "etc/group"] {
        std::fs::set_permissions(rootfs.join(f), std::fs::Permissions::from_mode(0o644))?;
    }
    // Directories made here 0755 whatever the umask (tmp keeps its 1777).
    run(Command::new("find").arg(&rootfs).args([
        "-type",
        "d",
        "!",
        "-path",
        "*/image-root/tmp",
        "-exec",
        "chmod",
        "go-w",
        "{}",
        "+",
    ]))?;

    let epoch = epoch();
    std::fs::create_dir_all(layout.join("blobs/sha256"))?;
    let mut top: Vec<String> = std::fs::read_dir(&rootfs)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    top.sort();
    let layer_tar = out.join("image-layer.tar");
    reproducible_tar(&layer_tar, &rootfs, &top, epoch)?;
    let diff_id = sha256(&layer_tar)?;
    let gz = Command::new("gzip")
        .args(["-n", "-9", "-c"])
        .arg(&layer_tar)
        .output()
        .context("running gzip")?;
    if !gz.status.success() {
        bail!("gzip {} failed: {}", layer_tar.display(), gz.status);
    }
    let layer = blob(
        &layout,
        "application/vnd.oci.image.layer.v1.tar+gzip",
        &gz.stdout,
    )?;
    std::fs::remove_file(&layer_tar)?;
    std::fs::remove_dir_all(&rootfs)?;

    let created = output(Command::new("date").args([
        "-u",
        "-d",
        &format!("@{epoch}"),
        "+%Y-%m-%dT%H:%M:%SZ",
    ]))?
    .trim()
    .to_owned();
    let debs_list = pkgs.join(", ");
    let config = json!({
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": [ENTRYPOINT],
            "Cmd": CMD,
            "Env": [
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                // Where the NVIDIA container toolkit runs the container, it mounts the host
                // driver's NVML (`utility`) into it, as dcgm-exporter's image asks; no GPU is
                // taken from the scheduler.
                "NVIDIA_VISIBLE_DEVICES=all",
                "NVIDIA_DRIVER_CAPABILITIES=utility",
            ],
            "WorkingDir": "/",
            "StopSignal": "SIGTERM",
            "Labels": {
                "org.opencontainers.image.title": "gpuprofd",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.description": "transparent system-wide GPU profiler daemon (eBPF uprobes on CUDA)",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
        "history": [{
            "created": created,
            "created_by": format!("cargo xtask dist: Debian packages {debs_list} (dpkg-deb -x), the kit's bin/gpuprofd and config.toml"),
        }],
    });
    let config = blob(
        &layout,
        "application/vnd.oci.image.config.v1+json",
        &serde_json::to_vec(&config)?,
    )?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": [layer],
    });
    let mut manifest = blob(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        &serde_json::to_vec(&manifest)?,
    )?;
    manifest["platform"] = json!({"architecture": "amd64", "os": "linux"});
    manifest["annotations"] = json!({"org.opencontainers.image.ref.name": version});
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [manifest],
    });
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&index)?)?;
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    let tar = out.join(format!("{name}.tar"));
    let mut names: Vec<String> = vec!["blobs".into(), "index.json".into(), "oci-layout".into()];
    names.sort();
    reproducible_tar(&tar, &layout, &names, epoch)?;
    Ok(layout)
}
