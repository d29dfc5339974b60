"""Launch-bound loop for overhead: 200 tiny elementwise kernels per step on a 1024-element
tensor, so the CPU-side launch path (where uprobes cost) dominates the step time."""

import common


def main():
    args = common.parser(__doc__).parse_args()
    import torch

    with common.Profiler(args.profile) as prof:
        x = torch.ones(1024, device="cuda")

        def step():
            for _ in range(200):
                x.mul_(1.0001)

        common.timed_steps(args.warmup, step, torch.cuda.synchronize)
        times = common.timed_steps(args.steps, step, torch.cuda.synchronize)
    common.write(args.out, "launch_bound", args.warmup + args.steps, times,
                 profiler=prof if args.profile else None,
                 known={"launches": 200 * (args.warmup + args.steps)})


if __name__ == "__main__":
    main()
