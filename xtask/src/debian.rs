//! The Debian package's `copyright` and `changelog.Debian.gz`, which Debian policy asks of every
//! package (§12.5, §12.7) and lintian checks.
//!
//! The copyright file is machine-readable (DEP-5). The binary is a static Rust build: every
//! crate compiled into it is listed with the licence its Cargo.toml declares, from `cargo tree`
//! over the daemon's normal dependencies, so the list cannot drift from Cargo.lock.

use crate::root;
use anyhow::{Context as _, Result, bail};
use std::collections::BTreeSet;
use std::process::Command;

const MIT: &str = "Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the \"Software\"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.";

/// One field line of a DEP-5 paragraph body: blank lines become " .".
fn body(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim().is_empty() {
                " .".to_owned()
            } else {
                format!(" {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crates compiled into the daemon: `name version: licence`, sorted, the workspace's own
/// left out.
fn bundled_crates() -> Result<Vec<String>> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(root())
        .args([
            "tree",
            "--locked",
            "-p",
            "profiler-daemon",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--target",
            "x86_64-unknown-linux-gnu",
            "-f",
            "{p}\t{l}",
        ])
        .output()
        .context("running cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut crates = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((pkg, licence)) = line.split_once('\t') else {
            continue;
        };
        // "name v1.2.3" or "name v1.2.3 (/path)" for the workspace's own (left out), and
        // "(*)" marks a repeat.
        let pkg = pkg.trim_end_matches(" (*)");
        if pkg.contains(" (/") {
            continue;
        }
        let licence = if licence.is_empty() {
            "unstated"
        } else {
            licence
        };
        crates.insert(format!("{pkg}: {licence}"));
    }
    Ok(crates.into_iter().collect())
}

/// `/usr/share/doc/gpuprofd/copyright`, DEP-5.
pub fn copyright() -> Result<String> {
    let crates = bundled_crates()?;
    if crates.is_empty() {
        bail!("cargo tree listed no crates for profiler-daemon");
    }
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: gpuprofd\n\
         Comment: The eBPF programs inside the binary are loaded with the licence string \
         \"GPL\"\n (aya's default), as the kernel's GPL-only helpers require; their source is \
         under\n MIT or Apache-2.0, and MIT is GPL-compatible.\n\
         \n\
         Files: *\n\
         Copyright: 2026 the gpuprofd developers\n\
         License: MIT or Apache-2.0\n\
         \n\
         Files: usr/bin/gpuprofd\n\
         Copyright: 2026 the gpuprofd developers, and the authors of the Rust crates below\n\
         License: MIT or Apache-2.0\n\
         Comment: A static Rust build; the crates compiled into it, with the licences their\n \
         Cargo.toml files declare:\n{}\n\
         \n\
         License: MIT\n{}\n\
         \n\
         License: Apache-2.0\n \
         On Debian systems, the complete text of the Apache License, Version 2.0, is in\n \
         /usr/share/common-licenses/Apache-2.0.\n",
        body(&crates.join("\n")),
        body(MIT),
    ))
}

/// `/usr/share/doc/gpuprofd/changelog.Debian` (before gzip): one entry for this version. The
/// date is the last commit's, so two builds of one commit give the same package.
pub fn changelog(version: &str) -> Result<String> {
    let out = Command::new("git")
        .current_dir(root())
        .args(["log", "-1", "--format=%aD"])
        .output()
        .context("running git log")?;
    let date = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let date = if out.status.success() && !date.is_empty() {
        date
    } else {
        "Thu, 01 Jan 2026 00:00:00 +0000".to_owned()
    };
    Ok(format!(
        "gpuprofd ({version}) unstable; urgency=medium\n\
         \n  \
         * Built from the gpuprofd repository by `cargo xtask dist`; what changed is in\n    \
         its git history.\n\
         \n \
         -- gpuprofd developers <gpuprofd@example.invalid>  {date}\n"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_blank_line_in_a_field_body_is_a_dot() {
        assert_eq!(super::body("a\n\nb"), " a\n .\n b");
    }
}
