/* Fake libcuda.so.1: hidden C implementations behind the asm trampolines in
 * driver_tramp.S.  Deterministic: "device memory" is host memory, launches do
 * no work, synchronisation sleeps for a scripted delay.  Built with
 * -fvisibility=hidden; only the trampolines and fakecuda_* are exported. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cuda_fake.h"
#include "cupti_fake.h"

#define EXPORT __attribute__((visibility("default")))
#define IMPL __attribute__((visibility("hidden"), used))
#define ONE_GIB (1ull << 30)

/* ------------------------------------------------------------ symbols */
enum {
#define X(n) IDX_##n,
#include "driver_syms.def"
#undef X
    NSYMS
};
static const char *const sym_names[NSYMS] = {
#define X(n) #n,
#include "driver_syms.def"
#undef X
};
static unsigned long long g_calls[NSYMS];
static unsigned long long g_digest;
#define DIG(a, b) FAKE_DIGEST(g_digest, a, b)
#define CNT(n) (__atomic_fetch_add(&g_calls[IDX_##n], 1, __ATOMIC_RELAXED), DIG(IDX_##n + 1, 0))
EXPORT unsigned long long fakecuda_digest(void) { return __atomic_load_n(&g_digest, __ATOMIC_RELAXED); }

/* checked by every trampoline: cmpl $0x321cba00, g_deinit(%rip) */
int g_deinit __attribute__((visibility("hidden"))) = 0;

static unsigned g_sync_delay_us;

static int sym_index(const char *name) {
    for (int i = 0; i < NSYMS; i++)
        if (strcmp(sym_names[i], name) == 0) return i;
    return -1;
}

EXPORT unsigned long long fakecuda_calls(const char *impl_name) {
    int i = impl_name ? sym_index(impl_name) : -1;
    return i < 0 ? 0 : __atomic_load_n(&g_calls[i], __ATOMIC_RELAXED);
}
EXPORT void fakecuda_set_sync_delay_us(unsigned us) { __atomic_store_n(&g_sync_delay_us, us, __ATOMIC_RELAXED); }
EXPORT void fakecuda_set_deinitialized(int on) {
    __atomic_store_n(&g_deinit, on ? 0x321cba00 : 0, __ATOMIC_RELAXED);
}

