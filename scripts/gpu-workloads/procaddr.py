"""Where do cuGetProcAddress_v2 pointers land? (needs no BPF and no GPU work)

The CUDA runtime (and PyTorch, Triton, cuBLAS) get driver entry points from
cuGetProcAddress_v2, not from the dynamic linker. gpuprofd probes the *exported* symbols, so
every pointer the driver hands out must be the exported symbol's address (or a jump to it),
else calls through it are invisible. This prints, for each hooked API, the dlsym address of
the exported name and the address cuGetProcAddress_v2 returns (default and per-thread-stream
flags), as JSON.

    python3 procaddr.py [--lib libcuda.so.1] [--out procaddr.json]
"""

import argparse
import ctypes
import json
import sys

# (name passed to cuGetProcAddress, flags, exported symbol expected)
CASES = [
    ("cuLaunchKernel", 0, "cuLaunchKernel"),
    ("cuLaunchKernel", 2, "cuLaunchKernel_ptsz"),
    ("cuLaunchKernelEx", 0, "cuLaunchKernelEx"),
    ("cuLaunchKernelEx", 2, "cuLaunchKernelEx_ptsz"),
    ("cuLaunchCooperativeKernel", 0, "cuLaunchCooperativeKernel"),
    ("cuGraphLaunch", 0, "cuGraphLaunch"),
    ("cuGraphLaunch", 2, "cuGraphLaunch_ptsz"),
    ("cuMemcpyHtoD", 0, "cuMemcpyHtoD_v2"),
    ("cuMemcpyHtoD", 2, "cuMemcpyHtoD_v2_ptds"),
    ("cuMemcpyDtoH", 0, "cuMemcpyDtoH_v2"),
    ("cuMemcpyAsync", 0, "cuMemcpyAsync"),
    ("cuMemcpyAsync", 2, "cuMemcpyAsync_ptsz"),
    ("cuMemcpyHtoDAsync", 0, "cuMemcpyHtoDAsync_v2"),
    ("cuMemcpy2D", 0, "cuMemcpy2D_v2"),
    ("cuMemAlloc", 0, "cuMemAlloc_v2"),
    ("cuMemFree", 0, "cuMemFree_v2"),
    ("cuMemAllocAsync", 0, "cuMemAllocAsync"),
    ("cuMemAllocHost", 0, "cuMemAllocHost_v2"),
    ("cuCtxSynchronize", 0, "cuCtxSynchronize"),
    ("cuStreamSynchronize", 0, "cuStreamSynchronize"),
    ("cuStreamSynchronize", 2, "cuStreamSynchronize_ptsz"),
    ("cuEventSynchronize", 0, "cuEventSynchronize"),
    ("cuModuleGetFunction", 0, "cuModuleGetFunction"),
    ("cuLibraryGetKernel", 0, "cuLibraryGetKernel"),
    ("cuKernelGetFunction", 0, "cuKernelGetFunction"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="libcuda.so.1")
    ap.add_argument("--out")
    ap.add_argument("--cuda-version", type=int, default=12000)
    args = ap.parse_args()
    lib = ctypes.CDLL(args.lib)
    init = getattr(lib, "cuInit")
    init.argtypes = [ctypes.c_uint]
    init_rc = init(0)
    get = lib.cuGetProcAddress_v2
    get.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                    ctypes.POINTER(ctypes.c_int)]
    rows = []
    for name, flags, exported in CASES:
        try:
            dl = ctypes.cast(getattr(lib, exported), ctypes.c_void_p).value
        except AttributeError:
            dl = None
        pfn = ctypes.c_void_p()
        status = ctypes.c_int(-1)
        rc = get(name.encode(), ctypes.byref(pfn), args.cuda_version, flags, ctypes.byref(status))
        rows.append({
            "symbol": exported, "query": name, "flags": flags, "rc": rc, "status": status.value,
            "dlsym": hex(dl) if dl else None, "proc_address": hex(pfn.value) if pfn.value else None,
            "same": bool(dl) and dl == pfn.value,
        })
    out = {"schema": "gpuprofd.procaddr/1", "lib": args.lib, "cuInit": init_rc, "symbols": rows,
           "all_same": all(r["same"] for r in rows if r["dlsym"])}
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
