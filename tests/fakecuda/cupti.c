/* Fake libcupti.so.12 (CUPTI 12.9 Update 1, API version 28): the real prototypes, enum values
 * and record layouts (CUpti_ActivityKernel9, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4 as in
 * cupti_activity.h, checked below and against cudarc's bindings by profiler-inject's
 * `layouts_match_the_fake_cupti` test), with the activity API's semantics: buffers requested
 * from the client on the thread that enqueued the work, completed buffers delivered from a
 * worker thread of its own (full buffers only: the real CUPTI's periodic flush, whatever
 * cuptiActivityFlushPeriod says, "can return only those activity buffers which are full") or
 * synchronously by cuptiActivityFlushAll (partly filled ones too); one subscriber per process; one CUPTI per process (a second copy of
 * this library, another file, is refused by the fake driver: attach_to_driver).
 *
 * The "GPU" is the fake driver (cupti_fake.h): each kernel, copy and memset becomes a record
 * with the scripted duration on a per-stream clock (start = max(enqueue time, the stream's
 * previous end)). CUPTI's clock is CLOCK_MONOTONIC + FAKECUPTI_EPOCH_NS, so a client that does
 * not convert is visibly wrong.
 *
 * Environment: FAKECUPTI_LOG=FILE appends one line per call that changes state (subscribe,
 * unsubscribe, register, enable K, disable K, threadidtype T, driverapi CBID 0|1, flush F,
 * period MS, deliver N, dropped N: a nonzero drop count read); FAKECUPTI_VERSION=V
 * reports another API version. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cupti_fake.h"

#define EXPORT __attribute__((visibility("default")))
#define PACKED_ALIGNMENT __attribute__((__packed__)) __attribute__((aligned(8)))
#define FAKECUPTI_EPOCH_NS 7000000000000ull

typedef enum {
    CUPTI_SUCCESS = 0,
    CUPTI_ERROR_INVALID_PARAMETER = 1,
    CUPTI_ERROR_INVALID_KIND = 3,
    CUPTI_ERROR_MAX_LIMIT_REACHED = 12,
    CUPTI_ERROR_NOT_INITIALIZED = 15,
    CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39,
    CUPTI_ERROR_UNKNOWN = 999,
    CUPTI_ERROR_FORCE_INT = 0x7fffffff
} CUptiResult;
typedef enum {
    CUPTI_ACTIVITY_KIND_INVALID = 0,
    CUPTI_ACTIVITY_KIND_MEMCPY = 1,
    CUPTI_ACTIVITY_KIND_MEMSET = 2,
    CUPTI_ACTIVITY_KIND_DRIVER = 4,
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
    CUPTI_ACTIVITY_KIND_FORCE_INT = 0x7fffffff
} CUpti_ActivityKind;
typedef enum { CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_UNKNOWN = 0, PGC_FORCE_INT = 0x7fffffff } CUpti_ActivityPartitionedGlobalCacheConfig;
typedef enum { CUPTI_FUNC_SHMEM_LIMIT_DEFAULT = 0, SHMEM_FORCE_INT = 0x7fffffff } CUpti_FuncShmemLimitConfig;
typedef enum { CUPTI_CHANNEL_TYPE_INVALID = 0, CHANNEL_FORCE_INT = 0x7fffffff } CUpti_ChannelType;
typedef enum {
    CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT = 0,
    CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM = 1,
    CUPTI_ACTIVITY_THREAD_ID_TYPE_SIZE = 2,
    CUPTI_ACTIVITY_THREAD_ID_TYPE_FORCE_INT = 0x7fffffff
} CUpti_ActivityThreadIdType;
typedef struct CUaccessPolicyWindow_st CUaccessPolicyWindow;
typedef struct CUctx_st *CUcontext;
typedef struct CUpti_Subscriber_st *CUpti_SubscriberHandle;
typedef uint32_t CUpti_CallbackId;
typedef int CUpti_CallbackDomain;
typedef void (*CUpti_CallbackFunc)(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                   const void *cbdata);
typedef struct {
    CUpti_ActivityKind kind;
} CUpti_Activity;
typedef void (*CUpti_BuffersCallbackRequestFunc)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*CUpti_BuffersCallbackCompleteFunc)(CUcontext context, uint32_t streamId, uint8_t *buffer,
                                                   size_t size, size_t validSize);

typedef struct PACKED_ALIGNMENT {
    CUpti_ActivityKind kind;
    union {
        uint8_t both;
        struct {
            uint8_t requested : 4;
            uint8_t executed : 4;
        } config;
    } cacheConfig;
    uint8_t sharedMemoryConfig;
    uint16_t registersPerThread;
    CUpti_ActivityPartitionedGlobalCacheConfig partitionedGlobalCacheRequested;
    CUpti_ActivityPartitionedGlobalCacheConfig partitionedGlobalCacheExecuted;
    uint64_t start;
    uint64_t end;
    uint64_t completed;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    int32_t gridX, gridY, gridZ;
    int32_t blockX, blockY, blockZ;
    int32_t staticSharedMemory;
    int32_t dynamicSharedMemory;
    uint32_t localMemoryPerThread;
    uint32_t localMemoryTotal;
    uint32_t correlationId;
    int64_t gridId;
    const char *name;
    void *reserved0;
    uint64_t queued;
    uint64_t submitted;
    uint8_t launchType;
    uint8_t isSharedMemoryCarveoutRequested;
    uint8_t sharedMemoryCarveoutRequested;
    uint8_t padding;
    uint32_t sharedMemoryExecuted;
    uint64_t graphNodeId;
    CUpti_FuncShmemLimitConfig shmemLimitConfig;
    uint32_t graphId;
    CUaccessPolicyWindow *pAccessPolicyWindow;
    uint32_t channelID;
    CUpti_ChannelType channelType;
    uint32_t clusterX, clusterY, clusterZ;
    uint32_t clusterSchedulingPolicy;
    uint64_t localMemoryTotal_v2;
    uint32_t maxPotentialClusterSize;
    uint32_t maxActiveClusters;
} CUpti_ActivityKernel9;

typedef struct PACKED_ALIGNMENT {
    CUpti_ActivityKind kind;
    uint8_t copyKind, srcKind, dstKind, flags;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t correlationId;
    uint32_t runtimeCorrelationId;
    uint32_t pad; /* CUPTILP64 */
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    CUpti_ChannelType channelType;
    uint32_t pad2;
    uint64_t copyCount;
} CUpti_ActivityMemcpy6;

