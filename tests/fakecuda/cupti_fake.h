/* The fake driver -> fake CUPTI hand-over (tests/fakecuda/cupti.c): what the "GPU" ran, one op
 * per kernel launch, copy or memset. The fake CUPTI registers itself with the driver at its first
 * call that needs it (fakecuda_set_cupti_hook, found with dlsym(RTLD_DEFAULT); a second copy of
 * the library is refused, as the real driver has one CUPTI per process); the driver then asks
 * `enabled` (CUPTI activity kinds, a bit each) before building an op, so a process with no
 * CUPTI, or with the kinds off, pays one load per call. A launch's op names its entry point's
 * callback id: with that id's driver API record enabled, the fake writes one on the launching
 * thread with the kernel's correlation id (a graph launch: an op of kind 0, the API record only). */
#ifndef CUPTI_FAKE_H
#define CUPTI_FAKE_H
#include <stdint.h>

#define FAKECUPTI_KIND_MEMCPY 1u
#define FAKECUPTI_KIND_MEMSET 2u
#define FAKECUPTI_KIND_CONCURRENT_KERNEL 10u
/* set in `enabled` while the driver API record of any callback id is enabled */
#define FAKECUPTI_KIND_DRIVER 4u

struct fakecupti_op {
    uint32_t kind;     /* FAKECUPTI_KIND_* */
    uint8_t copy_kind; /* CUpti_ActivityMemcpyKind */
    uint32_t device;
    uintptr_t stream;  /* the CUstream handle (0: legacy default) */
    const char *name;  /* kernels: the mangled name (the driver keeps it alive) */
    uint64_t bytes;
    uint64_t gpu_ns;   /* how long it runs on the GPU */
    uint32_t cbid;     /* the driver entry point's CUPTI callback id (launches), else 0 */
    uint64_t api_start; /* CLOCK_MONOTONIC ns when the driver call began its work (with cbid) */
};

struct fakecupti_hook {
    const volatile uint32_t *enabled; /* 1u << kind while that kind is enabled */
    void (*record)(const struct fakecupti_op *op);
};
#endif
