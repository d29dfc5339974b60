/* liblookalike.so: exports functions NAMED like CUDA entry points but is not
 * a CUDA library.  A profiler must not attach to it (the workload dlopens it
 * for the lookalike_launch command). */
#define EXPORT __attribute__((visibility("default")))
static volatile unsigned long long g_lookalike_calls;
EXPORT int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned smem, void *stream, void **params, void **extra) {
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)stream, (void)params,
        (void)extra;
    g_lookalike_calls++;
    return 0;
}
EXPORT int cudaLaunchKernel(const void *func, unsigned long long gxy, unsigned gz, unsigned long long bxy,
                            unsigned bz, void **args, unsigned long smem, void *stream) {
    (void)func, (void)gxy, (void)gz, (void)bxy, (void)bz, (void)args, (void)smem, (void)stream;
    g_lookalike_calls++;
    return 0;
}
EXPORT unsigned long long lookalike_calls(void) { return g_lookalike_calls; }
