/* Scripted CUDA workload for the gpuprofd tests and demo.
 *
 * Built three ways by build.sh:
 *   workload       links libcudart.so.12 and libcuda.so.1 (like an nvcc program that
 *                  also calls the driver, e.g. PyTorch); registers its kernels at start-up
 *                  from a constructor, exactly as nvcc's generated code does.
 *   workload_drv   links libcuda.so.1 only (Triton / CuPy / JAX style driver user).
 *   workload_late  links neither; `dlopen_runtime` loads libcudart.so.12 (which in turn
 *                  dlopens libcuda.so.1) and registers the kernels then.
 *
 * Protocol (line based, stdin -> stdout):
 *   prints "ready <pid>" once, then for every command line replies "ok <cmd> ..." or
 *   "err <cmd> <reason>".  EOF or "exit" ends the process with status 0.
 *
 * The host stubs of the runtime kernels carry the mangled names as their ELF symbols
 * (nvcc does the same), so a profiler that attaches after registration can still name them
 * from the executable's symbol table. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_fake.h"

#if defined(WORKLOAD_STATIC)
#define HAVE_RT 1
#define LINKED 1
#elif defined(WORKLOAD_LATE)
#define HAVE_RT 1
#define LINKED 0
#elif defined(WORKLOAD_DRV)
#define HAVE_RT 0
#define LINKED 1
#else
#define HAVE_RT 1
#define LINKED 1
#endif

/* ------------------------------------------------------- resolved APIs */
#define RT_API(X)                                                                                         \
    X(cudaLaunchKernel) X(cudaLaunchKernel_ptsz) X(__cudaLaunchKernel) X(cudaLaunchKernelExC)             \
    X(cudaLaunchKernelExC_ptsz) X(cudaLaunchCooperativeKernel) X(cudaMemcpy) X(cudaMemcpy_ptds)           \
    X(cudaMemcpyAsync) X(cudaMemcpyAsync_ptsz) X(cudaMemcpy2D) X(cudaMemcpyPeer) X(cudaMalloc) X(cudaFree) \
    X(cudaMallocHost) X(cudaMallocManaged) X(cudaDeviceSynchronize) X(cudaStreamSynchronize)              \
    X(cudaHostRegister) X(cudaHostUnregister)                                                             \
    X(cudaStreamWaitEvent) X(cudaStreamCreate) X(cudaEventCreate) X(__cudaRegisterFatBinary)               \
    X(cudaGraphInstantiate) X(cudaGraphLaunch)                                                            \
    X(__cudaRegisterFatBinaryEnd) X(__cudaRegisterFunction) X(__cudaGetKernel) X(fakecudart_calls) X(fakecudart_digest) \
    X(cudaMemset) X(cudaMemset_ptds) X(cudaMemsetAsync) X(cudaMemsetAsync_ptsz) X(cudaMemset2D)                \
    X(cudaMemset2D_ptds) X(cudaMemset2DAsync) X(cudaMemset2DAsync_ptsz) X(cudaMemset3D) X(cudaMemset3D_ptds)   \
    X(cudaMemset3DAsync) X(cudaMemset3DAsync_ptsz) X(cudaSetDevice) X(cudaGetDevice)

#define DRV_API(X)                                                                                      \
    X(cuInit) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuModuleLoadData) X(cuModuleGetFunction) \
    X(cuLibraryLoadData) X(cuLibraryGetKernel) X(cuKernelGetFunction) X(cuLaunchKernel)                 \
    X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz) X(cuLaunchCooperativeKernel)    \
    X(cuMemcpy) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoD_v2) X(cuMemcpy_ptds)               \
    X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyAsync)            \
    X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoDAsync_v2) X(cuMemcpyAsync_ptsz)       \
    X(cuMemcpyHtoDAsync_v2_ptsz) X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2_ptsz)              \
    X(cuMemcpy2D_v2) X(cuMemcpyPeer) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuStreamCreate)                 \
    X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate) X(fakecuda_calls) X(fakecuda_digest)                \
    X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAllocPitch_v2) X(cuMemHostAlloc) X(cuMemFreeHost)       \
    X(cuMemHostRegister_v2) X(cuMemHostUnregister)                                                      \
    X(cuMemCreate) X(cuMemMap) X(cuMemUnmap) X(cuMemRelease) X(cuGraphInstantiate) X(cuGraphLaunch)     \
    X(cuGraphLaunch_ptsz)                                                                               \
    X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) \
    X(cuMemsetD2D8_v2) X(cuMemsetD2D8_v2_ptds) X(cuMemsetD2D8Async) X(cuMemsetD2D8Async_ptsz) \
    X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds) X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz) \
    X(cuMemsetD2D16_v2) X(cuMemsetD2D16_v2_ptds) X(cuMemsetD2D16Async) X(cuMemsetD2D16Async_ptsz) \
    X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz) \
    X(cuMemsetD2D32_v2) X(cuMemsetD2D32_v2_ptds) X(cuMemsetD2D32Async) X(cuMemsetD2D32Async_ptsz) \
    X(fakecuda_set_sync_delay_us) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuCtxCreate_v2)     \
    X(cuCtxGetCurrent) X(cuCtxGetDevice)

static struct {
#define X(n) __typeof__(n) *n;
    RT_API(X)
#undef X
} R;
static struct {
#define X(n) __typeof__(n) *n;
    DRV_API(X)
#undef X
} D;
static int g_have_rt, g_have_drv;

static int resolve_all(void *rt, void *drv) {
    int missing = 0;
    if (rt) {
#define X(n) missing |= !(R.n = (__typeof__(R.n))dlsym(rt, #n));
        RT_API(X)
#undef X
        g_have_rt = !missing;
    }
    if (drv) {
#define X(n) missing |= !(D.n = (__typeof__(D.n))dlsym(drv, #n));
        DRV_API(X)
#undef X
        g_have_drv = !missing;
    }
    return missing ? -1 : 0;
}

/* ------------------------------------------------------ kernels (runtime) */
/* A fake "fatbin": the device names that module contains. */
static const char *const rt_kernel_names[] = {
    "_Z6vecAddPKfS0_Pfi",
    "_ZN4demo6reduceILi256EEEvPKfPfi",
    "_Z4reluPfi",
    "_Z4gemmPKfS0_Pfiii",
};
static const struct fake_fatbin rt_image = {FAKE_FATBIN_MAGIC, 4, rt_kernel_names};
static const __fatBinC_Wrapper_t rt_wrapper = {FATBINC_MAGIC, 1, &rt_image, NULL};

enum variant { V_PLAIN, V_PTSZ, V_STUB, V_EX, V_EX_PTSZ, V_COOP };
struct launch {
    dim3 g, b;
    size_t smem;
    cudaStream_t s;
    int variant;
};

static cudaError_t do_rt_launch(const void *self, const struct launch *l) {
    void *args[1] = {NULL};
    cudaLaunchConfig_t cfg = {l->g, l->b, l->smem, l->s, NULL, 0};
    cudaKernel_t k;
    switch (l->variant) {
    case V_PLAIN: return R.cudaLaunchKernel(self, l->g, l->b, args, l->smem, l->s);
    case V_PTSZ: return R.cudaLaunchKernel_ptsz(self, l->g, l->b, args, l->smem, l->s);
    case V_STUB: /* what nvcc 12.4+ host stubs do */
        if (R.__cudaGetKernel(&k, self)) return cudaErrorInvalidDeviceFunction;
        return R.__cudaLaunchKernel(k, l->g, l->b, args, l->smem, l->s);
    case V_EX: return R.cudaLaunchKernelExC(&cfg, self, args);
    case V_EX_PTSZ: return R.cudaLaunchKernelExC_ptsz(&cfg, self, args);
    case V_COOP: return R.cudaLaunchCooperativeKernel(self, l->g, l->b, args, l->smem, l->s);
    }
    return cudaErrorInvalidValue;
}

/* Host stubs, named like nvcc's: void vecAdd(const float*, const float*, float*, int) etc. */
#define STUB(cname, mangled)                                                              \
    __attribute__((noinline, used)) cudaError_t cname(const struct launch *l) __asm__(mangled); \
    __attribute__((noinline, used)) cudaError_t cname(const struct launch *l) {           \
        return do_rt_launch((const void *)&cname, l);                                     \
    }
STUB(stub_vecAdd, "_Z6vecAddPKfS0_Pfi")
STUB(stub_reduce, "_ZN4demo6reduceILi256EEEvPKfPfi")
STUB(stub_relu, "_Z4reluPfi")
STUB(stub_gemm, "_Z4gemmPKfS0_Pfiii")

static const struct {
    const char *name;
    cudaError_t (*stub)(const struct launch *);
} rt_kernels[] = {
    {"vecAdd", stub_vecAdd},
    {"reduce", stub_reduce},
    {"relu", stub_relu},
    {"gemm", stub_gemm},
};

static void **g_fatbin_handle;
static void register_kernels(void) {
    g_fatbin_handle = R.__cudaRegisterFatBinary((void *)&rt_wrapper);
    for (unsigned i = 0; i < 4; i++)
        R.__cudaRegisterFunction(g_fatbin_handle, (const char *)rt_kernels[i].stub, (char *)rt_kernel_names[i],
                                 rt_kernel_names[i], -1, NULL, NULL, NULL, NULL, NULL);
    R.__cudaRegisterFatBinaryEnd(g_fatbin_handle);
}

