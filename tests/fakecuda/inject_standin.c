/* A stand-in for gpuprofd's injection library (libgpuprofd_inject.so, profiler-inject/): the
 * same SONAME, the same three hand-over sites and the same semaphore in `.probes`, as the wire
 * ABI in profiler-common/src/gpu.rs fixes them, and nothing else (no CUPTI). The privileged
 * test gpu_activity.rs drives the sites from inject_workload.c with scripted records, so that
 * the daemon's side (discovery, the reference-counted probes, the records, the model, the
 * report) is checked without CUPTI or a GPU. The real library's own tests live with it. */
#include <stdint.h>

#define EXPORT __attribute__((visibility("default"), noinline))

/* Raised by the kernel (uprobe reference counter) while gpuprofd's probes are attached in
 * this process. In `.probes`, file-backed data: the kernel finds it by file offset. */
__attribute__((visibility("default"), used, section(".probes"))) volatile uint16_t gpuprofd_inject_semaphore = 0;

/* The semaphore as this library sees it, for the test's workload. The workload must not name
 * the variable itself: an executable that refers to a library's variable gets a copy of it in
 * its own .bss (a copy relocation), and every reference, the library's own included, then
 * goes to that copy, which the kernel never raises. (The real library is loaded with dlopen
 * by the CUDA driver, so no executable refers to its semaphore.) */
EXPORT uint16_t gpuprofd_standin_semaphore(void)
{
    return gpuprofd_inject_semaphore;
}

/* The sites do nothing: the probes read their arguments. The empty asm keeps the compiler
 * from merging or dropping them. */
EXPORT void gpuprofd_inject_activity(const void *batch, uint32_t n)
{
    __asm__ volatile("" : : "r"(batch), "r"(n) : "memory");
}

EXPORT void gpuprofd_inject_name(uint32_t id, const char *name)
{
    __asm__ volatile("" : : "r"(id), "r"(name) : "memory");
}

EXPORT void gpuprofd_inject_state(uint32_t state, uint64_t detail)
{
    __asm__ volatile("" : : "r"(state), "r"(detail) : "memory");
}
