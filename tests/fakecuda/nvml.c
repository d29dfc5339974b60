/* A fake libnvidia-ml.so.1: the NVML entry points gpuprofd samples, with the real prototypes and
 * struct layouts (nvml.h), returning values scripted in the file named by $FAKENVML_CONFIG:
 *
 *   device NAME UUID MEM_TOTAL_BYTES    a new device (names without spaces)
 *   util GPU_PERCENT MEM_PERCENT        for the last device
 *   memused BYTES
 *   power MILLIWATTS
 *   temp CELSIUS
 *   smclock MHZ
 *   proc PID USED_BYTES SM_PERCENT MEM_PERCENT [GI CI]   a compute process on the last device;
 *                                      with GI CI, on that MIG GPU/compute instance (as NVML
 *                                      lists a MIG-mode GPU's processes; else both 0xffffffff)
 *   throttle BITS                      nvmlClocksThrottleReason* bits in force (hex or decimal)
 *   pcie TX_KBPS RX_KBPS
 *   ecc CORRECTED UNCORRECTED          volatile ECC error counts
 *   xid CODE                           one critical XID event, delivered once to an event set
 *   gpm ID VALUE [VALUE...]            GPM: the value of NVML GPM metric ID (nvmlGpmMetricId_t)
 *                                      over the k-th interval between two samples of the
 *                                      device (k from 0; the last value repeats). A device
 *                                      with gpm lines supports GPM, one without does not (as
 *                                      before Hopper); metrics it has no line for fail on
 *                                      their own with NVML_ERROR_NOT_SUPPORTED.
 *   gpm_fail_after N                   from the device's (N+1)-th nvmlGpmSampleGet on, the call
 *                                      fails with NVML_ERROR_UNKNOWN (GPM broken mid-run)
 *   mig UUID GI CI                     a MIG instance of the last device (its UUID, GPU and
 *                                      compute instance): a device with mig lines is in MIG
 *                                      mode, its instances behind nvmlDeviceGetMigDeviceHandle-
 *                                      ByIndex (up to 7, as an H100's), each with its UUID and
 *                                      ids; a device without is not in MIG mode
 *   fail_after N    from the (N+1)-th nvmlDeviceGetUtilizationRates on, every device call
 *                   returns NVML_ERROR_GPU_IS_LOST (a GPU that fell off the bus mid-run)
 *
 * Without $FAKENVML_CONFIG (or with an unreadable one) nvmlInit_v2 fails with
 * NVML_ERROR_DRIVER_NOT_LOADED, as on a machine whose driver is not loaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_UNKNOWN = 999,
};
#define NVML_EVENT_XID 0x0000000000000008ULL
#define NVML_EVENT_DOUBLE_BIT_ECC 0x0000000000000002ULL

typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

#define MAX_GPM 64
#define MAX_GPM_VALUES 8
struct gpm_metric { unsigned id, n; double v[MAX_GPM_VALUES]; };
#define MAX_DEV 8
#define MAX_PROC 16
#define MAX_XID 16
struct proc { unsigned pid; unsigned long long used; unsigned sm, mem, gi, ci; };
struct dev {
    char name[96], uuid[96];
    unsigned long long total, used;
    unsigned util_gpu, util_mem, power, temp, smclock;
    struct proc procs[MAX_PROC];
    unsigned nprocs;
    unsigned long long throttle, ecc_corrected, ecc_uncorrected;
    unsigned pcie_tx, pcie_rx;
    int has_health;
    unsigned long long xids[MAX_XID];
    unsigned nxids, xids_sent;
    unsigned long long registered; /* event types registered on the set */
    struct gpm_metric gpm[MAX_GPM];
    unsigned ngpm;
    unsigned long long gpm_seq; /* samples taken of the device */
    long gpm_fail_after;        /* -1: never */
    unsigned gi, ci;            /* a MIG instance's ids */
    unsigned mig_first, nmig;   /* a MIG-mode GPU's instances, in migdevs */
};
typedef struct dev *nvmlDevice_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef struct { int used; } *nvmlEventSet_t;
static struct { int used; } the_set;

static struct dev devs[MAX_DEV];
static unsigned ndevs;
#define MAX_MIGDEV 32
#define MAX_MIG_PER_GPU 7
static struct dev migdevs[MAX_MIGDEV]; /* MIG instances' handles */
static unsigned nmigdevs;
static int inited;
static long fail_after = -1;
static long util_calls;
static unsigned long long samples; /* process-utilisation sample clock (µs) */

static int lost(void) { return fail_after >= 0 && util_calls > fail_after; }

