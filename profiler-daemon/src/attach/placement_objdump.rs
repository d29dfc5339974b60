//! Placement as a property over real code: every exported function of the system libraries on
//! this machine, checked against an independent decoder (GNU objdump, not iced-x86, which
//! [`super::placement`] uses). For each export the chosen site must be an instruction boundary
//! on the entry path by objdump's decode; every instruction skipped to reach it must, by its
//! objdump text, leave the stack pointer, every argument register and memory alone (so the
//! argument readers' adjustment, [`Placement::stack_delta`], is the 0 objdump implies); and a
//! site called cheap must be, by its raw bytes, one of the encodings the kernel emulates.

use super::placement::{Placement, WINDOW_BYTES, choose};
use crate::discovery::elf::read_elf;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// One instruction as objdump decodes it.
#[derive(Debug)]
struct Insn {
    bytes: Vec<u8>,
    text: String,
}

/// objdump's decode of the first `WINDOW_BYTES + 16` bytes of every function in `windows`
/// (start addresses), by address.
fn objdump(lib: &Path, windows: &[u64]) -> HashMap<u64, Insn> {
    let out = Command::new("objdump")
        .args(["-d", "-w", "--show-raw-insn"])
        .arg(lib)
        .output()
        .expect("objdump (binutils, which gcc needs anyway) runs the placement property test");
    assert!(out.status.success(), "objdump {}", lib.display());
    let mut sorted = windows.to_vec();
    sorted.sort_unstable();
    let wanted = |a: u64| {
        let i = sorted.partition_point(|&s| s <= a);
        i > 0 && a < sorted[i - 1] + WINDOW_BYTES + 16
    };
    let mut insns = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "   1b2c0:\tf3 0f 1e fa \tendbr64"
        let mut parts = line.splitn(3, '\t');
        let (Some(addr), Some(bytes)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some(addr) = addr.trim().strip_suffix(':') else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        if !wanted(addr) {
            continue;
        }
        let bytes: Vec<u8> = bytes
            .split_whitespace()
            .filter_map(|b| u8::from_str_radix(b, 16).ok())
            .collect();
        let text = parts.next().unwrap_or("").trim().to_owned();
        insns.insert(addr, Insn { bytes, text });
    }
    insns
}

const ARG_REGS: &[&str] = &[
    "rdi", "edi", "di", "dil", "rsi", "esi", "si", "sil", "rdx", "edx", "dx", "dl", "dh", "rcx",
    "ecx", "cx", "cl", "ch", "r8", "r8d", "r8w", "r8b", "r9", "r9d", "r9w", "r9b", "rsp", "esp",
    "sp", "spl",
];

/// Whether AT&T operand `op` names an argument register, the stack pointer or an xmm0–7 (or
/// its ymm/zmm widening).
fn is_arg_reg(op: &str) -> bool {
    let Some(r) = op.strip_prefix('%') else {
        return false;
    };
    if ARG_REGS.contains(&r) {
        return true;
    }
    ["xmm", "ymm", "zmm"].iter().any(|p| {
        r.strip_prefix(p)
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n < 8)
    })
}

/// Splits AT&T operands at top-level commas (`0x8(%rax,%rbx,4)` is one operand).
fn operands(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(s[start..].trim());
    }
    out
}

/// By objdump's text alone: may a probe sit after this instruction (no control flow, no memory
/// write, no write of an argument register or the stack pointer)? `Err` says why not.
fn skippable(text: &str) -> Result<(), String> {
    let text = text.split('#').next().unwrap_or("").trim();
    let (mn, ops) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let ops = operands(ops.trim());
    // Instructions that only read and set flags.
    const FLAGS_ONLY: &[&str] = &["cmp", "test", "bt", "ucomis", "comis"];
    // Instructions whose only written operand is the last (AT&T destination).
    const DEST_LAST: &[&str] = &[
        "mov", "lea", "xor", "add", "sub", "and", "or", "shl", "shr", "sar", "set", "cmov", "not",
        "neg", "inc", "dec", "imul", "pxor", "vpxor", "xorp", "movap", "movup", "movdq", "bswap",
    ];
    if mn == "endbr64" || mn.starts_with("nop") {
        return Ok(());
    }
    // An x87 load only pushes onto the x87 stack: no SysV argument travels there (long double
    // arguments are passed in memory).
    if mn.starts_with("fld") {
        return Ok(());
    }
    // x87 arithmetic and compares between x87 registers only (fucomi, fxch, fadd %st(1),%st).
    if mn.starts_with('f') && !ops.is_empty() && ops.iter().all(|o| o.starts_with("%st")) {
        return Ok(());
    }
    let written = ops.last().copied().unwrap_or("");
    if FLAGS_ONLY.iter().any(|p| mn.starts_with(p)) && !mn.starts_with("bts") {
        return Ok(());
    }
    if DEST_LAST.iter().any(|p| mn.starts_with(p)) {
        if written.contains('(') {
            return Err(format!("{text}: writes memory"));
        }
        if is_arg_reg(written) {
            return Err(format!("{text}: writes an argument register or rsp"));
        }
        if mn.starts_with("imul") && ops.len() < 2 {
            return Err(format!("{text}: one-operand imul writes rdx"));
        }
        return Ok(());
    }
    Err(format!(
        "{text}: not a form this check knows to be harmless"
    ))
}

