//! Chooses the cheapest safe uprobe site among a function's first instructions.
//!
//! The kernel's x86 uprobe code *emulates* a few instructions (~0.9 µs per hit measured on the
//! development machine) and single-steps every other one out of line (~10 µs). NVIDIA driver
//! exports start with a single-stepped `cmpl $imm, disp(%rip)` followed by an emulated `je`, and
//! CET builds start with a single-stepped `endbr64`, so probing a few bytes in is often ~10×
//! cheaper than probing the entry.
//!
//! Rule: decode linearly from the entry, at most [`MAX_INSNS`] instructions starting within
//! [`WINDOW_BYTES`] bytes, and choose the first instruction the kernel emulates, provided every
//! instruction before it is not control flow, writes no memory, and writes no register that can
//! carry an argument or address the stack (rdi, rsi, rdx, rcx, r8, r9, rsp, xmm0–xmm7 and their
//! sub/super-registers). Otherwise the entry is chosen. A probe at the chosen site therefore sees
//! every argument register and every stack argument (`[rsp+8]`, …) exactly as at entry:
//! [`Placement::stack_delta`] is always 0 and argument readers need no adjustment.

use std::fmt;

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction,
    InstructionInfoFactory, OpAccess, Register,
};

/// At most this many instructions (including the chosen one) are decoded from the entry.
pub const MAX_INSNS: usize = 4;
/// A chosen instruction starts fewer than this many bytes after the entry.
pub const WINDOW_BYTES: u64 = 24;

/// Where to put a function's uprobe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Bytes from the function's entry to the probed instruction (0 = the entry).
    pub offset: u64,
    /// How far rsp at the site is from rsp at entry. Always 0: an instruction that changes rsp
    /// is never skipped. Kept so callers state the assumption explicitly.
    pub stack_delta: i64,
    /// Why this site was chosen.
    pub reason: Reason,
    /// GNU-assembler text of the probed instruction (`"je 0x18"`, `"push %rbp"`), or `""` when
    /// the entry does not decode.
    pub site_insn: String,
}

/// Why a [`Placement`] was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The entry instruction is emulated by the kernel: already cheap.
    EntryEmulated,
    /// `skipped` single-stepped instructions with no effect on arguments precede the site.
    SkippedToEmulated { skipped: u8 },
    /// No emulated instruction is reachable within the window under the rule: the entry.
    EntrySingleStepped,
    /// The bytes are empty or the entry instruction does not decode: the entry.
    Undecodable,
    /// The entry instruction carries a prefix the kernel's x86 uprobes refuse (`lock`, or an
    /// `es`/`cs`/`ss`/`ds` segment override) and nothing before an emulated instruction may be
    /// skipped: the function cannot be probed. (Attached anyway, the probe would either fail
    /// with ENOTSUPP, errno 524, when a process already maps the file, or register and then
    /// silently never fire in processes that map it later.)
    Refused,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::EntryEmulated => f.write_str("entry is emulated"),
            Reason::SkippedToEmulated { skipped } => write!(
                f,
                "skipped {skipped} single-stepped instruction(s) to an emulated one"
            ),
            Reason::EntrySingleStepped => {
                f.write_str("no emulated instruction within the window: entry")
            }
            Reason::Undecodable => f.write_str("undecodable: entry"),
            Reason::Refused => f.write_str(
                "the entry instruction has a prefix uprobes refuse (lock or es/cs/ss/ds): not probed",
            ),
        }
    }
}

impl Placement {
    /// Whether the probed instruction is emulated by the kernel (the cheap kind of hit).
    pub fn is_cheap(&self) -> bool {
        matches!(
            self.reason,
            Reason::EntryEmulated | Reason::SkippedToEmulated { .. }
        )
    }

    fn entry(reason: Reason, site_insn: String) -> Self {
        Placement {
            offset: 0,
            stack_delta: 0,
            reason,
            site_insn,
        }
    }
}