static void sync_wait(void) {
    unsigned us = __atomic_load_n(&g_sync_delay_us, __ATOMIC_RELAXED);
    if (!us) return;
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* ------------------------------------------------------ handle registry */
enum otype { O_NONE, O_DEVMEM, O_DEVMEM32, O_HOSTMEM, O_MODULE, O_FUNC, O_KERNEL, O_STREAM, O_EVENT, O_GRAPHEXEC,
             O_VMM };
struct reg_ent {
    uintptr_t key;
    int type;
    size_t size;
    struct reg_ent *next;
};
#define NBUCKETS 4096
static struct reg_ent *g_buckets[NBUCKETS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned bucket_of(uintptr_t k) { return (unsigned)((k >> 4) * 2654435761u) % NBUCKETS; }
static void reg_add(uintptr_t k, int type, size_t size) {
    struct reg_ent *e = malloc(sizeof *e);
    if (!e) abort();
    e->key = k, e->type = type, e->size = size;
    pthread_mutex_lock(&g_mu);
    unsigned b = bucket_of(k);
    e->next = g_buckets[b], g_buckets[b] = e;
    pthread_mutex_unlock(&g_mu);
}
static int reg_type(uintptr_t k) {
    int t = O_NONE;
    pthread_mutex_lock(&g_mu);
    for (struct reg_ent *e = g_buckets[bucket_of(k)]; e; e = e->next)
        if (e->key == k) {
            t = e->type;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    return t;
}
/* removes k if it is registered with type t; returns its size+1 (0: absent) */
static size_t reg_del(uintptr_t k, int t) {
    size_t r = 0;
    pthread_mutex_lock(&g_mu);
    for (struct reg_ent **p = &g_buckets[bucket_of(k)]; *p; p = &(*p)->next)
        if ((*p)->key == k && (*p)->type == t) {
            struct reg_ent *e = *p;
            *p = e->next;
            r = e->size + 1;
            free(e);
            break;
        }
    pthread_mutex_unlock(&g_mu);
    return r;
}
static int stream_ok(CUstream s) {
    return (uintptr_t)s <= 2 || reg_type((uintptr_t)s) == O_STREAM;
}

/* ------------------------------------------------- modules and kernels */
struct fmod;
/* The name pointer at +8 of both objects, as 550.163.01's cuFuncGetName/cuKernelGetName read it
 * (docs/ARCHITECTURE.md, "Names from the driver's objects"); gpuprofd learns it, assumes nothing. */
struct CUfunc_st {
    struct fmod *mod;
    const char *name; /* NULL for an image of FAKE_FATBIN_MAGIC_ELSEWHERE: mod->names[index] */
    unsigned index;
};
struct CUkern_st {
    struct fmod *lib;
    const char *name;
    struct CUfunc_st *fn; /* from cuKernelGetFunction, created lazily */
};
_Static_assert(__builtin_offsetof(struct CUfunc_st, name) == 8, "name at +8, as the real driver");
_Static_assert(__builtin_offsetof(struct CUkern_st, name) == 8, "name at +8, as the real driver");
struct fmod {
    unsigned n;
    int is_lib;
    int elsewhere; /* FAKE_FATBIN_MAGIC_ELSEWHERE */
    char **names;
    struct CUfunc_st **fns;  /* modules */
    struct CUkern_st **kerns; /* libraries */
};

static CUresult load_image(struct fmod **out, const void *image, int is_lib) {
    const struct fake_fatbin *fb = image;
    if (!out || !fb) return CUDA_ERROR_INVALID_VALUE;
    if (fb->magic != FAKE_FATBIN_MAGIC && fb->magic != FAKE_FATBIN_MAGIC_ELSEWHERE) return CUDA_ERROR_INVALID_IMAGE;
    struct fmod *m = calloc(1, sizeof *m);
    m->n = fb->count, m->is_lib = is_lib, m->elsewhere = fb->magic == FAKE_FATBIN_MAGIC_ELSEWHERE;
    m->names = calloc(m->n + 1, sizeof(char *));
    m->fns = calloc(m->n + 1, sizeof(void *));
    m->kerns = calloc(m->n + 1, sizeof(void *));
    for (unsigned i = 0; i < m->n; i++) m->names[i] = strdup(fb->names[i]);
    reg_add((uintptr_t)m, O_MODULE, is_lib);
    *out = m;
    return CUDA_SUCCESS;
}
static int find_name(struct fmod *m, const char *name) {
    for (unsigned i = 0; i < m->n; i++)
        if (strcmp(m->names[i], name) == 0) return (int)i;
    return -1;
}
static struct fmod *as_mod(const void *h, int is_lib) {
    struct fmod *m = (struct fmod *)h;
    if (!m || reg_type((uintptr_t)m) != O_MODULE || m->is_lib != is_lib) return NULL;
    return m;
}

IMPL CUresult impl_cuModuleLoadData(CUmodule *module, const void *image) {
    CNT(cuModuleLoadData);
    return load_image((struct fmod **)module, image, 0);
}
IMPL CUresult impl_cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jo, void **jov,
                                     unsigned njo, CUlibraryOption *lo, void **lov, unsigned nlo) {
    (void)jo, (void)jov, (void)njo, (void)lo, (void)lov, (void)nlo;
    CNT(cuLibraryLoadData);
    return load_image((struct fmod **)library, code, 1);
}
IMPL CUresult impl_cuModuleUnload(CUmodule hmod) {
    CNT(cuModuleUnload);
    struct fmod *m = as_mod(hmod, 0);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_mu); /* fns array is guarded by g_mu too */
    struct CUfunc_st **fns = m->fns;
    pthread_mutex_unlock(&g_mu);
    for (unsigned i = 0; i < m->n; i++)
        if (fns[i]) reg_del((uintptr_t)fns[i], O_FUNC);
    reg_del((uintptr_t)m, O_MODULE);
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    CNT(cuModuleGetFunction);
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    struct fmod *m = as_mod(hmod, 0);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    int i = find_name(m, name);
    if (i < 0) return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&g_mu);
    struct CUfunc_st *f = m->fns[i];
    int fresh = 0;
    if (!f) {
        f = m->fns[i] = calloc(1, sizeof *f);
        f->name = m->elsewhere ? NULL : m->names[i], f->mod = m, f->index = (unsigned)i, fresh = 1;
    }
    pthread_mutex_unlock(&g_mu);
    if (fresh) reg_add((uintptr_t)f, O_FUNC, 0);
    *hfunc = f;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
    CNT(cuLibraryGetKernel);
    if (!pKernel || !name) return CUDA_ERROR_INVALID_VALUE;
    struct fmod *m = as_mod(library, 1);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    int i = find_name(m, name);
    if (i < 0) return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&g_mu);
    struct CUkern_st *k = m->kerns[i];
    int fresh = 0;
    if (!k) {
        k = m->kerns[i] = calloc(1, sizeof *k);
        k->name = m->names[i], k->lib = m, fresh = 1;
    }
    pthread_mutex_unlock(&g_mu);
    if (fresh) reg_add((uintptr_t)k, O_KERNEL, 0);
    *pKernel = k;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
    CNT(cuKernelGetFunction);
    if (!pFunc) return CUDA_ERROR_INVALID_VALUE;
    if (!kernel || reg_type((uintptr_t)kernel) != O_KERNEL) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&g_mu);
    struct CUfunc_st *f = kernel->fn;
    int fresh = 0;
    if (!f) {
        f = kernel->fn = calloc(1, sizeof *f);
        f->name = kernel->name, f->mod = kernel->lib, fresh = 1;
    }
    pthread_mutex_unlock(&g_mu);
    if (fresh) reg_add((uintptr_t)f, O_FUNC, 0);
    *pFunc = f;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuFuncGetName(const char **name, CUfunction hfunc) {
    CNT(cuFuncGetName);
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    if (!hfunc || reg_type((uintptr_t)hfunc) != O_FUNC) return CUDA_ERROR_INVALID_HANDLE;
    *name = hfunc->name ? hfunc->name : hfunc->mod->names[hfunc->index];
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuKernelGetName(const char **name, CUkernel hfunc) {
    CNT(cuKernelGetName);
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    if (!hfunc || reg_type((uintptr_t)hfunc) != O_KERNEL) return CUDA_ERROR_INVALID_HANDLE;
    *name = hfunc->name;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------- init / context */
/* Devices: $FAKECUDA_DEVICES of them (1 to FAKE_MAX_DEVICES, default 1), each with its primary
 * context; contexts made by cuCtxCreate are allocated. Each thread has its own context stack
 * (cuCtxSetCurrent replaces its top, Push/Pop move it), as the real driver keeps it. */
#define FAKE_MAX_DEVICES 8
#define FAKE_CTX_STACK 8
struct CUctx_st {
    CUdevice dev;
    int primary;
};
static struct CUctx_st g_primary_ctx[FAKE_MAX_DEVICES];
static __thread CUcontext t_ctx_stack[FAKE_CTX_STACK];
static __thread int t_ctx_depth; /* entries in use; the current context is the top */
#define t_current_ctx (t_ctx_depth ? t_ctx_stack[t_ctx_depth - 1] : NULL)

static int device_count(void) {
    const char *e = getenv("FAKECUDA_DEVICES");
    int n = e ? atoi(e) : 1;
    return n < 1 ? 1 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : n;
}
static int ctx_valid(CUcontext c) {
    if (!c) return 0;
    for (int i = 0; i < FAKE_MAX_DEVICES; i++)
        if (c == &g_primary_ctx[i]) return i < device_count();
    return !c->primary && c->dev >= 0 && c->dev < device_count();
}

/* As the real driver: the first cuInit loads $CUDA_INJECTION64_PATH and calls its
 * InitializeInjection once per process; a path that does not load, or has no such function, is
 * ignored. */
static void load_injection(void) {
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path || !*path) return;
    void *h = dlopen(path, RTLD_NOW);
    if (!h) return;
    int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    if (init) init();
}
IMPL CUresult impl_cuInit(unsigned flags) {
    CNT(cuInit);
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_injection);
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuDriverGetVersion(int *v) {
    CNT(cuDriverGetVersion);
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 12090;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuDeviceGet(CUdevice *d, int ordinal) {
    CNT(cuDeviceGet);
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuDeviceGetCount(int *c) {
    CNT(cuDeviceGetCount);
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    *c = device_count();
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    CNT(cuDevicePrimaryCtxRetain);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    g_primary_ctx[dev].dev = dev;
    g_primary_ctx[dev].primary = 1;
    *pctx = &g_primary_ctx[dev];
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuCtxSetCurrent(CUcontext ctx) {
    CNT(cuCtxSetCurrent);
    if (ctx && !ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx) {
        if (t_ctx_depth) t_ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!t_ctx_depth) t_ctx_depth = 1;
    t_ctx_stack[t_ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuCtxPushCurrent_v2(CUcontext ctx) {
    CNT(cuCtxPushCurrent_v2);
    if (!ctx_valid(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_ctx_depth == FAKE_CTX_STACK) return CUDA_ERROR_INVALID_VALUE;
    t_ctx_stack[t_ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuCtxPopCurrent_v2(CUcontext *pctx) {
    CNT(cuCtxPopCurrent_v2);
    if (!t_ctx_depth) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = t_ctx_stack[--t_ctx_depth];
    if (pctx) *pctx = c;
    return CUDA_SUCCESS;
}
/* cuCtxCreate_v2(pctx, flags, dev): a new context on dev, pushed on the thread's stack */
IMPL CUresult impl_cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev) {
    CNT(cuCtxCreate_v2);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    if (t_ctx_depth == FAKE_CTX_STACK) return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->dev = dev;
    t_ctx_stack[t_ctx_depth++] = c;
    *pctx = c;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuCtxGetDevice(CUdevice *dev) {
    CNT(cuCtxGetDevice);
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    CUcontext c = t_current_ctx;
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = c->dev;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuCtxGetCurrent(CUcontext *pctx) {
    CNT(cuCtxGetCurrent);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = t_current_ctx;
    return CUDA_SUCCESS;
}

/* The private table's one entry: the calling thread's current context's device. Not exported
 * (no trampoline), so no probe sees it, as with the real driver's export tables. */
static CUresult private_current_device(CUdevice *dev) {
    CUcontext c = t_current_ctx;
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = c->dev;
    return CUDA_SUCCESS;
}
static const struct fake_ctx_table g_ctx_table = {sizeof g_ctx_table, private_current_device};
IMPL CUresult impl_cuGetExportTable(const void **pp, const CUuuid *id) {
    CNT(cuGetExportTable);
    if (!pp || !id) return CUDA_ERROR_INVALID_VALUE;
    if (memcmp(id->bytes, FAKE_CTX_TABLE_ID, sizeof id->bytes)) return CUDA_ERROR_INVALID_VALUE;
    *pp = &g_ctx_table;
    return CUDA_SUCCESS;
}

/* -------------------------------------------------------- proc address */
/* addresses of the EXPORTED trampolines (through the GOT, like dlsym) */
static void *const sym_addrs[NSYMS] = {
#define X(n) (void *)&n,
#include "driver_syms.def"
#undef X
};

static int try_name(const char *base, const char *suffix) {
    char buf[256];
    if ((size_t)snprintf(buf, sizeof buf, "%s%s", base, suffix) >= sizeof buf) return -1;
    return sym_index(buf);
}
static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, int *status) {
    (void)cudaVersion;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    static const char *const pt_suffixes[] = {"_v2_ptds", "_v2_ptsz", "_ptds", "_ptsz"};
    static const char *const suffixes[] = {"_v2", ""};
    int i = -1;
    if (flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        for (unsigned k = 0; i < 0 && k < 4; k++) i = try_name(symbol, pt_suffixes[k]);
    for (unsigned k = 0; i < 0 && k < 2; k++) i = try_name(symbol, suffixes[k]);
    if (i < 0) {
        *pfn = NULL;
        if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = sym_addrs[i];
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    CNT(cuGetProcAddress);
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}
IMPL CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus) {
    CNT(cuGetProcAddress_v2);
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

/* ------------------------------------------------------- GPU activity */
/* The fake CUPTI (cupti.c) registers itself at its first call that needs the driver; each
 * kernel, copy and memset then becomes an op with the scripted GPU duration
 * (fakecuda_set_gpu_ns), if its kind is enabled. Without the fake CUPTI: one load per call.
 * One CUPTI per process, as the real driver's profiling interface has one owner: a second copy
 * of the library (another file, loaded beside the first) is refused (returns 1). */
static const struct fakecupti_hook *volatile g_cupti;
static uint64_t g_gpu_ns[3] = {2000, 1000, 500}; /* kernel, memcpy, memset */
EXPORT int fakecuda_set_cupti_hook(const struct fakecupti_hook *h) {
    const struct fakecupti_hook *none = NULL;
    if (__atomic_compare_exchange_n(&g_cupti, &none, h, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 0;
    return none == h ? 0 : 1;
}
/* which: 0 kernels, 1 copies, 2 memsets */
EXPORT void fakecuda_set_gpu_ns(unsigned which, unsigned long long ns) {
    if (which < 3) __atomic_store_n(&g_gpu_ns[which], ns, __ATOMIC_RELAXED);
}
static const struct fakecupti_hook *cupti_wants(uint32_t kind) {
    const struct fakecupti_hook *h = g_cupti;
    return h && (*h->enabled & (1u << kind)) ? h : NULL;
}
static uint32_t current_device(void) {
    CUcontext c = t_current_ctx;
    return c ? (uint32_t)c->dev : 0;
}
static void gpu_op(const struct fakecupti_hook *h, uint32_t kind, uintptr_t stream, const char *name, uint64_t bytes,
                   uint8_t copy_kind) {
    unsigned which = kind == FAKECUPTI_KIND_CONCURRENT_KERNEL ? 0 : kind == FAKECUPTI_KIND_MEMCPY ? 1 : 2;
    struct fakecupti_op op = {kind, copy_kind, current_device(), stream, name, bytes,
                              __atomic_load_n(&g_gpu_ns[which], __ATOMIC_RELAXED), 0, 0};
    h->record(&op);
}
static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* a launch's hook: kernel records or the launch's driver API record wanted */
static const struct fakecupti_hook *cupti_wants_launch(void) {
    const struct fakecupti_hook *h = g_cupti;
    return h && (*h->enabled & (1u << FAKECUPTI_KIND_CONCURRENT_KERNEL | 1u << FAKECUPTI_KIND_DRIVER)) ? h : NULL;
}

/* -------------------------------------------------------------- launch */
/* cbid: the entry point's CUPTI driver callback id (cupti_driver_cbid.h) */
static CUresult launch_check(CUfunction f, CUstream s, uint32_t cbid) {
    uint64_t t0 = mono_ns();
    int t = f ? reg_type((uintptr_t)f) : O_NONE;
    if (t != O_FUNC && t != O_KERNEL) return CUDA_ERROR_INVALID_HANDLE;
    if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    const struct fakecupti_hook *h = cupti_wants_launch();
    if (h) {
        const char *name = t == O_KERNEL ? ((CUkernel)f)->name : f->name ? f->name : f->mod->names[f->index];
        struct fakecupti_op op = {FAKECUPTI_KIND_CONCURRENT_KERNEL, 0, current_device(), (uintptr_t)s, name, 0,
                                  __atomic_load_n(&g_gpu_ns[0], __ATOMIC_RELAXED), cbid, t0};
        h->record(&op);
    }
    return CUDA_SUCCESS;
}
#define LAUNCH_ARG_NAMES f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream
/* what a launch was given, stack-passed arguments included, goes into the digest */
#define LAUNCH_UNUSED                                                                                     \
    DIG(gridDimX | (unsigned long long)gridDimY << 21 | (unsigned long long)gridDimZ << 42,               \
        blockDimX | (unsigned long long)blockDimY << 21 | (unsigned long long)blockDimZ << 42),           \
        DIG(sharedMemBytes, kernelParams != NULL)

IMPL CUresult impl_cuLaunchKernel(FAKE_LAUNCH_ARGS, void **extra) {
    CNT(cuLaunchKernel);
    LAUNCH_UNUSED, (void)extra;
    return launch_check(f, hStream, 307);
}
IMPL CUresult impl_cuLaunchKernel_ptsz(FAKE_LAUNCH_ARGS, void **extra) {
    CNT(cuLaunchKernel_ptsz);
    LAUNCH_UNUSED, (void)extra;
    return launch_check(f, hStream, 442);
}
IMPL CUresult impl_cuLaunchCooperativeKernel(FAKE_LAUNCH_ARGS) {
    CNT(cuLaunchCooperativeKernel);
    LAUNCH_UNUSED;
    return launch_check(f, hStream, 477);
}
IMPL CUresult impl_cuLaunchCooperativeKernel_ptsz(FAKE_LAUNCH_ARGS) {
    CNT(cuLaunchCooperativeKernel_ptsz);
    LAUNCH_UNUSED;
    return launch_check(f, hStream, 478);
}
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, uint32_t cbid) {
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    DIG(c->gridDimX | (unsigned long long)c->gridDimY << 21 | (unsigned long long)c->gridDimZ << 42,
        c->blockDimX | (unsigned long long)c->blockDimY << 21 | (unsigned long long)c->blockDimZ << 42);
    DIG(c->sharedMemBytes, c->numAttrs);
    if (c->numAttrs && !c->attrs) return CUDA_ERROR_INVALID_VALUE;
    return launch_check(f, c->hStream, cbid);
}
IMPL CUresult impl_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kp, void **extra) {
    CNT(cuLaunchKernelEx);
    (void)kp, (void)extra;
    return launch_ex(config, f, 652);
}
IMPL CUresult impl_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kp, void **extra) {
    CNT(cuLaunchKernelEx_ptsz);
    (void)kp, (void)extra;
    return launch_ex(config, f, 653);
}
IMPL CUresult impl_cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags) {
    CNT(cuGraphInstantiate);
    (void)hGraph, (void)flags;
    if (!phGraphExec) return CUDA_ERROR_INVALID_VALUE;
    void *g = calloc(1, 16);
    reg_add((uintptr_t)g, O_GRAPHEXEC, 0);
    *phGraphExec = g;
    return CUDA_SUCCESS;
}
/* The fake graph runs no kernel: its launch is a driver API record only (op kind 0). */
static CUresult graph_launch(CUgraphExec g, CUstream s, uint32_t cbid) {
    uint64_t t0 = mono_ns();
    if (!g || reg_type((uintptr_t)g) != O_GRAPHEXEC || !stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    const struct fakecupti_hook *h = g_cupti;
    if (h && (*h->enabled & (1u << FAKECUPTI_KIND_DRIVER))) {
        struct fakecupti_op op = {0, 0, current_device(), (uintptr_t)s, NULL, 0, 0, cbid, t0};
        h->record(&op);
    }
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuGraphLaunch(CUgraphExec g, CUstream s) {
    CNT(cuGraphLaunch);
    return graph_launch(g, s, 514);
}
IMPL CUresult impl_cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) {
    CNT(cuGraphLaunch_ptsz);
    return graph_launch(g, s, 515);
}

/* -------------------------------------------------------------- memcpy */
/* CUpti_ActivityMemcpyKind from what the pointers are (device memory: the driver's allocations) */
static uint8_t copy_kind(uintptr_t dst, uintptr_t src) {
    int d = reg_type(dst) == O_DEVMEM, s = reg_type(src) == O_DEVMEM;
    return d && s ? 8 /* DTOD */ : d ? 1 /* HTOD */ : s ? 2 /* DTOH */ : 9 /* HTOH */;
}
static CUresult copy_on(uintptr_t dst, uintptr_t src, size_t n, uintptr_t stream) {
    if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
    if (n) memmove((void *)dst, (const void *)src, n);
    DIG(n, fake_bytes_hash((const void *)dst, n));
    const struct fakecupti_hook *h = cupti_wants(FAKECUPTI_KIND_MEMCPY);
    if (h) gpu_op(h, FAKECUPTI_KIND_MEMCPY, stream, NULL, n, copy_kind(dst, src));
    return CUDA_SUCCESS;
}
static CUresult copy(uintptr_t dst, uintptr_t src, size_t n) { return copy_on(dst, src, n, 0); }
static CUresult copy_async(uintptr_t dst, uintptr_t src, size_t n, CUstream s) {
    if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    return copy_on(dst, src, n, (uintptr_t)s);
}
#define U(x) ((uintptr_t)(x))
IMPL CUresult impl_cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { CNT(cuMemcpy); return copy(d, s, n); }
IMPL CUresult impl_cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { CNT(cuMemcpy_ptds); return copy(d, s, n); }
IMPL CUresult impl_cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    CNT(cuMemcpyAsync);
    return copy_async(d, s, n, st);
}
IMPL CUresult impl_cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    CNT(cuMemcpyAsync_ptsz);
    return copy_async(d, s, n, st);
}
IMPL CUresult impl_cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { CNT(cuMemcpyHtoD_v2); return copy(d, U(s), n); }
IMPL CUresult impl_cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) {
    CNT(cuMemcpyHtoD_v2_ptds);
    return copy(d, U(s), n);
}
IMPL CUresult impl_cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { CNT(cuMemcpyDtoH_v2); return copy(U(d), s, n); }
IMPL CUresult impl_cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) {
    CNT(cuMemcpyDtoH_v2_ptds);
    return copy(U(d), s, n);
}
IMPL CUresult impl_cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { CNT(cuMemcpyDtoD_v2); return copy(d, s, n); }
IMPL CUresult impl_cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) {
    CNT(cuMemcpyDtoD_v2_ptds);
    return copy(d, s, n);
}
IMPL CUresult impl_cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
    CNT(cuMemcpyHtoDAsync_v2);
    return copy_async(d, U(s), n, st);
}
IMPL CUresult impl_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream st) {
    CNT(cuMemcpyHtoDAsync_v2_ptsz);
    return copy_async(d, U(s), n, st);
}
IMPL CUresult impl_cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
    CNT(cuMemcpyDtoHAsync_v2);
    return copy_async(U(d), s, n, st);
}
IMPL CUresult impl_cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream st) {
    CNT(cuMemcpyDtoHAsync_v2_ptsz);
    return copy_async(U(d), s, n, st);
}
IMPL CUresult impl_cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    CNT(cuMemcpyDtoDAsync_v2);
    return copy_async(d, s, n, st);
}
IMPL CUresult impl_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    CNT(cuMemcpyDtoDAsync_v2_ptsz);
    return copy_async(d, s, n, st);
}
static CUresult copy2d(const CUDA_MEMCPY2D *p) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType < 1 || p->srcMemoryType > 4 || p->dstMemoryType < 1 || p->dstMemoryType > 4 ||
        p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcPitch < p->srcXInBytes + p->WidthInBytes && p->Height > 1) return CUDA_ERROR_INVALID_VALUE;
    if (p->dstPitch < p->dstXInBytes + p->WidthInBytes && p->Height > 1) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t s = p->srcMemoryType == CU_MEMORYTYPE_HOST ? U(p->srcHost) : p->srcDevice;
    uintptr_t d = p->dstMemoryType == CU_MEMORYTYPE_HOST ? U(p->dstHost) : p->dstDevice;
    if (p->WidthInBytes && p->Height && (!s || !d)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t y = 0; y < p->Height; y++)
        memmove((void *)(d + (p->dstY + y) * p->dstPitch + p->dstXInBytes),
                (const void *)(s + (p->srcY + y) * p->srcPitch + p->srcXInBytes), p->WidthInBytes);
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { CNT(cuMemcpy2D_v2); return copy2d(p); }
IMPL CUresult impl_cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { CNT(cuMemcpy2D_v2_ptds); return copy2d(p); }
IMPL CUresult impl_cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream st) {
    CNT(cuMemcpy2DAsync_v2);
    return stream_ok(st) ? copy2d(p) : CUDA_ERROR_INVALID_HANDLE;
}
IMPL CUresult impl_cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream st) {
    CNT(cuMemcpy2DAsync_v2_ptsz);
    return stream_ok(st) ? copy2d(p) : CUDA_ERROR_INVALID_HANDLE;
}
static CUresult copy_peer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st) {
    if (!ctx_valid(dc) || !ctx_valid(sc)) return CUDA_ERROR_INVALID_CONTEXT;
    return copy_async(d, s, n, st);
}
IMPL CUresult impl_cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n) {
    CNT(cuMemcpyPeer);
    return copy_peer(d, dc, s, sc, n, NULL);
}
IMPL CUresult impl_cuMemcpyPeer_ptds(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n) {
    CNT(cuMemcpyPeer_ptds);
    return copy_peer(d, dc, s, sc, n, NULL);
}
IMPL CUresult impl_cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                                     CUstream st) {
    CNT(cuMemcpyPeerAsync);
    return copy_peer(d, dc, s, sc, n, st);
}
IMPL CUresult impl_cuMemcpyPeerAsync_ptsz(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                                          CUstream st) {
    CNT(cuMemcpyPeerAsync_ptsz);
    return copy_peer(d, dc, s, sc, n, st);
}