/// Whether the raw bytes are an encoding arch/x86/kernel/uprobes.c emulates.
fn emulated_bytes(b: &[u8]) -> bool {
    matches!(
        b,
        [0x50..=0x57]
            | [0x41, 0x50..=0x57]
            | [0x90]
            | [0x66, 0x90]
            | [0xeb, _]
            | [0xe9, _, _, _, _]
            | [0x70..=0x7f, _]
            | [0x0f, 0x80..=0x8f, _, _, _, _]
            | [0xe8, _, _, _, _]
    )
}

/// Checks every export of `lib`; returns how many, and how many were moved off the entry.
fn check_library(lib: &Path) -> (usize, usize) {
    let info = read_elf(lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    let starts: Vec<u64> = info.exports.iter().map(|e| e.vaddr).collect();
    let insns = objdump(lib, &starts);
    let mut moved = 0;
    let mut failures = Vec::new();
    for e in &info.exports {
        let p: Placement = choose(&e.entry_bytes, e.vaddr);
        assert_eq!(p.stack_delta, 0, "{}", e.name);
        if p.offset == 0 && !p.is_cheap() {
            continue; // the entry itself: nothing skipped, nothing to check
        }
        // Walk objdump's decode from the entry to the site.
        let mut at = e.vaddr;
        let mut ok = true;
        while at < e.vaddr + p.offset {
            let Some(i) = insns.get(&at) else {
                failures.push(format!(
                    "{}: objdump has no instruction at +{:#x} (site +{:#x})",
                    e.name,
                    at - e.vaddr,
                    p.offset
                ));
                ok = false;
                break;
            };
            if let Err(why) = skippable(&i.text) {
                failures.push(format!("{}: skipped {why}", e.name));
                ok = false;
                break;
            }
            at += i.bytes.len() as u64;
        }
        if !ok {
            continue;
        }
        if at != e.vaddr + p.offset {
            failures.push(format!(
                "{}: site +{:#x} is not an instruction boundary by objdump",
                e.name, p.offset
            ));
            continue;
        }
        match insns.get(&at) {
            Some(site) if emulated_bytes(&site.bytes) => {}
            site => failures.push(format!(
                "{}: site +{:#x} is called cheap but objdump decodes {site:?}",
                e.name, p.offset
            )),
        }
        if p.offset > 0 {
            moved += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{}: {} of {} exports fail:\n{}",
        lib.display(),
        failures.len(),
        info.exports.len(),
        failures.join("\n")
    );
    (info.exports.len(), moved)
}

#[test]
fn every_export_of_the_system_libraries_agrees_with_objdump() {
    let dir = Path::new("/lib/x86_64-linux-gnu");
    let mut checked = Vec::new();
    for (name, required) in [
        ("libc.so.6", true),
        ("libm.so.6", true),
        ("libstdc++.so.6", false),
        ("libcrypto.so.3", false),
        ("libssl.so.3", false),
        ("libz.so.1", false),
        ("libgcc_s.so.1", false),
        ("libsqlite3.so.0", false),
    ] {
        let lib = dir.join(name);
        if !lib.exists() {
            assert!(!required, "{} is missing", lib.display());
            continue;
        }
        let (n, moved) = check_library(&lib);
        checked.push(format!(
            "{name}: {n} exports, {moved} probed past the entry"
        ));
    }
    eprintln!("placement vs objdump: {}", checked.join("; "));
}

#[test]
fn the_objdump_rules_themselves() {
    assert!(skippable("endbr64").is_ok());
    assert!(skippable("cmpl   $0x321cba00,0x5(%rip)        # 1234 <x>").is_ok());
    assert!(skippable("mov    0x10(%rip),%rax").is_ok());
    assert!(skippable("movzbl 0x10(%rip),%eax").is_ok());
    assert!(skippable("mov    %rdi,%rax").is_ok());
    assert!(skippable("mov    %rax,%rdi").is_err());
    assert!(skippable("mov    %rax,0x8(%rsp)").is_err());
    assert!(skippable("sub    $0x8,%rsp").is_err());
    assert!(skippable("push   %rbp").is_err());
    assert!(skippable("pxor   %xmm0,%xmm0").is_err());
    assert!(skippable("pxor   %xmm8,%xmm8").is_ok());
    assert!(skippable("xor    %r9d,%r9d").is_err());
    assert!(skippable("syscall").is_err());
    assert!(skippable("fucomi %st(1),%st").is_ok());
    assert!(skippable("fstpt  0x10(%rsp)").is_err());
    assert!(emulated_bytes(&[0x55]));
    assert!(emulated_bytes(&[0x41, 0x57]));
    assert!(!emulated_bytes(&[0x49, 0x57]));
    assert!(!emulated_bytes(&[0xff, 0x35, 1, 2, 3, 4]));
    assert!(emulated_bytes(&[0x74, 0x0c]));
}
