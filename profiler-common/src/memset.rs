//! How many bytes a memset sets, from the arguments its probe read.
//!
//! One convention for every memset API, driver and runtime:
//!
//! * `cuMemsetD8/D16/D32_v2(dst, value, N)` and their `Async` variants: `N` elements of 1, 2 or
//!   4 bytes, so `N × element size`;
//! * `cuMemsetD2D8/D2D16/D2D32_v2(dst, pitch, value, Width, Height)`: `Width` is in elements
//!   (16-bit values for D2D16, 32-bit for D2D32, per the CUDA driver API reference), so
//!   `Width × Height × element size` — the bytes written, not the pitch × height the rows span;
//! * `cudaMemset(dst, value, count)`: `count` bytes;
//! * `cudaMemset2D(dst, pitch, value, width, height)`: `width` (in bytes) × `height`;
//! * `cudaMemset3D(pitchedPtr, value, extent)`: `extent.width` (bytes) × `height` × `depth`.

/// Bytes set by a memset of `width` elements per row, `height` rows and `depth` slices of
/// `elem` bytes each (pass 1 for a dimension the API does not have; an `elem` of 0 counts as
/// 1). Wrapping: a nonsense request (which the call refuses) must not trap the probe.
#[inline(always)]
pub const fn bytes(width: u64, height: u64, depth: u64, elem: u64) -> u64 {
    let elem = if elem == 0 { 1 } else { elem };
    width
        .wrapping_mul(height)
        .wrapping_mul(depth)
        .wrapping_mul(elem)
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn driver_1d_counts_elements_times_their_size() {
        assert_eq!(bytes(1000, 1, 1, 1), 1000); // cuMemsetD8_v2(p, v, 1000)
        assert_eq!(bytes(1000, 1, 1, 2), 2000); // cuMemsetD16_v2
        assert_eq!(bytes(1000, 1, 1, 4), 4000); // cuMemsetD32_v2
    }

    #[test]
    fn driver_2d_width_is_in_elements() {
        // cuMemsetD2D16_v2(p, pitch 512, v, Width 100, Height 7): 100 16-bit values per row.
        assert_eq!(bytes(100, 7, 1, 2), 1400);
        assert_eq!(bytes(100, 7, 1, 4), 2800);
        assert_eq!(bytes(100, 7, 1, 1), 700);
    }

    #[test]
    fn runtime_sizes_are_bytes() {
        assert_eq!(bytes(4096, 1, 1, 1), 4096); // cudaMemset
        assert_eq!(bytes(300, 20, 1, 1), 6000); // cudaMemset2D
        assert_eq!(bytes(64, 8, 3, 1), 1536); // cudaMemset3D
    }

    #[test]
    fn degenerate_requests_do_not_trap() {
        assert_eq!(bytes(0, 9, 9, 4), 0);
        assert_eq!(bytes(5, 1, 1, 0), 5);
        assert_eq!(bytes(u64::MAX, 2, 1, 1), u64::MAX.wrapping_mul(2));
    }
}
