//! A fast, non-cryptographic hasher for integer keys (tgids, handles, pointers): the
//! aggregator's, and the driver handles of every launch that `enrich::driver_objects` checks.
//!
//! The keys come from the kernel and the profiled programs, never from a network peer, so
//! HashDoS resistance buys nothing here and SipHash would cost a large share of the hot path.

use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Multiply-rotate combining with a full-avalanche finaliser (aligned pointers have zero low
/// bits; the finaliser spreads the high bits back down so hash tables index well).
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.add(u64::from_le_bytes(b));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
        self.add(bytes.len() as u64);
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // murmur3's fmix64.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

/// `BuildHasher` for `HashMap<_, _, FastBuild>`.
pub type FastBuild = BuildHasherDefault<FastHasher>;

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastBuild>;
/// A `HashSet` with [`FastHasher`].
pub type FastSet<K> = std::collections::HashSet<K, FastBuild>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn aligned_pointers_spread_over_low_bits() {
        let b = FastBuild::default();
        let mut low = std::collections::HashSet::new();
        for i in 0..256u64 {
            low.insert(b.hash_one(0x7f00_0000_0000 + i * 4096) & 0xff);
        }
        // 256 page-aligned keys land on most of the 256 low-byte values, not a handful.
        assert!(low.len() > 140, "{}", low.len());
    }

    #[test]
    fn bytes_and_words_differ_by_length() {
        let h = |bytes: &[u8]| {
            let mut s = FastHasher::default();
            s.write(bytes);
            s.finish()
        };
        assert_ne!(h(&[1, 0]), h(&[1]));
        assert_ne!(h(&[0; 8]), h(&[]));
    }
}