/* ------------------------------------------------------- kernels (driver) */
static const char *const drv_kernel_names[] = {"triton_poi_fused_add_0", "triton_red_fused_sum_1", "cupy_scale"};
static const struct fake_fatbin drv_image = {FAKE_FATBIN_MAGIC, 3, drv_kernel_names};
static const char *const lib_kernel_names[] = {"_Z9lib_saxpyfPKfPf"};
static const struct fake_fatbin lib_image = {FAKE_FATBIN_MAGIC, 1, lib_kernel_names};
static CUmodule g_mod;
static CUlibrary g_lib;
static CUcontext g_ctx;

static int drv_init(void) {
    if (D.cuInit(0) || D.cuDevicePrimaryCtxRetain(&g_ctx, 0) || D.cuCtxSetCurrent(g_ctx)) return -1;
    return 0;
}

/* ------------------------------------------------------------- helpers */
#define MAXS 4
static cudaStream_t rt_streams[MAXS];
static CUstream drv_streams[MAXS];
static cudaEvent_t rt_event;
static CUevent drv_event;

static char err_buf[8400];
#define FAIL(...) (snprintf(err_buf, sizeof err_buf, __VA_ARGS__), -1)

static int rt_stream(unsigned i, cudaStream_t *out) {
    if (i >= MAXS) return FAIL("stream index %u >= %d", i, MAXS);
    if (i && !rt_streams[i] && R.cudaStreamCreate(&rt_streams[i])) return FAIL("cudaStreamCreate failed");
    *out = rt_streams[i];
    return 0;
}
static int drv_stream(unsigned i, CUstream *out) {
    if (i >= MAXS) return FAIL("stream index %u >= %d", i, MAXS);
    if (i && !drv_streams[i] && D.cuStreamCreate(&drv_streams[i], 0)) return FAIL("cuStreamCreate failed");
    *out = drv_streams[i];
    return 0;
}

/* Copy scratch: ordinary host memory stands in for device memory (the fake driver copies
 * with memmove).  Never allocated through a CUDA API, so allocation counts stay exact. */
#define SCRATCH (1u << 20)
static unsigned char *g_src, *g_dst;

static int dir_of(const char *s) {
    static const char *const dirs[] = {"h2h", "h2d", "d2h", "d2d", "default"};
    for (int i = 0; i < 5; i++)
        if (strcmp(s, dirs[i]) == 0) return i;
    return -1;
}

#define MAXA 4096
struct alloc_list {
    void *p[MAXA];
    unsigned n;
};
static struct alloc_list rt_dev, rt_other, drv_dev;

/* ------------------------------------------------------------ commands */
/* Inlined into each caller (main, on_device's thread): the stack tests expect a command's
 * frames right under main's, as when main was its only caller. */
static inline __attribute__((always_inline)) int run(int argc, char **argv, char *reply_extra, size_t extra_len);
static int need_rt(void);
static int need_drv(void);

/* Devices and contexts (FAKECUDA_DEVICES sets how many devices the fake driver has):
 *   drv_set_device D     cuDevicePrimaryCtxRetain(D) + cuCtxSetCurrent on this thread
 *   rt_set_device D      cudaSetDevice(D)
 *   drv_push_ctx D       cuCtxPushCurrent_v2(primary context of D)
 *   drv_pop_ctx          cuCtxPopCurrent_v2
 *   drv_ctx_create D     cuCtxCreate_v2 on D (pushed)
 *   drv_get_device       cuCtxGetCurrent + cuCtxGetDevice; replies device=N
 *   rt_get_device        cudaGetDevice; replies device=N
 *   on_device D CMD ...  CMD on a new thread whose current context is D's primary (joined)
 *   on_rt_device D CMD   the same through cudaSetDevice */
static int cmd_ctx(const char *c, int argc, char **argv, char *extra, size_t extra_len) {
    if (need_drv()) return -1;
    CUcontext ctx;
    CUresult r;
    if (!strcmp(c, "drv_pop_ctx")) return D.cuCtxPopCurrent_v2(&ctx) ? FAIL("cuCtxPopCurrent_v2 failed") : 0;
    if (!strcmp(c, "drv_get_device")) {
        CUdevice d;
        if (D.cuCtxGetCurrent(&ctx) || D.cuCtxGetDevice(&d)) return FAIL("no current context");
        snprintf(extra, extra_len, " device=%d", d);
        return 0;
    }
    if (!strcmp(c, "rt_get_device")) {
        if (need_rt()) return -1;
        int d;
        if (R.cudaGetDevice(&d)) return FAIL("cudaGetDevice failed");
        snprintf(extra, extra_len, " device=%d", d);
        return 0;
    }
    if (argc != 1) return FAIL("usage: DEVICE");
    int dev = atoi(argv[0]);
    if (!strcmp(c, "rt_set_device")) {
        if (need_rt()) return -1;
        return R.cudaSetDevice(dev) ? FAIL("cudaSetDevice(%d) failed", dev) : 0;
    }
    if (!strcmp(c, "drv_ctx_create"))
        return D.cuCtxCreate_v2(&ctx, 0, dev) ? FAIL("cuCtxCreate_v2(%d) failed", dev) : 0;
    if ((r = D.cuDevicePrimaryCtxRetain(&ctx, dev))) return FAIL("cuDevicePrimaryCtxRetain(%d): %d", dev, r);
    if (!strcmp(c, "drv_push_ctx")) return D.cuCtxPushCurrent_v2(ctx) ? FAIL("cuCtxPushCurrent_v2 failed") : 0;
    return D.cuCtxSetCurrent(ctx) ? FAIL("cuCtxSetCurrent failed") : 0;
}

struct on_device {
    int argc;
    char **argv;
    int rt, r;
    char extra[64];
};
static void *on_device_thread(void *p) {
    struct on_device *o = p;
    char *set[2] = {o->rt ? "rt_set_device" : "drv_set_device", o->argv[0]};
    o->r = cmd_ctx(set[0], 1, &set[1], o->extra, sizeof o->extra);
    if (!o->r) o->r = run(o->argc - 1, o->argv + 1, o->extra, sizeof o->extra);
    return NULL;
}
static int cmd_on_device(int rt, int argc, char **argv, char *extra, size_t extra_len) {
    if (argc < 2) return FAIL("usage: DEVICE COMMAND [ARGS...]");
    struct on_device o = {argc, argv, rt, 0, ""};
    pthread_t t;
    if (pthread_create(&t, NULL, on_device_thread, &o)) return FAIL("pthread_create");
    pthread_join(t, NULL);
    snprintf(extra, extra_len, "%s", o.extra);
    return o.r;
}
static int need_rt(void) { return g_have_rt ? 0 : FAIL("no CUDA runtime in this workload"); }
static int need_drv(void) { return g_have_drv ? 0 : FAIL("no CUDA driver in this workload"); }

static int cmd_rt_launch(int variant, int argc, char **argv) {
    if (need_rt()) return -1;
    if (argc != 10) return FAIL("usage: NAME COUNT GX GY GZ BX BY BZ SMEM STREAM");
    cudaError_t (*stub)(const struct launch *) = NULL;
    for (unsigned i = 0; i < 4; i++)
        if (strcmp(argv[0], rt_kernels[i].name) == 0) stub = rt_kernels[i].stub;
    if (!stub) return FAIL("unknown kernel %s", argv[0]);
    struct launch l = {{(unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4])},
                       {(unsigned)atoi(argv[5]), (unsigned)atoi(argv[6]), (unsigned)atoi(argv[7])},
                       (size_t)atol(argv[8]), NULL, variant};
    if (rt_stream((unsigned)atoi(argv[9]), &l.s)) return -1;
    long n = atol(argv[1]);
    for (long i = 0; i < n; i++) {
        cudaError_t e = stub(&l);
        if (e) return FAIL("launch %ld returned %d", i, e);
    }
    return 0;
}

enum { DV_PLAIN, DV_PTSZ, DV_EX, DV_EX_PTSZ, DV_COOP, DV_LIB, DV_KFUNC };
static int cmd_drv_launch(int variant, int argc, char **argv) {
    if (need_drv()) return -1;
    if (argc != 10) return FAIL("usage: NAME COUNT GX GY GZ BX BY BZ SMEM STREAM");
    CUfunction f;
    CUresult r;
    if (variant == DV_LIB || variant == DV_KFUNC) {
        char mangled[128];
        snprintf(mangled, sizeof mangled, "_Z%zu%sfPKfPf", strlen(argv[0]), argv[0]);
        if (!g_lib && D.cuLibraryLoadData(&g_lib, &lib_image, NULL, NULL, 0, NULL, NULL, 0))
            return FAIL("cuLibraryLoadData failed");
        CUkernel k;
        if ((r = D.cuLibraryGetKernel(&k, g_lib, mangled))) return FAIL("cuLibraryGetKernel(%s): %d", mangled, r);
        if (variant == DV_KFUNC) {
            if ((r = D.cuKernelGetFunction(&f, k))) return FAIL("cuKernelGetFunction: %d", r);
        } else {
            f = (CUfunction)k; /* CUDA 12: a CUkernel may be launched as a CUfunction */
        }
    } else {
        if (!g_mod && D.cuModuleLoadData(&g_mod, &drv_image)) return FAIL("cuModuleLoadData failed");
        if ((r = D.cuModuleGetFunction(&f, g_mod, argv[0]))) return FAIL("cuModuleGetFunction(%s): %d", argv[0], r);
    }
    unsigned g[3] = {(unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4])};
    unsigned b[3] = {(unsigned)atoi(argv[5]), (unsigned)atoi(argv[6]), (unsigned)atoi(argv[7])};
    unsigned smem = (unsigned)atoi(argv[8]);
    CUstream s;
    if (drv_stream((unsigned)atoi(argv[9]), &s)) return -1;
    CUlaunchConfig cfg = {g[0], g[1], g[2], b[0], b[1], b[2], smem, s, NULL, 0};
    void *params[1] = {NULL};
    long n = atol(argv[1]);
    for (long i = 0; i < n; i++) {
        switch (variant) {
        case DV_PTSZ: r = D.cuLaunchKernel_ptsz(f, g[0], g[1], g[2], b[0], b[1], b[2], smem, s, params, NULL); break;
        case DV_EX: r = D.cuLaunchKernelEx(&cfg, f, params, NULL); break;
        case DV_EX_PTSZ: r = D.cuLaunchKernelEx_ptsz(&cfg, f, params, NULL); break;
        case DV_COOP: r = D.cuLaunchCooperativeKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], smem, s, params); break;
        default: r = D.cuLaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], smem, s, params, NULL); break;
        }
        if (r) return FAIL("launch %ld returned %d", i, r);
    }
    return 0;
}

