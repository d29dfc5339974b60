/* Fake libcudart.so.12.  Resolves the driver exactly like the real runtime:
 * no DT_NEEDED on libcuda; on first use dlopen("libcuda.so.1"), dlsym only
 * cuGetProcAddress_v2, and resolve everything else through it (flags 0 for
 * the default table, flags 2 = per-thread default stream for the table used
 * by the _ptsz/_ptds entry points).  Every runtime call makes at most one
 * driver API call on the calling thread (plus, on the first launch of a host
 * stub, cuModuleLoadData + cuModuleGetFunction: lazy loading as in CUDA 12.2+).
 * Built three times: -fcf-protection=none (entry = push %rbp), =full (endbr64), and with
 * -DFAKE_TAILCALL (wrappers that tail-jump into the driver). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_fake.h"

#define EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------- runtime counters */
#define RT_SYMS(X)                                                                                              \
    X(cudaLaunchKernel) X(cudaLaunchKernel_ptsz) X(__cudaLaunchKernel) X(__cudaLaunchKernel_ptsz)               \
    X(cudaLaunchKernelExC) X(cudaLaunchKernelExC_ptsz) X(cudaLaunchCooperativeKernel)                           \
    X(cudaLaunchCooperativeKernel_ptsz) X(cudaGraphInstantiate) X(cudaGraphLaunch) X(cudaGraphLaunch_ptsz)       \
    X(cudaMemcpy) X(cudaMemcpy_ptds) X(cudaMemcpyAsync) X(cudaMemcpyAsync_ptsz) X(cudaMemcpy2D)                  \
    X(cudaMemcpy2D_ptds) X(cudaMemcpy2DAsync) X(cudaMemcpy2DAsync_ptsz) X(cudaMemcpyPeer) X(cudaMemcpyPeerAsync)  \
    X(cudaMalloc) X(cudaFree) X(cudaMallocHost) X(cudaFreeHost) X(cudaHostAlloc) X(cudaMallocManaged)            \
    X(cudaHostRegister) X(cudaHostUnregister)                                                                   \
    X(cudaMemset) X(cudaMemset_ptds) X(cudaMemsetAsync) X(cudaMemsetAsync_ptsz) X(cudaMemset2D)                  \
    X(cudaMemset2D_ptds) X(cudaMemset2DAsync) X(cudaMemset2DAsync_ptsz) X(cudaMemset3D) X(cudaMemset3D_ptds)     \
    X(cudaMemset3DAsync) X(cudaMemset3DAsync_ptsz)                                                              \
    X(cudaMallocAsync) X(cudaMallocAsync_ptsz) X(cudaFreeAsync) X(cudaFreeAsync_ptsz) X(cudaMallocPitch)         \
    X(cudaDeviceSynchronize) X(cudaStreamSynchronize) X(cudaStreamSynchronize_ptsz) X(cudaEventSynchronize)      \
    X(cudaStreamWaitEvent) X(cudaStreamWaitEvent_ptsz) X(cudaStreamCreate) X(cudaEventCreate)                   \
    X(cudaEventRecord) X(cudaGetLastError) X(cudaGetDeviceCount) X(cudaSetDevice) X(cudaGetDevice) X(__cudaRegisterFatBinary)                    \
    X(__cudaRegisterFatBinaryEnd) X(__cudaRegisterFunction) X(__cudaUnregisterFatBinary) X(__cudaGetKernel)

enum {
#define X(n) RIDX_##n,
    RT_SYMS(X)
#undef X
        RT_NSYMS
};
static const char *const rt_names[RT_NSYMS] = {
#define X(n) #n,
    RT_SYMS(X)
#undef X
};
static unsigned long long rt_calls[RT_NSYMS];
static unsigned long long rt_digest;
#define CNT(n) (__atomic_fetch_add(&rt_calls[RIDX_##n], 1, __ATOMIC_RELAXED), FAKE_DIGEST(rt_digest, RIDX_##n + 1, 0))
EXPORT unsigned long long fakecudart_digest(void) { return __atomic_load_n(&rt_digest, __ATOMIC_RELAXED); }

EXPORT unsigned long long fakecudart_calls(const char *name) {
    for (int i = 0; name && i < RT_NSYMS; i++)
        if (strcmp(rt_names[i], name) == 0) return __atomic_load_n(&rt_calls[i], __ATOMIC_RELAXED);
    return 0;
}

