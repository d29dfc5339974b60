/* Scripted NCCL workload for the gpuprofd tests: links the fake libnccl.so.2, libcudart.so.12
 * and libcuda.so.1.
 *
 * Protocol (line based, stdin -> stdout), as workload.c's: prints "ready <pid>" once, then for
 * every command line replies "ok <cmd> ..." or "err <cmd> <reason>"; EOF or "exit" ends it.
 * Communicators live in slots 0..63, streams in slots 1..15 (stream slot 0: the default
 * stream). A unique id is made from a seed word (its bytes repeated over the 128 bytes), so
 * two processes given the same seed share a communicator, as ranks given one ncclUniqueId do.
 *
 *   set_device D                     cudaSetDevice(D)
 *   stream S                         cudaStreamCreate into stream slot S
 *   init C SEED NRANKS RANK          ncclCommInitRank into slot C
 *   init_config C SEED NRANKS RANK   ncclCommInitRankConfig(…, NULL config)
 *   init_all C NDEV [DEV...]         ncclCommInitAll into slots C..C+NDEV-1 (devlist, or NULL)
 *   split NEW C COLOR KEY            ncclCommSplit(slot C) into slot NEW
 *   count C | user_rank C | cu_device C      reply "... value=N"
 *   destroy C | abort C
 *   group_start | group_end
 *   allreduce C COUNT DTYPE OP S N   N× ncclAllReduce(count, datatype, op, comm, stream slot S)
 *   reducescatter C COUNT DTYPE OP S N
 *   allgather C COUNT DTYPE S N      (also alltoall)
 *   broadcast C COUNT DTYPE ROOT S N (also bcast: ncclBcast)
 *   reduce C COUNT DTYPE OP ROOT S N
 *   send C COUNT DTYPE PEER S N      (also recv)
 *
 * Compute beside the collectives (for the GPU-time tests):
 *   gpu_ns kernel|memcpy|memset NS   how long the following kernels, copies or memsets run on
 *                                    the fake GPU (fakecuda_set_gpu_ns; the fake CUPTI's times)
 *   launch S N                       N× cuLaunchKernel of a compute kernel (gemm) on stream slot S
 *   sync S                           cudaStreamSynchronize(stream slot S)
 *   sleep_ms MS
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include "nccl_fake.h"

int cudaSetDevice(int dev);
int cudaStreamCreate(cudaStream_t *s);
int cudaStreamSynchronize(cudaStream_t s);

/* The driver's module and launch calls (linked: libcuda.so.1). */
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
int cuModuleLoadData(CUmodule *module, const void *image);
int cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
int cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned smem, cudaStream_t s, void **params, void **extra);
/* The fake driver's image format (cuda_fake.h's struct fake_fatbin). */
static const char *const compute_names[] = {"_Z4gemmPKfS0_Pfiii"};
static const struct {
    unsigned magic, count;
    const char *const *names;
} compute_image = {0x466243B1u, 1, compute_names};
static CUfunction compute;

static ncclComm_t comms[64];
static cudaStream_t streams[16];
static char buf[1 << 16];

#define FAIL(...) (snprintf(reply, 256, __VA_ARGS__), 1)

static int slot(const char *s, int *out, int max) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v >= max) return 0;
    *out = (int)v;
    return 1;
}

static ncclUniqueId id_of(const char *seed) {
    ncclUniqueId id;
    size_t n = strlen(seed);
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) id.internal[i] = n ? seed[i % n] : 0;
    return id;
}

