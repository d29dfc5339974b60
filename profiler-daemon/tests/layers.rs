//! The layer test: the crate's top-level modules form the pipeline, and each imports only the
//! ones before it (docs/ARCHITECTURE.md). A `crate::X` path in any file of module M — code,
//! tests, doc links — is an edge M → X; an edge to a later module fails, and so does a
//! top-level module that is not in the list (a new one must be given its place).
//!
//! Plain comments are left out (they may name any module), string literals too
//! (`"crate::main"` in a demangler test is text, not a path); doc comments count, for their
//! intra-doc links.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The pipeline, bottom first: each module may import only those before it.
const ORDER: &[&str] = &[
    "sys",
    "api",
    "discovery",
    "capture",
    "attach",
    "nvml",
    "enrich",
    "model",
    "store",
    "analysis",
    "output",
    "session",
    "service",
    "bench",
    "doctor",
    "cli",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `text` without comments and without the contents of string and char literals.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // Doc comments (`///`, `//!`) stay: their intra-doc links are paths too.
            b'/' if b.get(i + 1) == Some(&b'/')
                && !matches!(b.get(i + 2), Some(b'/') | Some(b'!')) =>
            {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                // A doc comment: its text as code, so that `[`crate::x`]` counts (and
                // quotes or apostrophes in prose start no literal).
                while i < b.len() && b[i] != b'\n' {
                    if b[i] != b'"' && b[i] != b'\'' {
                        out.push(b[i] as char);
                    }
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'r' if matches!(b.get(i + 1), Some(b'#') | Some(b'"'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                // Raw string: r"…", r#"…"#, …
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                // A char literal ('x', '\n', '\''); lifetimes ('a) stay.
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// The top-level modules `code` names through `crate::` (paths and `use crate::{…}` groups).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in code.match_indices("crate::") {
        // Not part of a longer path (`gpuprofd_crate::`), nor `$crate::`.
        if i > 0 {
            let prev = code.as_bytes()[i - 1];
            if prev.is_ascii_alphanumeric() || prev == b'_' || prev == b'$' {
                continue;
            }
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: those not nested in a deeper brace.
            let mut depth = 0;
            let mut item_start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 0 => {
                        out.insert(ident(&group[k..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

/// The top-level modules lib.rs declares, in its order.
fn declared() -> Vec<String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    code_only(&lib)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

#[test]
fn every_module_has_a_place_in_the_pipeline() {
    assert_eq!(
        declared(),
        ORDER,
        "lib.rs's modules (in its order) and this test's ORDER differ: give a new module its \
         place in the pipeline (and in docs/ARCHITECTURE.md)"
    );
}

#[test]
fn no_module_imports_a_later_stage() {
    let declared = declared();
    let rank = |m: &str| ORDER.iter().position(|o| *o == m);
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut wrong = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src()).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        let Some(from) = rank(&module) else {
            continue; // lib.rs, main.rs
        };
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for to in crate_refs(&code) {
            if to == module || !declared.contains(&to) {
                continue;
            }
            let at = rank(&to).unwrap();
            if at > from {
                wrong.push(format!("{} → {to}", rel.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that point back up the pipeline (move the helper down into sys/ or \
         profiler-common, or pass a trait object or channel down):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_of_paths_sees_what_it_should() {
    let code = code_only(
        "use crate::{a, b::{c, d}, e};\n// crate::f\nlet s = \"crate::g\";\nlet r = r#\"crate::h\"#;\n\
         x = crate::i::j; y = gpuprofd_crate::k; let c = '\"'; z = crate::l;\n\
         /// See [`crate::m`]'s \"n\".\n",
    );
    let got: Vec<String> = crate_refs(&code).into_iter().collect();
    assert_eq!(got, ["a", "b", "e", "i", "l", "m"]);
}
