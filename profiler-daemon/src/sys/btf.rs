//! Where the running kernel keeps one field of a structure, from its own type information
//! (BTF, `/sys/kernel/btf/vmlinux`). The probes need one such offset: a thread's FS base in
//! `task_struct` (`thread.fsbase`), which on x86-64 glibc is `pthread_self()`, the only thread
//! identity CPython 3.9 and 3.10 keep in their thread states.
//!
//! Only what that needs is read: the type section (every kind, to walk it), struct and union
//! members (anonymous ones searched through, as `randstruct` kernels wrap fields in one), and
//! the string section. Every read is bounds-checked; a blob this code does not understand gives
//! `None`, never a wrong offset.

use std::sync::OnceLock;

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;

/// One type's header, and where its trailing data starts in the type section.
#[derive(Clone, Copy, Debug)]
struct Ty {
    name_off: u32,
    kind: u32,
    vlen: u32,
    kind_flag: bool,
    /// `size` or `type`, by kind.
    size_or_type: u32,
    data: usize,
}

struct Btf<'a> {
    /// Index 0 is the `void` type; ids start at 1.
    types: Vec<Ty>,
    tsec: &'a [u8],
    strs: &'a [u8],
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

impl<'a> Btf<'a> {
    fn parse(b: &'a [u8]) -> Option<Btf<'a>> {
        let magic = u16::from_le_bytes(b.get(0..2)?.try_into().ok()?);
        if magic != MAGIC {
            return None; // also a big-endian blob: not this machine's kernel
        }
        let hdr_len = u32_at(b, 4)? as usize;
        let section = |off: usize, len: usize| -> Option<&'a [u8]> {
            let start = hdr_len.checked_add(off)?;
            b.get(start..start.checked_add(len)?)
        };
        let tsec = section(u32_at(b, 8)? as usize, u32_at(b, 12)? as usize)?;
        let strs = section(u32_at(b, 16)? as usize, u32_at(b, 20)? as usize)?;
        let mut types = vec![Ty {
            name_off: 0,
            kind: 0,
            vlen: 0,
            kind_flag: false,
            size_or_type: 0,
            data: 0,
        }];
        let mut at = 0usize;
        while at < tsec.len() {
            let info = u32_at(tsec, at + 4)?;
            let ty = Ty {
                name_off: u32_at(tsec, at)?,
                kind: (info >> 24) & 0x1f,
                vlen: info & 0xffff,
                kind_flag: info >> 31 == 1,
                size_or_type: u32_at(tsec, at + 8)?,
                data: at + 12,
            };
            let vlen = ty.vlen as usize;
            let extra = match ty.kind {
                1 | 14 | 17 => 4,             // int, var, decl tag
                3 => 12,                      // array
                4 | 5 | 15 | 19 => 12 * vlen, // struct, union, datasec, enum64
                6 | 13 => 8 * vlen,           // enum, function prototype
                2 | 7..=12 | 16 | 18 => 0,    // pointer, fwd, modifiers, func, float, tag
                _ => return None,             // a kind this reader does not know
            };
            at = ty.data.checked_add(extra)?;
            types.push(ty);
        }
        Some(Btf { types, tsec, strs })
    }

    fn name(&self, off: u32) -> Option<&'a [u8]> {
        let rest = self.strs.get(off as usize..)?;
        let end = rest.iter().position(|&c| c == 0)?;
        Some(&rest[..end])
    }

    /// The struct or union a type id stands for, through typedefs and qualifiers.
    fn composite(&self, mut id: u32) -> Option<&Ty> {
        for _ in 0..32 {
            let t = self.types.get(id as usize)?;
            match t.kind {
                KIND_STRUCT | KIND_UNION => return Some(t),
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return None,
            }
        }
        None
    }

    /// `(byte offset, member type id)` of member `field` of `t`, searching anonymous members.
    fn member(&self, t: &Ty, field: &[u8], depth: u32) -> Option<(u64, u32)> {
        if depth > 8 {
            return None;
        }
        for i in 0..t.vlen as usize {
            let m = t.data + 12 * i;
            let name_off = u32_at(self.tsec, m)?;
            let ty = u32_at(self.tsec, m + 4)?;
            let raw = u32_at(self.tsec, m + 8)?;
            let bits = u64::from(if t.kind_flag { raw & 0xff_ffff } else { raw });
            if name_off == 0 {
                if let Some(inner) = self.composite(ty)
                    && let Some((off, id)) = self.member(inner, field, depth + 1)
                {
                    return Some((bits / 8 + off, id));
                }
            } else if self.name(name_off)? == field {
                // A bit field is not something the probes can read as a whole word.
                let bitfield = t.kind_flag && raw >> 24 != 0;
                return (bits % 8 == 0 && !bitfield).then_some((bits / 8, ty));
            }
        }
        None
    }

    /// The byte offset of `path` (members, outermost first) in struct `root`.
    fn offset_of(&self, root: &str, path: &[&str]) -> Option<u64> {
        let mut t = self
            .types
            .iter()
            .find(|t| t.kind == KIND_STRUCT && self.name(t.name_off) == Some(root.as_bytes()))?;
        let mut total = 0u64;
        for (i, field) in path.iter().enumerate() {
            let (off, id) = self.member(t, field.as_bytes(), 0)?;
            total += off;
            if i + 1 < path.len() {
                t = self.composite(id)?;
            }
        }
        Some(total)
    }
}