/* One command; 0 and `extra` on success, else 1 and the reason in `reply`. */
static int run(int argc, char **argv, char *reply, char *extra) {
    const char *c = argv[0];
    int a = 0, s = 0;
    ncclResult_t r = ncclSuccess;
#define NARGS(n) \
    if (argc != (n)) return FAIL("takes %d arguments", (n) - 1)
#define COMM(i) \
    if (!slot(argv[i], &a, 64)) return FAIL("bad slot")
#define STREAM(i) \
    if (!slot(argv[i], &s, 16)) return FAIL("bad stream slot")
    if (!strcmp(c, "gpu_ns")) {
        NARGS(3);
        void (*set)(unsigned, unsigned long long) =
            (void (*)(unsigned, unsigned long long))dlsym(RTLD_DEFAULT, "fakecuda_set_gpu_ns");
        unsigned which = !strcmp(argv[1], "kernel") ? 0 : !strcmp(argv[1], "memcpy") ? 1 : 2;
        if (!set) return FAIL("the driver has no fakecuda_set_gpu_ns");
        set(which, strtoull(argv[2], NULL, 10));
        return 0;
    }
    if (!strcmp(c, "launch")) {
        NARGS(3);
        STREAM(1);
        CUmodule m;
        if (!compute && (cuModuleLoadData(&m, &compute_image) ||
                         cuModuleGetFunction(&compute, m, compute_names[0])))
            return FAIL("no compute kernel");
        for (int i = 0; i < atoi(argv[2]); i++)
            if (cuLaunchKernel(compute, 1, 1, 1, 32, 1, 1, 0, streams[s], NULL, NULL))
                return FAIL("cuLaunchKernel failed");
        return 0;
    }
    if (!strcmp(c, "sync")) {
        NARGS(2);
        STREAM(1);
        return cudaStreamSynchronize(streams[s]) ? FAIL("cudaStreamSynchronize failed") : 0;
    }
    if (!strcmp(c, "sleep_ms")) {
        NARGS(2);
        struct timespec t = {atoi(argv[1]) / 1000, (atoi(argv[1]) % 1000) * 1000000L};
        nanosleep(&t, NULL);
        return 0;
    }
    if (!strcmp(c, "set_device")) {
        NARGS(2);
        return cudaSetDevice(atoi(argv[1])) ? FAIL("cudaSetDevice failed") : 0;
    }
    if (!strcmp(c, "stream")) {
        NARGS(2);
        STREAM(1);
        if (s == 0 || cudaStreamCreate(&streams[s])) return FAIL("cudaStreamCreate failed");
        sprintf(extra, " handle=%p", (void *)streams[s]);
        return 0;
    }
    if (!strcmp(c, "init") || !strcmp(c, "init_config")) {
        NARGS(5);
        COMM(1);
        ncclUniqueId id = id_of(argv[2]);
        r = c[4] ? ncclCommInitRankConfig(&comms[a], atoi(argv[3]), id, atoi(argv[4]), NULL)
                 : ncclCommInitRank(&comms[a], atoi(argv[3]), id, atoi(argv[4]));
    } else if (!strcmp(c, "init_all")) {
        if (argc < 3) return FAIL("init_all C NDEV [DEV...]");
        COMM(1);
        int n = atoi(argv[2]), devs[16];
        if (n < 1 || n > 16 || a + n > 64 || (argc != 3 && argc != 3 + n)) return FAIL("bad ndev");
        for (int i = 0; i < n && argc > 3; i++) devs[i] = atoi(argv[3 + i]);
        r = ncclCommInitAll(&comms[a], n, argc > 3 ? devs : NULL);
    } else if (!strcmp(c, "split")) {
        NARGS(5);
        int from;
        COMM(1);
        if (!slot(argv[2], &from, 64)) return FAIL("bad slot");
        r = ncclCommSplit(comms[from], atoi(argv[3]), atoi(argv[4]), &comms[a], NULL);
    } else if (!strcmp(c, "count") || !strcmp(c, "user_rank") || !strcmp(c, "cu_device")) {
        NARGS(2);
        COMM(1);
        int v = -1;
        r = c[0] == 'c' ? (c[1] == 'o' ? ncclCommCount(comms[a], &v) : ncclCommCuDevice(comms[a], &v))
                        : ncclCommUserRank(comms[a], &v);
        sprintf(extra, " value=%d", v);
    } else if (!strcmp(c, "destroy") || !strcmp(c, "abort")) {
        NARGS(2);
        COMM(1);
        r = c[0] == 'd' ? ncclCommDestroy(comms[a]) : ncclCommAbort(comms[a]);
        comms[a] = NULL;
    } else if (!strcmp(c, "group_start")) {
        r = ncclGroupStart();
    } else if (!strcmp(c, "group_end")) {
        r = ncclGroupEnd();
    } else {
        /* Collectives: OP C COUNT DTYPE [X [Y]] S N */
        int n = argc - 1, times;
        if (argc < 6) return FAIL("unknown command or too few arguments");
        COMM(1);
        STREAM(n - 1);
        times = atoi(argv[n]);
        size_t count = strtoull(argv[2], NULL, 10);
        ncclDataType_t dt = (ncclDataType_t)atoi(argv[3]);
        int x = argc > 6 ? atoi(argv[4]) : 0, y = argc > 7 ? atoi(argv[5]) : 0;
        ncclComm_t cm = comms[a];
        cudaStream_t st = streams[s];
        for (int i = 0; i < times && r == ncclSuccess; i++) {
            if (!strcmp(c, "allreduce") && argc == 7)
                r = ncclAllReduce(buf, buf, count, dt, (ncclRedOp_t)x, cm, st);
            else if (!strcmp(c, "reducescatter") && argc == 7)
                r = ncclReduceScatter(buf, buf, count, dt, (ncclRedOp_t)x, cm, st);
            else if (!strcmp(c, "allgather") && argc == 6)
                r = ncclAllGather(buf, buf, count, dt, cm, st);
            else if (!strcmp(c, "alltoall") && argc == 6)
                r = ncclAlltoAll(buf, buf, count, dt, cm, st);
            else if (!strcmp(c, "broadcast") && argc == 7)
                r = ncclBroadcast(buf, buf, count, dt, x, cm, st);
            else if (!strcmp(c, "bcast") && argc == 7)
                r = ncclBcast(buf, count, dt, x, cm, st);
            else if (!strcmp(c, "reduce") && argc == 8)
                r = ncclReduce(buf, buf, count, dt, (ncclRedOp_t)x, y, cm, st);
            else if (!strcmp(c, "send") && argc == 7)
                r = ncclSend(buf, count, dt, x, cm, st);
            else if (!strcmp(c, "recv") && argc == 7)
                r = ncclRecv(buf, count, dt, x, cm, st);
            else
                return FAIL("unknown command or wrong arguments");
        }
    }
    return r != ncclSuccess ? FAIL("ncclResult_t %d", (int)r) : 0;
}

int main(void) {
    char line[1024];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    while (fgets(line, sizeof line, stdin)) {
        char *argv[32];
        int argc = 0;
        for (char *t = strtok(line, " \t\r\n"); t && argc < 32; t = strtok(NULL, " \t\r\n")) argv[argc++] = t;
        if (!argc) continue;
        if (!strcmp(argv[0], "exit")) break;
        char reply[256] = "", extra[128] = "";
        if (run(argc, argv, reply, extra))
            printf("err %s %s\n", argv[0], reply);
        else
            printf("ok %s%s\n", argv[0], extra);
    }
    return 0;
}
