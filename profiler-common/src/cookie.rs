//! The 64-bit attach cookie: which API a probe stands for and where its arguments live.
//!
//! One eBPF program serves many symbols (every `_v2`/`_ptsz`/`_ptds` variant, runtime and driver
//! copies, …); the daemon packs, per attached symbol, the API id and the argument positions into
//! the cookie, and the program reads them back with `bpf_get_attach_cookie`.
//!
//! Layout: `api:16 | a:4 b:4 c:4 d:4 e:4 | _:4 | p:8 | q:8 | flags:8` (low to high bits).
//! `a`..`e` are argument indices (0..=5 registers, 6.. the stack), [`NONE`] when absent.

/// Argument index meaning "this API has no such argument".
pub const NONE: u8 = 15;

/// Probe is on a runtime (`libcudart`) function.
pub const F_RUNTIME: u8 = 1 << 0;
/// A return probe is attached too; the entry saves state for it.
pub const F_RET: u8 = 1 << 1;
/// Stream-ordered call: returns before the GPU work is done.
pub const F_ASYNC: u8 = 1 << 2;
/// Copy: bytes = arg[c] × arg[c+1] (cudaMemcpy2D width × height).
pub const F_2D: u8 = 1 << 3;
/// Copy: direction comes from the `cudaMemcpyKind` at arg `e`, not from `p`.
pub const F_KIND_ARG: u8 = 1 << 4;
/// Sync: GPU-side wait (cuStreamWaitEvent), CPU does not block.
pub const F_GPU_SIDE: u8 = 1 << 5;
/// Launch: cooperative.
pub const F_COOP: u8 = 1 << 6;

/// Decoded cookie fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cookie {
    pub api: u16,
    pub a: u8,
    pub b: u8,
    pub c: u8,
    pub d: u8,
    pub e: u8,
    /// Program-specific: copy direction, memory kind, name source.
    pub p: u8,
    /// Program-specific: memory operation; a memset's element size in bytes.
    pub q: u8,
    pub flags: u8,
}

impl Cookie {
    /// A cookie for `api` with no arguments and no flags.
    pub const fn new(api: u16) -> Self {
        Cookie {
            api,
            a: NONE,
            b: NONE,
            c: NONE,
            d: NONE,
            e: NONE,
            p: 0,
            q: 0,
            flags: 0,
        }
    }

    #[inline(always)]
    pub const fn pack(&self) -> u64 {
        (self.api as u64)
            | ((self.a as u64 & 0xf) << 16)
            | ((self.b as u64 & 0xf) << 20)
            | ((self.c as u64 & 0xf) << 24)
            | ((self.d as u64 & 0xf) << 28)
            | ((self.e as u64 & 0xf) << 32)
            | ((self.p as u64) << 40)
            | ((self.q as u64) << 48)
            | ((self.flags as u64) << 56)
    }

    #[inline(always)]
    pub const fn unpack(v: u64) -> Self {
        Cookie {
            api: v as u16,
            a: ((v >> 16) & 0xf) as u8,
            b: ((v >> 20) & 0xf) as u8,
            c: ((v >> 24) & 0xf) as u8,
            d: ((v >> 28) & 0xf) as u8,
            e: ((v >> 32) & 0xf) as u8,
            p: (v >> 40) as u8,
            q: (v >> 48) as u8,
            flags: (v >> 56) as u8,
        }
    }

    #[inline(always)]
    pub const fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Accessors on a packed cookie without unpacking every field (for the eBPF side).
#[inline(always)]
pub const fn api_of(v: u64) -> u32 {
    (v & 0xffff) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_field() {
        let c = Cookie {
            api: 0xbeef,
            a: 0,
            b: 2,
            c: 7,
            d: NONE,
            e: 6,
            p: 5,
            q: 3,
            flags: F_RET | F_2D,
        };
        assert_eq!(Cookie::unpack(c.pack()), c);
        assert_eq!(api_of(c.pack()), 0xbeef);
        assert!(Cookie::unpack(c.pack()).has(F_2D));
        assert!(!Cookie::unpack(c.pack()).has(F_ASYNC));
    }
}
