"""The code view's GPU check: a PyTorch model whose forward() launches from known lines.

Run under `gpuprofd --stack-period 1`; the validation compares the code view's Python frames
with the lines below. Writes --out JSON: pid, this file's path, steps, and the line of each
marked statement.
"""

import argparse
import json
import os
import time

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 256)
        self.fc2 = torch.nn.Linear(256, 10)

    def forward(self, x):
        h = self.fc1(x)  # LINE_FC1
        h = torch.relu(h)  # LINE_RELU
        return self.fc2(h)  # LINE_FC2


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()
    dev = torch.device("cuda")
    net = Net().to(dev)
    x = torch.randn(64, 256, device=dev)
    with torch.no_grad():
        for _ in range(3):  # lazy initialisation (cuBLAS handles, modules) out of the way
            net(x)
        torch.cuda.synchronize()
        # The daemon learns that this process is a CPython when it maps CUDA; give it time.
        time.sleep(1.0)
        for _ in range(a.steps):
            net(x)
        torch.cuda.synchronize()
    src = open(__file__).read().splitlines()

    def line(marker):
        return next(i + 1 for i, s in enumerate(src) if s.rstrip().endswith(marker))

    with open(a.out, "w") as f:
        json.dump(
            {
                "pid": os.getpid(),
                "file": os.path.abspath(__file__),
                "steps": a.steps,
                "lines": {k: line(f"# LINE_{k.upper()}") for k in ("fc1", "relu", "fc2")},
            },
            f,
        )


if __name__ == "__main__":
    main()
