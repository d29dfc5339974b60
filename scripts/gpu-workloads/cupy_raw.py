"""CuPy with a raw kernel (NVRTC-compiled, launched through the driver), pageable and pinned
host<->device copies of known sizes. CuPy's own bookkeeping is the independent count: the
script knows exactly how many launches and bytes it asked for."""

import common

SRC = r'''
extern "C" __global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
'''


def main():
    args = common.parser(__doc__).parse_args()
    import cupy as cp
    import numpy as np

    n = 1 << 20
    kern = cp.RawKernel(SRC, "scale")
    d = cp.zeros(n, dtype=cp.float32)
    pageable = np.ones(n, dtype=np.float32)
    pinned_mem = cp.cuda.alloc_pinned_memory(n * 4)
    pinned = np.frombuffer(pinned_mem, np.float32, n)
    pinned[:] = 1.0
    launches = 0
    h2d = d2h = 0

    def step():
        nonlocal launches, h2d, d2h
        d.set(pageable)
        h2d += n * 4
        kern(((n + 255) // 256,), (256,), (d, np.float32(1.0001), np.int32(n)))
        launches += 1
        d.set(pinned)
        h2d += n * 4
        kern(((n + 255) // 256,), (256,), (d, np.float32(0.9999), np.int32(n)))
        launches += 1
        d.get(out=pinned)
        d2h += n * 4

    sync = cp.cuda.Device().synchronize
    common.timed_steps(args.warmup, step, sync)
    times = common.timed_steps(args.steps, step, sync)
    common.write(args.out, "cupy_raw", args.warmup + args.steps, times,
                 known={"raw_kernel_launches": launches, "kernel_name": "scale",
                        "h2d_bytes": h2d, "d2h_bytes": d2h})


if __name__ == "__main__":
    main()