/* ------------------------------------------------------- driver tables */
/* (field = real exported prototype, base name passed to cuGetProcAddress) */
#define DRV_FUNCS(X)                                                                          \
    X(cuInit, "cuInit") X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                \
    X(cuCtxSetCurrent, "cuCtxSetCurrent") X(cuDeviceGetCount, "cuDeviceGetCount")             \
    X(cuModuleLoadData, "cuModuleLoadData") X(cuModuleGetFunction, "cuModuleGetFunction")     \
    X(cuLaunchKernel, "cuLaunchKernel") X(cuLaunchKernelEx, "cuLaunchKernelEx")               \
    X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel")                                 \
    X(cuGraphInstantiate, "cuGraphInstantiate") X(cuGraphLaunch, "cuGraphLaunch")             \
    X(cuMemcpy, "cuMemcpy") X(cuMemcpyAsync, "cuMemcpyAsync")                                  \
    X(cuMemcpyHtoD_v2, "cuMemcpyHtoD") X(cuMemcpyDtoH_v2, "cuMemcpyDtoH")                     \
    X(cuMemcpyDtoD_v2, "cuMemcpyDtoD") X(cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync")           \
    X(cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync") X(cuMemcpyDtoDAsync_v2, "cuMemcpyDtoDAsync") \
    X(cuMemcpy2D_v2, "cuMemcpy2D") X(cuMemcpy2DAsync_v2, "cuMemcpy2DAsync")                   \
    X(cuMemcpyPeer, "cuMemcpyPeer") X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync")                 \
    X(cuMemAlloc_v2, "cuMemAlloc") X(cuMemFree_v2, "cuMemFree")                               \
    X(cuMemAllocHost_v2, "cuMemAllocHost") X(cuMemHostAlloc, "cuMemHostAlloc")                \
    X(cuMemFreeHost, "cuMemFreeHost") X(cuMemAllocManaged, "cuMemAllocManaged")               \
    X(cuMemHostRegister_v2, "cuMemHostRegister") X(cuMemHostUnregister, "cuMemHostUnregister") \
    X(cuMemAllocAsync, "cuMemAllocAsync") X(cuMemFreeAsync, "cuMemFreeAsync")                 \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch") X(cuCtxSynchronize, "cuCtxSynchronize")          \
    X(cuStreamSynchronize, "cuStreamSynchronize") X(cuEventSynchronize, "cuEventSynchronize") \
    X(cuStreamWaitEvent, "cuStreamWaitEvent") X(cuStreamCreate, "cuStreamCreate")             \
    X(cuEventCreate, "cuEventCreate") X(cuEventRecord, "cuEventRecord")                     \
    X(cuMemsetD8_v2, "cuMemsetD8") X(cuMemsetD8Async, "cuMemsetD8Async")                      \
    X(cuMemsetD2D8_v2, "cuMemsetD2D8") X(cuMemsetD2D8Async, "cuMemsetD2D8Async")            \
    X(cuGetExportTable, "cuGetExportTable")

struct drv {
#define X(field, name) __typeof__(field) *field;
    DRV_FUNCS(X)
#undef X
};
static struct drv D;  /* flags 0: default (legacy) stream */
static struct drv DP; /* flags 2: per-thread default stream (_ptsz/_ptds) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cudaError_t g_init_err;
static CUcontext g_ctx;
static __thread cudaError_t t_last_err;

static CUresult (*p_getproc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static int resolve(struct drv *t, cuuint64_t flags) {
    CUdriverProcAddressQueryResult st;
#define X(field, name)                                                                        \
    if (p_getproc(name, (void **)&t->field, 12090, flags, &st) != CUDA_SUCCESS || !t->field) \
        return -1;
    DRV_FUNCS(X)
#undef X
    return 0;
}

static void do_init(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h || !(p_getproc = (__typeof__(p_getproc))dlsym(h, "cuGetProcAddress_v2"))) {
        g_init_err = cudaErrorInsufficientDriver;
        return;
    }
    if (resolve(&D, CU_GET_PROC_ADDRESS_DEFAULT) || resolve(&DP, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
        g_init_err = cudaErrorInsufficientDriver;
        return;
    }
    if (D.cuInit(0) != CUDA_SUCCESS || D.cuDevicePrimaryCtxRetain(&g_ctx, 0) != CUDA_SUCCESS ||
        D.cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS)
        g_init_err = cudaErrorInitializationError;
}

static cudaError_t map_err(CUresult r) {
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_IMAGE: return cudaErrorInvalidKernelImage;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorInvalidDeviceFunction;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    default: return cudaErrorUnknown;
    }
}
static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) t_last_err = e;
    return e;
}
#ifdef FAKE_TAILCALL
/* The runtime as a compiler's sibling-call optimisation shapes `return cuX(...)`: the driver's
 * result is returned as it is, so the call compiles to a tail jump (`jmp *slot`) and the driver
 * entry runs on the runtime entry's stack pointer. build.sh checks the jumps. Driver error
 * codes reach the caller unmapped in this build (success is 0 in both). */
