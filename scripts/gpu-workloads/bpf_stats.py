"""How many times each BPF program ran while this watched (the kernel's BPF_ENABLE_STATS).

    python3 bpf_stats.py --out FILE     # runs until SIGINT/SIGTERM, then writes FILE

Turns the kernel's run-time statistics on (they stay on while this process holds the fd), then
polls every loaded program's `run_cnt` and `run_time_ns` (`bpf_prog_info`) four times a
second. Programs loaded after it started (gpuprofd's, started next) count from zero, so the
sums are what each program did in this window, by program name. The gpu-validate harness uses
it to count how often the device tracker's context probes (`ctx_entry`, `ctx_ret`) ran per
kernel launch on a real runtime: a runtime that asked `cuCtxGetCurrent` at every call would
show here as one `ctx_ret` per launch.

Written with ctypes here because the GPU machine has Python but no bpftool; the same calls as
xtask/src/bpfstats.rs.
"""

import argparse
import ctypes
import json
import os
import signal
import time

SYS_BPF = 321  # x86-64
BPF_PROG_GET_NEXT_ID = 11
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_ENABLE_STATS = 32
INFO_LEN = 232  # struct bpf_prog_info up to run_cnt: name[16] at 64, run_time_ns at 192, run_cnt at 200

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def bpf(cmd, attr):
    return libc.syscall(ctypes.c_long(SYS_BPF), ctypes.c_long(cmd), attr, ctypes.c_uint(len(attr)))


def programs():
    """{id: (name, run_cnt, run_time_ns)} of every loaded program."""
    out, pid = {}, 0
    while True:
        a = ctypes.create_string_buffer(12)
        ctypes.memmove(a, pid.to_bytes(4, "little"), 4)
        if bpf(BPF_PROG_GET_NEXT_ID, a) < 0:
            return out
        pid = int.from_bytes(a.raw[4:8], "little")
        a = ctypes.create_string_buffer(12)
        ctypes.memmove(a, pid.to_bytes(4, "little"), 4)
        fd = bpf(BPF_PROG_GET_FD_BY_ID, a)
        if fd < 0:
            continue
        info = ctypes.create_string_buffer(INFO_LEN)
        a = ctypes.create_string_buffer(16)
        ctypes.memmove(a, fd.to_bytes(4, "little") + INFO_LEN.to_bytes(4, "little")
                       + ctypes.addressof(info).to_bytes(8, "little"), 16)
        ok = bpf(BPF_OBJ_GET_INFO_BY_FD, a) == 0
        os.close(fd)
        if not ok:
            continue
        raw = info.raw
        name = raw[64:80].split(b"\0", 1)[0].decode(errors="replace")
        ns = int.from_bytes(raw[192:200], "little")
        cnt = int.from_bytes(raw[200:208], "little")
        out[pid] = (name, cnt, ns)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    attr = ctypes.create_string_buffer(4)  # type = BPF_STATS_RUN_TIME (0)
    fd = bpf(BPF_ENABLE_STATS, attr)
    if fd < 0:
        err = os.strerror(ctypes.get_errno())
        json.dump({"error": f"BPF_ENABLE_STATS failed: {err}"}, open(args.out, "w"))
        return 1
    before = programs()  # programs already loaded: only what they do from now on counts
    seen = {}
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print("bpf_stats: on", flush=True)
    while True:
        for pid, v in programs().items():
            seen[pid] = v
        if stop:
            break
        time.sleep(0.25)
    by = {}
    for pid, (name, cnt, ns) in seen.items():
        _, c0, ns0 = before.get(pid, (name, 0, 0))
        e = by.setdefault(name, {"runs": 0, "ns": 0})
        e["runs"] += cnt - c0
        e["ns"] += ns - ns0
    by = {k: v for k, v in sorted(by.items()) if v["runs"]}
    with open(args.out, "w") as f:
        json.dump({"programs": by}, f, indent=1)
    os.close(fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