typedef struct PACKED_ALIGNMENT {
    CUpti_ActivityKind kind;
    uint32_t value;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t correlationId;
    uint16_t flags;
    uint16_t memoryKind;
    uint32_t pad; /* CUPTILP64 */
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    CUpti_ChannelType channelType;
    uint32_t pad2;
} CUpti_ActivityMemset4;

typedef struct PACKED_ALIGNMENT {
    CUpti_ActivityKind kind;
    CUpti_CallbackId cbid;
    uint64_t start;
    uint64_t end;
    uint32_t processId;
    uint32_t threadId;
    uint32_t correlationId;
    uint32_t returnValue;
} CUpti_ActivityAPI;

/* The same numbers as profiler-inject's layouts_match_the_fake_cupti (cudarc's bindings). */
#define AT(t, f, n) _Static_assert(offsetof(t, f) == n, #t "." #f)
_Static_assert(sizeof(CUpti_ActivityKernel9) == 208, "Kernel9 size");
AT(CUpti_ActivityKernel9, start, 16); AT(CUpti_ActivityKernel9, end, 24); AT(CUpti_ActivityKernel9, deviceId, 40);
AT(CUpti_ActivityKernel9, contextId, 44); AT(CUpti_ActivityKernel9, streamId, 48);
AT(CUpti_ActivityKernel9, correlationId, 92); AT(CUpti_ActivityKernel9, gridId, 96);
AT(CUpti_ActivityKernel9, name, 104); AT(CUpti_ActivityKernel9, graphId, 156);
AT(CUpti_ActivityKernel9, maxActiveClusters, 204);
_Static_assert(sizeof(CUpti_ActivityMemcpy6) == 96, "Memcpy6 size");
AT(CUpti_ActivityMemcpy6, copyKind, 4); AT(CUpti_ActivityMemcpy6, bytes, 8); AT(CUpti_ActivityMemcpy6, start, 16);
AT(CUpti_ActivityMemcpy6, end, 24); AT(CUpti_ActivityMemcpy6, deviceId, 32); AT(CUpti_ActivityMemcpy6, contextId, 36);
AT(CUpti_ActivityMemcpy6, streamId, 40); AT(CUpti_ActivityMemcpy6, correlationId, 44);
AT(CUpti_ActivityMemcpy6, copyCount, 88);
_Static_assert(sizeof(CUpti_ActivityMemset4) == 88, "Memset4 size");
AT(CUpti_ActivityMemset4, value, 4); AT(CUpti_ActivityMemset4, bytes, 8); AT(CUpti_ActivityMemset4, start, 16);
AT(CUpti_ActivityMemset4, end, 24); AT(CUpti_ActivityMemset4, deviceId, 32); AT(CUpti_ActivityMemset4, contextId, 36);
AT(CUpti_ActivityMemset4, streamId, 40); AT(CUpti_ActivityMemset4, correlationId, 44);
AT(CUpti_ActivityMemset4, graphId, 72);
_Static_assert(sizeof(CUpti_ActivityAPI) == 40, "API size");
AT(CUpti_ActivityAPI, cbid, 4); AT(CUpti_ActivityAPI, start, 8); AT(CUpti_ActivityAPI, end, 16);
AT(CUpti_ActivityAPI, processId, 24); AT(CUpti_ActivityAPI, threadId, 28);
AT(CUpti_ActivityAPI, correlationId, 32); AT(CUpti_ActivityAPI, returnValue, 36);

