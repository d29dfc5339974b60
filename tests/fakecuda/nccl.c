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
 * time so that the library needs no runtime), 0 without a runtime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_fake.h"

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
    (void)sendbuff, (void)recvbuff, (void)count, (void)stream;
    return check(comm, datatype, op);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)recvcount, (void)stream;
    return check(comm, datatype, op);
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)sendcount, (void)stream;
    return check(comm, datatype, -1);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)count, (void)stream;
    return check(comm, datatype, -1);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)count, (void)stream;
    if (valid(comm) && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
    return check(comm, datatype, -1);
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)recvbuff, (void)count, (void)stream;
    if (valid(comm) && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
    return check(comm, datatype, op);
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff, (void)count, (void)stream;
    if (valid(comm) && (peer < 0 || peer >= comm->nranks)) return ncclInvalidArgument;
    return check(comm, datatype, -1);
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
    (void)recvbuff, (void)count, (void)stream;
    if (valid(comm) && (peer < 0 || peer >= comm->nranks)) return ncclInvalidArgument;
    return check(comm, datatype, -1);
}

NCCL_API(ncclResult_t, ncclGroupStart, void) {
    g_group_depth++;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void) {
    if (g_group_depth == 0) return ncclInvalidUsage;
    g_group_depth--;
    return ncclSuccess;
}