/* drv_launch_ex_null NAME COUNT: cuLaunchKernelEx with a NULL configuration, as a buggy caller
 * would pass; the driver answers CUDA_ERROR_INVALID_VALUE, and the probe cannot read the
 * configuration (a probe fault the daemon counts). */
static int cmd_drv_launch_ex_null(int argc, char **argv) {
    if (need_drv()) return -1;
    if (argc != 2) return FAIL("usage: NAME COUNT");
    CUfunction f;
    CUresult r;
    if (!g_mod && D.cuModuleLoadData(&g_mod, &drv_image)) return FAIL("cuModuleLoadData failed");
    if ((r = D.cuModuleGetFunction(&f, g_mod, argv[0]))) return FAIL("cuModuleGetFunction(%s): %d", argv[0], r);
    void *params[1] = {NULL};
    for (long i = 0, n = atol(argv[1]); i < n; i++) {
        if ((r = D.cuLaunchKernelEx(NULL, f, params, NULL)) != CUDA_ERROR_INVALID_VALUE)
            return FAIL("launch %ld with no configuration returned %d", i, r);
    }
    return 0;
}

/* rt_memcpy[_ptds] DIR BYTES COUNT | rt_memcpy_async[_ptsz] DIR BYTES COUNT STREAM */
static int cmd_rt_memcpy(int async, int pt, int argc, char **argv) {
    if (need_rt()) return -1;
    if (argc != 3 + async) return FAIL(async ? "usage: DIR BYTES COUNT STREAM" : "usage: DIR BYTES COUNT");
    int kind = dir_of(argv[0]);
    size_t n = (size_t)atol(argv[1]);
    if (kind < 0) return FAIL("unknown direction %s", argv[0]);
    if (n > SCRATCH) return FAIL("at most %u bytes", SCRATCH);
    cudaStream_t s = NULL;
    if (async && rt_stream((unsigned)atoi(argv[3]), &s)) return -1;
    for (long i = 0, c = atol(argv[2]); i < c; i++) {
        cudaError_t e;
        if (async)
            e = (pt ? R.cudaMemcpyAsync_ptsz : R.cudaMemcpyAsync)(g_dst, g_src, n, kind, s);
        else
            e = (pt ? R.cudaMemcpy_ptds : R.cudaMemcpy)(g_dst, g_src, n, kind);
        if (e) return FAIL("copy %ld returned %d", i, e);
    }
    return 0;
}

/* rt_memcpy_pinned DIR BYTES COUNT: cudaMemcpy whose host side is the last rt_malloc_host
 * buffer (h2d: from it; d2h: into it) */
static int cmd_rt_memcpy_pinned(int argc, char **argv) {
    if (need_rt()) return -1;
    if (argc != 3) return FAIL("usage: DIR BYTES COUNT");
    int kind = dir_of(argv[0]);
    size_t n = (size_t)atol(argv[1]);
    if (kind != 1 && kind != 2) return FAIL("direction must be h2d or d2h");
    if (!rt_other.n) return FAIL("no pinned buffer: rt_malloc_host first");
    if (n > SCRATCH) return FAIL("at most %u bytes", SCRATCH);
    void *h = rt_other.p[rt_other.n - 1];
    for (long i = 0, c = atol(argv[2]); i < c; i++) {
        cudaError_t e = kind == 1 ? R.cudaMemcpy(g_dst, h, n, kind) : R.cudaMemcpy(h, g_src, n, kind);
        if (e) return FAIL("copy %ld returned %d", i, e);
    }
    return 0;
}

/* host_register rt|drv BYTES / host_unregister rt|drv: page-lock (cudaHostRegister,
   cuMemHostRegister) the workload's own static buffer, or release it; memcpy_registered DIR BYTES
   COUNT copies between it and "device" memory with cudaMemcpy. */
static char g_registered[SCRATCH] __attribute__((aligned(4096)));
static int cmd_host_register(int reg, int argc, char **argv) {
    if (argc != 1 + reg) return FAIL(reg ? "usage: rt|drv BYTES" : "usage: rt|drv");
    int drv = !strcmp(argv[0], "drv");
    if (drv ? need_drv() : need_rt()) return -1;
    size_t n = reg ? (size_t)atol(argv[1]) : 0;
    if (n > SCRATCH) return FAIL("at most %u bytes", SCRATCH);
    int r = reg ? (drv ? D.cuMemHostRegister_v2(g_registered, n, 0) : R.cudaHostRegister(g_registered, n, 0))
                : (drv ? D.cuMemHostUnregister(g_registered) : R.cudaHostUnregister(g_registered));
    return r ? FAIL("returned %d", r) : 0;
}
static int cmd_memcpy_registered(int argc, char **argv) {
    if (need_rt()) return -1;
    if (argc != 3) return FAIL("usage: DIR BYTES COUNT");
    int kind = dir_of(argv[0]);
    size_t n = (size_t)atol(argv[1]);
    if (kind != 1 && kind != 2) return FAIL("direction must be h2d or d2h");
    if (n > SCRATCH) return FAIL("at most %u bytes", SCRATCH);
    for (long i = 0, c = atol(argv[2]); i < c; i++) {
        cudaError_t e = kind == 1 ? R.cudaMemcpy(g_dst, g_registered, n, kind) : R.cudaMemcpy(g_registered, g_src, n, kind);
        if (e) return FAIL("copy %ld returned %d", i, e);
    }
    return 0;
}

static int cmd_drv_memcpy(int async, int pt, int argc, char **argv) {
    if (need_drv()) return -1;
    if (argc != 3 + async) return FAIL(async ? "usage: DIR BYTES COUNT STREAM" : "usage: DIR BYTES COUNT");
    int kind = dir_of(argv[0]);
    size_t n = (size_t)atol(argv[1]);
    if (kind < 1) return FAIL("direction must be h2d, d2h, d2d or default");
    if (n > SCRATCH) return FAIL("at most %u bytes", SCRATCH);
    CUstream s = NULL;
    if (async && drv_stream((unsigned)atoi(argv[3]), &s)) return -1;
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)g_dst, sp = (CUdeviceptr)(uintptr_t)g_src;
    for (long i = 0, c = atol(argv[2]); i < c; i++) {
        CUresult r;
        if (!async && !pt) {
            switch (kind) {
            case 1: r = D.cuMemcpyHtoD_v2(d, g_src, n); break;
            case 2: r = D.cuMemcpyDtoH_v2(g_dst, sp, n); break;
            case 3: r = D.cuMemcpyDtoD_v2(d, sp, n); break;
            default: r = D.cuMemcpy(d, sp, n); break;
            }
        } else if (!async) {
            switch (kind) {
            case 1: r = D.cuMemcpyHtoD_v2_ptds(d, g_src, n); break;
            case 2: r = D.cuMemcpyDtoH_v2_ptds(g_dst, sp, n); break;
            case 3: r = D.cuMemcpyDtoD_v2_ptds(d, sp, n); break;
            default: r = D.cuMemcpy_ptds(d, sp, n); break;
            }
        } else if (!pt) {
            switch (kind) {
            case 1: r = D.cuMemcpyHtoDAsync_v2(d, g_src, n, s); break;
            case 2: r = D.cuMemcpyDtoHAsync_v2(g_dst, sp, n, s); break;
            case 3: r = D.cuMemcpyDtoDAsync_v2(d, sp, n, s); break;
            default: r = D.cuMemcpyAsync(d, sp, n, s); break;
            }
        } else {
            switch (kind) {
            case 1: r = D.cuMemcpyHtoDAsync_v2_ptsz(d, g_src, n, s); break;
            case 2: r = D.cuMemcpyDtoHAsync_v2_ptsz(g_dst, sp, n, s); break;
            case 3: r = D.cuMemcpyDtoDAsync_v2_ptsz(d, sp, n, s); break;
            default: r = D.cuMemcpyAsync_ptsz(d, sp, n, s); break;
            }
        }
        if (r) return FAIL("copy %ld returned %d", i, r);
    }
    return 0;
}