#define RET_DRV(call) return (cudaError_t)(call)
#else
#define RET_DRV(call) return ret(map_err(call))
#endif
/* lazy init; returns the table to use, or NULL with the error set */
#define INIT(table)                                                \
    do {                                                           \
        pthread_once(&g_once, do_init);                            \
        if (g_init_err) return ret(g_init_err);                    \
    } while (0);                                                   \
    const struct drv *T = &(table);                                \
    (void)T

/* --------------------------------------------- registration / modules */
struct fatbin_rec {
    const __fatBinC_Wrapper_t *wrapper;
    CUmodule mod; /* loaded lazily on the first launch */
    struct fatbin_rec *next;
};
struct func_rec {
    const void *hostFun;
    const char *deviceName;
    struct fatbin_rec *fb;
    CUfunction f; /* cached after the first launch */
    struct func_rec *next;
};
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct fatbin_rec *g_fatbins;
static struct func_rec *g_funcs;

EXPORT void **__cudaRegisterFatBinary(void *fatCubin) {
    CNT(__cudaRegisterFatBinary);
    struct fatbin_rec *r = calloc(1, sizeof *r);
    r->wrapper = fatCubin;
    pthread_mutex_lock(&g_mu);
    r->next = g_fatbins, g_fatbins = r;
    pthread_mutex_unlock(&g_mu);
    return (void **)r;
}
EXPORT void __cudaRegisterFatBinaryEnd(void **h) {
    CNT(__cudaRegisterFatBinaryEnd);
    (void)h;
}
EXPORT void __cudaUnregisterFatBinary(void **h) {
    CNT(__cudaUnregisterFatBinary);
    pthread_mutex_lock(&g_mu);
    for (struct func_rec **p = &g_funcs; *p;) {
        if ((*p)->fb == (struct fatbin_rec *)h) {
            struct func_rec *d = *p;
            *p = d->next;
            free(d);
        } else {
            p = &(*p)->next;
        }
    }
    pthread_mutex_unlock(&g_mu);
    /* the record itself is leaked on purpose (module unload is not modelled) */
}
EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                   const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
                                   dim3 *gDim, int *wSize) {
    CNT(__cudaRegisterFunction);
    (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    struct func_rec *r = calloc(1, sizeof *r);
    r->hostFun = hostFun, r->deviceName = deviceName, r->fb = (struct fatbin_rec *)fatCubinHandle;
    pthread_mutex_lock(&g_mu);
    r->next = g_funcs, g_funcs = r;
    pthread_mutex_unlock(&g_mu);
}
EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun) {
    CNT(__cudaGetKernel);
    if (!kernel) return ret(cudaErrorInvalidValue);
    *kernel = (cudaKernel_t)hostFun; /* CUDA 12: the host stub address itself */
    return cudaSuccess;
}

/* host stub -> CUfunction, loading the module on first use */
static cudaError_t get_function(const void *hostFun, CUfunction *out) {
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&g_mu);
    struct func_rec *r = g_funcs;
    while (r && r->hostFun != hostFun) r = r->next;
    if (!r) {
        e = cudaErrorInvalidDeviceFunction;
    } else if (!r->f) {
        if (!r->fb->mod) {
            const __fatBinC_Wrapper_t *w = r->fb->wrapper;
            if (!w || w->magic != FATBINC_MAGIC)
                e = cudaErrorInvalidKernelImage;
            else
                e = map_err(D.cuModuleLoadData(&r->fb->mod, w->data));
        }
        if (e == cudaSuccess) {
            CUresult cr = D.cuModuleGetFunction(&r->f, r->fb->mod, r->deviceName);
            e = cr == CUDA_ERROR_NOT_FOUND ? cudaErrorInvalidDeviceFunction : map_err(cr);
        }
    }
    if (e == cudaSuccess) *out = r->f;
    pthread_mutex_unlock(&g_mu);
    return e;
}

