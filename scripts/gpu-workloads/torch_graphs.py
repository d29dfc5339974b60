"""CUDA graph replay (torch.cuda.graphs): one capture of a small MLP step, replayed --steps
times. gpuprofd must count each replay as one graph launch (cudaGraphLaunch / cuGraphLaunch),
not as the kernels inside it."""

import common


def main():
    args = common.parser(__doc__).parse_args()
    import torch

    with common.Profiler(args.profile) as prof:
        dev = torch.device("cuda")
        model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512)).to(dev)
        static_x = torch.randn(256, 512, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = model(static_x)
        torch.cuda.synchronize()
        times = common.timed_steps(args.steps, g.replay, torch.cuda.synchronize)
        del static_y
    common.write(args.out, "torch_graphs", args.steps, times,
                 profiler=prof if args.profile else None,
                 known={"graph_replays": args.steps})


if __name__ == "__main__":
    main()
