"""A cuBLAS GEMM loop (torch.matmul on 2048x2048 fp32 and bf16): cuBLAS launches its kernels
through the driver API (cuLaunchKernel / cuLaunchKernelEx), not the runtime."""

import common


def main():
    args = common.parser(__doc__).parse_args()
    import torch

    with common.Profiler(args.profile) as prof:
        dev = torch.device("cuda")
        a = torch.randn(2048, 2048, device=dev)
        b = torch.randn(2048, 2048, device=dev)
        ah, bh = a.bfloat16(), b.bfloat16()

        def step():
            torch.matmul(a, b)
            torch.matmul(ah, bh)

        sync = torch.cuda.synchronize
        common.timed_steps(args.warmup, step, sync)
        times = common.timed_steps(args.steps, step, sync)
    common.write(args.out, "cublas_gemm", args.warmup + args.steps, times,
                 profiler=prof if args.profile else None,
                 known={"matmuls": 2 * (args.warmup + args.steps)})


if __name__ == "__main__":
    main()
