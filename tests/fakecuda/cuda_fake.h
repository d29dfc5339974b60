/* Minimal CUDA driver/runtime declarations for the gpuprofd fake CUDA
 * libraries.  Prototypes, struct layouts and enum values follow the real
 * CUDA 12.9 headers (cuda.h / cuda_runtime_api.h / crt/host_runtime.h).
 * Unlike cuda.h there are NO #define renames: every declaration uses the
 * name that is really exported (cuMemAlloc_v2, cuLaunchKernel_ptsz, ...). */
#ifndef CUDA_FAKE_H
#define CUDA_FAKE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- driver */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned int CUdeviceptr_v1;
typedef uint64_t cuuint64_t;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef int CUjit_option;
typedef int CUlibraryOption;
typedef int CUdriverProcAddressQueryResult;
typedef struct CUmemAllocationProp_st CUmemAllocationProp; /* opaque here */

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

enum { /* CUmemorytype */
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4,
};

enum { /* cuGetProcAddress flags */
    CU_GET_PROC_ADDRESS_DEFAULT = 0,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 2,
};
enum { /* CUdriverProcAddressQueryResult */
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef struct CUlaunchAttribute_st {
    unsigned int id;
    char pad[4];
    unsigned char value[64];
} CUlaunchAttribute; /* 72 bytes */

typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes;
    size_t srcY;
    unsigned int srcMemoryType; /* CUmemorytype */
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes;
    size_t dstY;
    unsigned int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes;
    size_t Height;
} CUDA_MEMCPY2D;

CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxGetDevice(CUdevice *device);
/* cuGetExportTable: the driver's private interfaces, by UUID, that the real runtime uses for
 * what it asks most often (the current context, its device) without an exported call. The
 * fake driver has one, FAKE_CTX_TABLE_ID. */
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId);
struct fake_ctx_table {
    size_t size;
    CUresult (*current_device)(CUdevice *dev);
};
#define FAKE_CTX_TABLE_ID "fakecuda:ctx-tbl" /* 16 bytes, no NUL */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                           void **jitOptionsValues, unsigned int numJitOptions,
                           CUlibraryOption *libraryOptions, void **libraryOptionValues,
                           unsigned int numLibraryOptions);
CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name);
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel);
CUresult cuFuncGetName(const char **name, CUfunction hfunc);
CUresult cuKernelGetName(const char **name, CUkernel hfunc);

#define FAKE_LAUNCH_ARGS                                                                        \
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,          \
        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                 \
        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams
CUresult cuLaunchKernel(FAKE_LAUNCH_ARGS, void **extra);
CUresult cuLaunchKernel_ptsz(FAKE_LAUNCH_ARGS, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchCooperativeKernel(FAKE_LAUNCH_ARGS);
CUresult cuLaunchCooperativeKernel_ptsz(FAKE_LAUNCH_ARGS);
/* CUDA 12 cuda.h maps cuGraphInstantiate -> cuGraphInstantiateWithFlags; the
 * fake exports that 3-argument shape under the name cuGraphInstantiate. */
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy);
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy);
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream);
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream);
CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                      CUcontext srcContext, size_t ByteCount);
CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount);
CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                CUcontext srcContext, size_t ByteCount, CUstream hStream);
/* Memsets (cuda.h 12.9/13.5): N / Width count elements of 8, 16 or 32 bits. */
#define FAKE_MEMSET_PROTOS(bits, vty)                                                                         \
    CUresult cuMemsetD##bits##_v2(CUdeviceptr dstDevice, vty value, size_t N);                                \
    CUresult cuMemsetD##bits##_v2_ptds(CUdeviceptr dstDevice, vty value, size_t N);                           \
    CUresult cuMemsetD##bits##Async(CUdeviceptr dstDevice, vty value, size_t N, CUstream hStream);            \
    CUresult cuMemsetD##bits##Async_ptsz(CUdeviceptr dstDevice, vty value, size_t N, CUstream hStream);       \
    CUresult cuMemsetD2D##bits##_v2(CUdeviceptr dstDevice, size_t dstPitch, vty value, size_t Width,          \
                                    size_t Height);                                                           \
    CUresult cuMemsetD2D##bits##_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, vty value, size_t Width,     \
                                         size_t Height);                                                      \
    CUresult cuMemsetD2D##bits##Async(CUdeviceptr dstDevice, size_t dstPitch, vty value, size_t Width,        \
                                      size_t Height, CUstream hStream);                                       \
    CUresult cuMemsetD2D##bits##Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, vty value, size_t Width,   \
                                           size_t Height, CUstream hStream);