/// Chooses the probe site for a function whose first bytes are `entry_bytes`, loaded at
/// `entry_vaddr` (used only for the branch targets in [`Placement::site_insn`]).
pub fn choose(entry_bytes: &[u8], entry_vaddr: u64) -> Placement {
    let mut decoder = Decoder::with_ip(64, entry_bytes, entry_vaddr, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut insn = Instruction::default();
    let mut entry_text: Option<String> = None;
    for index in 0..MAX_INSNS {
        let offset = decoder.position() as u64;
        if offset >= WINDOW_BYTES || !decoder.can_decode() {
            break;
        }
        decoder.decode_out(&mut insn);
        if insn.is_invalid() {
            break;
        }
        let start = decoder.position() - insn.len();
        let bytes = &entry_bytes[start..decoder.position()];
        if is_emulated_encoding(&insn, bytes) {
            return Placement {
                offset,
                stack_delta: 0,
                reason: match index {
                    0 => Reason::EntryEmulated,
                    n => Reason::SkippedToEmulated { skipped: n as u8 },
                },
                site_insn: gas(&insn),
            };
        }
        if index == 0 {
            if kernel_refuses(&insn) {
                return Placement::entry(Reason::Refused, gas(&insn));
            }
            entry_text = Some(gas(&insn));
        }
        if !is_skippable(&mut info, &insn) {
            break;
        }
    }
    match entry_text {
        Some(text) => Placement::entry(Reason::EntrySingleStepped, text),
        None => Placement::entry(Reason::Undecodable, String::new()),
    }
}

/// Whether arch/x86/kernel/uprobes.c emulates `insn` instead of single-stepping it, judged by
/// code and length (conservative: prefixed forms the kernel might also accept count as not):
/// `push r64` (`50+r`, `41 50+r`), `nop` (`90`, `66 90`), `jmp rel8/rel32` (`eb`, `e9`),
/// `jcc rel8/rel32` (`70`–`7f`, `0f 80`–`8f`) and `call rel32` (`e8`).
///
/// The kernel accepts `push r8`–`r15` only with exactly the REX prefix `0x41`; an [`Instruction`]
/// does not record which REX byte it had, so a `0x49 0x57` push is also reported as emulated
/// here. [`choose`] checks the raw bytes too.
pub fn is_emulated(insn: &Instruction) -> bool {
    let len = insn.len();
    match insn.code() {
        Code::Push_r64 => {
            len == 1 || (len == 2 && (Register::R8..=Register::R15).contains(&insn.op0_register()))
        }
        Code::Nopd => len == 1,
        Code::Nopw => len == 2,
        Code::Jmp_rel8_64 => len == 2,
        Code::Jmp_rel32_64 | Code::Call_rel32_64 => len == 5,
        _ => (insn.is_jcc_short() && len == 2) || (insn.is_jcc_near() && len == 6),
    }
}

/// Whether arch/x86/kernel/uprobes.c refuses to probe `insn` for its prefixes: `lock` and the
/// `es`/`cs`/`ss`/`ds` segment overrides (its `is_prefix_bad`).
pub fn kernel_refuses(insn: &Instruction) -> bool {
    insn.has_lock_prefix()
        || matches!(
            insn.segment_prefix(),
            Register::ES | Register::CS | Register::SS | Register::DS
        )
}

/// [`is_emulated`] plus the raw-byte checks it cannot make (`bytes` = the instruction's bytes).
fn is_emulated_encoding(insn: &Instruction, bytes: &[u8]) -> bool {
    is_emulated(insn)
        && match insn.code() {
            Code::Push_r64 => bytes.len() == 1 || bytes.first() == Some(&0x41),
            Code::Nopd => bytes == [0x90],
            Code::Nopw => bytes == [0x66, 0x90],
            _ => true,
        }
}

/// Registers that may carry arguments or address stack arguments, as `full_register()`s.
const PROTECTED: [Register; 15] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
    Register::RSP,
    Register::ZMM0,
    Register::ZMM1,
    Register::ZMM2,
    Register::ZMM3,
    Register::ZMM4,
    Register::ZMM5,
    Register::ZMM6,
    Register::ZMM7,
];

fn writes(access: OpAccess) -> bool {
    matches!(
        access,
        OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
    )
}

/// Whether a probe may be placed after `insn` instead of on it: it falls through, writes no
/// memory and writes no argument or stack register.
fn is_skippable(factory: &mut InstructionInfoFactory, insn: &Instruction) -> bool {
    if insn.flow_control() != FlowControl::Next {
        return false;
    }
    let info = factory.info(insn);
    !info.used_memory().iter().any(|m| writes(m.access()))
        && !info
            .used_registers()
            .iter()
            .any(|r| writes(r.access()) && PROTECTED.contains(&r.register().full_register()))
}

