"""Phases of known device activity for the GPM check (scripts/gpu-validate.sh, step gpm).

idle, then square matmuls for --seconds each: bf16 (tensor pipes, HMMA), fp32 with TF32 off
(the FP32 pipes, no tensor pipe), fp64 (DFMA tensor pipes on Hopper), then idle. Writes the
wall-clock start and end of every phase (time.time()), so the per-second readings of
gpuprofd and of nvidia-smi dmon can be cut into the same phases:

    {"workload": "gpm_phases", "pid": int, "n": int,
     "phases": [{"name": str, "start": float, "end": float, "matmuls": int}]}
"""

import argparse
import json
import os
import time


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--n", type=int, default=8192, help="matrix size")
    args = p.parse_args()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    phases = []

    def idle(name, seconds):
        torch.cuda.synchronize()
        t0 = time.time()
        time.sleep(seconds)
        phases.append({"name": name, "start": t0, "end": time.time(), "matmuls": 0})

    def matmuls(name, dtype, n):
        a = torch.randn(n, n, device=dev).to(dtype)
        b = torch.randn(n, n, device=dev).to(dtype)
        (a @ b).sum().item()  # warm-up: library loading, autotuning
        torch.cuda.synchronize()
        t0 = time.time()
        count = 0
        while time.time() - t0 < args.seconds:
            for _ in range(4):
                a @ b
            torch.cuda.synchronize()
            count += 4
        phases.append({"name": name, "start": t0, "end": time.time(), "matmuls": count})
        del a, b

    idle("idle_before", 3.0)
    matmuls("bf16_matmul", torch.bfloat16, args.n)
    matmuls("fp32_matmul_no_tf32", torch.float32, args.n)
    # FP64 is slow on parts without FP64 tensor cores: a smaller matrix keeps each call short.
    matmuls("fp64_matmul", torch.float64, args.n // 2)
    idle("idle_after", 3.0)
    with open(args.out, "w") as f:
        json.dump({"workload": "gpm_phases", "pid": os.getpid(), "n": args.n, "phases": phases}, f,
                  indent=1)


if __name__ == "__main__":
    main()
