"""torch.distributed with the NCCL backend at world size 1 (the lent machine has one GPU, and
NCCL refuses two ranks on one GPU): one rank still calls the NCCL API and launches NCCL's
kernels. Per step: an all-reduce of 1 Mi float32 and of 256 Ki bfloat16, an all-gather of 4096
float32 per rank, a broadcast of the 1 Mi float32 tensor.

"known" holds what the script asked NCCL for, per operation, in gpuprofd's convention
(docs/USAGE.md, NCCL): calls, and bytes = count × datatype size with NCCL's own count (per
rank for AllGather). PyTorch may make calls of its own (a barrier, a warm-up): compare.py
reports any difference rather than hiding it.
"""

import os

import common

F32_N = 1 << 20
BF16_N = 1 << 18
GATHER_N = 4096


def main():
    args = common.parser(__doc__).parse_args()
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    with common.Profiler(args.profile) as prof:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
        a = torch.ones(F32_N, device="cuda")
        b = torch.ones(BF16_N, device="cuda", dtype=torch.bfloat16)
        g_in = torch.ones(GATHER_N, device="cuda")
        g_out = [torch.empty_like(g_in)]

        def step():
            dist.all_reduce(a)
            dist.all_reduce(b)
            dist.all_gather(g_out, g_in)
            dist.broadcast(a, src=0)

        common.timed_steps(args.warmup, step, torch.cuda.synchronize)
        times = common.timed_steps(args.steps, step, torch.cuda.synchronize)
        dist.destroy_process_group()
    n = args.warmup + args.steps
    known = {
        "AllReduce": {"calls": 2 * n, "bytes": n * (F32_N * 4 + BF16_N * 2)},
        "AllGather": {"calls": n, "bytes": n * GATHER_N * 4},
        "Broadcast": {"calls": n, "bytes": n * F32_N * 4},
    }
    common.write(args.out, "nccl_collectives", n, times,
                 profiler=prof if args.profile else None,
                 known={"nccl": known, "rank": 0, "nranks": 1})


if __name__ == "__main__":
    main()