/* rt_memcpy2d / drv_memcpy2d DIR WIDTH HEIGHT COUNT (pitch = width) */
static int cmd_memcpy2d(int drv, int argc, char **argv) {
    if (drv ? need_drv() : need_rt()) return -1;
    if (argc != 4) return FAIL("usage: DIR WIDTH HEIGHT COUNT");
    int kind = dir_of(argv[0]);
    size_t w = (size_t)atol(argv[1]), h = (size_t)atol(argv[2]);
    if (kind < 1) return FAIL("direction must be h2d, d2h, d2d or default");
    if (w * h > SCRATCH) return FAIL("at most %u bytes", SCRATCH);
    static const unsigned srct[5] = {0, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE,
                                     CU_MEMORYTYPE_UNIFIED};
    static const unsigned dstt[5] = {0, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE,
                                     CU_MEMORYTYPE_UNIFIED};
    for (long i = 0, c = atol(argv[3]); i < c; i++) {
        int r;
        if (drv) {
            CUDA_MEMCPY2D p;
            memset(&p, 0, sizeof p);
            p.srcMemoryType = srct[kind], p.dstMemoryType = dstt[kind];
            p.srcHost = g_src, p.srcDevice = (CUdeviceptr)(uintptr_t)g_src;
            p.dstHost = g_dst, p.dstDevice = (CUdeviceptr)(uintptr_t)g_dst;
            p.srcPitch = p.dstPitch = p.WidthInBytes = w, p.Height = h;
            r = D.cuMemcpy2D_v2(&p);
        } else {
            r = R.cudaMemcpy2D(g_dst, w, g_src, w, w, h, kind);
        }
        if (r) return FAIL("copy %ld returned %d", i, r);
    }
    return 0;
}

/* rt_memcpy_peer / drv_memcpy_peer BYTES COUNT */
static int cmd_memcpy_peer(int drv, int argc, char **argv) {
    if (drv ? need_drv() : need_rt()) return -1;
    if (argc != 2) return FAIL("usage: BYTES COUNT");
    size_t n = (size_t)atol(argv[0]);
    if (n > SCRATCH) return FAIL("at most %u bytes", SCRATCH);
    for (long i = 0, c = atol(argv[1]); i < c; i++) {
        int r = drv ? D.cuMemcpyPeer((CUdeviceptr)(uintptr_t)g_dst, g_ctx, (CUdeviceptr)(uintptr_t)g_src, g_ctx, n)
                    : R.cudaMemcpyPeer(g_dst, 0, g_src, 0, n);
        if (r) return FAIL("copy %ld returned %d", i, r);
    }
    return 0;
}

/* Memsets into the copy scratch (g_dst), value 0x5a in every byte. The pitch of a 2D or 3D
 * memset is its row plus 64 bytes, so that the bytes set (row × height) differ from the rows'
 * span (pitch × height); a 3D memset's slices are contiguous rows (ysize = height).
 *   rt_memset[_ptds] BYTES COUNT             rt_memset_async[_ptsz] BYTES COUNT STREAM
 *   rt_memset2d[_ptds] WIDTH HEIGHT COUNT    rt_memset2d_async[_ptsz] WIDTH HEIGHT COUNT STREAM
 *   rt_memset3d[_ptds] WIDTH HEIGHT DEPTH COUNT   rt_memset3d_async[_ptsz] ... COUNT STREAM
 *   drv_memset[_ptds] d8|d16|d32 N COUNT     drv_memset_async[_ptsz] d8|d16|d32 N COUNT STREAM
 *   drv_memset2d[_ptds] d8|d16|d32 WIDTH HEIGHT COUNT   drv_memset2d_async[_ptsz] ... COUNT STREAM
 * (the driver's N and WIDTH count elements of 1, 2 or 4 bytes; the runtime's are bytes) */