/* ------------------------------------------------------------------ state */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;       /* buffers, streams, dropped */
static pthread_mutex_t g_deliver_mu = PTHREAD_MUTEX_INITIALIZER; /* one delivery at a time */
static volatile uint32_t g_enabled;                              /* 1u << kind */
static CUpti_BuffersCallbackRequestFunc g_req;
static CUpti_BuffersCallbackCompleteFunc g_done;
static int g_subscribed;
static uint32_t g_period_ms;
static int g_hold; /* fakecupti_hold: the worker keeps completed buffers */
static uint32_t g_corr;
static size_t g_dropped;
struct buf {
    uint8_t *p;
    size_t size, used;
};
static struct buf g_cur;
#define MAXDONE 64
static struct buf g_done_q[MAXDONE];
static unsigned g_ndone;
struct stream_clock {
    uintptr_t handle;
    uint32_t id;
    uint64_t end;
};
#define MAXSTREAMS 64
static struct stream_clock g_streams[MAXSTREAMS];
static unsigned g_nstreams;
static uint32_t g_next_stream_id = 13;
/* driver API records enabled per callback id (cuptiActivityEnableDriverApi), and their count */
#define MAXCBID 1024
static uint8_t g_api_on[MAXCBID];
static unsigned g_api_n;
static CUpti_ActivityThreadIdType g_tid_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    const char *path = getenv("FAKECUPTI_LOG");
    if (!path || !*path) return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + FAKECUPTI_EPOCH_NS;
}

static size_t record_size(uint32_t kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel9);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_DRIVER: return sizeof(CUpti_ActivityAPI);
    default: return 0;
    }
}

/* g_mu held */
static void retire_current(void) {
    if (g_cur.p && g_ndone < MAXDONE) g_done_q[g_ndone++] = g_cur;
    g_cur.p = NULL, g_cur.size = g_cur.used = 0;
}

