/* Drives the injection library's sites (the stand-in, inject_standin.c) as the real library
 * does from CUPTI's worker thread: records in batches of 16 (GpuActivity, 48 bytes each, as
 * profiler-common/src/gpu.rs lays them out), kernel names, state changes. Reads commands on
 * stdin, one per line, and answers `ok <command> ...` or `err <command> ...`:
 *   sem                          the semaphore now: `ok sem value=N`
 *   wait_sem MS                  waits up to MS ms for a non-zero semaphore
 *   wait_sem_zero MS             waits up to MS ms for a zero semaphore
 *   state STATE DETAIL           gpuprofd_inject_state
 *   name ID MANGLED              gpuprofd_inject_name
 *   kernels ID DEVICE STREAM DUR_NS COUNT   COUNT kernels of name ID, DUR_NS each
 *   copy COPYKIND BYTES DUR_NS   one copy
 *   memset BYTES DUR_NS          one memset
 *   flush                        hands over what is pending (also done at every 16th record)
 *   exit */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint8_t kind, copy_kind;
    uint16_t pad;
    uint32_t device, context, stream, correlation, name;
    uint64_t start_ns, end_ns, bytes;
} GpuActivity;
_Static_assert(sizeof(GpuActivity) == 48, "the wire layout");

#define BATCH 16
/* The semaphore, read by the library (see inject_standin.c: never by name from here). */
uint16_t gpuprofd_standin_semaphore(void);
void gpuprofd_inject_activity(const GpuActivity *batch, uint32_t n);
void gpuprofd_inject_name(uint32_t id, const char *name);
void gpuprofd_inject_state(uint32_t state, uint64_t detail);

static GpuActivity pending[BATCH];
static uint32_t npending, correlation;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void flush(void)
{
    if (npending == 0)
        return;
    /* Entries past n are zero, as the real library leaves them. */
    memset(&pending[npending], 0, sizeof(GpuActivity) * (BATCH - npending));
    gpuprofd_inject_activity(pending, npending);
    npending = 0;
}

static void add(uint8_t kind, uint8_t copy_kind, uint32_t device, uint32_t stream, uint32_t name,
                uint64_t dur, uint64_t bytes)
{
    GpuActivity *a = &pending[npending++];
    uint64_t start = now_ns();
    *a = (GpuActivity){.kind = kind, .copy_kind = copy_kind, .device = device, .context = 1,
                       .stream = stream, .correlation = ++correlation, .name = name,
                       .start_ns = start, .end_ns = start + dur, .bytes = bytes};
    if (npending == BATCH)
        flush();
}

static int wait_sem(long ms, int want_nonzero)
{
    for (long i = 0; i <= ms; i++) {
        if ((gpuprofd_standin_semaphore() != 0) == want_nonzero)
            return 1;
        usleep(1000);
    }
    return 0;
}

int main(void)
{
    char line[1024];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "", text[600] = "";
        unsigned long long a = 0, b = 0, c = 0, d = 0, e = 0;
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, "%31s", cmd) != 1)
            continue;
        if (!strcmp(cmd, "sem")) {
            printf("ok sem value=%u\n", (unsigned)gpuprofd_standin_semaphore());
        } else if (!strcmp(cmd, "wait_sem") || !strcmp(cmd, "wait_sem_zero")) {
            sscanf(line, "%*s %llu", &a);
            int nonzero = !strcmp(cmd, "wait_sem");
            if (wait_sem((long)a, nonzero))
                printf("ok %s value=%u\n", cmd, (unsigned)gpuprofd_standin_semaphore());
            else
                printf("err %s timeout value=%u\n", cmd, (unsigned)gpuprofd_standin_semaphore());
        } else if (!strcmp(cmd, "state") && sscanf(line, "%*s %llu %llu", &a, &b) == 2) {
            gpuprofd_inject_state((uint32_t)a, b);
            printf("ok state\n");
        } else if (!strcmp(cmd, "name") && sscanf(line, "%*s %llu %599s", &a, text) == 2) {
            gpuprofd_inject_name((uint32_t)a, text);
            printf("ok name\n");
        } else if (!strcmp(cmd, "kernels") &&
                   sscanf(line, "%*s %llu %llu %llu %llu %llu", &a, &b, &c, &d, &e) == 5) {
            for (unsigned long long i = 0; i < e; i++)
                add(1, 0, (uint32_t)b, (uint32_t)c, (uint32_t)a, d, 0);
            printf("ok kernels\n");
        } else if (!strcmp(cmd, "copy") && sscanf(line, "%*s %llu %llu %llu", &a, &b, &c) == 3) {
            add(2, (uint8_t)a, 0, 1, 0, c, b);
            printf("ok copy\n");
        } else if (!strcmp(cmd, "memset") && sscanf(line, "%*s %llu %llu", &a, &b) == 2) {
            add(3, 0, 0, 1, 0, b, a);
            printf("ok memset\n");
        } else if (!strcmp(cmd, "flush")) {
            flush();
            printf("ok flush\n");
        } else if (!strcmp(cmd, "exit")) {
            return 0;
        } else {
            printf("err %s unknown or malformed\n", cmd);
        }
    }
    return 0;
}