#define MEMSET_PAD 64
#define DRV_MEMSET(bits, v)                                                                            \
    (dims == 1 ? (async ? (pt ? D.cuMemsetD##bits##Async_ptsz : D.cuMemsetD##bits##Async)(dp, v, w, ds)  \
                        : (pt ? D.cuMemsetD##bits##_v2_ptds : D.cuMemsetD##bits##_v2)(dp, v, w))         \
               : (async ? (pt ? D.cuMemsetD2D##bits##Async_ptsz : D.cuMemsetD2D##bits##Async)(dp, pitch, v, w, h, ds) \
                        : (pt ? D.cuMemsetD2D##bits##_v2_ptds : D.cuMemsetD2D##bits##_v2)(dp, pitch, v, w, h)))
static int cmd_memset(const char *c, int argc, char **argv) {
    int drv = c[0] == 'd';
    if (drv ? need_drv() : need_rt()) return -1;
    const char *rest = c + (drv ? strlen("drv_memset") : strlen("rt_memset"));
    int dims = 1;
    if (!strncmp(rest, "2d", 2) || (!drv && !strncmp(rest, "3d", 2))) dims = rest[0] - '0', rest += 2;
    int async = !strncmp(rest, "_async", 6);
    if (async) rest += 6;
    int pt = !strcmp(rest, async ? "_ptsz" : "_ptds");
    if (*rest && !pt) return FAIL("unknown command");
    unsigned esz = 1;
    if (drv) {
        if (argc < 1) return FAIL("usage: d8|d16|d32 ...");
        esz = !strcmp(argv[0], "d8") ? 1 : !strcmp(argv[0], "d16") ? 2 : !strcmp(argv[0], "d32") ? 4 : 0;
        if (!esz) return FAIL("element size must be d8, d16 or d32");
        argc--, argv++;
    }
    if (argc != dims + 1 + async)
        return FAIL("usage: %s%s COUNT%s", drv ? "d8|d16|d32 " : "",
                    dims == 1 ? "N" : dims == 2 ? "WIDTH HEIGHT" : "WIDTH HEIGHT DEPTH", async ? " STREAM" : "");
    size_t w = (size_t)atol(argv[0]), h = dims > 1 ? (size_t)atol(argv[1]) : 1;
    size_t depth = dims > 2 ? (size_t)atol(argv[2]) : 1;
    size_t row = w * esz, pitch = dims > 1 ? row + MEMSET_PAD : row;
    if (pitch * h * depth > SCRATCH) return FAIL("at most %u bytes", SCRATCH);
    cudaStream_t s = NULL;
    CUstream ds = NULL;
    if (async && (drv ? drv_stream((unsigned)atoi(argv[dims + 1]), &ds) : rt_stream((unsigned)atoi(argv[dims + 1]), &s)))
        return -1;
    CUdeviceptr dp = (CUdeviceptr)(uintptr_t)g_dst;
    struct cudaPitchedPtr pp = {g_dst, pitch, w, h};
    struct cudaExtent ext = {w, h, depth};
    for (long i = 0, n = atol(argv[dims]); i < n; i++) {
        int r;
        if (drv)
            r = esz == 1 ? DRV_MEMSET(8, 0x5a) : esz == 2 ? DRV_MEMSET(16, 0x5a5a) : DRV_MEMSET(32, 0x5a5a5a5au);
        else if (dims == 1)
            r = async ? (pt ? R.cudaMemsetAsync_ptsz : R.cudaMemsetAsync)(g_dst, 0x5a, w, s)
                      : (pt ? R.cudaMemset_ptds : R.cudaMemset)(g_dst, 0x5a, w);
        else if (dims == 2)
            r = async ? (pt ? R.cudaMemset2DAsync_ptsz : R.cudaMemset2DAsync)(g_dst, pitch, 0x5a, w, h, s)
                      : (pt ? R.cudaMemset2D_ptds : R.cudaMemset2D)(g_dst, pitch, 0x5a, w, h);
        else
            r = async ? (pt ? R.cudaMemset3DAsync_ptsz : R.cudaMemset3DAsync)(pp, 0x5a, ext, s)
                      : (pt ? R.cudaMemset3D_ptds : R.cudaMemset3D)(pp, 0x5a, ext);
        if (r) return FAIL("memset %ld returned %d", i, r);
    }
    return 0;
}

/* allocations reply ok with how many failed: a failed allocation is a valid scenario */
static int g_failed;
static int cmd_alloc(const char *which, int argc, char **argv) {
    int drv = which[0] == 'd';
    if (drv ? need_drv() : need_rt()) return -1;
    if (argc != 2) return FAIL("usage: BYTES COUNT");
    size_t n = (size_t)atol(argv[0]);
    g_failed = 0;
    for (long i = 0, c = atol(argv[1]); i < c; i++) {
        void *p = NULL;
        struct alloc_list *l;
        int r;
        if (drv) {
            CUdeviceptr dp = 0;
            r = D.cuMemAlloc_v2(&dp, n);
            p = (void *)(uintptr_t)dp, l = &drv_dev;
        } else if (strcmp(which, "rt_malloc") == 0) {
            r = R.cudaMalloc(&p, n), l = &rt_dev;
        } else if (strcmp(which, "rt_malloc_host") == 0) {
            r = R.cudaMallocHost(&p, n), l = &rt_other;
        } else {
            r = R.cudaMallocManaged(&p, n, 1), l = &rt_other;
        }
        if (r) {
            g_failed++;
            continue;
        }
        if (l->n == MAXA) return FAIL("more than %d live allocations", MAXA);
        l->p[l->n++] = p;
    }
    return 0;
}
static int cmd_free_all(int drv) {
    if (drv ? need_drv() : need_rt()) return -1;
    struct alloc_list *l = drv ? &drv_dev : &rt_dev;
    for (unsigned i = 0; i < l->n; i++) {
        int r = drv ? D.cuMemFree_v2((CUdeviceptr)(uintptr_t)l->p[i]) : R.cudaFree(l->p[i]);
        if (r) return FAIL("free %u returned %d", i, r);
    }
    l->n = 0;
    return 0;
}

/* syncs: rt_sync_device COUNT | drv_sync_stream STREAM COUNT | rt_sync_stream STREAM COUNT */
static int cmd_sync(const char *which, int argc, char **argv) {
    int drv = which[0] == 'd';
    if (drv ? need_drv() : need_rt()) return -1;
    int is_device = strcmp(which, "rt_sync_device") == 0;
    if (argc != (is_device ? 1 : 2)) return FAIL(is_device ? "usage: COUNT" : "usage: STREAM COUNT");
    long c = atol(argv[argc - 1]);
    cudaStream_t rs = NULL;
    CUstream ds = NULL;
    if (!is_device && (drv ? drv_stream((unsigned)atoi(argv[0]), &ds) : rt_stream((unsigned)atoi(argv[0]), &rs)))
        return -1;
    for (long i = 0; i < c; i++) {
        int r = is_device ? R.cudaDeviceSynchronize() : drv ? D.cuStreamSynchronize(ds) : R.cudaStreamSynchronize(rs);
        if (r) return FAIL("sync %ld returned %d", i, r);
    }
    return 0;
}
/* rt_stream_wait_event / drv_stream_wait_event STREAM COUNT */
static int cmd_wait_event(int drv, int argc, char **argv) {
    if (drv ? need_drv() : need_rt()) return -1;
    if (argc != 2) return FAIL("usage: STREAM COUNT");
    cudaStream_t rs = NULL;
    CUstream ds = NULL;
    if (drv ? drv_stream((unsigned)atoi(argv[0]), &ds) : rt_stream((unsigned)atoi(argv[0]), &rs)) return -1;
    if (drv && !drv_event && D.cuEventCreate(&drv_event, 0)) return FAIL("cuEventCreate failed");
    if (!drv && !rt_event && R.cudaEventCreate(&rt_event)) return FAIL("cudaEventCreate failed");
    for (long i = 0, c = atol(argv[1]); i < c; i++) {
        int r = drv ? D.cuStreamWaitEvent(ds, drv_event, 0) : R.cudaStreamWaitEvent(rs, rt_event, 0);
        if (r) return FAIL("wait %ld returned %d", i, r);
    }
    return 0;
}

/* drv_malloc_async BYTES COUNT STREAM | drv_free_async_all STREAM | drv_malloc_pitch W H COUNT |
 * drv_host_alloc BYTES COUNT (freed at once with cuMemFreeHost) | drv_vmm BYTES COUNT
 * (cuMemCreate + cuMemMap + cuMemUnmap + cuMemRelease each) */
static struct alloc_list drv_async;
static int cmd_drv_mem(const char *c, int argc, char **argv) {
    if (need_drv()) return -1;
    CUstream s = NULL;
    if (!strcmp(c, "drv_malloc_async")) {
        if (argc != 3) return FAIL("usage: BYTES COUNT STREAM");
        if (drv_stream((unsigned)atoi(argv[2]), &s)) return -1;
        for (long i = 0, n = atol(argv[1]); i < n; i++) {
            CUdeviceptr p;
            if (D.cuMemAllocAsync(&p, (size_t)atol(argv[0]), s)) return FAIL("cuMemAllocAsync failed");
            if (drv_async.n == MAXA) return FAIL("too many");
            drv_async.p[drv_async.n++] = (void *)(uintptr_t)p;
        }
        return 0;
    }
    if (!strcmp(c, "drv_free_async_all")) {
        if (argc != 1) return FAIL("usage: STREAM");
        if (drv_stream((unsigned)atoi(argv[0]), &s)) return -1;
        for (unsigned i = 0; i < drv_async.n; i++)
            if (D.cuMemFreeAsync((CUdeviceptr)(uintptr_t)drv_async.p[i], s)) return FAIL("cuMemFreeAsync failed");
        drv_async.n = 0;
        return 0;
    }
    if (!strcmp(c, "drv_malloc_pitch")) {
        if (argc != 3) return FAIL("usage: WIDTH HEIGHT COUNT");
        for (long i = 0, n = atol(argv[2]); i < n; i++) {
            CUdeviceptr p;
            size_t pitch;
            if (D.cuMemAllocPitch_v2(&p, &pitch, (size_t)atol(argv[0]), (size_t)atol(argv[1]), 4))
                return FAIL("cuMemAllocPitch_v2 failed");
        }
        return 0;
    }
    if (!strcmp(c, "drv_host_alloc")) {
        if (argc != 2) return FAIL("usage: BYTES COUNT");
        for (long i = 0, n = atol(argv[1]); i < n; i++) {
            void *p;
            if (D.cuMemHostAlloc(&p, (size_t)atol(argv[0]), 0)) return FAIL("cuMemHostAlloc failed");
            if (D.cuMemFreeHost(p)) return FAIL("cuMemFreeHost failed");
        }
        return 0;
    }
    if (!strcmp(c, "drv_vmm")) {
        if (argc != 2) return FAIL("usage: BYTES COUNT");
        size_t bytes = (size_t)atol(argv[0]);
        for (long i = 0, n = atol(argv[1]); i < n; i++) {
            CUmemGenericAllocationHandle h;
            CUdeviceptr va = 0x7f0000000000ull;
            if (D.cuMemCreate(&h, bytes, NULL, 0)) return FAIL("cuMemCreate failed");
            if (D.cuMemMap(va, bytes, 0, h, 0) || D.cuMemUnmap(va, bytes)) return FAIL("cuMemMap/Unmap failed");
            if (D.cuMemRelease(h)) return FAIL("cuMemRelease failed");
        }
        return 0;
    }
    return FAIL("unknown command");
}

/* rt_graph_launch / drv_graph_launch / drv_graph_launch_ptsz COUNT STREAM */
static int cmd_graph(const char *c, int argc, char **argv) {
    int drv = c[0] == 'd';
    if (drv ? need_drv() : need_rt()) return -1;
    if (argc != 2) return FAIL("usage: COUNT STREAM");
    static CUgraphExec dg;
    static cudaGraphExec_t rg;
    CUstream ds = NULL;
    cudaStream_t rs = NULL;
    if (drv ? drv_stream((unsigned)atoi(argv[1]), &ds) : rt_stream((unsigned)atoi(argv[1]), &rs)) return -1;
    if (drv && !dg && D.cuGraphInstantiate(&dg, NULL, 0)) return FAIL("cuGraphInstantiate failed");
    if (!drv && !rg && R.cudaGraphInstantiate(&rg, NULL, 0)) return FAIL("cudaGraphInstantiate failed");
    int pt = strstr(c, "_ptsz") != NULL;
    for (long i = 0, n = atol(argv[0]); i < n; i++) {
        int r = !drv ? R.cudaGraphLaunch(rg, rs) : pt ? D.cuGraphLaunch_ptsz(dg, ds) : D.cuGraphLaunch(dg, ds);
        if (r) return FAIL("graph launch %ld returned %d", i, r);
    }
    return 0;
}

/* ------------------------------------------------------------ benchmarks */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double g_bench_result;

/* time_launch rt|drv N: N back-to-back launches of one kernel; the reply carries ns per call */
static int cmd_time_launch(int argc, char **argv) {
    if (argc != 2) return FAIL("usage: rt|drv COUNT");
    long n = atol(argv[1]);
    int drv = !strcmp(argv[0], "drv");
    if (drv ? need_drv() : need_rt()) return -1;
    CUfunction f = NULL;
    if (drv) {
        if (!g_mod && D.cuModuleLoadData(&g_mod, &drv_image)) return FAIL("cuModuleLoadData failed");
        if (D.cuModuleGetFunction(&f, g_mod, "cupy_scale")) return FAIL("cuModuleGetFunction failed");
    }
    struct launch l = {{1, 1, 1}, {32, 1, 1}, 0, NULL, V_PLAIN};
    void *params[1] = {NULL};
    double t = now_s();
    for (long i = 0; i < n; i++) {
        int r = drv ? D.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL) : stub_vecAdd(&l);
        if (r) return FAIL("launch %ld returned %d", i, r);
    }
    g_bench_result = (now_s() - t) * 1e9 / (double)(n ? n : 1);
    return 0;
}

/* storm THREADS COUNT: COUNT runtime launches on each of THREADS threads at once */
struct storm_arg {
    long n;
    int err;
};
static void *storm_thread(void *p) {
    struct storm_arg *a = p;
    struct launch l = {{1, 1, 1}, {32, 1, 1}, 0, NULL, V_PLAIN};
    for (long i = 0; i < a->n; i++)
        if (stub_relu(&l)) {
            a->err = 1;
            break;
        }
    return NULL;
}
static int cmd_storm(int argc, char **argv) {
    if (need_rt()) return -1;
    if (argc != 2) return FAIL("usage: THREADS COUNT");
    int nt = atoi(argv[0]);
    if (nt < 1 || nt > 1024) return FAIL("1..1024 threads");
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    struct storm_arg *args = calloc((size_t)nt, sizeof *args);
    if (!th || !args) return free(th), free(args), FAIL("out of memory");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    double t = now_s();
    int started = 0, err = 0;
    for (; started < nt; started++) {
        args[started].n = atol(argv[1]), args[started].err = 0;
        if (pthread_create(&th[started], &attr, storm_thread, &args[started])) break;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL), err |= args[i].err;
    pthread_attr_destroy(&attr);
    free(th), free(args);
    if (started < nt) return FAIL("pthread_create failed after %d threads", started);
    if (err) return FAIL("a launch failed");
    g_bench_result = (double)nt * (double)atol(argv[1]) / (now_s() - t); /* launches per second */
    return 0;
}

/* pace RATE SECONDS: runtime launches at RATE per second for SECONDS on this thread, in 1 ms
   slices (RATE/1000 launches, then a sleep to the slice's end); the reply carries the rate
   achieved. For sustained-rate benchmarks: a storm only says how fast the probes let it go. */
static int cmd_pace(int argc, char **argv) {
    if (need_rt()) return -1;
    if (argc != 2) return FAIL("usage: RATE SECONDS");
    double rate = atof(argv[0]), secs = atof(argv[1]);
    if (rate < 1000 || secs <= 0) return FAIL("RATE >= 1000, SECONDS > 0");
    struct launch l = {{1, 1, 1}, {32, 1, 1}, 0, NULL, V_PLAIN};
    long per_slice = (long)(rate / 1000.0), slices = (long)(secs * 1000.0), done = 0;
    double t0 = now_s();
    for (long s = 0; s < slices; s++) {
        for (long i = 0; i < per_slice; i++, done++)
            if (stub_relu(&l)) return FAIL("launch %ld failed", done);
        double due = t0 + (double)(s + 1) * 1e-3, now = now_s();
        if (due > now) {
            struct timespec ts = {0, (long)((due - now) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    g_bench_result = (double)done / (now_s() - t0);
    return 0;
}

static char g_exe_dir[4096];

/* lookalike_launch COUNT: calls liblookalike.so's cuLaunchKernel (not CUDA at all) */
static int cmd_lookalike(int argc, char **argv) {
    if (argc != 1) return FAIL("usage: COUNT");
    char path[4200];
    snprintf(path, sizeof path, "%s/../lib/liblookalike.so", g_exe_dir);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return FAIL("dlopen %s: %s", path, dlerror());
    int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                  void **) = (__typeof__(launch))dlsym(h, "cuLaunchKernel");
    if (!launch) return FAIL("liblookalike.so has no cuLaunchKernel");
    for (long i = 0, c = atol(argv[0]); i < c; i++) launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    return 0;
}

/* dlopen_runtime [DIR | FILE]: the runtime from DIR (a wheel's nvidia/cuda_runtime/lib), or
 * from FILE (a renamed copy), else by name */
static int cmd_dlopen_runtime(int argc, char **argv) {
    if (g_have_rt) return FAIL("the runtime is already loaded");
    char path[4200] = "libcudart.so.12";
    if (argc > 1) return FAIL("usage: [DIR | FILE.so*]");
    if (argc == 1 && strstr(argv[0], ".so"))
        snprintf(path, sizeof path, "%s", argv[0]); /* a file, possibly renamed */
    else if (argc == 1)
        snprintf(path, sizeof path, "%s/libcudart.so.12", argv[0]);
    void *rt = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!rt) return FAIL("dlopen %s: %s", path, dlerror());
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!drv) return FAIL("dlopen libcuda.so.1: %s", dlerror());
    if (resolve_all(rt, drv)) return FAIL("a CUDA symbol is missing");
    if (drv_init()) return FAIL("driver initialisation failed");
    register_kernels();
    return 0;
}

/* stack_chain NA NB SYNCS: known call chains for the stack tests. NA launches of relu through
 * stack_chain_a -> stack_chain_b -> stack_chain_c -> cudaLaunchKernel, NB through
 * stack_chain_a -> stack_chain_c, then SYNCS cudaDeviceSynchronize from stack_chain_sync.
 * noinline/noclone and work after each call keep every frame (no tail calls, no clones). */
volatile int g_chain_sink;
__attribute__((noinline, noclone)) cudaError_t stack_chain_c(const void *func) {
    void *args[1] = {NULL};
    dim3 g = {4, 1, 1}, b = {64, 1, 1};
    cudaError_t r = R.cudaLaunchKernel(func, g, b, args, 0, NULL); /* STACK_C */
    g_chain_sink += (int)r;
    return r;
}
__attribute__((noinline, noclone)) cudaError_t stack_chain_b(const void *func) {
    cudaError_t r = stack_chain_c(func); /* STACK_B */
    g_chain_sink += 1;
    return r;
}
__attribute__((noinline, noclone)) int stack_chain_a(long na, long nb) {
    int bad = 0;
    for (long i = 0; i < na; i++) bad |= stack_chain_b((const void *)&stub_relu) != cudaSuccess; /* STACK_A_B */
    g_chain_sink += 1;
    for (long i = 0; i < nb; i++) bad |= stack_chain_c((const void *)&stub_relu) != cudaSuccess; /* STACK_A_C */
    g_chain_sink += 1;
    return bad;
}
__attribute__((noinline, noclone)) int stack_chain_sync(long n) {
    int bad = 0;
    for (long i = 0; i < n; i++) bad |= R.cudaDeviceSynchronize() != cudaSuccess; /* STACK_SYNC */
    g_chain_sink += 1;
    return bad;
}
/* Inlined, as run() is: the stack tests expect main's frame right above stack_chain_a. */
static inline __attribute__((always_inline)) int cmd_stack_chain(int argc, char **argv) {
    if (need_rt()) return -1;
    if (argc != 3) return FAIL("usage: NA NB SYNCS");
    if (stack_chain_a(atol(argv[0]), atol(argv[1]))) return FAIL("a launch failed"); /* STACK_CMD_A */
    if (stack_chain_sync(atol(argv[2]))) return FAIL("a sync failed");            /* STACK_CMD_SYNC */
    return 0;
}

/* stack_steps STEPS: a training loop's fixed call pattern, as in a model's step: each step calls
 * step_attention() from three call sites, then step_mlp(); each launches one kernel through
 * stack_chain_c. Four call sites, one launch each per step: any sampling that counts calls
 * (every Nth) sees the same positions every step; a random draw gives each site its share. */
__attribute__((noinline, noclone)) cudaError_t step_attention(void) {
    cudaError_t r = stack_chain_c((const void *)&stub_relu); /* STEP_ATTN */
    g_chain_sink += 1;
    return r;
}
__attribute__((noinline, noclone)) cudaError_t step_mlp(void) {
    cudaError_t r = stack_chain_c((const void *)&stub_vecAdd); /* STEP_MLP */
    g_chain_sink += 1;
    return r;
}
__attribute__((noinline, noclone)) int stack_steps(long steps) {
    int bad = 0;
    for (long i = 0; i < steps; i++) {
        bad |= step_attention() != cudaSuccess; /* STEP_ATTN_1 */
        bad |= step_attention() != cudaSuccess; /* STEP_ATTN_2 */
        bad |= step_attention() != cudaSuccess; /* STEP_ATTN_3 */
        bad |= step_mlp() != cudaSuccess;       /* STEP_MLP_1 */
    }
    g_chain_sink += 1;
    return bad;
}
static inline __attribute__((always_inline)) int cmd_stack_steps(int argc, char **argv) {
    if (need_rt()) return -1;
    if (argc != 1) return FAIL("usage: STEPS");
    if (stack_steps(atol(argv[0]))) return FAIL("a launch failed"); /* STEP_CMD */
    return 0;
}

/* exec PATH [ARG...]: replace the process image, keeping its pid, stdin and stdout, as
   launchers and wrappers do (`exec python train.py`). Replies only when exec fails. */
static int cmd_exec(int argc, char **argv) {
    if (argc < 1) return FAIL("usage: PATH [ARG...]");
    char *args[33];
    int n = argc < 32 ? argc : 32;
    for (int i = 0; i < n; i++) args[i] = argv[i];
    args[n] = NULL;
    fflush(stdout);
    execv(argv[0], args);
    return FAIL("exec %s: %s", argv[0], strerror(errno));
}

/* exec_thread PATH [ARG...]: as `exec`, but from a second thread, as a multithreaded launcher
   may: the kernel then gives that thread the process's pid and ends the main thread. Replies
   only when exec fails. */
static char *g_exec_args[33];
static void *exec_from_thread(void *unused) {
    (void)unused;
    fflush(stdout);
    execv(g_exec_args[0], g_exec_args);
    printf("err exec_thread exec %s: %s\n", g_exec_args[0], strerror(errno));
    fflush(stdout);
    return NULL;
}
static int cmd_exec_thread(int argc, char **argv) {
    if (argc < 1) return FAIL("usage: PATH [ARG...]");
    int n = argc < 32 ? argc : 32;
    for (int i = 0; i < n; i++) g_exec_args[i] = argv[i];
    g_exec_args[n] = NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, exec_from_thread, NULL)) return FAIL("pthread_create");
    pthread_join(t, NULL); /* returns only when exec failed */
    return FAIL("exec_thread failed");
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* ------------------------------------------- held handles (live attach names) */
/* drv_hold NAME [kernel|elsewhere]: a module of its own holding NAME (`kernel`: a library,
 * and its CUkernel; `elsewhere`: an image whose function objects keep no name pointer) and
 * the handle, kept for drv_launch_held; replies the handle. What a program that loads its
 * kernels once and launches them later does (Triton, cuBLAS): the handle may be made before
 * gpuprofd attaches and launched after.
 * drv_launch_held NAME COUNT: cuLaunchKernel of that handle COUNT times (grid 1, block 32). */
#define MAXH 32
static struct {
    char name[128];
    CUfunction f;
} g_held[MAXH];
static unsigned g_nheld;

static int cmd_drv_hold(int argc, char **argv, char *extra, size_t extra_len) {
    if (need_drv()) return -1;
    const char *how = argc == 2 ? argv[1] : "";
    if (argc < 1 || argc > 2 || (argc == 2 && strcmp(how, "kernel") && strcmp(how, "elsewhere")))
        return FAIL("usage: NAME [kernel|elsewhere]");
    if (g_nheld >= MAXH) return FAIL("at most %d held handles", MAXH);
    if (strlen(argv[0]) >= sizeof g_held[0].name) return FAIL("name too long");
    const char *names[1] = {argv[0]}; /* the driver copies them */
    struct fake_fatbin img = {strcmp(how, "elsewhere") ? FAKE_FATBIN_MAGIC : FAKE_FATBIN_MAGIC_ELSEWHERE, 1, names};
    CUfunction f;
    CUresult r;
    if (!strcmp(how, "kernel")) {
        CUlibrary lib;
        CUkernel k;
        if ((r = D.cuLibraryLoadData(&lib, &img, NULL, NULL, 0, NULL, NULL, 0))) return FAIL("cuLibraryLoadData: %d", r);
        if ((r = D.cuLibraryGetKernel(&k, lib, argv[0]))) return FAIL("cuLibraryGetKernel: %d", r);
        f = (CUfunction)k;
    } else {
        CUmodule m;
        if ((r = D.cuModuleLoadData(&m, &img))) return FAIL("cuModuleLoadData: %d", r);
        if ((r = D.cuModuleGetFunction(&f, m, argv[0]))) return FAIL("cuModuleGetFunction: %d", r);
    }
    snprintf(g_held[g_nheld].name, sizeof g_held[0].name, "%s", argv[0]);
    g_held[g_nheld++].f = f;
    snprintf(extra, extra_len, " %p", (void *)f);
    return 0;
}

static int cmd_drv_launch_held(int argc, char **argv) {
    if (need_drv()) return -1;
    if (argc != 2) return FAIL("usage: NAME COUNT");
    CUfunction f = NULL;
    for (unsigned i = 0; i < g_nheld; i++)
        if (!strcmp(g_held[i].name, argv[0])) f = g_held[i].f;
    if (!f) return FAIL("no held handle %s", argv[0]);
    void *params[1] = {NULL};
    for (long i = 0, n = atol(argv[1]); i < n; i++) {
        CUresult r = D.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
        if (r) return FAIL("launch %ld returned %d", i, r);
    }
    return 0;
}

/* gpu_ns kernel|memcpy|memset NS: how long the following kernels, copies or memsets run on the
 * fake GPU (what the fake CUPTI records; the driver's defaults: 2000, 1000, 500).
 * cupti_client on|off: become (or stop being) an in-process CUPTI client, as torch.profiler
 * does: cuptiSubscribe / cuptiUnsubscribe of the libcupti.so.12 the library path finds; replies
 * CUPTI's result code.
 * cupti_client take: as torch.profiler starting after the injection library enabled: subscribe,
 * register its own buffer callbacks (CUPTI's records go to it from now on; it frees them) and
 * enable kernel records; replies the subscription's result code.
 * cupti_preload PATH: dlopen a CUPTI by its path, as a framework loads its own (PyTorch's
 * wheel, by its RPATH) at import, long before its profiler starts.
 * cupti_hold on|off: the fake CUPTI (already loaded) keeps completed buffers while on.
 * fork_exit: see cmd_fork_exit. */
static int cmd_gpu_ns(int argc, char **argv) {
    if (argc != 2) return FAIL("usage: kernel|memcpy|memset NS");
    unsigned which = !strcmp(argv[0], "kernel") ? 0 : !strcmp(argv[0], "memcpy") ? 1 : !strcmp(argv[0], "memset") ? 2 : 3;
    if (which == 3) return FAIL("usage: kernel|memcpy|memset NS");
    void (*set)(unsigned, unsigned long long) =
        (void (*)(unsigned, unsigned long long))dlsym(RTLD_DEFAULT, "fakecuda_set_gpu_ns");
    if (!set) return FAIL("the driver has no fakecuda_set_gpu_ns");
    set(which, strtoull(argv[1], NULL, 10));
    return 0;
}
static int cmd_cupti_preload(int argc, char **argv) {
    if (argc != 1) return FAIL("usage: PATH");
    if (!dlopen(argv[0], RTLD_NOW | RTLD_GLOBAL)) return FAIL("dlopen %s: %s", argv[0], dlerror());
    return 0;
}
static int cmd_cupti_hold(int argc, char **argv) {
    if (argc != 1 || (strcmp(argv[0], "on") && strcmp(argv[0], "off"))) return FAIL("usage: on|off");
    void *h = dlopen("libcupti.so.12", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return FAIL("libcupti.so.12 is not loaded");
    void (*hold)(int) = (void (*)(int))dlsym(h, "fakecupti_hold");
    if (!hold) return FAIL("libcupti.so.12 has no fakecupti_hold: not the fake");
    hold(!strcmp(argv[0], "on"));
    return 0;
}
/* fork_exit: a child forked now calls exit(0) (running atexit handlers, as a forked worker
 * that returns normally does); replies its wait status. */
static int cmd_fork_exit(char *extra, size_t extra_len) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return FAIL("fork: %s", strerror(errno));
    if (pid == 0) exit(0);
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return FAIL("waitpid: %s", strerror(errno));
    snprintf(extra, extra_len, " status=%d", st);
    return 0;
}
static void *g_cupti_sub;
static void client_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 1 << 16;
    *buffer = malloc(*size);
    *max_records = 0;
}
static void client_buffer_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size, (void)valid;
    free(buffer);
}
static int cmd_cupti_client(int argc, char **argv, char *extra, size_t extra_len) {
    if (argc != 1 || (strcmp(argv[0], "on") && strcmp(argv[0], "off") && strcmp(argv[0], "take")))
        return FAIL("usage: on|off|take");
    void *h = dlopen("libcupti.so.12", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return FAIL("dlopen libcupti.so.12: %s", dlerror());
    int r;
    if (!strcmp(argv[0], "take")) {
        int (*sub)(void **, void *, void *) = (int (*)(void **, void *, void *))dlsym(h, "cuptiSubscribe");
        int (*reg)(void *, void *) = (int (*)(void *, void *))dlsym(h, "cuptiActivityRegisterCallbacks");
        int (*en)(int) = (int (*)(int))dlsym(h, "cuptiActivityEnable");
        if (!sub || !reg || !en) return FAIL("no cuptiSubscribe/RegisterCallbacks/Enable");
        r = sub(&g_cupti_sub, NULL, NULL);
        if (r == 0 && (reg((void *)client_buffer_requested, (void *)client_buffer_completed) || en(10)))
            return FAIL("registering the client's callbacks failed");
    } else if (!strcmp(argv[0], "on")) {
        int (*sub)(void **, void *, void *) = (int (*)(void **, void *, void *))dlsym(h, "cuptiSubscribe");
        if (!sub) return FAIL("no cuptiSubscribe");
        r = sub(&g_cupti_sub, NULL, NULL);
    } else {
        int (*unsub)(void *) = (int (*)(void *))dlsym(h, "cuptiUnsubscribe");
        if (!unsub) return FAIL("no cuptiUnsubscribe");
        r = unsub(g_cupti_sub);
    }
    snprintf(extra, extra_len, " result=%d", r);
    return 0;
}

/* returns 1 to exit, 0 ok, -1 error (err_buf) */
static inline __attribute__((always_inline)) int run(int argc, char **argv, char *reply_extra, size_t extra_len) {
    const char *c = argv[0];
    argc--, argv++;
    reply_extra[0] = 0;
    if (!strcmp(c, "exit")) return 1;
    if (!strcmp(c, "exec")) return cmd_exec(argc, argv);
    if (!strcmp(c, "exec_thread")) return cmd_exec_thread(argc, argv);
    if (!strcmp(c, "rt_launch")) return cmd_rt_launch(V_PLAIN, argc, argv);
    if (!strcmp(c, "drv_set_device") || !strcmp(c, "rt_set_device") || !strcmp(c, "drv_push_ctx") ||
        !strcmp(c, "drv_pop_ctx") || !strcmp(c, "drv_ctx_create") || !strcmp(c, "drv_get_device") ||
        !strcmp(c, "rt_get_device"))
        return cmd_ctx(c, argc, argv, reply_extra, extra_len);
    if (!strcmp(c, "on_device") || !strcmp(c, "on_rt_device"))
        return cmd_on_device(c[3] == 'r', argc, argv, reply_extra, extra_len);
    if (!strcmp(c, "stack_chain")) return cmd_stack_chain(argc, argv);
    if (!strcmp(c, "stack_steps")) return cmd_stack_steps(argc, argv);
    if (!strcmp(c, "rt_launch_ptsz")) return cmd_rt_launch(V_PTSZ, argc, argv);
    if (!strcmp(c, "rt_launch_stub")) return cmd_rt_launch(V_STUB, argc, argv);
    if (!strcmp(c, "rt_launch_ex")) return cmd_rt_launch(V_EX, argc, argv);
    if (!strcmp(c, "rt_launch_ex_ptsz")) return cmd_rt_launch(V_EX_PTSZ, argc, argv);
    if (!strcmp(c, "rt_launch_coop")) return cmd_rt_launch(V_COOP, argc, argv);
    if (!strcmp(c, "drv_launch")) return cmd_drv_launch(DV_PLAIN, argc, argv);
    if (!strcmp(c, "drv_launch_ptsz")) return cmd_drv_launch(DV_PTSZ, argc, argv);
    if (!strcmp(c, "drv_launch_ex")) return cmd_drv_launch(DV_EX, argc, argv);
    if (!strcmp(c, "drv_launch_ex_ptsz")) return cmd_drv_launch(DV_EX_PTSZ, argc, argv);
    if (!strcmp(c, "drv_launch_ex_null")) return cmd_drv_launch_ex_null(argc, argv);
    if (!strcmp(c, "drv_launch_coop")) return cmd_drv_launch(DV_COOP, argc, argv);
    if (!strcmp(c, "drv_launch_lib")) return cmd_drv_launch(DV_LIB, argc, argv);
    if (!strcmp(c, "drv_launch_kfunc")) return cmd_drv_launch(DV_KFUNC, argc, argv);
    if (!strcmp(c, "drv_hold")) return cmd_drv_hold(argc, argv, reply_extra, extra_len);
    if (!strcmp(c, "drv_launch_held")) return cmd_drv_launch_held(argc, argv);
    if (!strcmp(c, "rt_memcpy")) return cmd_rt_memcpy(0, 0, argc, argv);
    if (!strcmp(c, "rt_memcpy_ptds")) return cmd_rt_memcpy(0, 1, argc, argv);
    if (!strcmp(c, "rt_memcpy_pinned")) return cmd_rt_memcpy_pinned(argc, argv);
    if (!strcmp(c, "host_register")) return cmd_host_register(1, argc, argv);
    if (!strcmp(c, "host_unregister")) return cmd_host_register(0, argc, argv);
    if (!strcmp(c, "memcpy_registered")) return cmd_memcpy_registered(argc, argv);
    if (!strcmp(c, "rt_memcpy_async")) return cmd_rt_memcpy(1, 0, argc, argv);
    if (!strcmp(c, "rt_memcpy_async_ptsz")) return cmd_rt_memcpy(1, 1, argc, argv);
    if (!strcmp(c, "drv_memcpy")) return cmd_drv_memcpy(0, 0, argc, argv);
    if (!strcmp(c, "drv_memcpy_ptds")) return cmd_drv_memcpy(0, 1, argc, argv);
    if (!strcmp(c, "drv_memcpy_async")) return cmd_drv_memcpy(1, 0, argc, argv);
    if (!strcmp(c, "drv_memcpy_async_ptsz")) return cmd_drv_memcpy(1, 1, argc, argv);
    if (!strcmp(c, "rt_memcpy2d")) return cmd_memcpy2d(0, argc, argv);
    if (!strcmp(c, "drv_memcpy2d")) return cmd_memcpy2d(1, argc, argv);
    if (!strcmp(c, "rt_memcpy_peer")) return cmd_memcpy_peer(0, argc, argv);
    if (!strncmp(c, "rt_memset", 9) || !strncmp(c, "drv_memset", 10)) return cmd_memset(c, argc, argv);
    if (!strcmp(c, "drv_memcpy_peer")) return cmd_memcpy_peer(1, argc, argv);
    if (!strcmp(c, "rt_malloc") || !strcmp(c, "rt_malloc_host") || !strcmp(c, "rt_malloc_managed") ||
        !strcmp(c, "drv_malloc")) {
        int r = cmd_alloc(c, argc, argv);
        snprintf(reply_extra, extra_len, " failed=%d", g_failed);
        return r;
    }
    if (!strncmp(c, "drv_malloc_", 11) || !strcmp(c, "drv_free_async_all") || !strcmp(c, "drv_host_alloc") ||
        !strcmp(c, "drv_vmm"))
        return cmd_drv_mem(c, argc, argv);
    if (!strcmp(c, "rt_graph_launch") || !strcmp(c, "drv_graph_launch") || !strcmp(c, "drv_graph_launch_ptsz"))
        return cmd_graph(c, argc, argv);
    if (!strcmp(c, "rt_free_all")) return cmd_free_all(0);
    if (!strcmp(c, "drv_free_all")) return cmd_free_all(1);
    if (!strcmp(c, "rt_sync_device") || !strcmp(c, "rt_sync_stream") || !strcmp(c, "drv_sync_stream"))
        return cmd_sync(c, argc, argv);
    if (!strcmp(c, "rt_stream_wait_event")) return cmd_wait_event(0, argc, argv);
    if (!strcmp(c, "drv_stream_wait_event")) return cmd_wait_event(1, argc, argv);
    if (!strcmp(c, "set_delay_us")) {
        if (need_drv()) return -1;
        if (argc != 1) return FAIL("usage: MICROSECONDS");
        D.fakecuda_set_sync_delay_us((unsigned)atol(argv[0]));
        return 0;
    }
    if (!strcmp(c, "sleep_ms")) {
        if (argc != 1) return FAIL("usage: MILLISECONDS");
        sleep_ms(atol(argv[0]));
        return 0;
    }
    if (!strcmp(c, "time_launch") || !strcmp(c, "storm") || !strcmp(c, "pace")) {
        int r = c[0] == 't' ? cmd_time_launch(argc, argv) : c[0] == 's' ? cmd_storm(argc, argv) : cmd_pace(argc, argv);
        snprintf(reply_extra, extra_len, " result=%.3f", g_bench_result);
        return r;
    }
    if (!strcmp(c, "lookalike_launch")) return cmd_lookalike(argc, argv);
    if (!strcmp(c, "gpu_ns")) return cmd_gpu_ns(argc, argv);
    if (!strcmp(c, "cupti_client")) return cmd_cupti_client(argc, argv, reply_extra, extra_len);
    if (!strcmp(c, "cupti_hold")) return cmd_cupti_hold(argc, argv);
    if (!strcmp(c, "cupti_preload")) return cmd_cupti_preload(argc, argv);
    if (!strcmp(c, "fork_exit")) return cmd_fork_exit(reply_extra, extra_len);
    if (!strcmp(c, "dlopen_runtime")) return cmd_dlopen_runtime(argc, argv);
    if (!strcmp(c, "digest")) {
        /* what the libraries computed, and what the copies left in the buffers */
        printf("digest drv=%016llx rt=%016llx dst=%016llx\n", g_have_drv ? D.fakecuda_digest() : 0,
               g_have_rt ? R.fakecudart_digest() : 0, fake_bytes_hash(g_dst, SCRATCH) ^ fake_mix(SCRATCH, 0));
        return 0;
    }
    if (!strcmp(c, "count")) {
        if (argc != 1) return FAIL("usage: SYMBOL");
        unsigned long long n;
        if (!strncmp(argv[0], "cu", 2) && argv[0][2] != 'd')
            n = g_have_drv ? D.fakecuda_calls(argv[0]) : 0;
        else
            n = g_have_rt ? R.fakecudart_calls(argv[0]) : 0;
        printf("count %s %llu\n", argv[0], n);
        return 0;
    }
    return FAIL("unknown command");
}

#if LINKED
/* nvcc emits this registration as a static constructor in every translation unit with kernels */
__attribute__((constructor)) static void init_cuda(void) {
    void *self = dlopen(NULL, RTLD_NOW);
#if defined(WORKLOAD_STATIC)
    /* the runtime is linked into this executable (nvcc's default, -cudart static): direct calls */
    resolve_all(NULL, self);
#define X(n) R.n = n;
    RT_API(X)
#undef X
    g_have_rt = 1;
#else
    resolve_all(HAVE_RT ? self : NULL, self);
#endif
    if (HAVE_RT && g_have_rt) register_kernels();
}
#endif

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ssize_t n = readlink("/proc/self/exe", g_exe_dir, sizeof g_exe_dir - 1);
    if (n > 0) {
        g_exe_dir[n] = 0;
        char *slash = strrchr(g_exe_dir, '/');
        if (slash) *slash = 0;
    }
    g_src = calloc(1, SCRATCH), g_dst = calloc(1, SCRATCH);
    if (!g_src || !g_dst) return 1;
    for (unsigned i = 0; i < SCRATCH; i++) g_src[i] = (unsigned char)(i * 131u + i / 4096u);
#if LINKED
    if (!g_have_drv || drv_init()) {
        fprintf(stderr, "workload: the CUDA driver did not initialise\n");
        return 1;
    }
#endif
    printf("ready %d\n", (int)getpid());
    char line[1024];
    while (fgets(line, sizeof line, stdin)) {
        char *argv[32];
        int argc = 0;
        for (char *t = strtok(line, " \t\r\n"); t && argc < 32; t = strtok(NULL, " \t\r\n")) argv[argc++] = t;
        if (!argc || argv[0][0] == '#') continue;
        char extra[64];
        int r = run(argc, argv, extra, sizeof extra);
        if (r == 1) {
            printf("ok exit\n");
            break;
        }
        if (r < 0)
            printf("err %s %s\n", argv[0], err_buf);
        else
            printf("ok %s%s\n", argv[0], extra);
    }
    return 0;
}