/* Delivers every retired buffer (and, with `current`, the one being filled) on this thread. */
static void deliver(int current) {
    pthread_mutex_lock(&g_deliver_mu);
    struct buf q[MAXDONE];
    pthread_mutex_lock(&g_mu);
    if (current && g_cur.p && g_cur.used) retire_current();
    unsigned n = g_ndone;
    memcpy(q, g_done_q, n * sizeof q[0]);
    g_ndone = 0;
    CUpti_BuffersCallbackCompleteFunc done = g_done;
    pthread_mutex_unlock(&g_mu);
    for (unsigned i = 0; i < n; i++) {
        size_t recs = 0;
        for (size_t off = 0; off < q[i].used; recs++) off += record_size(*(uint32_t *)(q[i].p + off));
        logf_("deliver %zu", recs);
        if (done) done(NULL, 0, q[i].p, q[i].size, q[i].used);
    }
    pthread_mutex_unlock(&g_deliver_mu);
}

static void *worker(void *unused) {
    (void)unused;
    pthread_setname_np(pthread_self(), "fakecupti-wrk");
    for (;;) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
        if (__atomic_load_n(&g_hold, __ATOMIC_ACQUIRE)) continue;
        pthread_mutex_lock(&g_mu);
        int any = g_ndone > 0;
        pthread_mutex_unlock(&g_mu);
        if (any) deliver(0);
    }
    return NULL;
}

static void start_worker(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) == 0) pthread_detach(t);
}

/* g_mu held: the stream's CUPTI id and clock */
static struct stream_clock *stream_of(uintptr_t h) {
    if (h == 1) h = 0; /* CU_STREAM_LEGACY is the default stream */
    for (unsigned i = 0; i < g_nstreams; i++)
        if (g_streams[i].handle == h) return &g_streams[i];
    if (g_nstreams == MAXSTREAMS) return &g_streams[0];
    struct stream_clock *s = &g_streams[g_nstreams++];
    s->handle = h, s->end = 0;
    s->id = h == 0 ? 7 : g_next_stream_id++; /* the legacy default stream is 7, as CUPTI says */
    return s;
}

/* g_mu held: room for `sz` more bytes in the current buffer (a new one from the client if need
 * be); NULL, and one more drop, when there is none. */
static uint8_t *room(size_t sz) {
    if (g_cur.p && g_cur.size - g_cur.used < sz) retire_current();
    if (!g_cur.p && g_req) {
        uint8_t *p = NULL;
        size_t size = 0, max = 0;
        g_req(&p, &size, &max);
        if (p && size >= sz && g_ndone < MAXDONE) g_cur.p = p, g_cur.size = size, g_cur.used = 0;
    }
    if (!g_cur.p) {
        g_dropped++;
        return NULL;
    }
    uint8_t *at = g_cur.p + g_cur.used;
    memset(at, 0, sz);
    g_cur.used += sz;
    return at;
}

/* The fake driver's hook, on the calling (launching) thread: one op -> its GPU record (if its
 * kind is enabled) and, for a launch whose callback id is enabled, the driver API record with
 * the same correlation id, its start when the driver began, its end now. */