/// The byte offset of `path` in kernel struct `root`, from a BTF blob.
pub fn offset_of(btf: &[u8], root: &str, path: &[&str]) -> Option<u64> {
    Btf::parse(btf)?.offset_of(root, path)
}

/// Where the running kernel's `task_struct` keeps `thread.fsbase` (read once; `None` without
/// BTF or on a kernel with no such field, e.g. not x86-64).
pub fn task_fsbase() -> Option<u32> {
    static OFF: OnceLock<Option<u32>> = OnceLock::new();
    *OFF.get_or_init(|| {
        let blob = std::fs::read("/sys/kernel/btf/vmlinux").ok()?;
        u32::try_from(offset_of(&blob, "task_struct", &["thread", "fsbase"])?).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob: `types` as (name, info, size/type, trailing words).
    fn blob(strings: &[&str], types: &[(u32, u32, u32, Vec<u32>)]) -> (Vec<u8>, Vec<u32>) {
        let mut strs = vec![0u8];
        let mut offs = Vec::new();
        for s in strings {
            offs.push(strs.len() as u32);
            strs.extend_from_slice(s.as_bytes());
            strs.push(0);
        }
        let mut tsec = Vec::new();
        for (name, info, st, extra) in types {
            for w in [*name, *info, *st].iter().chain(extra) {
                tsec.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for w in [
            24u32,
            0,
            tsec.len() as u32,
            tsec.len() as u32,
            strs.len() as u32,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend(tsec);
        b.extend(strs);
        (b, offs)
    }

    #[test]
    fn finds_a_member_through_an_anonymous_struct_and_a_typedef() {
        let names = [
            "long",
            "thread_struct",
            "fsbase",
            "sp",
            "task_struct",
            "pid",
            "thread",
            "ts_t",
        ];
        let (_, o) = blob(&names, &[]);
        let st =
            |vlen: u32, kflag: bool| (KIND_STRUCT << 24) | vlen | if kflag { 1 << 31 } else { 0 };
        let types = vec![
            // 1: long
            (o[0], 1 << 24, 8, vec![64]),
            // 2: struct thread_struct { long sp; long fsbase; } (bit offsets 0, 64)
            (o[1], st(2, false), 16, vec![o[3], 1, 0, o[2], 1, 64]),
            // 3: typedef struct thread_struct ts_t
            (o[7], KIND_TYPEDEF << 24, 2, vec![]),
            // 4: anonymous struct { int pid (kind_flag: bitfield size 0, offset 32); ts_t thread @ 128 }
            (0, st(2, true), 32, vec![o[5], 1, 32, o[6], 3, 128]),
            // 5: struct task_struct { long state; <anon struct 4> @ 64 bits }
            (o[4], st(2, false), 48, vec![o[0], 1, 0, 0, 4, 64]),
        ];
        let (b, _) = blob(&names, &types);
        // 8 (anon) + 16 (thread) + 8 (fsbase)
        assert_eq!(
            offset_of(&b, "task_struct", &["thread", "fsbase"]),
            Some(32)
        );
        assert_eq!(offset_of(&b, "task_struct", &["pid"]), Some(12));
        assert_eq!(offset_of(&b, "task_struct", &["thread", "nope"]), None);
        assert_eq!(offset_of(&b, "nope", &["thread"]), None);
        // Cut short anywhere: no answer, no panic.
        for n in 0..b.len() {
            let _ = offset_of(&b[..n], "task_struct", &["thread", "fsbase"]);
        }
        assert_eq!(
            offset_of(&b[..b.len() - 30], "task_struct", &["thread", "fsbase"]),
            None
        );
    }

    #[test]
    fn a_bit_field_is_not_offered_as_a_word() {
        let names = ["long", "s", "flag"];
        let (_, o) = blob(&names, &[]);
        let types = vec![
            (o[0], 1 << 24, 8, vec![64]),
            // struct s { long flag:3 @ bit 0 } (kind_flag set, bitfield size 3)
            (
                o[1],
                (KIND_STRUCT << 24) | 1 | (1 << 31),
                8,
                vec![o[2], 1, 3 << 24],
            ),
        ];
        let (b, _) = blob(&names, &types);
        assert_eq!(offset_of(&b, "s", &["flag"]), None);
    }

    #[test]
    fn this_kernel_has_a_task_fsbase_when_it_has_btf() {
        // On x86-64 with BTF, the offset exists and lies inside task_struct (a few KiB).
        if std::path::Path::new("/sys/kernel/btf/vmlinux").exists() && cfg!(target_arch = "x86_64")
        {
            let off = task_fsbase().expect("task_struct.thread.fsbase in this kernel's BTF");
            assert!((1024..32768).contains(&off), "{off}");
        }
    }
}