/* --------------------------------------------------------------- launch */
static cudaError_t launch(const struct drv *T, const void *func, dim3 g, dim3 b, void **args, size_t smem,
                          cudaStream_t s) {
    CUfunction f;
    cudaError_t e = get_function(func, &f);
    if (e) return ret(e);
    RET_DRV(T->cuLaunchKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem, s, args, NULL));
}
static cudaError_t launch_coop(const struct drv *T, const void *func, dim3 g, dim3 b, void **args, size_t smem,
                               cudaStream_t s) {
    CUfunction f;
    cudaError_t e = get_function(func, &f);
    if (e) return ret(e);
    RET_DRV(T->cuLaunchCooperativeKernel(f, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem, s, args));
}
static cudaError_t launch_ex(const struct drv *T, const cudaLaunchConfig_t *c, const void *func, void **args) {
    if (!c) return ret(cudaErrorInvalidValue);
    CUfunction f;
    cudaError_t e = get_function(func, &f);
    if (e) return ret(e);
    CUlaunchConfig cc = {
        .gridDimX = c->gridDim.x, .gridDimY = c->gridDim.y, .gridDimZ = c->gridDim.z,
        .blockDimX = c->blockDim.x, .blockDimY = c->blockDim.y, .blockDimZ = c->blockDim.z,
        .sharedMemBytes = (unsigned)c->dynamicSmemBytes, .hStream = c->stream,
        .attrs = (CUlaunchAttribute *)c->attrs, .numAttrs = c->numAttrs,
    };
    RET_DRV(T->cuLaunchKernelEx(&cc, f, args, NULL));
}

EXPORT cudaError_t cudaLaunchKernel(FAKE_RT_LAUNCH_ARGS(const void *)) {
    CNT(cudaLaunchKernel);
    INIT(D);
    return launch(T, func, gridDim, blockDim, args, sharedMem, stream);
}
EXPORT cudaError_t cudaLaunchKernel_ptsz(FAKE_RT_LAUNCH_ARGS(const void *)) {
    CNT(cudaLaunchKernel_ptsz);
    INIT(DP);
    return launch(T, func, gridDim, blockDim, args, sharedMem, stream);
}
/* Like the real runtime: a pure tail jump into the exported cudaLaunchKernel
 * (through the PLT), so hooking both entry points double counts. build.sh
 * checks the jmp. */
EXPORT cudaError_t __cudaLaunchKernel(FAKE_RT_LAUNCH_ARGS(cudaKernel_t)) {
    CNT(__cudaLaunchKernel);
    return cudaLaunchKernel((const void *)func, gridDim, blockDim, args, sharedMem, stream);
}
EXPORT cudaError_t __cudaLaunchKernel_ptsz(FAKE_RT_LAUNCH_ARGS(cudaKernel_t)) {
    CNT(__cudaLaunchKernel_ptsz);
    return cudaLaunchKernel_ptsz((const void *)func, gridDim, blockDim, args, sharedMem, stream);
}
EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) {
    CNT(cudaLaunchKernelExC);
    INIT(D);
    return launch_ex(T, config, func, args);
}
EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args) {
    CNT(cudaLaunchKernelExC_ptsz);
    INIT(DP);
    return launch_ex(T, config, func, args);
}
EXPORT cudaError_t cudaLaunchCooperativeKernel(FAKE_RT_LAUNCH_ARGS(const void *)) {
    CNT(cudaLaunchCooperativeKernel);
    INIT(D);
    return launch_coop(T, func, gridDim, blockDim, args, sharedMem, stream);
}
EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(FAKE_RT_LAUNCH_ARGS(const void *)) {
    CNT(cudaLaunchCooperativeKernel_ptsz);
    INIT(DP);
    return launch_coop(T, func, gridDim, blockDim, args, sharedMem, stream);
}
EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags) {
    CNT(cudaGraphInstantiate);
    INIT(D);
    RET_DRV(T->cuGraphInstantiate(pGraphExec, graph, flags));
}
EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) {
    CNT(cudaGraphLaunch);
    INIT(D);
    RET_DRV(T->cuGraphLaunch(g, s));
}
EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t g, cudaStream_t s) {
    CNT(cudaGraphLaunch_ptsz);
    INIT(DP);
    RET_DRV(T->cuGraphLaunch(g, s));
}