static int load(void) {
    const char *path = getenv("FAKENVML_CONFIG");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return -1;
    char line[512];
    ndevs = 0;
    nmigdevs = 0;
    while (fgets(line, sizeof line, f)) {
        char w[32];
        if (sscanf(line, "%31s", w) != 1 || w[0] == '#') continue;
        struct dev *d = ndevs ? &devs[ndevs - 1] : NULL;
        if (!strcmp(w, "device") && ndevs < MAX_DEV) {
            d = &devs[ndevs++];
            memset(d, 0, sizeof *d);
            d->gpm_fail_after = -1;
            sscanf(line, "%*s %95s %95s %llu", d->name, d->uuid, &d->total);
        } else if (!d) {
            if (!strcmp(w, "fail_after")) sscanf(line, "%*s %ld", &fail_after);
        } else if (!strcmp(w, "util")) {
            sscanf(line, "%*s %u %u", &d->util_gpu, &d->util_mem);
        } else if (!strcmp(w, "memused")) {
            sscanf(line, "%*s %llu", &d->used);
        } else if (!strcmp(w, "power")) {
            sscanf(line, "%*s %u", &d->power);
        } else if (!strcmp(w, "temp")) {
            sscanf(line, "%*s %u", &d->temp);
        } else if (!strcmp(w, "smclock")) {
            sscanf(line, "%*s %u", &d->smclock);
        } else if (!strcmp(w, "mig") && nmigdevs < MAX_MIGDEV && d->nmig < MAX_MIG_PER_GPU) {
            struct dev *m = &migdevs[nmigdevs];
            memset(m, 0, sizeof *m);
            sscanf(line, "%*s %95s %u %u", m->uuid, &m->gi, &m->ci);
            if (!d->nmig) d->mig_first = nmigdevs;
            d->nmig++;
            nmigdevs++;
        } else if (!strcmp(w, "proc") && d->nprocs < MAX_PROC) {
            struct proc *p = &d->procs[d->nprocs++];
            if (sscanf(line, "%*s %u %llu %u %u %u %u", &p->pid, &p->used, &p->sm, &p->mem,
                       &p->gi, &p->ci) < 6)
                p->gi = p->ci = 0xffffffff; /* NVML's "no value": not on a MIG instance */
        } else if (!strcmp(w, "fail_after")) {
            sscanf(line, "%*s %ld", &fail_after);
        } else if (!strcmp(w, "throttle")) {
            sscanf(line, "%*s %lli", &d->throttle);
            d->has_health = 1;
        } else if (!strcmp(w, "pcie")) {
            sscanf(line, "%*s %u %u", &d->pcie_tx, &d->pcie_rx);
            d->has_health = 1;
        } else if (!strcmp(w, "ecc")) {
            sscanf(line, "%*s %llu %llu", &d->ecc_corrected, &d->ecc_uncorrected);
            d->has_health = 1;
        } else if (!strcmp(w, "xid") && d->nxids < MAX_XID) {
            sscanf(line, "%*s %llu", &d->xids[d->nxids++]);
        } else if (!strcmp(w, "gpm_fail_after")) {
            sscanf(line, "%*s %ld", &d->gpm_fail_after);
        } else if (!strcmp(w, "gpm") && d->ngpm < MAX_GPM) {
            struct gpm_metric *m = &d->gpm[d->ngpm++];
            char *p = line;
            int used = 0;
            sscanf(p, "%*s %u%n", &m->id, &used);
            p += used;
            while (m->n < MAX_GPM_VALUES && sscanf(p, "%lf%n", &m->v[m->n], &used) == 1) {
                m->n++;
                p += used;
            }
        }
    }
    fclose(f);
    return 0;
}

#define CHECK_DEV(d)                                           \
    do {                                                       \
        if (!inited) return NVML_ERROR_UNINITIALIZED;          \
        if (!(d) || (d) < devs || (d) >= devs + ndevs)         \
            return NVML_ERROR_INVALID_ARGUMENT;                \
        if (lost()) return NVML_ERROR_GPU_IS_LOST;             \
    } while (0)

EXPORT nvmlReturn_t nvmlInit_v2(void) {
    if (load()) return NVML_ERROR_DRIVER_NOT_LOADED;
    inited = 1;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags) { return nvmlInit_v2(); }
EXPORT nvmlReturn_t nvmlShutdown(void) {
    inited = 0;
    return NVML_SUCCESS;
}
EXPORT const char *nvmlErrorString(nvmlReturn_t r) { return r ? "fake NVML error" : "Success"; }