static void record(const struct fakecupti_op *op) {
    size_t sz = record_size(op->kind);
    int gpu = sz && (g_enabled & (1u << op->kind));
    int api = op->cbid && op->cbid < MAXCBID && __atomic_load_n(&g_api_on[op->cbid], __ATOMIC_ACQUIRE);
    if (!gpu && !api) return;
    pthread_mutex_lock(&g_mu);
    uint32_t corr = ++g_corr;
    uint8_t *at = gpu ? room(sz) : NULL;
    if (at) {
        struct stream_clock *s = stream_of(op->stream);
        uint64_t t = now_ns();
        uint64_t start = t > s->end ? t : s->end, end = start + op->gpu_ns;
        s->end = end;
        if (op->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            CUpti_ActivityKernel9 *r = (CUpti_ActivityKernel9 *)at;
            r->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            r->start = start, r->end = end, r->completed = end, r->queued = t, r->submitted = t;
            r->deviceId = op->device, r->contextId = op->device + 1, r->streamId = s->id;
            r->correlationId = corr, r->gridId = corr, r->name = op->name;
            r->gridX = r->gridY = r->gridZ = r->blockX = r->blockY = r->blockZ = 1;
        } else if (op->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            CUpti_ActivityMemcpy6 *r = (CUpti_ActivityMemcpy6 *)at;
            r->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
            r->copyKind = op->copy_kind, r->bytes = op->bytes, r->start = start, r->end = end;
            r->deviceId = op->device, r->contextId = op->device + 1, r->streamId = s->id;
            r->correlationId = corr, r->copyCount = 1;
        } else {
            CUpti_ActivityMemset4 *r = (CUpti_ActivityMemset4 *)at;
            r->kind = CUPTI_ACTIVITY_KIND_MEMSET;
            r->bytes = op->bytes, r->start = start, r->end = end;
            r->deviceId = op->device, r->contextId = op->device + 1, r->streamId = s->id, r->correlationId = corr;
        }
    }
    CUpti_ActivityAPI *r = api ? (CUpti_ActivityAPI *)room(sizeof(CUpti_ActivityAPI)) : NULL;
    if (r) {
        r->kind = CUPTI_ACTIVITY_KIND_DRIVER;
        r->cbid = op->cbid;
        r->start = op->api_start + FAKECUPTI_EPOCH_NS;
        r->end = now_ns();
        r->processId = (uint32_t)getpid();
        /* SYSTEM: gettid, as CUPTI on Linux; DEFAULT: pthread_self's value, cut to 32 bits */
        r->threadId = g_tid_type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM ? (uint32_t)gettid()
                                                                         : (uint32_t)(uintptr_t)pthread_self();
        r->correlationId = corr;
        r->returnValue = 0;
    }
    pthread_mutex_unlock(&g_mu);
}

static const struct fakecupti_hook g_hook = {&g_enabled, record};

/* Test knob (workload `cupti_hold on|off`): while on, the worker delivers nothing, so a client's
 * buffers stay lent, as when its completion callback is slow. */
EXPORT void fakecupti_hold(int on) { __atomic_store_n(&g_hold, on, __ATOMIC_RELEASE); }

/* At the first call that needs the driver (subscribe, register, enable): become the process's
 * CUPTI. Another copy of this library (another file) that got there first owns the driver's
 * profiling interface, and this copy's calls fail with CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
 * as torch.profiler's did on a GPU when a second CUPTI was loaded into its process. Logs
 * "attach busy" once. Without the fake driver in the process: nothing to attach to, no error. */
static int g_attached; /* 1: this copy is the process's CUPTI; -1: another copy is */
static CUptiResult attach_to_driver(void) {
    int a = __atomic_load_n(&g_attached, __ATOMIC_ACQUIRE);
    if (a) return a > 0 ? CUPTI_SUCCESS : CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    int (*set)(const struct fakecupti_hook *) =
        (int (*)(const struct fakecupti_hook *))dlsym(RTLD_DEFAULT, "fakecuda_set_cupti_hook");
    if (!set) return CUPTI_SUCCESS;
    int ok = set(&g_hook) == 0;
    int was = 0;
    if (__atomic_compare_exchange_n(&g_attached, &was, ok ? 1 : -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) && !ok)
        logf_("attach busy");
    return __atomic_load_n(&g_attached, __ATOMIC_ACQUIRE) > 0 ? CUPTI_SUCCESS
                                                                : CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
}