/* --------------------------------------------------------------- memcpy */
#define DP_(p) ((CUdeviceptr)(uintptr_t)(p))
static cudaError_t memcpy_sync(const struct drv *T, void *dst, const void *src, size_t n, int kind) {
    switch (kind) {
    case cudaMemcpyHostToHost:
        if (n && (!dst || !src)) return ret(cudaErrorInvalidValue);
        if (n) memmove(dst, src, n);
        return cudaSuccess;
    case cudaMemcpyHostToDevice: RET_DRV(T->cuMemcpyHtoD_v2(DP_(dst), src, n));
    case cudaMemcpyDeviceToHost: RET_DRV(T->cuMemcpyDtoH_v2(dst, DP_(src), n));
    case cudaMemcpyDeviceToDevice: RET_DRV(T->cuMemcpyDtoD_v2(DP_(dst), DP_(src), n));
    case cudaMemcpyDefault: RET_DRV(T->cuMemcpy(DP_(dst), DP_(src), n));
    default: return ret(cudaErrorInvalidValue);
    }
}
static cudaError_t memcpy_async(const struct drv *T, void *dst, const void *src, size_t n, int kind,
                                cudaStream_t s) {
    switch (kind) {
    case cudaMemcpyHostToHost:
        if (n && (!dst || !src)) return ret(cudaErrorInvalidValue);
        if (n) memmove(dst, src, n);
        return cudaSuccess;
    case cudaMemcpyHostToDevice: RET_DRV(T->cuMemcpyHtoDAsync_v2(DP_(dst), src, n, s));
    case cudaMemcpyDeviceToHost: RET_DRV(T->cuMemcpyDtoHAsync_v2(dst, DP_(src), n, s));
    case cudaMemcpyDeviceToDevice: RET_DRV(T->cuMemcpyDtoDAsync_v2(DP_(dst), DP_(src), n, s));
    case cudaMemcpyDefault: RET_DRV(T->cuMemcpyAsync(DP_(dst), DP_(src), n, s));
    default: return ret(cudaErrorInvalidValue);
    }
}
EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    CNT(cudaMemcpy);
    INIT(D);
    return memcpy_sync(T, dst, src, n, kind);
}
EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    CNT(cudaMemcpy_ptds);
    INIT(DP);
    return memcpy_sync(T, dst, src, n, kind);
}
EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    CNT(cudaMemcpyAsync);
    INIT(D);
    return memcpy_async(T, dst, src, n, kind, s);
}
EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                        cudaStream_t s) {
    CNT(cudaMemcpyAsync_ptsz);
    INIT(DP);
    return memcpy_async(T, dst, src, n, kind, s);
}
static cudaError_t memcpy2d(const struct drv *T, void *dst, size_t dpitch, const void *src, size_t spitch,
                            size_t w, size_t h, int kind, int async, cudaStream_t s) {
    if (kind < 0 || kind > 4) return ret(cudaErrorInvalidValue);
    if ((h > 1 && (dpitch < w || spitch < w))) return ret(cudaErrorInvalidValue);
    if (kind == cudaMemcpyHostToHost) {
        for (size_t y = 0; y < h; y++) memmove((char *)dst + y * dpitch, (const char *)src + y * spitch, w);
        return cudaSuccess;
    }
    static const unsigned srct[5] = {0, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE,
                                     CU_MEMORYTYPE_UNIFIED};
    static const unsigned dstt[5] = {0, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE,
                                     CU_MEMORYTYPE_UNIFIED};
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = srct[kind], c.dstMemoryType = dstt[kind];
    if (c.srcMemoryType == CU_MEMORYTYPE_HOST)
        c.srcHost = src;
    else
        c.srcDevice = DP_(src);
    if (c.dstMemoryType == CU_MEMORYTYPE_HOST)
        c.dstHost = dst;
    else
        c.dstDevice = DP_(dst);
    c.srcPitch = spitch, c.dstPitch = dpitch, c.WidthInBytes = w, c.Height = h;
    if (async) RET_DRV(T->cuMemcpy2DAsync_v2(&c, s));
    RET_DRV(T->cuMemcpy2D_v2(&c));
}
EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h,
                                enum cudaMemcpyKind kind) {
    CNT(cudaMemcpy2D);
    INIT(D);
    return memcpy2d(T, dst, dpitch, src, spitch, w, h, kind, 0, NULL);
}
EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h,
                                     enum cudaMemcpyKind kind) {
    CNT(cudaMemcpy2D_ptds);
    INIT(DP);
    return memcpy2d(T, dst, dpitch, src, spitch, w, h, kind, 0, NULL);
}
EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h,
                                     enum cudaMemcpyKind kind, cudaStream_t s) {
    CNT(cudaMemcpy2DAsync);
    INIT(D);
    return memcpy2d(T, dst, dpitch, src, spitch, w, h, kind, 1, s);
}
EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w,
                                          size_t h, enum cudaMemcpyKind kind, cudaStream_t s) {
    CNT(cudaMemcpy2DAsync_ptsz);
    INIT(DP);
    return memcpy2d(T, dst, dpitch, src, spitch, w, h, kind, 1, s);
}
EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t n) {
    CNT(cudaMemcpyPeer);
    INIT(D);
    if (dstDevice != 0 || srcDevice != 0) return ret(cudaErrorInvalidDevice);
    RET_DRV(T->cuMemcpyPeer(DP_(dst), g_ctx, DP_(src), g_ctx, n));
}
EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t n,
                                       cudaStream_t s) {
    CNT(cudaMemcpyPeerAsync);
    INIT(D);
    if (dstDevice != 0 || srcDevice != 0) return ret(cudaErrorInvalidDevice);
    RET_DRV(T->cuMemcpyPeerAsync(DP_(dst), g_ctx, DP_(src), g_ctx, n, s));
}