/* -------------------------------------------------------------- memset */
/* w elements of esz bytes per row, h rows pitch bytes apart (h = 1, pitch unused: 1D).
 * Alignment as the real driver asks it: the pointer (and a 2D pitch) a multiple of esz. */
static CUresult set_mem_on(CUdeviceptr d, size_t pitch, unsigned v, unsigned esz, size_t w, size_t h,
                           uintptr_t stream);
static CUresult set_mem(CUdeviceptr d, size_t pitch, unsigned v, unsigned esz, size_t w, size_t h) {
    return set_mem_on(d, pitch, v, esz, w, h, 0);
}
static CUresult set_mem_on(CUdeviceptr d, size_t pitch, unsigned v, unsigned esz, size_t w, size_t h,
                           uintptr_t stream) {
    if (w && h && !d) return CUDA_ERROR_INVALID_VALUE;
    if (d % esz || (h > 1 && (pitch % esz || pitch < w * esz))) return CUDA_ERROR_INVALID_VALUE;
    for (size_t y = 0; y < h; y++) {
        unsigned char *row = (unsigned char *)(uintptr_t)(d + y * pitch);
        for (size_t x = 0; x < w; x++) {
            if (esz == 1) row[x] = (unsigned char)v;
            else if (esz == 2) ((unsigned short *)row)[x] = (unsigned short)v;
            else ((unsigned *)row)[x] = v;
        }
    }
    DIG(w * h * esz, h ? fake_bytes_hash((const void *)(uintptr_t)d, w * esz) : 0);
    const struct fakecupti_hook *hk = cupti_wants(FAKECUPTI_KIND_MEMSET);
    if (hk) gpu_op(hk, FAKECUPTI_KIND_MEMSET, stream, NULL, (uint64_t)w * h * esz, 0);
    return CUDA_SUCCESS;
}
static CUresult set_mem_async(CUdeviceptr d, size_t pitch, unsigned v, unsigned esz, size_t w, size_t h,
                              CUstream s) {
    if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    return set_mem_on(d, pitch, v, esz, w, h, (uintptr_t)s);
}
/* The real prototypes: cuMemsetD<bits>(dst, value, N), cuMemsetD2D<bits>(dst, pitch, value,
 * Width, Height) with Width in elements, and their Async variants with a stream last. */