FAKE_MEMSET_PROTOS(8, unsigned char)
FAKE_MEMSET_PROTOS(16, unsigned short)
FAKE_MEMSET_PROTOS(32, unsigned int)

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuCtxSynchronize(void);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes);
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle handle);
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size);

/* Legacy v1 exports (32-bit CUdeviceptr_v1 / unsigned int sizes), kept by
 * the real driver for pre-3.2 binaries. */
CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount);
CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
CUresult cuMemFree(CUdeviceptr_v1 dptr);

/* Non-CUDA test hooks exported by the fake libcuda.so.1 */
void fakecuda_set_sync_delay_us(unsigned us);
unsigned long long fakecuda_calls(const char *impl_name);
void fakecuda_set_deinitialized(int on); /* 1: every trampoline returns 4 */
/* A digest of everything the driver was asked and did (which calls, launch shapes, bytes
 * copied and their contents, sizes allocated): a sum of per-call hashes, so it does not
 * depend on the order threads ran in. Equal with and without a profiler attached. */
unsigned long long fakecuda_digest(void);

static inline unsigned long long fake_mix(unsigned long long a, unsigned long long b) {
    unsigned long long x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
    x ^= x >> 30, x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27, x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
/* FNV-1a over up to 64 bytes at each end of a buffer. */
static inline unsigned long long fake_bytes_hash(const void *p, unsigned long long n) {
    const unsigned char *b = p;
    unsigned long long h = 0xcbf29ce484222325ull;
    for (unsigned long long i = 0; i < n && i < 64; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    for (unsigned long long i = n > 64 ? n - 64 : n; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FAKE_DIGEST(var, a, b) \
    __atomic_fetch_add(&(var), fake_mix((unsigned long long)(a), (unsigned long long)(b)), __ATOMIC_RELAXED)

/* --------------------------------------------------------------- runtime */
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUkern_st *cudaKernel_t;
typedef struct dim3 { unsigned int x, y, z; } dim3;
typedef struct uint3 { unsigned int x, y, z; } uint3;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorCudartUnloading = 4,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidKernelImage = 200,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorSymbolNotFound = 500,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
};

typedef struct cudaLaunchAttribute_st {
    unsigned int id;
    char pad[4];
    unsigned char val[64];
} cudaLaunchAttribute; /* 72 bytes, layout-identical to CUlaunchAttribute */

typedef struct cudaLaunchConfig_st {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned int numAttrs;
} cudaLaunchConfig_t;

#define FAKE_RT_LAUNCH_ARGS(fty) fty func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream
cudaError_t cudaLaunchKernel(FAKE_RT_LAUNCH_ARGS(const void *));
cudaError_t cudaLaunchKernel_ptsz(FAKE_RT_LAUNCH_ARGS(const void *));
cudaError_t __cudaLaunchKernel(FAKE_RT_LAUNCH_ARGS(cudaKernel_t));
cudaError_t __cudaLaunchKernel_ptsz(FAKE_RT_LAUNCH_ARGS(cudaKernel_t));
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args);
cudaError_t cudaLaunchCooperativeKernel(FAKE_RT_LAUNCH_ARGS(const void *));
cudaError_t cudaLaunchCooperativeKernel_ptsz(FAKE_RT_LAUNCH_ARGS(const void *));
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                 cudaStream_t stream);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                   size_t height, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count);
cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                                cudaStream_t stream);
struct cudaPitchedPtr {
    void *ptr;
    size_t pitch;
    size_t xsize;
    size_t ysize;
};
struct cudaExtent {
    size_t width; /* in bytes for linear memory */
    size_t height;
    size_t depth;
};
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width, size_t height);
cudaError_t cudaMemset2D_ptds(void *devPtr, size_t pitch, int value, size_t width, size_t height);
cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t stream);
cudaError_t cudaMemset2DAsync_ptsz(void *devPtr, size_t pitch, int value, size_t width, size_t height,
                                   cudaStream_t stream);
cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent);
cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent);
cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent,
                              cudaStream_t stream);
cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent,
                                   cudaStream_t stream);
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream);
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);

/* crt/host_runtime.h registration API */
typedef struct {
    int magic; /* FATBINC_MAGIC */
    int version;
    const void *data; /* -> struct fake_fatbin */
    void *filename_or_fatbins;
} __fatBinC_Wrapper_t;
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);

/* Non-CUDA test hook exported by the fake libcudart.so.12: per runtime
 * entry point call counts, by exported name ("cudaLaunchKernel"). */