/* --------------------------------------------------------------- memset */
/* Byte memsets through the driver's 8-bit memsets, one driver call each, as cudaMemcpy does. */
EXPORT cudaError_t cudaMemset(void *p, int v, size_t n) {
    CNT(cudaMemset);
    INIT(D);
    RET_DRV(T->cuMemsetD8_v2(DP_(p), (unsigned char)v, n));
}
EXPORT cudaError_t cudaMemset_ptds(void *p, int v, size_t n) {
    CNT(cudaMemset_ptds);
    INIT(DP);
    RET_DRV(T->cuMemsetD8_v2(DP_(p), (unsigned char)v, n));
}
EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    CNT(cudaMemsetAsync);
    INIT(D);
    RET_DRV(T->cuMemsetD8Async(DP_(p), (unsigned char)v, n, s));
}
EXPORT cudaError_t cudaMemsetAsync_ptsz(void *p, int v, size_t n, cudaStream_t s) {
    CNT(cudaMemsetAsync_ptsz);
    INIT(DP);
    RET_DRV(T->cuMemsetD8Async(DP_(p), (unsigned char)v, n, s));
}
EXPORT cudaError_t cudaMemset2D(void *p, size_t pitch, int v, size_t w, size_t h) {
    CNT(cudaMemset2D);
    INIT(D);
    RET_DRV(T->cuMemsetD2D8_v2(DP_(p), pitch, (unsigned char)v, w, h));
}
EXPORT cudaError_t cudaMemset2D_ptds(void *p, size_t pitch, int v, size_t w, size_t h) {
    CNT(cudaMemset2D_ptds);
    INIT(DP);
    RET_DRV(T->cuMemsetD2D8_v2(DP_(p), pitch, (unsigned char)v, w, h));
}
EXPORT cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s) {
    CNT(cudaMemset2DAsync);
    INIT(D);
    RET_DRV(T->cuMemsetD2D8Async(DP_(p), pitch, (unsigned char)v, w, h, s));
}
EXPORT cudaError_t cudaMemset2DAsync_ptsz(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s) {
    CNT(cudaMemset2DAsync_ptsz);
    INIT(DP);
    RET_DRV(T->cuMemsetD2D8Async(DP_(p), pitch, (unsigned char)v, w, h, s));
}
/* A 3D memset is a 2D one over height × depth rows when its slices are contiguous rows of the
 * allocation (extent.height == ysize, or one slice). The fake refuses the other case rather
 * than make one driver call per slice: every runtime call makes at most one driver call. */