static nvmlReturn_t copy_str(const char *s, char *out, unsigned len) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, s);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned len) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    return copy_str("535.261.03-fake", version, len);
}
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = ndevs;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (index >= ndevs || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devs[index];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len) {
    CHECK_DEV(d);
    return copy_str(d->name, name, len);
}
#define CHECK_MIG(m)                                                  \
    do {                                                              \
        if (!inited) return NVML_ERROR_UNINITIALIZED;                 \
        if (!(m) || (m) < migdevs || (m) >= migdevs + nmigdevs)       \
            return NVML_ERROR_INVALID_ARGUMENT;                       \
    } while (0)

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len) {
    /* A MIG instance's handle has a UUID of its own. */
    if (inited && d >= migdevs && d < migdevs + nmigdevs) return copy_str(d->uuid, uuid, len);
    CHECK_DEV(d);
    return copy_str(d->uuid, uuid, len);
}
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned *current, unsigned *pending) {
    CHECK_DEV(d);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = d->nmig ? 1 : 0; /* NVML_DEVICE_MIG_ENABLE / DISABLE */
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned *count) {
    CHECK_DEV(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = d->nmig ? MAX_MIG_PER_GPU : 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned index,
                                                        nvmlDevice_t *mig) {
    CHECK_DEV(d);
    if (!d->nmig) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= MAX_MIG_PER_GPU || !mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= d->nmig) return NVML_ERROR_NOT_FOUND;
    *mig = &migdevs[d->mig_first + index];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t m, unsigned *id) {
    CHECK_MIG(m);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->gi;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t m, unsigned *id) {
    CHECK_MIG(m);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->ci;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    util_calls++;
    CHECK_DEV(d);
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    u->gpu = d->util_gpu;
    u->memory = d->util_mem;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    CHECK_DEV(d);
    if (!m || (m->version & 0xffffff) != sizeof *m || m->version >> 24 != 2)
        return NVML_ERROR_INVALID_ARGUMENT; /* the caller must set NVML_STRUCT_VERSION(Memory, 2) */
    m->total = d->total;
    m->used = d->used;
    m->reserved = 0;
    m->free = d->total - d->used;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw) {
    CHECK_DEV(d);
    if (!d->power) return NVML_ERROR_NOT_SUPPORTED;
    *mw = d->power;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *t) {
    CHECK_DEV(d);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *t = d->temp;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
    CHECK_DEV(d);
    if (type != 1 /* NVML_CLOCK_SM */) return NVML_ERROR_NOT_SUPPORTED;
    *mhz = d->smclock;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count,
                                                            nvmlProcessInfo_t *infos) {
    CHECK_DEV(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (*count < d->nprocs) {
        *count = d->nprocs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = d->nprocs;
    for (unsigned i = 0; i < d->nprocs; i++) {
        infos[i].pid = d->procs[i].pid;
        infos[i].usedGpuMemory = d->procs[i].used;
        infos[i].gpuInstanceId = d->procs[i].gi;
        infos[i].computeInstanceId = d->procs[i].ci;
    }
    return NVML_SUCCESS;
}
/* One sample per process per call, stamped later than every earlier one: a caller that passes
 * the newest stamp it saw gets each sample once. */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
                                                    nvmlProcessUtilizationSample_t *out,
                                                    unsigned *count,
                                                    unsigned long long last_seen) {
    CHECK_DEV(d);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!out || *count < d->nprocs) {
        *count = d->nprocs;
        return d->nprocs ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_ERROR_NOT_FOUND;
    }
    unsigned long long stamp = ++samples * 1000000ULL;
    if (stamp <= last_seen) stamp = last_seen + 1;
    for (unsigned i = 0; i < d->nprocs; i++) {
        out[i].pid = d->procs[i].pid;
        out[i].timeStamp = stamp;
        out[i].smUtil = d->procs[i].sm;
        out[i].memUtil = d->procs[i].mem;
        out[i].encUtil = out[i].decUtil = 0;
    }
    *count = d->nprocs;
    return NVML_SUCCESS;
}

