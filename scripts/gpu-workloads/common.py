"""Shared helpers for the GPU validation workloads (scripts/gpu-validate.sh).

Every workload writes one JSON result (``--out``) that ``compare.py`` sets against the
gpuprofd report of the same run:

    {"workload": str, "pid": int, "steps": int, "step_times_s": [float],
     "profiler": null | {"kernels": int, "kernel_names": {name: count},
                         "kernel_gpu_us": {name: total GPU microseconds},
                         "memcpy": {"h2d"|"d2h"|"d2d"|...: {"calls": int, "bytes": int,
                                                            "gpu_us": float}},
                         "api": {name: count}},
     "known": {...}}     # what the workload itself knows it did (bytes copied, graph replays)

"profiler" is torch.profiler's own count (CUPTI) over the *whole* run: the profiler is started
before the first CUDA call, so it covers the same calls gpuprofd sees for the process.
"""

import argparse
import json
import os
import signal
import sys
import tempfile
import time


def parser(desc):
    p = argparse.ArgumentParser(description=desc)
    p.add_argument("--out", required=True, help="result JSON path")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--profile", action="store_true", help="count with torch.profiler (CUPTI)")
    p.add_argument(
        "--hold",
        action="store_true",
        help="after warm-up, print 'held <pid>' and wait for SIGUSR1 before the measured steps "
        "(live attach: gpuprofd --pid is started in between)",
    )
    p.add_argument("--warmup", type=int, default=3)
    return p


def hold_until_signal():
    """Prints 'held PID' and blocks until SIGUSR1."""
    got = []
    signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
    print(f"held {os.getpid()}", flush=True)
    while not got:
        signal.pause()


class Profiler:
    """torch.profiler over a region, reduced to counts from its chrome trace (or a no-op)."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.prof = None
        self.result = None

    def __enter__(self):
        if self.enabled:
            import torch.profiler as tp

            self.prof = tp.profile(
                activities=[tp.ProfilerActivity.CPU, tp.ProfilerActivity.CUDA],
                record_shapes=False,
            )
            self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        if self.prof is None:
            return False
        self.prof.__exit__(*exc)
        with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as f:
            path = f.name
        try:
            self.prof.export_chrome_trace(path)
            with open(path) as f:
                self.result = reduce_trace(json.load(f))
        finally:
            os.unlink(path)
        return False


_COPY_KINDS = {
    "htod": "h2d",
    "dtoh": "d2h",
    "dtod": "d2d",
    "htoh": "h2h",
    "ptop": "peer",
}


def reduce_trace(trace):
    """Counts kernels (by name, with their GPU time), copies (by direction, with bytes and GPU
    time) and CUDA API calls. GPU times are the trace's ``dur`` (microseconds, CUPTI's start
    and end), summed."""
    kernels, names, api = 0, {}, {}
    kernel_us = {}
    memcpy = {}
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat", "")
        name = ev.get("name", "")
        if cat == "kernel":
            kernels += 1
            names[name] = names.get(name, 0) + 1
            kernel_us[name] = kernel_us.get(name, 0.0) + float(ev.get("dur", 0) or 0)
        elif cat == "gpu_memcpy":
            # names look like "Memcpy HtoD (Pageable -> Device)"
            parts = name.split()
            kind = _COPY_KINDS.get(parts[1].lower(), "default") if len(parts) > 1 else "default"
            e = memcpy.setdefault(kind, {"calls": 0, "bytes": 0, "gpu_us": 0.0})
            e["calls"] += 1
            e["bytes"] += int(ev.get("args", {}).get("bytes", 0) or 0)
            e["gpu_us"] += float(ev.get("dur", 0) or 0)
        elif cat in ("cuda_runtime", "cuda_driver"):
            api[name] = api.get(name, 0) + 1
    return {
        "kernels": kernels,
        "kernel_names": names,
        "kernel_gpu_us": kernel_us,
        "memcpy": memcpy,
        "api": api,
    }


def write(out, workload, steps, step_times, profiler=None, known=None, extra=None):
    res = {
        "workload": workload,
        "pid": os.getpid(),
        "steps": steps,
        "step_times_s": step_times,
        "profiler": profiler.result if profiler is not None else None,
        "known": known or {},
    }
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        # The device the process worked on, as the framework sees it (device attribution).
        res["cuda_device"] = torch.cuda.current_device()
    # Every CUPTI file mapped in the process (the injection library must not add a second).
    try:
        with open("/proc/self/maps") as f:
            res["cupti_files"] = sorted({l.split()[-1] for l in f if "libcupti" in l})
    except OSError:
        pass
    if extra:
        res.update(extra)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, out)
    print(f"{workload}: {steps} steps, median {median(step_times) * 1e3:.2f} ms", file=sys.stderr)


def median(xs):
    s = sorted(xs)
    if not s:
        return 0.0
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def timed_steps(n, step, sync):
    """Runs step() n times; returns per-step wall times (sync() after each)."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    return times