unsigned long long fakecudart_calls(const char *name);
/* The runtime's digest (see fakecuda_digest): which entry points ran, with what. */
unsigned long long fakecudart_digest(void);

/* ------------------------------------------------------------ fake image */
#define FATBINC_MAGIC 0x466243B1
#define FAKE_FATBIN_MAGIC 0x466243B1u
/* An image whose function objects keep no name pointer of their own (the fake driver finds
 * the name through the module): a driver object laid out otherwise, for the tests of the
 * daemon's layout learner. */
#define FAKE_FATBIN_MAGIC_ELSEWHERE 0x466243B2u
struct fake_fatbin {
    unsigned magic; /* FAKE_FATBIN_MAGIC */
    unsigned count;
    const char *const *names;
};

/* ------------------------------------------------------------ ABI checks */
#define FAKE_OFF(t, f, o) _Static_assert(offsetof(t, f) == (o), #t "." #f)
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute");
_Static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig");
FAKE_OFF(CUlaunchConfig, gridDimX, 0);
FAKE_OFF(CUlaunchConfig, gridDimY, 4);
FAKE_OFF(CUlaunchConfig, gridDimZ, 8);
FAKE_OFF(CUlaunchConfig, blockDimX, 12);
FAKE_OFF(CUlaunchConfig, blockDimY, 16);
FAKE_OFF(CUlaunchConfig, blockDimZ, 20);
FAKE_OFF(CUlaunchConfig, sharedMemBytes, 24);
FAKE_OFF(CUlaunchConfig, hStream, 32);
FAKE_OFF(CUlaunchConfig, attrs, 40);
FAKE_OFF(CUlaunchConfig, numAttrs, 48);
_Static_assert(sizeof(CUDA_MEMCPY2D) == 128, "CUDA_MEMCPY2D");
FAKE_OFF(CUDA_MEMCPY2D, srcXInBytes, 0);
FAKE_OFF(CUDA_MEMCPY2D, srcY, 8);
FAKE_OFF(CUDA_MEMCPY2D, srcMemoryType, 16);
FAKE_OFF(CUDA_MEMCPY2D, srcHost, 24);
FAKE_OFF(CUDA_MEMCPY2D, srcDevice, 32);
FAKE_OFF(CUDA_MEMCPY2D, srcArray, 40);
FAKE_OFF(CUDA_MEMCPY2D, srcPitch, 48);
FAKE_OFF(CUDA_MEMCPY2D, dstXInBytes, 56);
FAKE_OFF(CUDA_MEMCPY2D, dstY, 64);
FAKE_OFF(CUDA_MEMCPY2D, dstMemoryType, 72);
FAKE_OFF(CUDA_MEMCPY2D, dstHost, 80);
FAKE_OFF(CUDA_MEMCPY2D, dstDevice, 88);
FAKE_OFF(CUDA_MEMCPY2D, dstArray, 96);
FAKE_OFF(CUDA_MEMCPY2D, dstPitch, 104);
FAKE_OFF(CUDA_MEMCPY2D, WidthInBytes, 112);
FAKE_OFF(CUDA_MEMCPY2D, Height, 120);
_Static_assert(sizeof(dim3) == 12, "dim3");
_Static_assert(sizeof(cudaLaunchAttribute) == 72, "cudaLaunchAttribute");
_Static_assert(sizeof(cudaLaunchConfig_t) == 56, "cudaLaunchConfig_t");
FAKE_OFF(cudaLaunchConfig_t, gridDim, 0);
FAKE_OFF(cudaLaunchConfig_t, blockDim, 12);
FAKE_OFF(cudaLaunchConfig_t, dynamicSmemBytes, 24);
FAKE_OFF(cudaLaunchConfig_t, stream, 32);
FAKE_OFF(cudaLaunchConfig_t, attrs, 40);
FAKE_OFF(cudaLaunchConfig_t, numAttrs, 48);
_Static_assert(sizeof(struct cudaPitchedPtr) == 32, "cudaPitchedPtr");
_Static_assert(sizeof(struct cudaExtent) == 24, "cudaExtent");
_Static_assert(sizeof(__fatBinC_Wrapper_t) == 24, "__fatBinC_Wrapper_t");
FAKE_OFF(__fatBinC_Wrapper_t, data, 8);
_Static_assert(sizeof(struct fake_fatbin) == 16, "fake_fatbin");

#ifdef __cplusplus
}
#endif
#endif /* CUDA_FAKE_H */
