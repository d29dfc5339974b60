//! Build, run, test and benchmark driver: `cargo xtask <command>`. Each command installs what it
//! needs first (scripts/setup.sh is idempotent), so a fresh machine needs nothing by hand.

mod against;
mod bench;
mod bench_export;
mod bench_inject;
mod bench_onset;
mod bench_traps;
mod bpfstats;
mod cpucap;
mod debian;
mod image;
mod neighbour;
mod package;
mod reliability;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Parser)]
#[command(about = "gpuprofd's build, run and test driver")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install the toolchain pieces a fresh machine lacks (nightly rust-src, LLVM 22, bpf-linker).
    Setup,
    /// Build gpuprofd and its injection library (release, eBPF object embedded, linked against
    /// glibc 2.28 with cargo-zigbuild; copied to target/release/gpuprofd and
    /// target/release/libgpuprofd_inject.so) and the fake CUDA libraries.
    Build,
    /// Build, then run gpuprofd with ARGS (as root; via sudo when not root). Without ARGS it runs
    /// `gpuprofd demo`: the fake-CUDA training loop under the real probes.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The whole test suite: formatting, clippy, unit tests, then the privileged end-to-end
    /// tests (real eBPF against the fake CUDA libraries; must run as root).
    Test {
        /// Skip fmt and clippy.
        #[arg(long)]
        no_lint: bool,
    },
    /// Build the release binary and a systemd install kit: target/dist/gpuprofd-VERSION-x86_64-linux/
    /// (bin/gpuprofd, gpuprofd.service, gpuprofd.socket, gpuprofd-metrics.socket,
    /// least-privilege.conf, config.toml, install.sh, README.md, docs/, deploy/), the same as a
    /// .tar.gz beside it, the Debian package target/dist/gpuprofd_VERSION_amd64.deb, and the OCI image
    /// target/dist/gpuprofd-VERSION-oci/ (an image layout; gpuprofd-VERSION-oci.tar beside it)
    /// made of Debian's libc6 (apt-get download) and the kit's binary.
    Dist,
    /// Run every fuzz target (fuzz/, cargo-fuzz on nightly) for SECONDS each, from the seeds in
    /// fuzz/corpus; a crash fails it and leaves its input in fuzz/artifacts/TARGET/.
    Fuzz {
        #[arg(long, default_value_t = 20)]
        seconds: u32,
        /// Only these targets.
        #[arg(long = "target")]
        targets: Vec<String>,
    },
    /// Everything behind the reliability promises (as root): the harmlessness, overload, crash,
    /// churn and hostile-input tests on real eBPF, placement against objdump, every fuzz target
    /// for FUZZ_SECONDS. Writes docs/RELIABILITY.md from what the run saw.
    Reliability {
        #[arg(long, default_value_t = 60)]
        fuzz_seconds: u32,
        /// Spread the churn test's 10,000 short processes over this many seconds (the issue's
        /// soak is 600; 0 runs them as fast as they go, as CI does).
        #[arg(long, default_value_t = 0)]
        soak_seconds: u32,
    },
    /// Benchmarks (as root): probe cost per call against the uprobe floor, pipeline ceiling,
    /// launch storm, process churn. Writes docs/PERFORMANCE.md (not with --quick).
    Bench {
        /// Seconds, not minutes: checks the benchmark runs and loses nothing at a modest rate.
        #[arg(long)]
        quick: bool,
        /// How long the 200 k launches/s run lasts (the figure is 60 s; 600 watches the
        /// daemon's RSS for ten minutes).
        #[arg(long, default_value_t = 60)]
        sustain_seconds: u64,
        /// Instead: this build's probes against another gpuprofd binary's, per hooked call, in
        /// interleaved rounds (timed and program time; full capture and counted). Prints a
        /// table; writes nothing.
        #[arg(long, value_name = "GPUPROFD")]
        against: Option<PathBuf>,
        /// Rounds of `--against` (each: both builds, both modes, every entry shape).
        #[arg(long, default_value_t = 5, requires = "against")]
        rounds: usize,
    },
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_owned()
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: {cmd:?}");
    let st = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed: {st}");
    }
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn setup() -> Result<()> {
    run(Command::new("bash").arg(root().join("scripts/setup.sh")))
}

fn fakecuda_dir() -> PathBuf {
    root().join("target/fakecuda")
}

fn build() -> Result<PathBuf> {
    setup()?;
    let bin = package::build_release()?;
    run(Command::new("bash")
        .arg(root().join("tests/fakecuda/build.sh"))
        .arg(fakecuda_dir()))?;
    Ok(bin)
}

fn dist() -> Result<PathBuf> {
    setup()?;
    package::dist(&package::build_release()?)
}

/// The fuzz targets, in fuzz/Cargo.toml's order.
const FUZZ_TARGETS: [&str; 8] = [
    "decode",
    "capture_file",
    "config",
    "ctl_request",
    "procfs",
    "elf",
    "placement",
    "demangle",
];

