//! The hand-over sites and the semaphore (`profiler_common::gpu`): what gpuprofd's probes
//! attach to. Hand-written because their shape is the contract: each site is a naked function
//! whose first instruction is a 5-byte `nopl 0x0(%rax,%rax,1)` (an instruction the kernel's
//! uprobes emulate instead of single-stepping out of line) followed by `ret`, exported, never
//! inlined. Each ends with a different number of `int3` after its `ret` so that no linker's
//! identical-code folding can merge two of them into one address. `tests/tests/inject.rs` and
//! this crate's `sites_shape` test check the bytes in the built file.

use profiler_common::gpu::GpuActivity;

/// `void gpuprofd_inject_activity(const GpuActivity batch[BATCH], uint32_t n)`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn gpuprofd_inject_activity(_batch: *const GpuActivity, _n: u32) {
    core::arch::naked_asm!(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "ret", "int3")
}

/// `void gpuprofd_inject_name(uint32_t id, const char *name)`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn gpuprofd_inject_name(_id: u32, _name: *const core::ffi::c_char) {
    core::arch::naked_asm!(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "ret", "int3", "int3")
}

/// `void gpuprofd_inject_state(uint32_t state, uint64_t detail)`.
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub extern "C" fn gpuprofd_inject_state(_state: u32, _detail: u64) {
    core::arch::naked_asm!(
        ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
        "ret",
        "int3",
        "int3",
        "int3"
    )
}

/// The semaphore. An explicit section makes LLVM emit it as initialised data (PROGBITS, "aw"),
/// never `.bss`: the kernel finds it by its file offset. Only the kernel writes it.
#[unsafe(no_mangle)]
#[unsafe(link_section = ".probes")]
#[used]
pub static mut gpuprofd_inject_semaphore: u16 = 0;

/// The semaphore's current value (a volatile read: the kernel changes it behind our back).
pub fn semaphore() -> u16 {
    // SAFETY: a 2-byte aligned static that lives as long as the library.
    unsafe { core::ptr::read_volatile(&raw const gpuprofd_inject_semaphore) }
}

/// Reports a state change to the state site.
pub fn state(state: u32, detail: u64) {
    gpuprofd_inject_state(state, detail);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code as loaded: a 5-byte nop, `ret`, and a different `int3` tail for each site.
    #[test]
    fn sites_shape() {
        let sites: [(*const u8, usize); 3] = [
            (gpuprofd_inject_activity as *const u8, 1),
            (gpuprofd_inject_name as *const u8, 2),
            (gpuprofd_inject_state as *const u8, 3),
        ];
        for (f, int3s) in sites {
            // SAFETY: reading the first bytes of our own functions' code.
            let code = unsafe { core::slice::from_raw_parts(f, 6 + int3s) };
            let mut want = vec![0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3];
            want.extend(std::iter::repeat_n(0xcc, int3s));
            assert_eq!(code, &want[..]);
        }
        assert_eq!(semaphore(), 0, "nobody listens in a unit test");
    }
}
