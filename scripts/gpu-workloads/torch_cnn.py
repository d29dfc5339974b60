"""A small CNN training loop: eager fp32, AMP bf16, or torch.compile (Triton kernels).

Per step: one pageable host->device copy of the batch and labels (known bytes), forward,
backward, optimizer step, and loss.item() (one 4-byte device->host copy).
"""

import common

MODES = ("eager", "amp", "compile")


def main():
    p = common.parser(__doc__)
    p.add_argument("--mode", choices=MODES, default="eager")
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()

    import torch
    import torch.nn as nn

    whole = common.Profiler(args.profile and not args.hold)
    with whole:
        dev = torch.device("cuda")
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10),
        ).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        fwd = torch.compile(model) if args.mode == "compile" else model
        x_cpu = torch.randn(args.batch, 3, 32, 32)
        y_cpu = torch.randint(0, 10, (args.batch,))
        batch_bytes = x_cpu.numel() * x_cpu.element_size() + y_cpu.numel() * y_cpu.element_size()

        def step():
            x, y = x_cpu.to(dev), y_cpu.to(dev)
            opt.zero_grad(set_to_none=True)
            if args.mode == "amp":
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = loss_fn(fwd(x), y)
            else:
                loss = loss_fn(fwd(x), y)
            loss.backward()
            opt.step()
            return loss.item()

        sync = torch.cuda.synchronize
        common.timed_steps(args.warmup, step, sync)
        if args.hold:
            common.hold_until_signal()
            with common.Profiler(args.profile) as late:
                times = common.timed_steps(args.steps, step, sync)
            prof = late
            measured_steps = args.steps
        else:
            times = common.timed_steps(args.steps, step, sync)
            prof = whole
            measured_steps = args.warmup + args.steps
    common.write(
        args.out,
        f"torch_cnn_{args.mode}" + ("_live" if args.hold else ""),
        measured_steps,
        times,
        profiler=prof if args.profile else None,
        known={"h2d_bytes_batches": batch_bytes * measured_steps, "loss_item_d2h": measured_steps},
    )


if __name__ == "__main__":
    main()
