/* A fake libnccl.so.2 for the gpuprofd tests: NCCL's real SONAME, prototypes, enum values and
 * entry shapes (see docs/NCCL.md), no GPU and no network.
 *
 * Every API function is exported twice at one address, as the real library does: `pncclX`
 * (strong, the profiling interface's name) and `ncclX` (a weak alias). Built with frame
 * pointers and no shrink-wrapping, each begins with `push %rbp` (the real one's shape for
 * nearly all of them); ncclCommInitRankConfig and ncclCommInitAll begin with a `movabs` into
 * %rax before it, as in the real 2.32.3 (nccl_tramp.S). ncclBcast calls ncclBroadcast through
 * the PLT, as the real one does.
 *
 * Communicators are made locally: NCCL's initialisation is collective across ranks, this one
 * is not, so one process can make all the ranks of a "world" (each call gives one rank). A
 * communicator's device is the calling thread's CUDA device (cudaGetDevice, looked up at run
 * time so that the library needs no runtime), 0 without a runtime.
 *
 * Each collective and point-to-point call runs a device kernel, as the real one does: its
 * `ncclDevKernel_*` on the call's stream, at the call or, inside a ncclGroupStart/ncclGroupEnd
 * group, once at the group's end (on the first call's stream). Here the kernels (2.32.3's
 * names) live in a module of the fake driver's image format, loaded at the first launch, and
 * go through the driver's cuLaunchKernelEx (how the real one reaches the driver is not
 * modelled); the driver is looked up at run time (no driver, no kernel). The fake CUPTI times
 * them like any kernel (`gpu_ns kernel`). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_fake.h"
/* The driver's types and the fake image format (its functions are looked up, not linked). */
#include "cuda_fake.h"

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))
/* NCCL's NCCL_API: the `p` name is the definition, the plain name a weak alias of it. */
#define NCCL_API(ret, name, ...)                                                               \
    EXPORT ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));                     \
    EXPORT ret p##name(__VA_ARGS__)

struct ncclComm {
    unsigned magic;
    int rank, nranks, dev;
    ncclUniqueId id;
};
#define COMM_MAGIC 0x6e63636cu

static __thread int g_group_depth;

static int current_device(void) {
    int (*get)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cudaGetDevice");
    int d = 0;
    if (get && get(&d) != 0) d = 0;
    return d;
}

static int valid(const struct ncclComm *c) { return c && c->magic == COMM_MAGIC; }

/* NCCL's device kernels as CUPTI names them (mangled), as the real 2.32.3 (pip's
 * nvidia-nccl-cu12) has them: `ncclDevKernel_<Coll>[_<Type>]_<Algo>(ncclDevKernelArgsStorage<4096ul>)`;
 * AlltoAll runs as SendRecv (it has no kernel of its own there). */
enum { K_ALLREDUCE, K_REDUCESCATTER, K_ALLGATHER, K_ALLTOALL, K_BROADCAST, K_REDUCE, K_SENDRECV, NK };
static const char *const kernel_names[NK] = {
    "_Z32ncclDevKernel_AllReduce_f32_RING24ncclDevKernelArgsStorageILm4096EE",
    "_Z36ncclDevKernel_ReduceScatter_f32_RING24ncclDevKernelArgsStorageILm4096EE",
    "_Z28ncclDevKernel_AllGather_RING24ncclDevKernelArgsStorageILm4096EE",
    "_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE",
    "_Z28ncclDevKernel_Broadcast_RING24ncclDevKernelArgsStorageILm4096EE",
    "_Z29ncclDevKernel_Reduce_f32_RING24ncclDevKernelArgsStorageILm4096EE",
    "_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE",
};
static const struct fake_fatbin kernel_image = {FAKE_FATBIN_MAGIC, NK, kernel_names};
static CUfunction g_kernels[NK];
static CUresult (*g_launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
static pthread_once_t g_kernels_once = PTHREAD_ONCE_INIT;

static void load_kernels(void) {
    CUresult (*load)(CUmodule *, const void *) =
        (CUresult(*)(CUmodule *, const void *))dlsym(RTLD_DEFAULT, "cuModuleLoadData");
    CUresult (*get)(CUfunction *, CUmodule, const char *) =
        (CUresult(*)(CUfunction *, CUmodule, const char *))dlsym(RTLD_DEFAULT, "cuModuleGetFunction");
    CUmodule m;
    if (!load || !get || load(&m, &kernel_image) != CUDA_SUCCESS) return;
    for (int i = 0; i < NK; i++)
        if (get(&g_kernels[i], m, kernel_names[i]) != CUDA_SUCCESS) return;
    g_launch_ex = (CUresult(*)(const CUlaunchConfig *, CUfunction, void **, void **))dlsym(
        RTLD_DEFAULT, "cuLaunchKernelEx");
}

/* A group's pending kernel: the first call's kernel and stream. */
static __thread int g_group_kernel = -1;
static __thread cudaStream_t g_group_stream;

static void launch_now(int k, cudaStream_t stream) {
    pthread_once(&g_kernels_once, load_kernels);
    if (!g_launch_ex) return;
    void *args[1] = {NULL};
    CUlaunchConfig c = {1, 1, 1, 64, 1, 1, 0, (CUstream)stream, NULL, 0};
    g_launch_ex(&c, g_kernels[k], args, NULL);
}

/* Kernel `k` of a successful call on `stream`: now, or at the group's end. */
static ncclResult_t launch(ncclResult_t r, int k, cudaStream_t stream) {
    if (r != ncclSuccess) return r;
    if (g_group_depth > 0) {
        if (g_group_kernel < 0) g_group_kernel = k, g_group_stream = stream;
    } else {
        launch_now(k, stream);
    }
    return r;
}

static ncclResult_t make(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, int dev) {
    if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->dev = dev;
    if (id) c->id = *id;
    *out = c;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId) {
    if (!uniqueId) return ncclInvalidArgument;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) uniqueId->internal[i] = (char)rand();
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    return make(comm, nranks, &commId, rank, current_device());
}

