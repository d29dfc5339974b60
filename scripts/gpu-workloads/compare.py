"""Sets gpuprofd's reports against the workloads' own counts; writes results.json and summary.md.

    python3 compare.py MANIFEST.json OUTDIR

MANIFEST.json (written by gpu-validate.sh):
    {"env": {...}, "doctor": "doctor.json" | null, "procaddr": "procaddr.json" | null,
     "nvml": "nvml.json" | null, "gpm": "gpm.json" | null,
     "runs": [{"name": str, "kind": "coverage"|"live"|"attribution"|"device"|"nccl"|"neighbour"|"overhead",
               "mode": "none"|"gpuprofd-counted"|"gpuprofd-counted-duty"|"gpuprofd"|"gpuprofd-two-traps"|"torch.profiler",  # overhead only
               "report": "gpuprofd report path" | null, "results": ["workload result path", ...],
               "error": str | null}]}

Every difference beyond the stated tolerance becomes a finding; nothing is dropped silently.
Standard library only (it also runs in CI on synthetic inputs).
"""

import json
import os
import sys

# Tolerances: counts and bytes must match exactly; overhead is reported, not judged.
COUNT_TOLERANCE = 0


def load(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def process_of(report, pid):
    for p in (report or {}).get("processes", []):
        if p.get("tgid") == pid:
            return p
    return None


def norm(name):
    return "".join(name.split())


def api_counts(proc):
    return {a["name"]: a["calls"] for a in proc.get("api", [])}


def name_sources(proc):
    out = {}
    for k in proc.get("kernels", []):
        by = out.setdefault(k.get("api", "?"), {})
        src = k.get("name_source", "?")
        by[src] = by.get(src, 0) + k.get("calls", 0)
    return out


def compare_process(name, proc, res, findings):
    """One workload process: gpuprofd's view against the workload's own counts."""
    row = {"run": name, "workload": res.get("workload"), "pid": res.get("pid")}
    if proc is None:
        findings.append(f"{name}: gpuprofd has no process {res.get('pid')} in its report")
        row["missing"] = True
        return row
    launches = proc.get("launches", 0)
    graphs = proc.get("graphs", {}).get("launches", 0)
    unnamed = proc.get("unnamed_launches", 0)
    apis = api_counts(proc)
    row.update(
        {
            "gpuprofd_launches": launches,
            "gpuprofd_graph_launches": graphs,
            "unnamed_launches": unnamed,
            "named_fraction": round(1 - unnamed / launches, 4) if launches else None,
            "symbols_fired": sorted(a for a, c in apis.items() if c > 0),
            # Issue 35: where the names of the launches under each API came from (with one
            # trap per launch a runtime launch is named by the driver handle it passed).
            "name_sources_by_api": name_sources(proc),
        }
    )
    prof = res.get("profiler")
    known = res.get("known", {})
    if prof:
        row["profiler_kernels"] = prof["kernels"]
        if known.get("graph_replays") is None:
            diff = launches - prof["kernels"]
            row["launch_diff"] = diff
            if abs(diff) > COUNT_TOLERANCE:
                findings.append(
                    f"{name}: gpuprofd counted {launches} kernel launches, torch.profiler {prof['kernels']} "
                    f"({diff:+d})"
                )
        # names: which of the profiler's kernel names gpuprofd also has
        ours = {norm(k["name"]) for k in proc.get("kernels", [])}
        theirs = prof.get("kernel_names", {})
        if theirs:
            hit = sum(1 for n in theirs if norm(n) in ours)
            row["profiler_names_matched"] = f"{hit}/{len(theirs)}"
            missing = [n for n in theirs if norm(n) not in ours][:5]
            if missing:
                findings.append(f"{name}: {len(theirs) - hit} kernel names differ from torch.profiler's, e.g. {missing}")
        # copies by direction
        ours_c = {c["direction"]: c for c in proc.get("copies", [])}
        for d, e in sorted(prof.get("memcpy", {}).items()):
            g = ours_c.get(d, {"calls": 0, "bytes": 0})
            if g["calls"] != e["calls"] or g["bytes"] != e["bytes"]:
                findings.append(
                    f"{name}: {d} copies gpuprofd {g['calls']} calls / {g['bytes']} B, "
                    f"torch.profiler {e['calls']} / {e['bytes']} B"
                )
        # API calls both sides count (runtime and driver names). CUPTI names the runtime calls
        # of every copy of the runtime, also those linked statically into cuBLAS and cuDNN;
        # gpuprofd hooks the shared libcudart, so such a call shows as the driver call it makes.
        # Within a family the totals must agree; the split between its names is reported.
        api_rows = []
        fam_ours, fam_theirs = {}, {}
        for a, c in sorted(prof.get("api", {}).items()):
            if a in apis or a in API_FAMILY or a.startswith(("cudaLaunch", "cudaMemcpy", "cuLaunch", "cudaGraphLaunch")):
                g = apis.get(a, 0)
                api_rows.append({"api": a, "profiler": c, "gpuprofd": g})
                fam = API_FAMILY.get(a)
                if fam:
                    fam_theirs[fam] = fam_theirs.get(fam, 0) + c
                elif g != c:
                    findings.append(f"{name}: {a} gpuprofd {g} calls, torch.profiler {c}")
        for a, g in apis.items():
            fam = API_FAMILY.get(a)
            if fam:
                fam_ours[fam] = fam_ours.get(fam, 0) + g
                if a not in prof.get("api", {}):
                    api_rows.append({"api": a, "profiler": 0, "gpuprofd": g})
        row["api_families"] = {}
        for fam in sorted(set(fam_ours) | set(fam_theirs)):
            g, c = fam_ours.get(fam, 0), fam_theirs.get(fam, 0)
            row["api_families"][fam] = {"profiler": c, "gpuprofd": g}
            if g != c:
                findings.append(f"{name}: {fam}: gpuprofd {g} calls, torch.profiler {c}")
        row["api"] = api_rows
    # Steps found in the capture (informational: the loop's iterations minus the first, which
    # closes the warm-up; a training loop with none found is a finding).
    steps_path = res.get("_steps_path")
    if steps_path and os.path.exists(steps_path):
        steps = json.load(open(steps_path))
        mine = [s for s in steps if s.get("pid") == res.get("pid")]
        row["steps_found"] = mine[0]["calls"] if mine else 0
        row["step_boundary"] = mine[0]["boundary"] if mine else None
        if not mine and known.get("loss_item_d2h"):
            findings.append(f"{name}: a training loop with {known['loss_item_d2h']} loss.item() calls, gpuprofd found no steps")
    if known.get("graph_replays") is not None:
        want = known["graph_replays"]
        row["graph_replays"] = want
        # replays plus the capture-time instantiation launches are all graph launches
        if graphs < want:
            findings.append(f"{name}: {want} graph replays, gpuprofd saw {graphs} graph launches")
    if known.get("raw_kernel_launches") is not None:
        want = known["raw_kernel_launches"]
        got = sum(k["calls"] for k in proc.get("kernels", []) if norm(k["name"]).startswith(known.get("kernel_name", "")))
        row["raw_kernel_launches"] = {"known": want, "gpuprofd": got}
        if got != want:
            findings.append(f"{name}: the script launched {want} raw kernels, gpuprofd counted {got}")
        ours_c = {c["direction"]: c for c in proc.get("copies", [])}
        for d, key in (("h2d", "h2d_bytes"), ("d2h", "d2h_bytes")):
            got_b = ours_c.get(d, {}).get("bytes", 0)
            row[f"{d}_bytes"] = {"known": known[key], "gpuprofd": got_b}
            if got_b < known[key]:
                findings.append(f"{name}: the script copied {known[key]} B {d}, gpuprofd saw {got_b} B")
    return row


def median(xs):
    s = sorted(xs)
    if not s:
        return None
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


# Runtime and driver calls that do the same thing: a runtime call of a statically linked runtime
# reaches gpuprofd as its driver call (see the API comparison in `process_row`).
API_FAMILY = {
    **{a: "kernel launches" for a in (
        "cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz",
        "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernel_ptsz",
        "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
        "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz")},
    **{a: "device allocations" for a in ("cudaMalloc", "cuMemAlloc_v2")},
    **{a: "device frees" for a in ("cudaFree", "cuMemFree_v2")},
    **{a: "pinned host allocations" for a in (
        "cudaHostAlloc", "cudaMallocHost", "cuMemHostAlloc", "cuMemAllocHost_v2")},
}

# Overhead modes in table order: gpuprofd-counted is the service's default (launches counted in
# the kernel), gpuprofd is full capture (a record per launch), both with one trap per runtime
# launch; gpuprofd-two-traps is full capture with the runtime's launch entries probed too.
# inject-idle is the injection library loaded with no gpuprofd; gpuprofd-inject is full capture
# with the library enabled (CUPTI records). Every other gpuprofd mode runs with --no-inject.
OVERHEAD_MODES = ("none", "inject-idle", "gpuprofd-counted", "gpuprofd-counted-duty", "gpuprofd-counted-duty25",
                  "gpuprofd", "gpuprofd-two-traps", "gpuprofd-inject", "torch.profiler")

MODE_LABELS = {"none": "none", "inject-idle": "library loaded, no gpuprofd",
               "gpuprofd-counted": "service mode", "gpuprofd-counted-duty": "service 100ms/1s",
               "gpuprofd-counted-duty25": "service 250ms/1s", "gpuprofd": "full capture",
               "gpuprofd-two-traps": "full capture, two traps",
               "gpuprofd-inject": "full capture + GPU time (library)", "torch.profiler": "torch.profiler"}


def overhead_rows(runs):
    """Per workload and mode: the median step time of each run (a run per round, the modes
    interleaved within a round), and the median of those; ratios against no profiler."""
    by = {}
    for r in runs:
        if r.get("kind") != "overhead" or r.get("error"):
            continue
        res = load(r["results"][0]) if r.get("results") else None
        if not res:
            continue
        by.setdefault(res["workload"], {}).setdefault(r.get("mode", "none"), []).append(
            median(res["step_times_s"]))
    rows = []
    for w, modes in sorted(by.items()):
        med = {m: median(v) for m, v in modes.items()}
        base = med.get("none")
        row = {"workload": w, "median_step_s": med}
        if any(len(v) > 1 for v in modes.values()):
            row["runs_median_step_s"] = modes
        if base:
            row["ratio_vs_none"] = {m: round(t / base, 4) for m, t in med.items() if t}
        rows.append(row)
    return rows


def device_rows(name, report, results, stats, findings):
    """Device attribution of each workload process: its calls per device against the device the
    framework says it used, launches against torch.profiler's; the context probes' runs."""
    rows = []
    total_launches = 0
    for res in results:
        proc = process_of(report, res.get("pid"))
        row = {"run": name, "workload": res.get("workload"), "pid": res.get("pid"),
               "cuda_device": res.get("cuda_device")}
        if proc is None:
            findings.append(f"{name}: gpuprofd has no process {res.get('pid')} in its report")
            rows.append(row)
            continue
        launches = proc.get("launches", 0)
        total_launches += launches
        devs = proc.get("devices", [])
        row["launches"] = launches
        row["devices"] = devs
        known = next((d for d in devs if d.get("device") == res.get("cuda_device")), {})
        unknown = next((d for d in devs if d.get("device") is None), {})
        row["launches_on_device"] = known.get("launches", 0)
        row["launches_unknown"] = unknown.get("launches", 0)
        row["nvml_gpu"] = unknown.get("nvml_gpu")
        other = sum(d.get("launches", 0) for d in devs
                    if d.get("device") is not None and d.get("device") != res.get("cuda_device"))
        if other:
            findings.append(f"{name}: pid {res['pid']}: {other} launches on a device other than "
                            f"torch's current device {res.get('cuda_device')}")
        if sum(d.get("launches", 0) for d in devs) != launches:
            findings.append(f"{name}: pid {res['pid']}: the devices' launches do not add up to {launches}")
        prof = res.get("profiler")
        if prof:
            row["profiler_kernels"] = prof["kernels"]
            if row["launches_on_device"] != prof["kernels"]:
                findings.append(f"{name}: pid {res['pid']}: {row['launches_on_device']} launches on device "
                                f"{res.get('cuda_device')}, torch.profiler counted {prof['kernels']} kernels")
        rows.append(row)
    progs = (stats or {}).get("programs", {})
    if stats is not None:
        ctx_in = progs.get("ctx_entry", {}).get("runs", 0)
        ctx_ret = progs.get("ctx_ret", {}).get("runs", 0)
        rows.append({"run": name, "context_probe_runs": {"ctx_entry": ctx_in, "ctx_ret": ctx_ret},
                     "launches_all_processes": total_launches,
                     "ctx_entry_per_launch": round(ctx_in / total_launches, 4) if total_launches else None,
                     "bpf_programs": progs})
    return rows


def nccl_rows(name, proc, res, findings):
    """NCCL under gpuprofd against what the workload asked for: calls and bytes per operation
    (over every communicator of the process), and each communicator's rank, size, device and
    the call that made it."""
    row = {"run": name, "pid": res.get("pid"), "ops": {}, "communicators": []}
    known = res.get("known", {})
    nccl = (proc or {}).get("nccl")
    if proc is None or nccl is None:
        findings.append(f"{name}: no NCCL call of process {res.get('pid')} in the report "
                        "(was libnccl.so.2 found? see the report's libraries)")
        return row
    got = {}
    for c in nccl.get("communicators", []):
        row["communicators"].append({k: c.get(k) for k in ("id", "rank", "nranks", "device", "created_by", "ended")})
        for o in c.get("ops", []):
            g = got.setdefault(o["op"], {"calls": 0, "bytes": 0, "datatypes": {}, "gpu_kernels": None})
            g["calls"] += o.get("calls", 0)
            g["bytes"] += o.get("bytes", 0)
            # The kernels tied to the operation's calls, where the injection library measured them.
            if o.get("gpu_kernels") is not None:
                g["gpu_kernels"] = (g["gpu_kernels"] or 0) + o["gpu_kernels"]
            for d, n in o.get("datatypes", {}).items():
                g["datatypes"][d] = g["datatypes"].get(d, 0) + n
    for op in sorted(set(got) | set(known.get("nccl", {}))):
        k = known.get("nccl", {}).get(op, {"calls": 0, "bytes": 0})
        g = got.get(op, {"calls": 0, "bytes": 0, "datatypes": {}, "gpu_kernels": None})
        row["ops"][op] = {"known_calls": k["calls"], "known_bytes": k["bytes"], "calls": g["calls"],
                          "bytes": g["bytes"], "datatypes": g["datatypes"], "gpu_kernels": g["gpu_kernels"]}
        if (g["calls"], g["bytes"]) != (k["calls"], k["bytes"]):
            findings.append(f"{name}: {op}: gpuprofd {g['calls']} calls / {g['bytes']} B, "
                            f"the script asked for {k['calls']} / {k['bytes']} B")
    used = [c for c in nccl.get("communicators", []) if c.get("ops")]
    for c in used:
        want = (known.get("rank"), known.get("nranks"), res.get("cuda_device"))
        have = (c.get("rank"), c.get("nranks"), c.get("device"))
        if have != want:
            findings.append(f"{name}: communicator {c.get('id')}: rank {have[0]} of {have[1]} on device "
                            f"{have[2]}, expected rank {want[0]} of {want[1]} on device {want[2]}")
    prof = res.get("profiler") or {}
    row["profiler_nccl_kernels"] = sum(n for k, n in prof.get("kernel_names", {}).items()
                                       if k.startswith(("ncclDevKernel", "ncclKernel")))
    return row


def kernel_key(name):
    """A kernel name as both sides can agree on it: no spaces, no leading return type
    ("void "), which torch.profiler's names carry and a demangler may leave out."""
    n = name or ""
    if n.startswith("void "):
        n = n[5:]
    return norm(n)


def gputime_rows(name, lib_report, lib_res, prof_res, prof_report, findings):
    """Measured GPU time: gpuprofd's per-kernel GPU time (the injection library, run alone)
    against torch.profiler's CUDA time per kernel (the same steps, run again with the
    profiler), and the library's state in each run."""
    row = {"run": name}
    proc = process_of(lib_report, (lib_res or {}).get("pid"))
    if proc is None:
        findings.append(f"{name}: no process {(lib_res or {}).get('pid')} in gpuprofd's report")
        return row
    g = proc.get("gpu_time") or {}
    row["state"] = g.get("state") or g.get("unavailable")
    row["basis"] = g.get("basis")
    if g.get("basis") != "measured":
        findings.append(f"{name}: no measured GPU time: {g.get('unavailable') or g}")
    # What the library delivered and how much of it the join tied to recorded launches.
    for k in ("records", "kernels", "calls", "joined", "unjoined", "unjoined_by", "dropped",
              "launches_evicted", "bad_times"):
        row[k] = g.get(k)
    row["launches"] = proc.get("launches")
    row["cupti_files"] = (lib_res or {}).get("cupti_files")
    if len(row["cupti_files"] or []) > 1:
        findings.append(f"{name}: two CUPTI files in the process: {row['cupti_files']}")
    row["kernel_gpu_ms"] = round((g.get("kernel_ns") or 0) / 1e6, 3)
    if g.get("dropped"):
        findings.append(f"{name}: the library dropped {g['dropped']} records")
    if g.get("unjoined"):
        findings.append(f"{name}: {g['unjoined']} of {g.get('kernels')} kernel records not tied to a "
                        f"launch: {g.get('unjoined_by')}")
    if prof_res is None:
        return row  # no torch.profiler run (JAX): gpuprofd's figures alone
    ours = {}
    for k in proc.get("kernels", []):
        t = k.get("gpu_time")
        if t and t.get("basis", "measured") == "measured":
            key = kernel_key(k.get("name") or k.get("mangled"))
            ours[key] = ours.get(key, 0) + t.get("total_ns", 0)
    prof = (prof_res or {}).get("profiler") or {}
    theirs = {kernel_key(n): us * 1000.0 for n, us in prof.get("kernel_gpu_us", {}).items()}
    both = sorted(set(ours) & set(theirs), key=lambda k: -theirs[k])
    row["kernels_gpuprofd"] = len(ours)
    row["kernels_profiler"] = len(theirs)
    row["kernels_matched"] = len(both)
    row["gpuprofd_ms"] = round(sum(ours[k] for k in both) / 1e6, 3)
    row["profiler_ms"] = round(sum(theirs[k] for k in both) / 1e6, 3)
    row["unmatched_gpuprofd_ms"] = round(sum(v for k, v in ours.items() if k not in theirs) / 1e6, 3)
    row["unmatched_profiler_ms"] = round(sum(v for k, v in theirs.items() if k not in ours) / 1e6, 3)
    if row["profiler_ms"]:
        row["sum_ratio"] = round(row["gpuprofd_ms"] / row["profiler_ms"], 4)
        if abs(row["sum_ratio"] - 1) > 0.01:
            findings.append(f"{name}: matched kernels' GPU time {row['gpuprofd_ms']} ms against "
                            f"torch.profiler's {row['profiler_ms']} ms (goal: within 1 %)")
    top = []
    for k in both[:10]:
        r = ours[k] / theirs[k] if theirs[k] else None
        top.append({"kernel": k[:80], "gpuprofd_ms": round(ours[k] / 1e6, 3),
                    "profiler_ms": round(theirs[k] / 1e6, 3), "ratio": round(r, 4) if r else None})
        if r is not None and abs(r - 1) > 0.02:
            findings.append(f"{name}: {k[:60]}: {ours[k] / 1e6:.3f} ms against torch.profiler's "
                            f"{theirs[k] / 1e6:.3f} ms (goal: within 2 %)")
    row["top"] = top
    # torch.profiler with the library loaded: it must still have counted kernels, and the
    # library must have stepped aside.
    if prof.get("kernels") is not None and g.get("kernels") is not None:
        row["kernel_records_vs_profiler"] = f"{g.get('kernels')} / {prof.get('kernels')}"
    row["profiler_kernels"] = prof.get("kernels")
    pp = process_of(prof_report, (prof_res or {}).get("pid")) or {}
    pg = pp.get("gpu_time") or {}
    row["prof_run_state"] = pg.get("state") or pg.get("unavailable")
    if not prof.get("kernels"):
        findings.append(f"{name}: torch.profiler counted no kernels with the library loaded")
    # The library either saw the profiler first (yielded) or enabled first and the profiler,
    # subscribing later, took CUPTI's callbacks (state stays enabled, records stop): both are
    # right as long as the profiler counted its kernels (checked above).
    row["prof_run_library_records"] = pg.get("records")
    row["prof_run_cupti_files"] = (prof_res or {}).get("cupti_files")
    if len(row["prof_run_cupti_files"] or []) > 1:
        findings.append(f"{name}: two CUPTI files in the process: {row['prof_run_cupti_files']}")
    return row


def neighbour_rows(runs, findings):
    """The neighbour of gpuprofd --pid: its median step time with no daemon and beside the
    daemon watching another process, per round, and the ratio of the medians."""
    by = {}
    for r in runs:
        if r.get("kind") != "neighbour" or r.get("error"):
            continue
        res = load(r["results"][0]) if r.get("results") else None
        if not res:
            continue
        by.setdefault(r.get("mode"), []).append(median(res["step_times_s"]))
        rep = load(r.get("report"))
        if rep is not None and process_of(rep, res.get("pid")) is not None:
            findings.append(f"{r['name']}: the neighbour (pid {res.get('pid')}) is in gpuprofd --pid's report")
    if not by:
        return None
    med = {m: median(v) for m, v in by.items()}
    out = {"runs_median_step_s": by, "median_step_s": med}
    if med.get("none") and med.get("gpuprofd-pid-other"):
        out["ratio"] = round(med["gpuprofd-pid-other"] / med["none"], 4)
    return out


def fmt_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join(str(x) for x in r) + " |")
    return "\n".join(out)