#define MEMSET3D_ROWS(pp, e) \
    ((e).depth > 1 && (e).height != (pp).ysize ? (size_t)-1 : (e).height * (e).depth)
EXPORT cudaError_t cudaMemset3D(struct cudaPitchedPtr pp, int v, struct cudaExtent e) {
    CNT(cudaMemset3D);
    INIT(D);
    size_t rows = MEMSET3D_ROWS(pp, e);
    if (rows == (size_t)-1) return ret(cudaErrorInvalidValue);
    RET_DRV(T->cuMemsetD2D8_v2(DP_(pp.ptr), pp.pitch, (unsigned char)v, e.width, rows));
}
EXPORT cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pp, int v, struct cudaExtent e) {
    CNT(cudaMemset3D_ptds);
    INIT(DP);
    size_t rows = MEMSET3D_ROWS(pp, e);
    if (rows == (size_t)-1) return ret(cudaErrorInvalidValue);
    RET_DRV(T->cuMemsetD2D8_v2(DP_(pp.ptr), pp.pitch, (unsigned char)v, e.width, rows));
}
EXPORT cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pp, int v, struct cudaExtent e, cudaStream_t s) {
    CNT(cudaMemset3DAsync);
    INIT(D);
    size_t rows = MEMSET3D_ROWS(pp, e);
    if (rows == (size_t)-1) return ret(cudaErrorInvalidValue);
    RET_DRV(T->cuMemsetD2D8Async(DP_(pp.ptr), pp.pitch, (unsigned char)v, e.width, rows, s));
}
EXPORT cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pp, int v, struct cudaExtent e, cudaStream_t s) {
    CNT(cudaMemset3DAsync_ptsz);
    INIT(DP);
    size_t rows = MEMSET3D_ROWS(pp, e);
    if (rows == (size_t)-1) return ret(cudaErrorInvalidValue);
    RET_DRV(T->cuMemsetD2D8Async(DP_(pp.ptr), pp.pitch, (unsigned char)v, e.width, rows, s));
}

/* --------------------------------------------------------------- memory */
EXPORT cudaError_t cudaMalloc(void **p, size_t n) {
    CNT(cudaMalloc);
    INIT(D);
    RET_DRV(T->cuMemAlloc_v2((CUdeviceptr *)p, n));
}
EXPORT cudaError_t cudaFree(void *p) {
    CNT(cudaFree);
    INIT(D);
    if (!p) return cudaSuccess;
    RET_DRV(T->cuMemFree_v2(DP_(p)));
}
EXPORT cudaError_t cudaMallocHost(void **p, size_t n) {
    CNT(cudaMallocHost);
    INIT(D);
    RET_DRV(T->cuMemAllocHost_v2(p, n));
}
EXPORT cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
    CNT(cudaHostAlloc);
    INIT(D);
    RET_DRV(T->cuMemHostAlloc(p, n, flags));
}
EXPORT cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags) {
    CNT(cudaHostRegister);
    INIT(D);
    RET_DRV(T->cuMemHostRegister_v2(p, n, flags));
}
EXPORT cudaError_t cudaHostUnregister(void *p) {
    CNT(cudaHostUnregister);
    INIT(D);
    RET_DRV(T->cuMemHostUnregister(p));
}
EXPORT cudaError_t cudaFreeHost(void *p) {
    CNT(cudaFreeHost);
    INIT(D);
    RET_DRV(T->cuMemFreeHost(p));
}
EXPORT cudaError_t cudaMallocManaged(void **p, size_t n, unsigned flags) {
    CNT(cudaMallocManaged);
    INIT(D);
    RET_DRV(T->cuMemAllocManaged((CUdeviceptr *)p, n, flags ? flags : 1 /* CU_MEM_ATTACH_GLOBAL */));
}
EXPORT cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
    CNT(cudaMallocAsync);
    INIT(D);
    RET_DRV(T->cuMemAllocAsync((CUdeviceptr *)p, n, s));
}
EXPORT cudaError_t cudaMallocAsync_ptsz(void **p, size_t n, cudaStream_t s) {
    CNT(cudaMallocAsync_ptsz);
    INIT(DP);
    RET_DRV(T->cuMemAllocAsync((CUdeviceptr *)p, n, s));
}
EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    CNT(cudaFreeAsync);
    INIT(D);
    RET_DRV(T->cuMemFreeAsync(DP_(p), s));
}
EXPORT cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s) {
    CNT(cudaFreeAsync_ptsz);
    INIT(DP);
    RET_DRV(T->cuMemFreeAsync(DP_(p), s));
}
EXPORT cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t w, size_t h) {
    CNT(cudaMallocPitch);
    INIT(D);
    RET_DRV(T->cuMemAllocPitch_v2((CUdeviceptr *)p, pitch, w, h, 4));
}