/// objdump-like AT&T text: lower-case hex, no leading zeros, `disp(%rip)` kept relative.
fn gas(insn: &Instruction) -> String {
    let mut formatter = GasFormatter::new();
    let options = formatter.options_mut();
    options.set_uppercase_hex(false);
    options.set_branch_leading_zeros(false);
    options.set_rip_relative_addresses(true);
    let mut text = String::new();
    formatter.format(insn, &mut text);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::elf::read_elf;
    use std::collections::BTreeMap;
    use std::path::Path;

    /// cuLaunchKernel-style trampoline of the real NVIDIA driver:
    /// `cmpl $0x321cba00,0x19a8f5e(%rip); je +0xc; jmp *0x19a8f4e(%rip); nopl; mov $4,%eax; ret`.
    const TRAMPOLINE: &[u8] = &[
        0x81, 0x3d, 0x5e, 0x8f, 0x9a, 0x01, 0x00, 0xba, 0x1c, 0x32, 0x74, 0x0c, 0xff, 0x25, 0x4e,
        0x8f, 0x9a, 0x01, 0x0f, 0x1f, 0x40, 0x00, 0xb8, 0x04, 0x00, 0x00, 0x00, 0xc3,
    ];

    fn at(bytes: &[u8]) -> Placement {
        let p = choose(bytes, 0);
        assert_eq!(p.stack_delta, 0);
        p
    }

    fn assert_site(bytes: &[u8], offset: u64, reason: Reason, insn_prefix: &str) {
        let p = at(bytes);
        assert_eq!(
            (p.offset, p.reason),
            (offset, reason),
            "{bytes:02x?}: {p:?}"
        );
        assert!(
            p.site_insn.starts_with(insn_prefix),
            "{bytes:02x?}: {:?} does not start with {insn_prefix:?}",
            p.site_insn
        );
        assert_eq!(
            p.is_cheap(),
            matches!(
                reason,
                Reason::EntryEmulated | Reason::SkippedToEmulated { .. }
            )
        );
    }

    #[test]
    fn driver_trampoline_skips_cmpl_to_je() {
        assert_site(
            TRAMPOLINE,
            10,
            Reason::SkippedToEmulated { skipped: 1 },
            "je ",
        );
        assert_eq!(at(TRAMPOLINE).site_insn, "je 0x18");
        assert_eq!(choose(TRAMPOLINE, 0x1000).site_insn, "je 0x1018");
    }

    #[test]
    fn memset_trampoline_with_movzbl_still_probes_je() {
        // cmpl; je; movzbl %sil,%esi; jmp *disp(%rip)
        let bytes = [
            0x81, 0x3d, 0x5e, 0x8f, 0x9a, 0x01, 0x00, 0xba, 0x1c, 0x32, 0x74, 0x10, 0x40, 0x0f,
            0xb6, 0xf6, 0xff, 0x25, 0x4a, 0x8f, 0x9a, 0x01,
        ];
        assert_site(&bytes, 10, Reason::SkippedToEmulated { skipped: 1 }, "je ");
    }

    #[test]
    fn runtime_prologues() {
        // push %rbp; mov %rsp,%rbp
        assert_site(
            &[0x55, 0x48, 0x89, 0xe5],
            0,
            Reason::EntryEmulated,
            "push %rbp",
        );
        // endbr64; push %rbp; mov %rsp,%rbp
        let cet = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5];
        assert_site(
            &cet,
            4,
            Reason::SkippedToEmulated { skipped: 1 },
            "push %rbp",
        );
        // push %r15
        assert_site(
            &[0x41, 0x57, 0x41, 0x56],
            0,
            Reason::EntryEmulated,
            "push %r15",
        );
        // endbr64; push %r15
        let cet_r15 = [0xf3, 0x0f, 0x1e, 0xfa, 0x41, 0x57];
        assert_site(
            &cet_r15,
            4,
            Reason::SkippedToEmulated { skipped: 1 },
            "push %r15",
        );
    }

    #[test]
    fn rsp_write_before_push_keeps_entry() {
        // sub $0x18,%rsp; push %rbx
        let sub = [0x48, 0x83, 0xec, 0x18, 0x53];
        assert_site(&sub, 0, Reason::EntrySingleStepped, "sub $0x18,%rsp");
        // endbr64; sub $0x18,%rsp; push %rbx
        let cet_sub = [0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x18, 0x53];
        assert_site(&cet_sub, 0, Reason::EntrySingleStepped, "endbr64");
    }

    #[test]
    fn register_and_memory_writes() {
        // mov %rdi,%rax; push %rbx: rax carries no argument.
        let rax = [0x48, 0x89, 0xf8, 0x53];
        assert_site(
            &rax,
            3,
            Reason::SkippedToEmulated { skipped: 1 },
            "push %rbx",
        );
        // mov %rsi,%rdi; push %rbx: clobbers the first argument.
        assert_site(
            &[0x48, 0x89, 0xf7, 0x53],
            0,
            Reason::EntrySingleStepped,
            "mov",
        );
        // mov %esi,%edi (sub-register of rdi); push %rbx
        assert_site(&[0x89, 0xf7, 0x53], 0, Reason::EntrySingleStepped, "mov");
        // mov %al,%cl (sub-register of rcx); push %rbx
        assert_site(&[0x88, 0xc1, 0x53], 0, Reason::EntrySingleStepped, "mov");
        // mov %rax,(%rsp); push %rbx: memory write.
        assert_site(
            &[0x48, 0x89, 0x04, 0x24, 0x53],
            0,
            Reason::EntrySingleStepped,
            "mov",
        );
        // pxor %xmm0,%xmm0; push %rbx: clobbers the first FP argument.
        assert_site(
            &[0x66, 0x0f, 0xef, 0xc0, 0x53],
            0,
            Reason::EntrySingleStepped,
            "pxor",
        );
        // xor %eax,%eax; mov (%rdi),%r10; push %rbx: reads only, writes rax/r10/flags.
        let reads = [0x31, 0xc0, 0x4c, 0x8b, 0x17, 0x53];
        assert_site(
            &reads,
            5,
            Reason::SkippedToEmulated { skipped: 2 },
            "push %rbx",
        );
    }

    #[test]
    fn branches() {
        // endbr64; jmp rel32
        let jmp = [0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0x10, 0x00, 0x00, 0x00];
        assert_site(&jmp, 4, Reason::SkippedToEmulated { skipped: 1 }, "jmp ");
        // jmp rel8, call rel32, jne rel32 at entry
        assert_site(&[0xeb, 0x05], 0, Reason::EntryEmulated, "jmp ");
        assert_site(&[0xe8, 0, 0, 0, 0], 0, Reason::EntryEmulated, "call ");
        assert_site(&[0x0f, 0x85, 0, 1, 0, 0], 0, Reason::EntryEmulated, "jne ");
        // jmp *disp32(%rip) at entry: single-stepped and control flow.
        let indirect = [0xff, 0x25, 0x4e, 0x8f, 0x9a, 0x01, 0x55];
        assert_site(&indirect, 0, Reason::EntrySingleStepped, "jmp");
        assert!(at(&indirect).site_insn.ends_with("*0x19a8f4e(%rip)"));
        // ret at entry
        assert_site(&[0xc3, 0x55], 0, Reason::EntrySingleStepped, "ret");
        // 66-prefixed (16-bit-operand) jcc/call are not emulated.
        assert!(!at(&[0x66, 0x74, 0x02, 0x55]).is_cheap());
    }

    #[test]
    fn nops_and_push_encodings() {
        assert_site(&[0x90], 0, Reason::EntryEmulated, "nop");
        assert_site(&[0x66, 0x90], 0, Reason::EntryEmulated, "");
        // pause (f3 90) and REX.W push are single-stepped by the conservative rule.
        assert_eq!(at(&[0xf3, 0x90]).reason, Reason::EntrySingleStepped);
        assert_eq!(at(&[0x48, 0x55]).reason, Reason::EntrySingleStepped);
        // push %r15 with REX 0x49 rather than 0x41: the kernel does not emulate it.
        assert_eq!(at(&[0x49, 0x57]).reason, Reason::EntrySingleStepped);
        // 16-bit push is not emulated
        assert_eq!(at(&[0x66, 0x55]).reason, Reason::EntrySingleStepped);
    }

    #[test]
    fn window_limits() {
        // Three harmless endbr64 then push: 4th instruction, offset 12: allowed.
        let three = [[0xf3, 0x0f, 0x1e, 0xfa].repeat(3), vec![0x55]].concat();
        assert_site(
            &three,
            12,
            Reason::SkippedToEmulated { skipped: 3 },
            "push %rbp",
        );
        // Four harmless instructions then push: beyond MAX_INSNS.
        let four = [[0xf3, 0x0f, 0x1e, 0xfa].repeat(4), vec![0x55]].concat();
        assert_site(&four, 0, Reason::EntrySingleStepped, "endbr64");
        // Two 10-byte harmless movabs to rax, then a nop, then push: near the byte window.
        let movabs = [0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8];
        let far = [movabs.repeat(2), vec![0x0f, 0x1f, 0x00, 0x55]].concat();
        assert_eq!(at(&far[..21]).reason, Reason::EntrySingleStepped);
        // nopl (%rax) (3 bytes, not an emulated encoding here) is harmless: push at 23 < 24.
        assert_site(
            &far,
            23,
            Reason::SkippedToEmulated { skipped: 3 },
            "push %rbp",
        );
        let too_far = [movabs.repeat(2), vec![0x0f, 0x1f, 0x40, 0x00, 0x55]].concat();
        assert_site(&too_far, 0, Reason::EntrySingleStepped, "movabs");
    }

    #[test]
    fn undecodable_and_truncated() {
        let empty = at(&[]);
        assert_eq!(
            (empty.offset, empty.reason, empty.site_insn.as_str()),
            (0, Reason::Undecodable, "")
        );
        assert_eq!(at(&[0xff, 0xff]).reason, Reason::Undecodable);
        // ud2 decodes but raises #UD: not skippable.
        assert_site(&[0x0f, 0x0b, 0x55], 0, Reason::EntrySingleStepped, "ud2");
        // cmpl truncated before the je: entry.
        assert_site(&TRAMPOLINE[..8], 0, Reason::Undecodable, "");
        assert_site(&TRAMPOLINE[..11], 0, Reason::EntrySingleStepped, "cmpl");
        // Garbage after a harmless instruction: fall back to the entry.
        assert_site(
            &[0xf3, 0x0f, 0x1e, 0xfa, 0xff, 0xff],
            0,
            Reason::EntrySingleStepped,
            "endbr64",
        );
    }

    #[test]
    fn prefixes_uprobes_refuse_are_never_probed() {
        // lock addq $1,0x517f(%rip): a shrink-wrapped leaf's first instruction
        let lock = [0xf0, 0x48, 0x83, 0x05, 0x7f, 0x51, 0x00, 0x00, 0x01, 0xc3];
        let p = at(&lock);
        assert_eq!((p.offset, p.reason), (0, Reason::Refused));
        assert!(!p.is_cheap());
        assert!(p.site_insn.starts_with("lock add"), "{}", p.site_insn);
        // cs nopw 0x0(%rax,%rax,1); ds-prefixed mov
        assert_eq!(
            at(&[0x2e, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]).reason,
            Reason::Refused
        );
        assert_eq!(at(&[0x3e, 0x48, 0x8b, 0x07, 0xc3]).reason, Reason::Refused);
        // fs/gs overrides (TLS) are fine; an emulated site after a skippable one is unaffected
        assert_eq!(
            at(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0, 0x55]).reason,
            Reason::SkippedToEmulated { skipped: 1 }
        );
    }

    #[test]
    fn reason_display() {
        assert_eq!(Reason::EntryEmulated.to_string(), "entry is emulated");
        assert_eq!(
            Reason::SkippedToEmulated { skipped: 2 }.to_string(),
            "skipped 2 single-stepped instruction(s) to an emulated one"
        );
        assert_eq!(
            Reason::EntrySingleStepped.to_string(),
            "no emulated instruction within the window: entry"
        );
        assert_eq!(Reason::Undecodable.to_string(), "undecodable: entry");
    }

    #[test]
    fn libc_exports_get_instruction_boundaries() {
        let info = read_elf(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for e in &info.exports {
            let p = choose(&e.entry_bytes, e.vaddr);
            assert_eq!(p.stack_delta, 0, "{}", e.name);
            // Independent linear decode of the same bytes.
            let mut decoder = Decoder::with_ip(64, &e.entry_bytes, e.vaddr, DecoderOptions::NONE);
            let mut starts = Vec::new();
            let mut insns = Vec::new();
            while decoder.can_decode() && decoder.position() < WINDOW_BYTES as usize {
                starts.push(decoder.position() as u64);
                let insn = decoder.decode();
                if insn.is_invalid() {
                    break;
                }
                insns.push(insn);
            }
            assert!(
                p.offset == 0 || starts.contains(&p.offset),
                "{}: offset {} is not an instruction boundary of {:02x?}",
                e.name,
                p.offset,
                e.entry_bytes
            );
            if p.is_cheap() {
                let i = starts.iter().position(|&s| s == p.offset).unwrap();
                assert!(is_emulated(&insns[i]), "{}: {p:?}", e.name);
                assert_eq!(p.site_insn, gas(&insns[i]));
            }
            let key = match p.reason {
                Reason::SkippedToEmulated { .. } => "skipped".to_string(),
                r => format!("{r:?}"),
            };
            *reasons.entry(key).or_default() += 1;
        }
        eprintln!(
            "libc placements over {} exports: {reasons:?}",
            info.exports.len()
        );
    }
}