def code_view(name, proc, res, findings):
    """Launches whose stack holds `FILE:LINE forward` for each marked line of code_view.py.

    CPython 3.11+ names a frame by its qualified name (`Net.forward`), older ones by the bare
    function name (`forward`): either is this line's frame."""
    row = {"run": name, "pid": res["pid"], "steps": res["steps"], "lines": {}}
    if proc is None:
        findings.append(f"{name}: process {res['pid']} not in the report")
        return row
    st = proc.get("stacks", {})
    row["stack_samples"] = st.get("samples")
    row["python"] = st.get("python")
    row["python_no_thread"] = st.get("python_no_thread")
    for key, line in res["lines"].items():
        frame = f"{res['file']}:{line} forward"
        head = f"{res['file']}:{line} "

        def is_line(f):
            return f.startswith(head) and f[len(head):].split(".")[-1] == "forward"

        n = sum(r.get("launches", 0) for r in proc.get("code", []) if any(map(is_line, r.get("stack", []))))
        row["lines"][key] = {"line": line, "launches": n}
        if n < res["steps"]:
            findings.append(f"{name}: {frame}: {n} launches attributed, expected at least {res['steps']}")
    return row


def main(manifest_path, outdir):
    base = os.path.dirname(os.path.abspath(manifest_path))
    man = load(manifest_path)

    def rel(p):
        return p if not p or os.path.isabs(p) else os.path.join(base, p)

    findings, rows, blocked, code_rows, dev_rows, nccl_out = [], [], [], [], [], []
    gputime_out = []
    for r in man.get("runs", []):
        if r.get("error"):
            findings.append(f"{r['name']}: did not run: {r['error']}")
            continue
        if r.get("kind") in ("overhead", "neighbour"):
            continue
        report = load(rel(r.get("report")))
        if r.get("kind") == "nccl" and report is not None:
            for x in r.get("results", []):
                res = load(rel(x)) or {}
                nccl_out.append(nccl_rows(r["name"], process_of(report, res.get("pid")), res, findings))
            continue
        if r.get("kind") == "gputime" and report is not None:
            res = [load(rel(x)) for x in r.get("results", [])] + [None, None, None]
            gputime_out.append(gputime_rows(r["name"], report, res[0], res[1], res[2], findings))
            continue
        if r.get("kind") == "device" and report is not None:
            rp = rel(r.get("report"))
            stats = load(rp[: -len(".report.json")] + ".bpfstats.json") if rp.endswith(".report.json") else None
            dev_rows.extend(device_rows(r["name"], report, [load(rel(x)) or {} for x in r.get("results", [])],
                                        stats, findings))
            continue
        if report is None:
            findings.append(f"{r['name']}: no gpuprofd report")
            continue
        drops = {k: v for k, v in report.get("drops", {}).items() if v}
        if drops:
            findings.append(f"{r['name']}: gpuprofd dropped records: {drops}")
        for rp in r.get("results", []):
            res = load(rel(rp))
            if res is None:
                findings.append(f"{r['name']}: workload result {rp} missing")
                continue
            if r.get("kind") == "code":
                code_rows.append(code_view(r["name"], process_of(report, res["pid"]), res, findings))
                continue
            rp_report = rel(r.get("report")) or ""
            if rp_report.endswith(".report.json"):
                res["_steps_path"] = rp_report[: -len(".report.json")] + ".steps.json"
            rows.append(compare_process(r["name"], process_of(report, res["pid"]), res, findings))
    neighbour = neighbour_rows([dict(r, report=rel(r.get("report")), results=[rel(x) for x in r.get("results", [])])
                                for r in man.get("runs", [])], findings)
    over = overhead_rows([dict(r, results=[rel(x) for x in r.get("results", [])]) for r in man.get("runs", [])])
    doctor = load(rel(man.get("doctor")))
    if doctor is not None and not doctor.get("ok"):
        blocked.append("BPF: gpuprofd doctor says the probes cannot run on this machine; capture runs were skipped")
    if doctor is not None and not doctor.get("libraries"):
        findings.append("doctor: no CUDA driver or runtime library was found to inspect")
    for lib in (doctor or {}).get("libraries", []):
        if lib.get("error"):
            findings.append(f"doctor: {lib.get('path')}: {lib['error']}")
    procaddr = load(rel(man.get("procaddr")))
    for e in (procaddr or {}).get("symbols", []):
        if e.get("dlsym") and not e.get("same"):
            findings.append(
                f"procaddr: cuGetProcAddress_v2({e['query']}, flags {e['flags']}) returns {e['proc_address']}, "
                f"not the exported {e['symbol']} at {e['dlsym']}: calls through it bypass the probe"
            )
    nvml = load(rel(man.get("nvml")))
    gpm = load(rel(man.get("gpm")))
    results = {
        "schema": "gpuprofd.validation/1",
        "env": man.get("env", {}),
        "doctor": doctor,
        "procaddr": procaddr,
        "nvml": nvml,
        "gpm": gpm,
        "processes": rows,
        "code_view": code_rows,
        "overhead": over,
        "device": dev_rows,
        "nccl": nccl_out,
        "gputime": gputime_out,
        "neighbour": neighbour,
        "findings": findings,
        "blocked": blocked,
    }
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    md = ["# gpuprofd GPU validation", ""]
    for k, v in sorted(man.get("env", {}).items()):
        md.append(f"- {k}: {v}")
    md.append("")
    if doctor is not None:
        md.append("## Can the probes run here (gpuprofd doctor)")
        md.append(fmt_table(["check", "ok", "detail"], [(c["name"], c["ok"], c["detail"]) for c in doctor.get("checks", [])]))
        md.append("")
        md.append("## Driver and runtime facts (hook plan)")
        lib_rows = [
            (lib.get("path"), lib.get("soname"), lib.get("exports"), lib.get("hooked_symbols"), lib.get("probes_after_entry"))
            for lib in doctor.get("libraries", [])
        ]
        md.append(fmt_table(["library", "soname", "exports", "hooked", "probe after entry"], lib_rows))
        md.append("")
    if procaddr is not None:
        md.append("## Where cuGetProcAddress pointers land")
        pr = [(e["symbol"], e["dlsym"], e["proc_address"], e["same"]) for e in procaddr.get("symbols", [])]
        md.append(fmt_table(["symbol", "dlsym", "cuGetProcAddress", "same"], pr))
        md.append("")
    if rows:
        md.append("## Coverage and counts")
        md.append(
            fmt_table(
                ["run", "pid", "gpuprofd launches", "torch.profiler kernels", "diff", "graph launches", "named", "names matched"],
                [
                    (
                        r["run"], r["pid"], r.get("gpuprofd_launches"), r.get("profiler_kernels", "-"),
                        r.get("launch_diff", "-"), r.get("gpuprofd_graph_launches"), r.get("named_fraction"),
                        r.get("profiler_names_matched", "-"),
                    )
                    for r in rows
                ],
            )
        )
        md.append("")
        md.append("Symbols that fired, per run:")
        for r in rows:
            md.append(f"- {r['run']}: {', '.join(r.get('symbols_fired', [])) or '(none)'}")
        md.append("")
    if gputime_out:
        md.append("## Measured GPU time (injection library) against torch.profiler")
        md.append(
            fmt_table(
                ["run", "state", "kernels matched", "gpuprofd ms", "torch.profiler ms", "ratio",
                 "unmatched gpuprofd / profiler ms", "profiler kernels (library loaded)", "library then"],
                [
                    (g["run"], g.get("state"), g.get("kernels_matched"), g.get("gpuprofd_ms"),
                     g.get("profiler_ms"), g.get("sum_ratio", "-"),
                     f"{g.get('unmatched_gpuprofd_ms')} / {g.get('unmatched_profiler_ms')}",
                     g.get("profiler_kernels"), g.get("prof_run_state"))
                    for g in gputime_out
                ],
            )
        )
        md.append("")
        md.append("What the library delivered (run alone), and the join to recorded launches:")
        md.append(fmt_table(
            ["run", "launches recorded", "kernel records (/ profiler's kernels)", "kernel GPU ms",
             "launch calls", "joined", "unjoined (why)", "dropped", "evicted", "bad times"],
            [(g["run"], g.get("launches"), g.get("kernel_records_vs_profiler") or g.get("kernels"),
              g.get("kernel_gpu_ms"), g.get("calls"), g.get("joined"),
              f"{g.get('unjoined')} {g.get('unjoined_by') or ''}".strip(), g.get("dropped"),
              g.get("launches_evicted"), g.get("bad_times"))
             for g in gputime_out]))
        md.append("")
        for g in gputime_out:
            if g.get("top"):
                md.append(f"Top kernels of {g['run']} by torch.profiler's time:")
                md.append(fmt_table(["kernel", "gpuprofd ms", "torch.profiler ms", "ratio"],
                                    [(t["kernel"], t["gpuprofd_ms"], t["profiler_ms"], t["ratio"])
                                     for t in g["top"]]))
                md.append("")
    if code_rows:
        md.append("## Code view (launches per line of forward(), --stack-period 1)")
        md.append(
            fmt_table(
                ["run", "stacks", "python", "no thread state", "line", "launches"],
                [
                    (c["run"], c.get("stack_samples"), c.get("python"), c.get("python_no_thread"),
                     f"{k} ({v['line']})", v["launches"])
                    for c in code_rows
                    for k, v in c["lines"].items()
                ],
            )
        )
        md.append("")
    if over:
        md.append("## Overhead (median step time; ratio against no profiler in the same session)")
        ran = [m for m in OVERHEAD_MODES if any(m in o["median_step_s"] for o in over)]
        md.append(
            fmt_table(
                ["workload"] + [f"{MODE_LABELS[m]} s" for m in ran]
                + [f"{MODE_LABELS[m]} ratio" for m in ran if m != "none"],
                [
                    (
                        o["workload"],
                        *(o["median_step_s"].get(m) for m in ran),
                        *(o.get("ratio_vs_none", {}).get(m) for m in ran if m != "none"),
                    )
                    for o in over
                ],
            )
        )
        md.append("")
    if dev_rows:
        md.append("## Device attribution")
        md.append(fmt_table(
            ["run", "pid", "torch device", "launches", "on that device", "unknown", "nvml_gpu", "torch.profiler kernels"],
            [(d["run"], d["pid"], d.get("cuda_device"), d.get("launches"), d.get("launches_on_device"),
              d.get("launches_unknown"), d.get("nvml_gpu"), d.get("profiler_kernels", "-"))
             for d in dev_rows if "pid" in d]))
        md.append("")
        for d in dev_rows:
            if "context_probe_runs" in d:
                md.append(f"- {d['run']}: context probes ran {d['context_probe_runs']} for "
                          f"{d['launches_all_processes']} launches ({d['ctx_entry_per_launch']} ctx_entry per launch); "
                          f"every program: {json.dumps(d['bpf_programs'])}")
        md.append("")
    if nccl_out:
        md.append("## NCCL (per operation: gpuprofd against what the script asked for)")
        md.append(fmt_table(
            ["run", "op", "calls", "asked", "bytes", "asked bytes", "datatypes", "kernels tied (measured)"],
            [(n["run"], op, o["calls"], o["known_calls"], o["bytes"], o["known_bytes"], json.dumps(o["datatypes"]),
              "-" if o.get("gpu_kernels") is None else o["gpu_kernels"])
             for n in nccl_out for op, o in n["ops"].items()]))
        for n in nccl_out:
            md.append(f"- {n['run']}: communicators {json.dumps(n['communicators'])}; "
                      f"torch.profiler's NCCL kernels: {n.get('profiler_nccl_kernels')}")
        md.append("")
    if neighbour is not None:
        md.append("## A neighbour of gpuprofd --pid (launch-bound loop, median step time)")
        md.append("```\n" + json.dumps(neighbour, indent=1) + "\n```")
        md.append("")
    if nvml is not None:
        md.append("## NVML")
        md.append("```\n" + json.dumps(nvml, indent=1) + "\n```")
        md.append("")
    if gpm is not None:
        md.append("## GPM (gpuprofd, measured, beside nvidia-smi dmon; medians per phase, GPU 0)")
        if gpm.get("dmon_error"):
            md.append(f"nvidia-smi dmon: {gpm['dmon_error']}")
        names = ("sm_activity", "sm_occupancy", "tensor", "tensor_hmma", "dram_bandwidth",
                 "fp16", "fp32", "fp64")
        rows = []
        for ph in gpm.get("phases", []):
            rows.append((ph["phase"], f"{ph.get('gpuprofd_points', 0)}/{ph.get('dmon_points', 0)}",
                         *(f"{ph.get('gpuprofd_' + n, '-')} / {ph.get('dmon_' + n, '-')}" for n in names)))
        md.append(fmt_table(("phase", "points gpuprofd/dmon", *(n + " % gpuprofd / dmon" for n in names)), rows))
        md.append("```\n" + json.dumps(gpm.get("gpuprofd"), indent=1) + "\n```")
        md.append("")
    md.append("## Findings")
    md.extend(f"- {f}" for f in findings) if findings else md.append("- none")
    if blocked:
        md.append("")
        md.append("## Blocked")
        md.extend(f"- {b}" for b in blocked)
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"compare: {len(rows)} processes, {len(findings)} findings -> {outdir}/summary.md")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