/* ------------------------------------------------------------- the API */
EXPORT CUptiResult cuptiGetVersion(uint32_t *version) {
    if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
    const char *v = getenv("FAKECUPTI_VERSION");
    *version = v && *v ? (uint32_t)strtoul(v, NULL, 10) : 28;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata) {
    (void)callback, (void)userdata;
    if (!subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
    CUptiResult r = attach_to_driver();
    if (r != CUPTI_SUCCESS) return r;
    if (__atomic_exchange_n(&g_subscribed, 1, __ATOMIC_ACQ_REL)) {
        logf_("subscribe busy");
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    *subscriber = (CUpti_SubscriberHandle)&g_subscribed;
    logf_("subscribe ok");
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
    if (subscriber != (CUpti_SubscriberHandle)&g_subscribed || !__atomic_load_n(&g_subscribed, __ATOMIC_ACQUIRE))
        return CUPTI_ERROR_INVALID_PARAMETER;
    __atomic_store_n(&g_subscribed, 0, __ATOMIC_RELEASE);
    logf_("unsubscribe");
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                  CUpti_BuffersCallbackCompleteFunc done) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (!req || !done) return CUPTI_ERROR_INVALID_PARAMETER;
    CUptiResult r = attach_to_driver();
    if (r != CUPTI_SUCCESS) return r;
    pthread_mutex_lock(&g_mu);
    g_req = req, g_done = done;
    pthread_mutex_unlock(&g_mu);
    logf_("register");
    pthread_once(&once, start_worker);
    return CUPTI_SUCCESS;
}

static CUptiResult set_kind(CUpti_ActivityKind kind, int on) {
    if (!record_size((uint32_t)kind) || kind == CUPTI_ACTIVITY_KIND_DRIVER) return CUPTI_ERROR_INVALID_KIND;
    CUptiResult r = attach_to_driver();
    if (r != CUPTI_SUCCESS) return r;
    if (on) __atomic_or_fetch(&g_enabled, 1u << kind, __ATOMIC_ACQ_REL);
    else __atomic_and_fetch(&g_enabled, ~(1u << kind), __ATOMIC_ACQ_REL);
    logf_("%s %d", on ? "enable" : "disable", (int)kind);
    return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) { return set_kind(kind, 1); }

EXPORT CUptiResult cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
    if (cbid >= MAXCBID) return CUPTI_ERROR_INVALID_PARAMETER;
    CUptiResult r = attach_to_driver();
    if (r != CUPTI_SUCCESS) return r;
    pthread_mutex_lock(&g_mu);
    uint8_t was = g_api_on[cbid], now = enable ? 1 : 0;
    __atomic_store_n(&g_api_on[cbid], now, __ATOMIC_RELEASE);
    g_api_n = g_api_n + now - was;
    if (g_api_n) __atomic_or_fetch(&g_enabled, 1u << CUPTI_ACTIVITY_KIND_DRIVER, __ATOMIC_ACQ_REL);
    else __atomic_and_fetch(&g_enabled, ~(1u << CUPTI_ACTIVITY_KIND_DRIVER), __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&g_mu);
    logf_("driverapi %u %u", cbid, (unsigned)now);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
    if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT && type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        return CUPTI_ERROR_INVALID_PARAMETER;
    g_tid_type = type;
    logf_("threadidtype %d", (int)type);
    return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) { return set_kind(kind, 0); }

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record) {
    if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
    uint8_t *next = *record ? (uint8_t *)*record + record_size((*record)->kind) : buffer;
    if (next < buffer || (size_t)(next - buffer) >= valid || !record_size(*(uint32_t *)next)) {
        *record = NULL;
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    }
    *record = (CUpti_Activity *)next;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    logf_("flush %u", flag);
    deliver(1);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t time) {
    __atomic_store_n(&g_period_ms, time, __ATOMIC_RELAXED);
    logf_("period %u", time);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
    if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = now_ns();
    return CUPTI_SUCCESS;
}

/* The records dropped since the last call (all contexts and streams: the fake has one buffer). */
EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t *dropped) {
    (void)context, (void)streamId;
    if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_mu);
    *dropped = g_dropped;
    g_dropped = 0;
    pthread_mutex_unlock(&g_mu);
    if (*dropped) logf_("dropped %zu", *dropped);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
    if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *str = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; return CUPTI_ERROR_INVALID_PARAMETER;
    }
    return CUPTI_SUCCESS;
}