/* Behind the movabs entries of nccl_tramp.S. */
HIDDEN ncclResult_t fake_comm_init_rank_config(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                               ncclConfig_t *config) {
    (void)config;
    return make(comm, nranks, &commId, rank, current_device());
}

HIDDEN ncclResult_t fake_comm_init_all(ncclComm_t *comms, int ndev, const int *devlist) {
    if (!comms || ndev < 1) return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        ncclResult_t r = make(&comms[i], ndev, NULL, i, devlist ? devlist[i] : i);
        if (r != ncclSuccess) return r;
    }
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         ncclConfig_t *config) {
    (void)key;
    (void)config;
    if (!valid(comm) || !newcomm) return ncclInvalidArgument;
    if (color == NCCL_SPLIT_NOCOLOR) {
        *newcomm = NULL;
        return ncclSuccess;
    }
    /* As if every rank gave the same color: the same ranks. */
    return make(newcomm, comm->nranks, NULL, comm->rank, comm->dev);
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
    if (!valid(comm)) return ncclInvalidArgument;
    comm->magic = 0;
    free(comm);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
    if (!valid(comm)) return ncclInvalidArgument;
    comm->magic = 0;
    free(comm);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count) {
    if (!valid(comm) || !count) return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device) {
    if (!valid(comm) || !device) return ncclInvalidArgument;
    *device = comm->dev;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank) {
    if (!valid(comm) || !rank) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

static ncclResult_t check(ncclComm_t comm, ncclDataType_t dt, int op) {
    if (!valid(comm) || (unsigned)dt >= ncclNumTypes || (op >= 0 && (unsigned)op >= ncclNumOps))
        return ncclInvalidArgument;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)count;
    return launch(check(comm, datatype, op), K_ALLREDUCE, stream);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)recvcount;
    return launch(check(comm, datatype, op), K_REDUCESCATTER, stream);
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)sendcount;
    return launch(check(comm, datatype, -1), K_ALLGATHER, stream);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)count;
    return launch(check(comm, datatype, -1), K_ALLTOALL, stream);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)count;
    if (valid(comm) && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
    return launch(check(comm, datatype, -1), K_BROADCAST, stream);
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)count;
    if (valid(comm) && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
    return launch(check(comm, datatype, op), K_REDUCE, stream);
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)count;
    if (valid(comm) && (peer < 0 || peer >= comm->nranks)) return ncclInvalidArgument;
    return launch(check(comm, datatype, -1), K_SENDRECV, stream);
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
    (void)recvbuff, (void)count;
    if (valid(comm) && (peer < 0 || peer >= comm->nranks)) return ncclInvalidArgument;
    return launch(check(comm, datatype, -1), K_SENDRECV, stream);
}

NCCL_API(ncclResult_t, ncclGroupStart, void) {
    g_group_depth++;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void) {
    if (g_group_depth == 0) return ncclInvalidUsage;
    g_group_depth--;
    if (g_group_depth == 0 && g_group_kernel >= 0) {
        launch_now(g_group_kernel, g_group_stream);
        g_group_kernel = -1;
    }
    return ncclSuccess;
}