/* ------------------------------------------------------ sync / streams */
EXPORT cudaError_t cudaDeviceSynchronize(void) {
    CNT(cudaDeviceSynchronize);
    INIT(D);
    RET_DRV(T->cuCtxSynchronize());
}
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    CNT(cudaStreamSynchronize);
    INIT(D);
    RET_DRV(T->cuStreamSynchronize(s));
}
EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
    CNT(cudaStreamSynchronize_ptsz);
    INIT(DP);
    RET_DRV(T->cuStreamSynchronize(s));
}
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    CNT(cudaEventSynchronize);
    INIT(D);
    RET_DRV(T->cuEventSynchronize(e));
}
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    CNT(cudaStreamWaitEvent);
    INIT(D);
    RET_DRV(T->cuStreamWaitEvent(s, e, flags));
}
EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    CNT(cudaStreamWaitEvent_ptsz);
    INIT(DP);
    RET_DRV(T->cuStreamWaitEvent(s, e, flags));
}
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) {
    CNT(cudaStreamCreate);
    INIT(D);
    RET_DRV(T->cuStreamCreate(s, 0));
}
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) {
    CNT(cudaEventCreate);
    INIT(D);
    RET_DRV(T->cuEventCreate(e, 0));
}
EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    CNT(cudaEventRecord);
    INIT(D);
    RET_DRV(T->cuEventRecord(e, s));
}
EXPORT cudaError_t cudaGetLastError(void) {
    CNT(cudaGetLastError);
    cudaError_t e = t_last_err;
    t_last_err = cudaSuccess;
    return e;
}
/* cudaSetDevice(dev): the device's primary context becomes the calling thread's current one
 * (the runtime since 12.0 binds it at once, through the driver). */
EXPORT cudaError_t cudaSetDevice(int dev) {
    CNT(cudaSetDevice);
    INIT(D);
    CUcontext c;
    CUresult r = T->cuDevicePrimaryCtxRetain(&c, dev);
    if (r != CUDA_SUCCESS) return ret(map_err(r));
    RET_DRV(T->cuCtxSetCurrent(c));
}
/* cudaGetDevice(dev): the calling thread's device. As in the real runtime, asked through the
 * driver's private export table (fetched once), not through cuCtxGetDevice: no probe on the
 * driver sees it. No current context: device 0. */
static const struct fake_ctx_table *g_ctx_tbl;
EXPORT cudaError_t cudaGetDevice(int *dev) {
    CNT(cudaGetDevice);
    INIT(D);
    if (!dev) return ret(cudaErrorInvalidValue);
    const struct fake_ctx_table *t = __atomic_load_n(&g_ctx_tbl, __ATOMIC_ACQUIRE);
    if (!t) {
        CUuuid id;
        memcpy(id.bytes, FAKE_CTX_TABLE_ID, sizeof id.bytes);
        CUresult r = T->cuGetExportTable((const void **)&t, &id);
        if (r != CUDA_SUCCESS) return ret(map_err(r));
        __atomic_store_n(&g_ctx_tbl, t, __ATOMIC_RELEASE);
    }
    CUdevice d;
    *dev = t->current_device(&d) == CUDA_SUCCESS ? d : 0;
    return ret(cudaSuccess);
}
EXPORT cudaError_t cudaGetDeviceCount(int *count) {
    CNT(cudaGetDeviceCount);
    INIT(D);
    RET_DRV(T->cuDeviceGetCount(count));
}