/* Health: only for devices whose config names it (else NOT_SUPPORTED, as on GeForce boards). */
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d,
                                                              unsigned long long *reasons) {
    CHECK_DEV(d);
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->has_health) return NVML_ERROR_NOT_SUPPORTED;
    *reasons = d->throttle;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned *value) {
    CHECK_DEV(d);
    if (!value) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->has_health) return NVML_ERROR_NOT_SUPPORTED;
    if (counter == 0) *value = d->pcie_tx;      /* NVML_PCIE_UTIL_TX_BYTES */
    else if (counter == 1) *value = d->pcie_rx; /* NVML_PCIE_UTIL_RX_BYTES */
    else return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int error_type, int counter_type,
                                                unsigned long long *count) {
    CHECK_DEV(d);
    if (!count || counter_type != 0 /* NVML_VOLATILE_ECC */) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->has_health) return NVML_ERROR_NOT_SUPPORTED;
    *count = error_type == 0 ? d->ecc_corrected : d->ecc_uncorrected;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index) {
    CHECK_DEV(d);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)(d - devs);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    CHECK_DEV(d);
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = NVML_EVENT_XID | NVML_EVENT_DOUBLE_BIT_ECC;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    the_set.used = 1;
    *set = (nvmlEventSet_t)&the_set;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                             nvmlEventSet_t set) {
    CHECK_DEV(d);
    if (set != (nvmlEventSet_t)&the_set) return NVML_ERROR_INVALID_ARGUMENT;
    d->registered |= types;
    return NVML_SUCCESS;
}
/* The next XID not yet delivered, of any device registered for XID events; else a timeout. */
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned timeout_ms) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (set != (nvmlEventSet_t)&the_set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < ndevs; i++) {
        struct dev *d = &devs[i];
        if ((d->registered & NVML_EVENT_XID) && d->xids_sent < d->nxids) {
            memset(data, 0, sizeof *data);
            data->device = d;
            data->eventType = NVML_EVENT_XID;
            data->eventData = d->xids[d->xids_sent++];
            data->gpuInstanceId = data->computeInstanceId = 0xffffffff;
            return NVML_SUCCESS;
        }
    }
    (void)timeout_ms;
    return NVML_ERROR_TIMEOUT;
}
EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (set != (nvmlEventSet_t)&the_set) return NVML_ERROR_INVALID_ARGUMENT;
    the_set.used = 0;
    return NVML_SUCCESS;
}

/* GPM (nvml.h, R520 and later): the layouts of nvmlGpmSupport_t, nvmlGpmMetric_t and
 * nvmlGpmMetricsGet_t; samples are opaque handles the caller allocates and frees. */
#define NVML_GPM_METRICS_GET_VERSION 1
#define NVML_GPM_SUPPORT_VERSION 1
#define NVML_GPM_METRIC_MAX 210 /* the array size of the nvml.h nvml-wrapper 0.13 binds */
typedef struct { unsigned version, isSupportedDevice; } nvmlGpmSupport_t;
struct nvmlGpmSample_st { struct dev *dev; unsigned long long seq; };
typedef struct nvmlGpmSample_st *nvmlGpmSample_t;
typedef struct {
    unsigned metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { char *shortName, *longName, *unit; } metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[NVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s) {
    CHECK_DEV(d);
    if (!s || s->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_INVALID_ARGUMENT;
    s->isSupportedDevice = d->ngpm > 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *out) {
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = calloc(1, sizeof **out);
    return *out ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}
EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t s) {
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    free(s);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, nvmlGpmSample_t s) {
    CHECK_DEV(d);
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->ngpm) return NVML_ERROR_NOT_SUPPORTED;
    if (d->gpm_fail_after >= 0 && (long long)d->gpm_seq >= d->gpm_fail_after) {
        d->gpm_seq++; /* counted, never handed out */
        return NVML_ERROR_UNKNOWN;
    }
    s->dev = d;
    s->seq = ++d->gpm_seq;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t d, unsigned gpu_instance, nvmlGpmSample_t s) {
    CHECK_DEV(d);
    return NVML_ERROR_NOT_SUPPORTED; /* no MIG on the fake devices */
}
/* The scripted value of each metric over the interval between the two samples (which must be
 * of the same device, the second taken later). */
EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    static char short_name[] = "fake", long_name[] = "fake GPM metric", unit[] = "%";
    if (!inited) return NVML_ERROR_UNINITIALIZED;
    if (!m || m->version != NVML_GPM_METRICS_GET_VERSION || m->numMetrics > NVML_GPM_METRIC_MAX ||
        !m->sample1 || !m->sample2 || !m->sample1->dev || m->sample1->dev != m->sample2->dev ||
        m->sample2->seq <= m->sample1->seq)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct dev *d = m->sample1->dev;
    if (lost()) return NVML_ERROR_GPU_IS_LOST;
    unsigned long long k = m->sample1->seq - 1;
    for (unsigned i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &m->metrics[i];
        x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        x->value = 0;
        x->metricInfo.shortName = x->metricInfo.longName = x->metricInfo.unit = NULL;
        for (unsigned j = 0; j < d->ngpm; j++) {
            struct gpm_metric *g = &d->gpm[j];
            if (g->id != x->metricId || !g->n) continue;
            x->nvmlReturn = NVML_SUCCESS;
            x->value = g->v[k < g->n ? k : g->n - 1];
            x->metricInfo.shortName = short_name;
            x->metricInfo.longName = long_name;
            x->metricInfo.unit = unit;
        }
    }
    return NVML_SUCCESS;
}