#define MEMSET_1D(name, vty, esz) \
    IMPL CUresult impl_##name(CUdeviceptr d, vty v, size_t n) { CNT(name); return set_mem(d, 0, v, esz, n, 1); }
#define MEMSET_1D_ASYNC(name, vty, esz)                                         \
    IMPL CUresult impl_##name(CUdeviceptr d, vty v, size_t n, CUstream st) {    \
        CNT(name);                                                              \
        return set_mem_async(d, 0, v, esz, n, 1, st);                           \
    }
#define MEMSET_2D(name, vty, esz)                                                         \
    IMPL CUresult impl_##name(CUdeviceptr d, size_t pitch, vty v, size_t w, size_t h) {   \
        CNT(name);                                                                        \
        return set_mem(d, pitch, v, esz, w, h);                                           \
    }
#define MEMSET_2D_ASYNC(name, vty, esz)                                                                  \
    IMPL CUresult impl_##name(CUdeviceptr d, size_t pitch, vty v, size_t w, size_t h, CUstream st) {     \
        CNT(name);                                                                                       \
        return set_mem_async(d, pitch, v, esz, w, h, st);                                                \
    }
#define MEMSET_FAMILY(bits, vty, esz)                                                                    \
    MEMSET_1D(cuMemsetD##bits##_v2, vty, esz) MEMSET_1D(cuMemsetD##bits##_v2_ptds, vty, esz)             \
    MEMSET_1D_ASYNC(cuMemsetD##bits##Async, vty, esz) MEMSET_1D_ASYNC(cuMemsetD##bits##Async_ptsz, vty, esz) \
    MEMSET_2D(cuMemsetD2D##bits##_v2, vty, esz) MEMSET_2D(cuMemsetD2D##bits##_v2_ptds, vty, esz)         \
    MEMSET_2D_ASYNC(cuMemsetD2D##bits##Async, vty, esz) MEMSET_2D_ASYNC(cuMemsetD2D##bits##Async_ptsz, vty, esz)
MEMSET_FAMILY(8, unsigned char, 1)
MEMSET_FAMILY(16, unsigned short, 2)
MEMSET_FAMILY(32, unsigned int, 4)

/* ------------------------------------------------- streams and events */
static void *new_handle(int type) {
    void *h = calloc(1, 16);
    if (!h) abort();
    reg_add((uintptr_t)h, type, 0);
    return h;
}
IMPL CUresult impl_cuStreamCreate(CUstream *ph, unsigned flags) {
    CNT(cuStreamCreate);
    (void)flags;
    if (!ph) return CUDA_ERROR_INVALID_VALUE;
    *ph = new_handle(O_STREAM);
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuStreamDestroy_v2(CUstream s) {
    CNT(cuStreamDestroy_v2);
    if (!s || !reg_del((uintptr_t)s, O_STREAM)) return CUDA_ERROR_INVALID_HANDLE;
    free(s);
    return CUDA_SUCCESS;
}
static CUresult stream_sync(CUstream s) {
    if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    sync_wait();
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuStreamSynchronize(CUstream s) { CNT(cuStreamSynchronize); return stream_sync(s); }
IMPL CUresult impl_cuStreamSynchronize_ptsz(CUstream s) { CNT(cuStreamSynchronize_ptsz); return stream_sync(s); }
IMPL CUresult impl_cuCtxSynchronize(void) {
    CNT(cuCtxSynchronize);
    sync_wait();
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuEventCreate(CUevent *pe, unsigned flags) {
    CNT(cuEventCreate);
    (void)flags;
    if (!pe) return CUDA_ERROR_INVALID_VALUE;
    *pe = new_handle(O_EVENT);
    return CUDA_SUCCESS;
}
static CUresult event_stream(CUevent e, CUstream s) {
    if (!e || reg_type((uintptr_t)e) != O_EVENT || !stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuEventRecord(CUevent e, CUstream s) { CNT(cuEventRecord); return event_stream(e, s); }
IMPL CUresult impl_cuEventRecord_ptsz(CUevent e, CUstream s) { CNT(cuEventRecord_ptsz); return event_stream(e, s); }
IMPL CUresult impl_cuEventSynchronize(CUevent e) {
    CNT(cuEventSynchronize);
    if (!e || reg_type((uintptr_t)e) != O_EVENT) return CUDA_ERROR_INVALID_HANDLE;
    sync_wait();
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
    CNT(cuStreamWaitEvent);
    (void)flags;
    return event_stream(e, s);
}
IMPL CUresult impl_cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned flags) {
    CNT(cuStreamWaitEvent_ptsz);
    (void)flags;
    return event_stream(e, s);
}

/* -------------------------------------------------------------- memory */
static CUresult alloc_mem(uintptr_t *out, size_t size, int type) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || size > ONE_GIB) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = aligned_alloc(256, (size + 255) & ~(size_t)255);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    reg_add((uintptr_t)p, type, size);
    DIG(size, type);
    *out = (uintptr_t)p;
    return CUDA_SUCCESS;
}
static CUresult free_mem(uintptr_t p, int type) {
    if (!p || !reg_del(p, type)) return CUDA_ERROR_INVALID_VALUE;
    free((void *)p);
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) {
    CNT(cuMemAlloc_v2);
    return alloc_mem((uintptr_t *)dptr, n, O_DEVMEM);
}
IMPL CUresult impl_cuMemFree_v2(CUdeviceptr p) {
    CNT(cuMemFree_v2);
    return free_mem(p, O_DEVMEM);
}
IMPL CUresult impl_cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s) {
    CNT(cuMemAllocAsync);
    return stream_ok(s) ? alloc_mem((uintptr_t *)dptr, n, O_DEVMEM) : CUDA_ERROR_INVALID_HANDLE;
}
IMPL CUresult impl_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t n, CUstream s) {
    CNT(cuMemAllocAsync_ptsz);
    return stream_ok(s) ? alloc_mem((uintptr_t *)dptr, n, O_DEVMEM) : CUDA_ERROR_INVALID_HANDLE;
}
IMPL CUresult impl_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    CNT(cuMemFreeAsync);
    return stream_ok(s) ? free_mem(p, O_DEVMEM) : CUDA_ERROR_INVALID_HANDLE;
}
IMPL CUresult impl_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
    CNT(cuMemFreeAsync_ptsz);
    return stream_ok(s) ? free_mem(p, O_DEVMEM) : CUDA_ERROR_INVALID_HANDLE;
}
IMPL CUresult impl_cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned flags) {
    CNT(cuMemAllocManaged);
    (void)flags;
    return alloc_mem((uintptr_t *)dptr, n, O_DEVMEM);
}
IMPL CUresult impl_cuMemAllocHost_v2(void **pp, size_t n) {
    CNT(cuMemAllocHost_v2);
    return alloc_mem((uintptr_t *)pp, n, O_HOSTMEM);
}
IMPL CUresult impl_cuMemHostAlloc(void **pp, size_t n, unsigned flags) {
    CNT(cuMemHostAlloc);
    (void)flags;
    return alloc_mem((uintptr_t *)pp, n, O_HOSTMEM);
}
IMPL CUresult impl_cuMemFreeHost(void *p) {
    CNT(cuMemFreeHost);
    return free_mem((uintptr_t)p, O_HOSTMEM);
}
/* Page-locked regions of the process's own memory (cuMemHostRegister): refused when one overlaps
   another, unregistered by their start only, as the real driver does. */
#define MAX_REGISTERED 64
static struct {
    uintptr_t p;
    size_t n;
} g_registered[MAX_REGISTERED];
static pthread_mutex_t g_registered_lock = PTHREAD_MUTEX_INITIALIZER;
static CUresult host_register(void *p, size_t n) {
    if (!p || !n) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t a = (uintptr_t)p;
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_registered_lock);
    int free_slot = -1;
    for (int i = 0; i < MAX_REGISTERED; i++) {
        if (!g_registered[i].p) {
            if (free_slot < 0) free_slot = i;
        } else if (a < g_registered[i].p + g_registered[i].n && g_registered[i].p < a + n) {
            free_slot = -2;
            r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            break;
        }
    }
    if (free_slot >= 0) {
        g_registered[free_slot].p = a, g_registered[free_slot].n = n;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_registered_lock);
    DIG(n, r);
    return r;
}
IMPL CUresult impl_cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
    CNT(cuMemHostRegister_v2);
    (void)flags;
    return host_register(p, n);
}
IMPL CUresult impl_cuMemHostRegister(void *p, size_t n, unsigned flags) {
    CNT(cuMemHostRegister);
    (void)flags;
    return host_register(p, n);
}
IMPL CUresult impl_cuMemHostUnregister(void *p) {
    CNT(cuMemHostUnregister);
    CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    pthread_mutex_lock(&g_registered_lock);
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (p && g_registered[i].p == (uintptr_t)p) {
            DIG(g_registered[i].n, 0);
            g_registered[i].p = 0, g_registered[i].n = 0;
            r = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&g_registered_lock);
    return r;
}
IMPL CUresult impl_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t w, size_t h, unsigned elem) {
    CNT(cuMemAllocPitch_v2);
    if (!dptr || !pPitch || (elem != 4 && elem != 8 && elem != 16)) return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (w + 511) & ~(size_t)511;
    if (h && pitch > ONE_GIB / h) return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = alloc_mem((uintptr_t *)dptr, pitch * h, O_DEVMEM);
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    return r;
}
static unsigned long long g_vmm_next = 0x1000;
IMPL CUresult impl_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
    CNT(cuMemCreate);
    (void)prop, (void)flags;
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || size > ONE_GIB) return CUDA_ERROR_OUT_OF_MEMORY;
    *handle = __atomic_fetch_add(&g_vmm_next, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuMemRelease(CUmemGenericAllocationHandle h) {
    CNT(cuMemRelease);
    (void)h;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuMemMap(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
                            unsigned long long flags) {
    CNT(cuMemMap);
    (void)p, (void)size, (void)off, (void)h, (void)flags;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuMemUnmap(CUdeviceptr p, size_t size) {
    CNT(cuMemUnmap);
    (void)p, (void)size;
    return CUDA_SUCCESS;
}

/* legacy v1 ABI: 32-bit device pointers, allocated below 4 GiB */
IMPL CUresult impl_cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned n) {
    CNT(cuMemAlloc);
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    if (n == 0) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (p == MAP_FAILED || (uintptr_t)p > 0xffffffffu) return CUDA_ERROR_OUT_OF_MEMORY;
    reg_add((uintptr_t)p, O_DEVMEM32, n);
    *dptr = (CUdeviceptr_v1)(uintptr_t)p;
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuMemFree(CUdeviceptr_v1 p) {
    CNT(cuMemFree);
    size_t r = p ? reg_del(p, O_DEVMEM32) : 0;
    if (!r) return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)(uintptr_t)p, r - 1);
    return CUDA_SUCCESS;
}
IMPL CUresult impl_cuMemcpyHtoD(CUdeviceptr_v1 d, const void *s, unsigned n) {
    CNT(cuMemcpyHtoD);
    return copy(d, U(s), n);
}