fn fuzz(seconds: u32, only: &[String]) -> Result<()> {
    let have = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        bail!("cargo-fuzz is not installed: `scripts/setup.sh --test-tools` installs it");
    }
    for t in FUZZ_TARGETS {
        if !only.is_empty() && !only.iter().any(|o| o == t) {
            continue;
        }
        run(&mut fuzz_command(t, seconds)?)?;
    }
    Ok(())
}

/// The scratch corpus directory of fuzz target `t`: new inputs go there; the seeds in the
/// repository stay as they are.
fn fuzz_scratch(t: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpuprofd-fuzz-corpus-{t}"))
}

/// `cargo +nightly fuzz run T` for `seconds`, from the seeds in fuzz/corpus/T.
fn fuzz_command(t: &str, seconds: u32) -> Result<Command> {
    let scratch = fuzz_scratch(t);
    std::fs::create_dir_all(&scratch)?;
    let mut c = Command::new("cargo");
    c.current_dir(root())
        .env("GPUPROFD_SKIP_EBPF", "1")
        .args(["+nightly", "fuzz", "run", "--fuzz-dir", "fuzz", t])
        .arg(&scratch)
        .arg(root().join("fuzz/corpus").join(t))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg("-rss_limit_mb=4096");
    Ok(c)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Setup => setup(),
        Cmd::Build => build().map(|_| ()),
        Cmd::Dist => dist().map(|_| ()),
        Cmd::Fuzz { seconds, targets } => fuzz(seconds, &targets),
        Cmd::Run { args } => {
            let bin = build()?;
            let args = if args.is_empty() {
                vec![
                    "demo".to_string(),
                    "--fake-cuda".into(),
                    fakecuda_dir().display().to_string(),
                ]
            } else {
                args
            };
            let mut cmd = if is_root() {
                Command::new(&bin)
            } else {
                let mut c = Command::new("sudo");
                c.arg(&bin);
                c
            };
            run(cmd.args(&args).current_dir(root()))
        }
        Cmd::Test { no_lint } => {
            let bin = build()?;
            run(Command::new("bash")
                .arg(root().join("scripts/setup.sh"))
                .arg("--test-tools"))?;
            if !no_lint {
                run(cargo().args(["fmt", "--all", "--", "--check"]))?;
                run(cargo().args([
                    "clippy",
                    "--workspace",
                    "--exclude",
                    "profiler-ebpf",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ]))?;
            }
            run(cargo().args([
                "test",
                "--workspace",
                "--exclude",
                "profiler-ebpf",
                "--exclude",
                "gpuprofd-tests",
            ]))?;
            if !is_root() {
                bail!(
                    "the privileged tests attach real uprobes and must run as root: \
                     `sudo -E cargo xtask test` (they fail rather than skip without BPF)"
                );
            }
            // The install kit, for the tests of the unit file and install script.
            let kit = package::dist(&bin)?;
            run(cargo()
                .args(["test", "-p", "gpuprofd-tests", "--", "--test-threads=1"])
                .env("GPUPROFD_DIST", &kit)
                .env("GPUPROFD_BIN", &bin)
                .env("FAKECUDA_DIR", fakecuda_dir()))?;
            // Every fuzz target, briefly (the seeds and what 15 s of mutation finds).
            fuzz(15, &[])?;
            // The benchmark's quick mode: it still runs, and nothing is lost at a modest rate.
            bench::run(&root(), &bin, &fakecuda_dir(), true, 2)
        }
        Cmd::Reliability {
            fuzz_seconds,
            soak_seconds,
        } => {
            let bin = build()?;
            if !is_root() {
                bail!(
                    "the reliability run attaches uprobes and must run as root: \
                     `sudo -E cargo xtask reliability`"
                );
            }
            run(Command::new("bash")
                .arg(root().join("scripts/setup.sh"))
                .arg("--test-tools"))?;
            let kit = package::dist(&bin)?;
            reliability::run(
                &root(),
                &bin,
                &kit,
                &fakecuda_dir(),
                fuzz_seconds,
                soak_seconds,
            )
        }
        Cmd::Bench {
            quick,
            sustain_seconds,
            against,
            rounds,
        } => {
            let bin = build()?;
            if !is_root() {
                bail!(
                    "the benchmark attaches uprobes and must run as root: `sudo -E cargo xtask bench`"
                );
            }
            match against {
                Some(other) => {
                    if !other.is_file() {
                        bail!(
                            "--against {}: no such file (give the path of another gpuprofd \
                             binary, e.g. one built from an earlier commit)",
                            other.display()
                        );
                    }
                    let calls = if quick { 20_000 } else { 1_000_000 };
                    against::run(&bin, &other, &fakecuda_dir(), rounds.max(1), calls)
                }
                None => bench::run(&root(), &bin, &fakecuda_dir(), quick, sustain_seconds),
            }
        }
    }
}
