#!/usr/bin/env bash
# GPU validation harness: runs gpuprofd (built elsewhere and carried here) against real CUDA
# workloads and sets its counts against independent ones (torch.profiler/CUPTI, the
# workloads' own bookkeeping). Writes OUT/results.json and OUT/summary.md.
#
#   scripts/gpu-validate.sh [--bin PATH] [--out DIR] [--steps N] [--only LIST] [--dry-run]
#
#   --bin PATH   the gpuprofd binary (default: ./gpuprofd, else target/release/gpuprofd)
#   --out DIR    where to write (default: gpu-validation-<UTC date>)
#   --steps N    measured steps per workload (default 20)
#   --rounds N   overhead: N rounds, each running every mode once in turn (default 1)
#   --only LIST  comma-separated step names (see the plan) to run a subset
#   --modes LIST overhead: the modes to run (default: none,counted,counted_duty,counted_duty25,
#                gpuprofd,gpuprofd_two,prof; also inject_idle, inject: see overhead below)
#   --lib PATH   also give this CUDA library file or directory to the doctor step (repeatable)
#   --dry-run    check prerequisites and print the plan; run nothing on the GPU
#
# Steps, in order (each is independent; a failure is recorded as a finding, never hidden):
#   doctor       gpuprofd doctor --json: do BPF programs load and uprobes fire here? hook plan
#                of the real driver and every runtime found (entry bytes, probe offsets)
#   procaddr     where cuGetProcAddress_v2 pointers land versus the exported symbols
#   coverage     under gpuprofd --all-jobs, each workload with torch.profiler counting:
#                torch_cnn eager / amp / compile, cublas_gemm, torch_graphs, cupy_raw, jax_jit
#   live         a training loop started before gpuprofd, attached with --pid after warm-up;
#                again with --count-launches (the service's in-kernel counting), and with
#                --launch-traps one (names of older handles from the driver's objects)
#   service      gpuprofd serve; the same loop captured after warm-up through the control socket
#                (gpuprofd ctl capture --pid), its file compared like live
#   code         the code view on a PyTorch model (--stack-period 1): launches attributed to
#                the known lines of its forward()
#   attribution  two jobs at once in different cgroups, each job's totals against its own count
#   device       device attribution: two processes on the GPU under --all-jobs (each call's
#                device against torch.cuda.current_device(), launches against torch.profiler),
#                and a loop attached with --pid after warm-up (context made before the attach);
#                the context probes' runs per launch, counted by the kernel (bpf_stats.py)
#   nccl         torch.distributed with the NCCL backend at world size 1 under --all-jobs: each
#                operation's calls and bytes against what the script asked for; the
#                communicator's rank, size, device and which call made it
#   gputime      measured GPU time: each workload under `gpuprofd -- COMMAND` (the injection library
#                loaded), alone, then again with torch.profiler: gpuprofd's per-kernel GPU time
#                against torch.profiler's CUDA time per kernel (two runs of the same steps), the
#                library's state in each (enabled; yielded to torch.profiler)
#   neighbour    a launch-bound loop that gpuprofd --pid does not watch (it watches another
#                CUDA process), against the same loop with no daemon: interleaved rounds
#   overhead     median step time with no profiler / gpuprofd service mode (launches counted
#                in the kernel; and with the launch probes' duty cycle 100ms/1s) / gpuprofd
#                full capture (one trap per runtime launch; and two) / torch.profiler
#                (launch-bound and compute-bound loops). Every gpuprofd mode runs with --no-inject;
#                inject_idle is the injection library loaded with no gpuprofd (CUDA_INJECTION64_PATH
#                set by hand), inject is full capture with the library loaded and enabled
#   nvml         nvidia-smi --query-gpu / --query-compute-apps during a run
#   gpm          gpuprofd's GPM figures (1 s rounds) beside nvidia-smi dmon --gpm-metrics, per
#                phase of known activity (idle, bf16 / fp32 / fp64 matmuls): about 50 s
# Without BPF (doctor fails) only doctor, procaddr, nvml and gpm (its nvidia-smi half) run; the
# rest is recorded blocked.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
WL="$HERE/gpu-workloads"
BIN=""
OUT=""
STEPS=20
ROUNDS=1
ONLY=""
MODES="none,counted,counted_duty,counted_duty25,gpuprofd,gpuprofd_two,prof"
DRY=0
EXTRA_LIBS=()
ALL_STEPS="doctor procaddr coverage live service code attribution device nccl gputime neighbour overhead nvml gpm"

usage() { sed -n '2,36p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --lib) EXTRA_LIBS+=(--lib "$2"); shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu-validate: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$STEPS" in '' | *[!0-9]*) echo "gpu-validate: --steps needs a number" >&2; exit 2 ;; esac
case "$ROUNDS" in '' | 0 | *[!0-9]*) echo "gpu-validate: --rounds needs a number above 0" >&2; exit 2 ;; esac
if [ -z "$BIN" ]; then
    if [ -x ./gpuprofd ]; then BIN=./gpuprofd; else BIN="$ROOT/target/release/gpuprofd"; fi
fi
[ -n "$OUT" ] || OUT="gpu-validation-$(date -u +%Y%m%dT%H%M%SZ)"
# The injection library (measured GPU time) as the kit lays it out: beside the binary.
INJECT_LIB=""
[ -f "$(dirname "$BIN")/libgpuprofd_inject.so" ] && INJECT_LIB=$(cd "$(dirname "$BIN")" && pwd)/libgpuprofd_inject.so
PY=${PYTHON:-python3}

wanted() { # STEP
    [ -z "$ONLY" ] && return 0
    case ",$ONLY," in *",$1,"*) return 0 ;; esac
    return 1
}
if [ -n "$ONLY" ]; then
    for s in ${ONLY//,/ }; do
        case " $ALL_STEPS " in *" $s "*) ;; *) echo "gpu-validate: unknown step '$s' (steps: $ALL_STEPS)" >&2; exit 2 ;; esac
    done
fi

# ---- prerequisites ----------------------------------------------------------------------
MISSING=()
have_py_mod() { "$PY" -c "import $1" >/dev/null 2>&1; }
check() { # NAME OK(0/1) DETAIL
    if [ "$2" = 0 ]; then printf '  ok       %-16s %s\n' "$1" "$3"; else printf '  MISSING  %-16s %s\n' "$1" "$3"; MISSING+=("$1"); fi
}
echo "gpu-validate: prerequisites"
if [ -x "$BIN" ]; then check gpuprofd 0 "$BIN ($("$BIN" --version 2>/dev/null || echo '?'))"; else check gpuprofd 1 "$BIN is not an executable: build with 'cargo xtask build' and carry target/release/gpuprofd"; fi
if [ "$(id -u)" = 0 ]; then check root 0 "uid 0"; else check root 1 "run as root (BPF and uprobes)"; fi
if [ -n "$INJECT_LIB" ]; then check inject-lib 0 "$INJECT_LIB"; else check inject-lib 1 "no libgpuprofd_inject.so beside $BIN: gputime and the inject overhead modes record 'not measured'; carry target/release/libgpuprofd_inject.so"; fi
if command -v "$PY" >/dev/null 2>&1; then check python3 0 "$("$PY" --version 2>&1)"; else check python3 1 "no $PY"; fi
if command -v nvidia-smi >/dev/null 2>&1; then check nvidia-smi 0 "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU answered')"; else check nvidia-smi 1 "not on PATH"; fi
for m in torch triton cupy jax; do
    if have_py_mod "$m"; then check "$m" 0 "importable"; else check "$m" 1 "not importable (its workloads are recorded as not run)"; fi
done
if [ -w /sys/fs/cgroup ] && [ -f /sys/fs/cgroup/cgroup.controllers ]; then check cgroup-v2 0 "/sys/fs/cgroup writable"; else check cgroup-v2 1 "attribution runs without separate cgroups"; fi

for m in ${MODES//,/ }; do
    case " none counted counted_duty counted_duty25 gpuprofd gpuprofd_two prof inject_idle inject " in
    *" $m "*) ;;
    *) echo "gpu-validate: unknown overhead mode '$m' (modes: none counted counted_duty counted_duty25 gpuprofd gpuprofd_two prof inject_idle inject)" >&2; exit 2 ;;
    esac
done

echo "gpu-validate: plan (output in $OUT, $STEPS measured steps per workload)"
for s in $ALL_STEPS; do
    if wanted "$s"; then echo "  run   $s"; else echo "  skip  $s"; fi
done
if [ "$DRY" = 1 ]; then
    echo "gpu-validate: dry run: nothing executed (${#MISSING[@]} prerequisites missing${MISSING[*]:+: ${MISSING[*]}})"
    exit 0
fi
for req in gpuprofd root python3; do
    case " ${MISSING[*]} " in *" $req "*) echo "gpu-validate: cannot run without $req" >&2; exit 1 ;; esac
done

mkdir -p "$OUT/runs"
OUT=$(cd "$OUT" && pwd)
RUNS="$OUT/runs.jsonl"
: >"$RUNS"
json_str() { "$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
record() { # NAME KIND MODE REPORT ERROR RESULT...
    local name=$1 kind=$2 mode=$3 report=$4 err=$5
    shift 5
    local res="[" sep=""
    for r in "$@"; do res="$res$sep$(json_str "$r")"; sep=","; done
    res="$res]"
    printf '{"name":%s,"kind":%s,"mode":%s,"report":%s,"error":%s,"results":%s}\n' \
        "$(json_str "$name")" "$(json_str "$kind")" "$(json_str "$mode")" \
        "$([ -n "$report" ] && json_str "$report" || echo null)" \
        "$([ -n "$err" ] && json_str "$err" || echo null)" "$res" >>"$RUNS"
}

wait_line() { # FILE PATTERN SECONDS -> 0 when a line matches
    local i=0
    while [ "$i" -lt $(($3 * 10)) ]; do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# Starts gpuprofd --all-jobs in the background; sets DPID. Waits for its ready line.
start_daemon() { # NAME [extra args...]
    local name=$1
    shift
    "$BIN" --all-jobs --no-live --output "$OUT/runs/$name.report.json" "$@" \
        >"$OUT/runs/$name.gpuprofd.out" 2>"$OUT/runs/$name.gpuprofd.err" &
    DPID=$!
    if ! wait_line "$OUT/runs/$name.gpuprofd.err" "gpuprofd: ready" 60; then
        kill -INT "$DPID" 2>/dev/null || true
        wait "$DPID" 2>/dev/null || true
        return 1
    fi
}
stop_daemon() {
    kill -INT "$DPID" 2>/dev/null || true
    wait "$DPID" 2>/dev/null || true
}

# ---- environment ---------------------------------------------------------------------------
ENV_JSON="$OUT/env.json"
"$PY" - "$ENV_JSON" "$BIN" <<'PYEOF'
import json, os, platform, subprocess, sys, datetime
def sh(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:
        return f"unavailable ({e.__class__.__name__})"
env = {
    "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"),
    "kernel": platform.release(),
    "gpu": sh("nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"),
    "driver": sh("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
    "gpuprofd": sh(sys.argv[2], "--version"),
}
for mod, attr in (("torch", "__version__"), ("triton", "__version__"), ("cupy", "__version__"), ("jax", "__version__")):
    try:
        m = __import__(mod)
        env[mod] = getattr(m, attr, "?")
        if mod == "torch":
            env["torch_cuda"] = m.version.cuda
    except Exception:
        env[mod] = "not importable"
json.dump(env, open(sys.argv[1], "w"), indent=1)
PYEOF

# Every CUDA runtime on the machine (system and pip wheels) for the hook plan.
find_runtimes() {
    {
        ldconfig -p 2>/dev/null | awk '/libcudart\.so|libcuda\.so\.1/ {print $NF}'
        "$PY" - <<'PYEOF' 2>/dev/null || true
import site, glob, os
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcudart.so*")) + glob.glob(os.path.join(d, "torch", "lib", "libcudart*.so*")):
        print(p)
PYEOF
    } | sort -u
}

BPF_OK=0
DOCTOR=""
if wanted doctor; then
    echo "gpu-validate: doctor"
    DOCTOR="$OUT/doctor.json"
    LIBARGS=("${EXTRA_LIBS[@]}")
    while IFS= read -r l; do [ -n "$l" ] && LIBARGS+=(--lib "$l"); done < <(find_runtimes)
    if "$BIN" doctor --json --symbols "${LIBARGS[@]}" >"$DOCTOR" 2>"$OUT/doctor.err"; then BPF_OK=1; fi
    "$BIN" doctor "${LIBARGS[@]}" >"$OUT/doctor.txt" 2>&1 || true
    if [ "$BPF_OK" = 1 ]; then echo "  BPF works here"; else echo "  BPF does NOT work here: capture steps are recorded as blocked (see $OUT/doctor.txt)"; fi
else
    BPF_OK=1 # assumed: the caller chose to skip the check
fi

PROCADDR=""
if wanted procaddr; then
    echo "gpu-validate: procaddr"
    PROCADDR="$OUT/procaddr.json"
    "$PY" "$WL/procaddr.py" --out "$PROCADDR" 2>"$OUT/procaddr.err" || { echo "  procaddr failed (see $OUT/procaddr.err)"; PROCADDR=""; }
fi

blocked() { record "$1" "$2" "" "" "blocked: BPF programs cannot run on this machine (gpuprofd doctor)"; }

# ---- coverage ------------------------------------------------------------------------------
coverage_run() { # NAME MODULE SCRIPT [args...]
    local name=$1 module=$2 script=$3
    shift 3
    if ! have_py_mod "$module"; then record "$name" coverage "" "" "$module is not importable"; return; fi
    if [ "$BPF_OK" != 1 ]; then blocked "$name" coverage; return; fi
    echo "  $name"
    local res="$OUT/runs/$name.result.json" cap="$OUT/runs/$name.gpuprof"
    # A capture file; the JSON report, steps, timeline and overview page are read back from it
    # (which also validates the capture-file path on real workloads).
    if "$BIN" --all-jobs --no-live --output "$cap" -- \
        "$PY" "$WL/$script" --out "$res" --steps "$STEPS" "$@" \
        >"$OUT/runs/$name.gpuprofd.out" 2>"$OUT/runs/$name.gpuprofd.err" &&
        "$BIN" report "$cap" --format json -o "$OUT/runs/$name.report.json" 2>>"$OUT/runs/$name.gpuprofd.err"; then
        "$BIN" report "$cap" --view steps --format json -o "$OUT/runs/$name.steps.json" 2>>"$OUT/runs/$name.gpuprofd.err" || true
        "$BIN" report "$cap" --format html -o "$OUT/runs/$name.report.html" 2>>"$OUT/runs/$name.gpuprofd.err" || true
        "$BIN" export "$cap" -o "$OUT/runs/$name.trace.json" 2>>"$OUT/runs/$name.gpuprofd.err" || true
        "$BIN" export "$cap" -o "$OUT/runs/$name.pftrace" 2>>"$OUT/runs/$name.gpuprofd.err" || true
        "$BIN" report "$cap" --view timeline -o "$OUT/runs/$name.timeline.txt" 2>>"$OUT/runs/$name.gpuprofd.err" || true
        record "$name" coverage "" "$OUT/runs/$name.report.json" "" "$res"
    else
        record "$name" coverage "" "" "gpuprofd or the workload failed: see runs/$name.gpuprofd.err"
    fi
}
if wanted coverage; then
    echo "gpu-validate: coverage"
    coverage_run torch_cnn_eager torch torch_cnn.py --mode eager --profile
    coverage_run torch_cnn_amp torch torch_cnn.py --mode amp --profile
    coverage_run torch_cnn_compile triton torch_cnn.py --mode compile --profile
    coverage_run cublas_gemm torch cublas_gemm.py --profile
    coverage_run torch_graphs torch torch_graphs.py --profile
    coverage_run cupy_raw cupy cupy_raw.py
    coverage_run jax_jit jax jax_jit.py
fi

# ---- live attach -----------------------------------------------------------------------------
# NAME [gpuprofd args...]: the loop started first, attached with --pid after its warm-up.
live_run() {
    local name=$1
    shift
    local res="$OUT/runs/$name.result.json"
    "$PY" "$WL/torch_cnn.py" --mode eager --hold --profile --out "$res" --steps "$STEPS" \
        >"$OUT/runs/$name.workload.out" 2>"$OUT/runs/$name.workload.err" &
    WPID=$!
    if wait_line "$OUT/runs/$name.workload.out" "^held " 300; then
        "$BIN" --pid "$WPID" --no-live --output "$OUT/runs/$name.report.json" "$@" \
            >"$OUT/runs/$name.gpuprofd.out" 2>"$OUT/runs/$name.gpuprofd.err" &
        DPID=$!
        if wait_line "$OUT/runs/$name.gpuprofd.err" "gpuprofd: ready" 60; then
            kill -USR1 "$WPID"
            wait "$WPID" || true
            stop_daemon
            record "$name" live "" "$OUT/runs/$name.report.json" "" "$res"
        else
            kill "$WPID" 2>/dev/null || true
            stop_daemon
            record "$name" live "" "" "gpuprofd --pid did not become ready: see runs/$name.gpuprofd.err"
        fi
    else
        kill "$WPID" 2>/dev/null || true
        record "$name" live "" "" "the workload never reached its hold point: see runs/$name.workload.err"
    fi
}
if wanted live; then
    echo "gpu-validate: live attach (--pid), a record per launch and launches counted in the kernel"
    if ! have_py_mod torch; then
        record live live "" "" "torch is not importable"
    elif [ "$BPF_OK" != 1 ]; then
        blocked live live
    else
        live_run live
        # The service's default: launches counted in the kernel, compared the same way.
        live_run live_counted --count-launches 1s
        # One trap per runtime launch on a warmed-up process (--pid's default is two): how many
        # of the handles it launches the driver-object layout (learned by the coverage runs
        # before, remembered in the state directory) names.
        live_run live_one_trap --launch-traps one
    fi
fi

# ---- service mode ----------------------------------------------------------------------------
if wanted service; then
    echo "gpu-validate: service (gpuprofd serve, a deep capture through the control socket)"
    if ! have_py_mod torch; then
        record service live "" "" "torch is not importable"
    elif [ "$BPF_OK" != 1 ]; then
        blocked service live
    else
        cfg="$OUT/runs/service.toml"
        sock="$OUT/runs/service.sock"
        res="$OUT/runs/service.result.json"
        cap="$OUT/runs/service.gpuprof"
        printf '[metrics]\nlisten = "127.0.0.1:19400"\n[control]\nsocket = "%s"\n' "$sock" >"$cfg"
        "$BIN" serve --config "$cfg" \
            >"$OUT/runs/service.gpuprofd.out" 2>"$OUT/runs/service.gpuprofd.err" &
        SPID=$!
        if wait_line "$OUT/runs/service.gpuprofd.err" "gpuprofd: ready" 120; then
            "$PY" "$WL/torch_cnn.py" --mode eager --hold --profile --out "$res" --steps "$STEPS" \
                >"$OUT/runs/service.workload.out" 2>"$OUT/runs/service.workload.err" &
            WPID=$!
            if wait_line "$OUT/runs/service.workload.out" "^held " 300; then
                "$BIN" ctl --socket "$sock" capture --pid "$WPID" --duration 1h -o "$cap" \
                    2>"$OUT/runs/service.ctl.err" &
                CPID=$!
                wait_line "$OUT/runs/service.ctl.err" "capturing" 30 || true
                kill -USR1 "$WPID"
                wait "$WPID" || true
                # The capture ends with the process; the service keeps running.
                wait "$CPID" || true
                "$BIN" ctl --socket "$sock" snapshot >"$OUT/runs/service.snapshot.json" \
                    2>>"$OUT/runs/service.ctl.err" || true
                curl -s "http://127.0.0.1:19400/metrics" >"$OUT/runs/service.metrics.txt" 2>/dev/null || true
                if "$BIN" report "$cap" --format json -o "$OUT/runs/service.report.json" \
                    2>>"$OUT/runs/service.ctl.err"; then
                    record service live "" "$OUT/runs/service.report.json" "" "$res"
                else
                    record service live "" "" "the deep capture does not read back: see runs/service.ctl.err"
                fi
            else
                kill "$WPID" 2>/dev/null || true
                record service live "" "" "the workload never reached its hold point: see runs/service.workload.err"
            fi
        else
            record service live "" "" "gpuprofd serve did not become ready: see runs/service.gpuprofd.err"
        fi
        kill -TERM "$SPID" 2>/dev/null || true
        wait "$SPID" 2>/dev/null || true
    fi
fi

# ---- code view -------------------------------------------------------------------------------
if wanted code; then
    echo "gpu-validate: code view (Python frames of a PyTorch forward())"
    if ! have_py_mod torch; then
        record code_view code "" "" "torch is not importable"
    elif [ "$BPF_OK" != 1 ]; then
        blocked code_view code
    else
        cap="$OUT/runs/code_view.gpuprof"
        res="$OUT/runs/code_view.result.json"
        if "$BIN" --all-jobs --no-live --stack-period 1 --output "$cap" -- \
            "$PY" "$WL/code_view.py" --out "$res" --steps "$STEPS" \
            >"$OUT/runs/code_view.gpuprofd.out" 2>"$OUT/runs/code_view.gpuprofd.err" &&
            "$BIN" report "$cap" --format json -o "$OUT/runs/code_view.report.json" 2>>"$OUT/runs/code_view.gpuprofd.err"; then
            "$BIN" report "$cap" --view code -o "$OUT/runs/code_view.code.txt" 2>>"$OUT/runs/code_view.gpuprofd.err" || true
            "$BIN" report "$cap" --view callers -o "$OUT/runs/code_view.callers.txt" 2>>"$OUT/runs/code_view.gpuprofd.err" || true
            record code_view code "" "$OUT/runs/code_view.report.json" "" "$res"
        else
            record code_view code "" "" "gpuprofd or the workload failed: see runs/code_view.gpuprofd.err"
        fi
    fi
fi

# ---- attribution -----------------------------------------------------------------------------
run_in_cgroup() { # CGROUP CMD... (cgroup may be empty)
    local cg=$1
    shift
    if [ -n "$cg" ]; then
        (echo "$BASHPID" >"$cg/cgroup.procs" && exec "$@")
    else
        "$@"
    fi
}
if wanted attribution; then
    echo "gpu-validate: attribution (two jobs at once)"
    if ! have_py_mod torch; then
        record attribution attribution "" "" "torch is not importable"
    elif [ "$BPF_OK" != 1 ]; then
        blocked attribution attribution
    elif start_daemon attribution; then
        CGA="" CGB=""
        if [ -w /sys/fs/cgroup ] && [ -f /sys/fs/cgroup/cgroup.controllers ]; then
            CGA=/sys/fs/cgroup/gpuprofd-val-job-a
            CGB=/sys/fs/cgroup/gpuprofd-val-job-b
            mkdir -p "$CGA" "$CGB"
        fi
        run_in_cgroup "$CGA" "$PY" "$WL/torch_cnn.py" --mode eager --profile --out "$OUT/runs/attr_a.result.json" --steps "$STEPS" 2>"$OUT/runs/attr_a.err" &
        A=$!
        run_in_cgroup "$CGB" "$PY" "$WL/cublas_gemm.py" --profile --out "$OUT/runs/attr_b.result.json" --steps "$STEPS" 2>"$OUT/runs/attr_b.err" &
        B=$!
        wait "$A" || true
        wait "$B" || true
        stop_daemon
        [ -n "$CGA" ] && rmdir "$CGA" "$CGB" 2>/dev/null || true
        record attribution attribution "" "$OUT/runs/attribution.report.json" "" \
            "$OUT/runs/attr_a.result.json" "$OUT/runs/attr_b.result.json"
    else
        record attribution attribution "" "" "gpuprofd --all-jobs did not become ready: see runs/attribution.gpuprofd.err"
    fi
fi

# ---- device attribution ------------------------------------------------------------------------
# The kernel's count of every BPF program's runs during a capture (bpf_stats.py); STATS_PID.
stats_start() { # FILE
    "$PY" "$WL/bpf_stats.py" --out "$1" >"$1.out" 2>&1 &
    STATS_PID=$!
    wait_line "$1.out" "bpf_stats: on" 10 || true
}
stats_stop() {
    kill -INT "$STATS_PID" 2>/dev/null || true
    wait "$STATS_PID" 2>/dev/null || true
}
if wanted device; then
    echo "gpu-validate: device attribution (two processes under --all-jobs; a --pid attach after warm-up)"
    if ! have_py_mod torch; then
        record device_all device "" "" "torch is not importable"
    elif [ "$BPF_OK" != 1 ]; then
        blocked device_all device
    else
        # Both processes start under the daemon: their contexts are made while it watches.
        stats_start "$OUT/runs/device_all.bpfstats.json"
        if "$BIN" --all-jobs --no-live --output "$OUT/runs/device_all.report.json" -- bash -c \
            "'$PY' '$WL/torch_cnn.py' --mode eager --profile --out '$OUT/runs/device_a.result.json' --steps $STEPS 2>'$OUT/runs/device_a.err' &
             '$PY' '$WL/cublas_gemm.py' --profile --out '$OUT/runs/device_b.result.json' --steps $STEPS 2>'$OUT/runs/device_b.err'
             wait" >"$OUT/runs/device_all.gpuprofd.out" 2>"$OUT/runs/device_all.gpuprofd.err"; then
            stats_stop
            record device_all device "" "$OUT/runs/device_all.report.json" "" \
                "$OUT/runs/device_a.result.json" "$OUT/runs/device_b.result.json"
        else
            stats_stop
            record device_all device "" "" "gpuprofd or a workload failed: see runs/device_all.gpuprofd.err"
        fi
        # The context is made before the attach: learned from a later call, or NVML's
        # one-GPU fallback names the GPU on the unknown row. No torch.profiler here (CUPTI's
        # own context calls would reveal the context).
        res="$OUT/runs/device_live.result.json"
        "$PY" "$WL/torch_cnn.py" --mode eager --hold --out "$res" --steps "$STEPS" \
            >"$OUT/runs/device_live.workload.out" 2>"$OUT/runs/device_live.workload.err" &
        WPID=$!
        if wait_line "$OUT/runs/device_live.workload.out" "^held " 300; then
            stats_start "$OUT/runs/device_live.bpfstats.json"
            "$BIN" --pid "$WPID" --no-live --output "$OUT/runs/device_live.report.json" \
                >"$OUT/runs/device_live.gpuprofd.out" 2>"$OUT/runs/device_live.gpuprofd.err" &
            DPID=$!
            if wait_line "$OUT/runs/device_live.gpuprofd.err" "gpuprofd: ready" 60; then
                kill -USR1 "$WPID"
                wait "$WPID" || true
                stop_daemon
                stats_stop
                record device_live device "" "$OUT/runs/device_live.report.json" "" "$res"
            else
                kill "$WPID" 2>/dev/null || true
                stop_daemon
                stats_stop
                record device_live device "" "" "gpuprofd --pid did not become ready: see runs/device_live.gpuprofd.err"
            fi
        else
            kill "$WPID" 2>/dev/null || true
            record device_live device "" "" "the workload never reached its hold point: see runs/device_live.workload.err"
        fi
    fi
fi

# ---- NCCL ------------------------------------------------------------------------------------------
# Issue 32: NCCL's collectives without a code change. One GPU: world size 1 (NCCL refuses two
# ranks on one GPU); the rank still calls the API and launches NCCL's kernels.
if wanted nccl; then
    echo "gpu-validate: nccl (torch.distributed, NCCL backend, world size 1)"
    if ! have_py_mod torch; then
        record nccl nccl "" "" "torch is not importable"
    elif [ "$BPF_OK" != 1 ]; then
        blocked nccl nccl
    else
        cap="$OUT/runs/nccl.gpuprof"
        res="$OUT/runs/nccl.result.json"
        if "$BIN" --all-jobs --no-live --output "$cap" -- \
            "$PY" "$WL/nccl_collectives.py" --out "$res" --steps "$STEPS" --profile \
            >"$OUT/runs/nccl.gpuprofd.out" 2>"$OUT/runs/nccl.gpuprofd.err" &&
            "$BIN" report "$cap" --format json -o "$OUT/runs/nccl.report.json" 2>>"$OUT/runs/nccl.gpuprofd.err"; then
            "$BIN" report "$cap" --view collectives --wide -o "$OUT/runs/nccl.collectives.txt" 2>>"$OUT/runs/nccl.gpuprofd.err" || true
            "$BIN" report "$cap" --view steps --wide -o "$OUT/runs/nccl.steps.txt" 2>>"$OUT/runs/nccl.gpuprofd.err" || true
            # The job across its ranks (one rank here) and the node-GPU selection (one GPU:
            # --gpu 0 should equal --device 0), for a reader to compare.
            "$BIN" report "$cap" --view ranks -o "$OUT/runs/nccl.ranks.txt" 2>>"$OUT/runs/nccl.gpuprofd.err" || true
            "$BIN" report "$cap" --gpu 0 --view devices -o "$OUT/runs/nccl.gpu0.devices.txt" 2>>"$OUT/runs/nccl.gpuprofd.err" || true
            "$BIN" report "$cap" --device 0 --view devices -o "$OUT/runs/nccl.device0.devices.txt" 2>>"$OUT/runs/nccl.gpuprofd.err" || true
            record nccl nccl "" "$OUT/runs/nccl.report.json" "" "$res"
        else
            record nccl nccl "" "" "gpuprofd or the workload failed: see runs/nccl.gpuprofd.err"
        fi
    fi
fi

# ---- measured GPU time (the injection library) ------------------------------------------------
# Issue 31, layer 3. Each workload twice, both under `gpuprofd -- COMMAND` (which loads
# libgpuprofd_inject.so into it): first alone (gpuprofd's per-kernel GPU times, CUPTI through
# the library), then with torch.profiler counting (its per-kernel CUDA times; the library must
# yield to it, and torch.profiler must still work). Two runs of the same steps: the per-kernel
# comparison carries the run-to-run spread of the kernels' own durations.
gputime_run() { # NAME MODULE SCRIPT [args...]; GPUTIME_MODES="lib" for a workload without torch.profiler
    local name=$1 module=$2 script=$3
    shift 3
    if ! have_py_mod "$module"; then record "$name" gputime "" "" "$module is not importable"; return; fi
    if [ "$BPF_OK" != 1 ]; then blocked "$name" gputime; return; fi
    if [ -z "$INJECT_LIB" ]; then record "$name" gputime "" "" "no libgpuprofd_inject.so beside $BIN"; return; fi
    echo "  $name"
    if [ -n "${GPUTIME_WARM:-}" ]; then
        # One plain run first (torch.compile: Inductor's caches on disk), so the two measured
        # runs run the same kernels; on a cold cache the first also ran compile-time benchmarks
        # (11,030 kernels against 609 on the H200, 2026-11-27).
        "$PY" "$WL/$script" --out "$OUT/runs/$name.warm.result.json" --steps 1 "$@" \
            >/dev/null 2>"$OUT/runs/$name.warm.err" || true
    fi
    local mode ok=1 res=()
    for mode in ${GPUTIME_MODES:-lib prof}; do
        local extra=()
        [ "$mode" = prof ] && extra=(--profile)
        # The library's run goes through a capture file (GPU records in schema 9, read back
        # into the JSON report; the file stays for a replay of the join).
        local dest="$OUT/runs/$name.$mode.report.json"
        [ "$mode" = lib ] && dest="$OUT/runs/$name.lib.gpuprof"
        if ! "$BIN" --no-live --output "$dest" -- \
            "$PY" "$WL/$script" --out "$OUT/runs/$name.$mode.result.json" --steps "$STEPS" "${extra[@]}" "$@" \
            >"$OUT/runs/$name.$mode.gpuprofd.out" 2>"$OUT/runs/$name.$mode.gpuprofd.err"; then
            ok=0
        elif [ "$mode" = lib ] && ! "$BIN" report "$dest" --format json -o "$OUT/runs/$name.lib.report.json" \
            2>>"$OUT/runs/$name.lib.gpuprofd.err"; then
            ok=0
        fi
    done
    if [ "$ok" = 1 ]; then
        "$BIN" report "$OUT/runs/$name.lib.report.json" --view kernels --order-by gpu_time --wide \
            -o "$OUT/runs/$name.lib.kernels.txt" 2>>"$OUT/runs/$name.lib.gpuprofd.err" || true
        # Each step's measured GPU busy time (and NCCL time) beside its wall time: read by hand.
        "$BIN" report "$OUT/runs/$name.lib.gpuprof" --view steps --wide \
            -o "$OUT/runs/$name.lib.steps.txt" 2>>"$OUT/runs/$name.lib.gpuprofd.err" || true
        res=("$OUT/runs/$name.lib.result.json")
        case " ${GPUTIME_MODES:-lib prof} " in
        *" prof "*) res+=("$OUT/runs/$name.prof.result.json" "$OUT/runs/$name.prof.report.json") ;;
        esac
        record "$name" gputime "" "$OUT/runs/$name.lib.report.json" "" "${res[@]}"
    else
        record "$name" gputime "" "" "gpuprofd or the workload failed: see runs/$name.{lib,prof}.gpuprofd.err"
    fi
}
if wanted gputime; then
    echo "gpu-validate: gputime (measured GPU time through the injection library, against torch.profiler)"
    gputime_run gputime_cnn_eager torch torch_cnn.py --mode eager
    gputime_run gputime_cublas_gemm torch cublas_gemm.py
    gputime_run gputime_torch_graphs torch torch_graphs.py
    gputime_run gputime_cnn_amp torch torch_cnn.py --mode amp
    GPUTIME_WARM=1 gputime_run gputime_cnn_compile torch torch_cnn.py --mode compile
    # JAX has no torch.profiler: gpuprofd's figures alone (state, kernels timed and joined).
    GPUTIME_MODES=lib gputime_run gputime_jax_jit jax jax_jit.py
fi

# ---- neighbour -----------------------------------------------------------------------------------
# Issue 35: a CUDA process that gpuprofd --pid does not select must not pay for the probes. The
# watched process is a warmed-up loop held at its hold point; the neighbour is the launch-bound
# loop, run with no daemon and beside gpuprofd --pid in turn, ROUNDS (at least 3) rounds.
if wanted neighbour; then
    echo "gpu-validate: neighbour (a process outside gpuprofd --pid's selection)"
    if ! have_py_mod torch; then
        record neighbour neighbour "" "" "torch is not importable"
    elif [ "$BPF_OK" != 1 ]; then
        blocked neighbour neighbour
    else
        "$PY" "$WL/torch_cnn.py" --mode eager --hold --out "$OUT/runs/neighbour_watched.result.json" --steps 1 \
            >"$OUT/runs/neighbour_watched.out" 2>"$OUT/runs/neighbour_watched.err" &
        HPID=$!
        if wait_line "$OUT/runs/neighbour_watched.out" "^held " 300; then
            nr=$ROUNDS
            if [ "$nr" -lt 3 ]; then nr=3; fi
            for round in $(seq 1 "$nr"); do
                for mode in none pid; do
                    # Alternate which goes first, so a drift over time does not favour one.
                    if [ $((round % 2)) = 0 ]; then
                        if [ "$mode" = none ]; then mode=pid; else mode=none; fi
                    fi
                    n="nb_r${round}_$mode"
                    if [ "$mode" = pid ]; then
                        "$BIN" --pid "$HPID" --no-live --output "$OUT/runs/$n.report.json" \
                            >"$OUT/runs/$n.gpuprofd.out" 2>"$OUT/runs/$n.gpuprofd.err" &
                        DPID=$!
                        if ! wait_line "$OUT/runs/$n.gpuprofd.err" "gpuprofd: ready" 60; then
                            stop_daemon
                            record "$n" neighbour gpuprofd-pid-other "" "gpuprofd --pid did not become ready: see runs/$n.gpuprofd.err"
                            continue
                        fi
                    fi
                    echo "  round $round: $mode"
                    if "$PY" "$WL/launch_bound.py" --out "$OUT/runs/$n.json" --steps $((STEPS * 25)) 2>"$OUT/runs/$n.err"; then
                        record "$n" neighbour "$([ "$mode" = pid ] && echo gpuprofd-pid-other || echo none)" \
                            "$([ "$mode" = pid ] && echo "$OUT/runs/$n.report.json")" "" "$OUT/runs/$n.json"
                    else
                        record "$n" neighbour "$mode" "" "the loop failed: see runs/$n.err"
                    fi
                    if [ "$mode" = pid ]; then stop_daemon; fi
                done
            done
        else
            record neighbour neighbour "" "" "the watched process never reached its hold point: see runs/neighbour_watched.err"
        fi
        kill "$HPID" 2>/dev/null || true
        wait "$HPID" 2>/dev/null || true
    fi
fi

# ---- overhead --------------------------------------------------------------------------------
overhead_run() { # NAME STEPS SCRIPT [args...]: ROUNDS rounds, the modes interleaved in each
    local name=$1 n=$2 script=$3
    shift 3
    local round
    for round in $(seq 1 "$ROUNDS"); do
        overhead_round "$name" "$n" "$script" "$round" "$@"
    done
}
overhead_round() { # NAME STEPS SCRIPT ROUND [args...]: the modes in an order rotated by ROUND
    local base=$1 n=$2 script=$3 round=$4
    shift 4
    local name=$base
    [ "$ROUNDS" -gt 1 ] && name="${base}_r$round"
    local modes i
    IFS=, read -r -a modes <<<"$MODES"
    for i in "${!modes[@]}"; do
        overhead_mode "${modes[$(((i + round - 1) % ${#modes[@]}))]}" "$name" "$n" "$script" "$@" ||
            echo "  $name: mode ${modes[$(((i + round - 1) % ${#modes[@]}))]} failed (see its .err)"
    done
}
overhead_mode() { # MODE NAME STEPS SCRIPT [args...]
    local mode=$1 name=$2 n=$3 script=$4
    shift 4
    case "$mode" in
    none)
        echo "  $name: none"
        "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_none.json" --steps "$n" "$@" 2>/dev/null &&
            record "oh_${name}_none" overhead none "" "" "$OUT/runs/oh_${name}_none.json"
        ;;
    counted)
        # The service's default: launches counted in the kernel, no record per launch.
        if [ "$BPF_OK" != 1 ]; then blocked "oh_${name}_counted" overhead; return; fi
        echo "  $name: gpuprofd service mode (--count-launches)"
        "$BIN" --all-jobs --no-live --no-inject --count-launches 1s --output "$OUT/runs/oh_${name}_counted.report.json" -- \
            "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_counted.json" --steps "$n" "$@" \
            >/dev/null 2>"$OUT/runs/oh_${name}_counted.err" &&
            record "oh_${name}_counted" overhead gpuprofd-counted "" "" "$OUT/runs/oh_${name}_counted.json"
        ;;
    gpuprofd)
        if [ "$BPF_OK" != 1 ]; then blocked "oh_${name}_gpuprofd" overhead; return; fi
        echo "  $name: gpuprofd full capture"
        "$BIN" --all-jobs --no-live --no-inject --output "$OUT/runs/oh_${name}_gpuprofd.report.json" -- \
            "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_gpuprofd.json" --steps "$n" "$@" \
            >/dev/null 2>"$OUT/runs/oh_${name}_gpuprofd.err" &&
            record "oh_${name}_gpuprofd" overhead gpuprofd "" "" "$OUT/runs/oh_${name}_gpuprofd.json"
        ;;
    counted_duty)
        # Service mode under a duty cycle: launch probes attached 100 ms of every second.
        if [ "$BPF_OK" != 1 ]; then blocked "oh_${name}_counted_duty" overhead; return; fi
        echo "  $name: gpuprofd service mode, launch probes 100ms/1s"
        "$BIN" --all-jobs --no-live --no-inject --count-launches 1s --launch-duty 100ms/1s --output "$OUT/runs/oh_${name}_counted_duty.report.json" -- \
            "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_counted_duty.json" --steps "$n" "$@" \
            >/dev/null 2>"$OUT/runs/oh_${name}_counted_duty.err" &&
            record "oh_${name}_counted_duty" overhead gpuprofd-counted-duty "" "" "$OUT/runs/oh_${name}_counted_duty.json"
        ;;
    counted_duty25)
        # The same with the launch probes attached 250 ms of every second.
        if [ "$BPF_OK" != 1 ]; then blocked "oh_${name}_counted_duty25" overhead; return; fi
        echo "  $name: gpuprofd service mode, launch probes 250ms/1s"
        "$BIN" --all-jobs --no-live --no-inject --count-launches 1s --launch-duty 250ms/1s --output "$OUT/runs/oh_${name}_counted_duty25.report.json" -- \
            "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_counted_duty25.json" --steps "$n" "$@" \
            >/dev/null 2>"$OUT/runs/oh_${name}_counted_duty25.err" &&
            record "oh_${name}_counted_duty25" overhead gpuprofd-counted-duty25 "" "" "$OUT/runs/oh_${name}_counted_duty25.json"
        ;;
    gpuprofd_two)
        # Full capture with both layers probed (two traps per runtime launch), as before #35.
        if [ "$BPF_OK" != 1 ]; then blocked "oh_${name}_gpuprofd_two" overhead; return; fi
        echo "  $name: gpuprofd full capture, two traps per runtime launch"
        "$BIN" --all-jobs --no-live --no-inject --launch-traps two --output "$OUT/runs/oh_${name}_gpuprofd_two.report.json" -- \
            "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_gpuprofd_two.json" --steps "$n" "$@" \
            >/dev/null 2>"$OUT/runs/oh_${name}_gpuprofd_two.err" &&
            record "oh_${name}_gpuprofd_two" overhead gpuprofd-two-traps "" "" "$OUT/runs/oh_${name}_gpuprofd_two.json"
        ;;
    prof)
        echo "  $name: torch.profiler"
        "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_prof.json" --steps "$n" --profile "$@" 2>/dev/null &&
            record "oh_${name}_prof" overhead torch.profiler "" "" "$OUT/runs/oh_${name}_prof.json"
        ;;
    inject_idle)
        # The injection library loaded (CUDA_INJECTION64_PATH by hand) and no gpuprofd: its
        # control thread polls, CUPTI is never loaded. Goal: not measurable against none.
        if [ -z "$INJECT_LIB" ]; then record "oh_${name}_inject_idle" overhead inject-idle "" "no libgpuprofd_inject.so beside $BIN"; return; fi
        echo "  $name: injection library loaded, no gpuprofd"
        CUDA_INJECTION64_PATH="$INJECT_LIB" "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_inject_idle.json" --steps "$n" "$@" 2>/dev/null &&
            record "oh_${name}_inject_idle" overhead inject-idle "" "" "$OUT/runs/oh_${name}_inject_idle.json"
        ;;
    inject)
        # Full capture with the library loaded by -- COMMAND and enabled (CUPTI activity records
        # of kernels, copies and memsets, and driver-API records of the launches for the join).
        if [ "$BPF_OK" != 1 ]; then blocked "oh_${name}_inject" overhead; return; fi
        if [ -z "$INJECT_LIB" ]; then record "oh_${name}_inject" overhead gpuprofd-inject "" "no libgpuprofd_inject.so beside $BIN"; return; fi
        echo "  $name: gpuprofd full capture with measured GPU time (injection library)"
        "$BIN" --all-jobs --no-live --output "$OUT/runs/oh_${name}_inject.report.json" -- \
            "$PY" "$WL/$script" --out "$OUT/runs/oh_${name}_inject.json" --steps "$n" "$@" \
            >/dev/null 2>"$OUT/runs/oh_${name}_inject.err" &&
            record "oh_${name}_inject" overhead gpuprofd-inject "" "" "$OUT/runs/oh_${name}_inject.json"
        ;;
    *) echo "  $name: unknown overhead mode '$mode'" >&2; return 1 ;;
    esac
}
if wanted overhead; then
    echo "gpu-validate: overhead"
    if have_py_mod torch; then
        # A launch-bound step is ~200 launches (about a millisecond): many steps for a stable median.
        overhead_run launch_bound $((STEPS * 25)) launch_bound.py
        overhead_run compute_bound $((STEPS * 3)) torch_cnn.py --mode eager --batch 512
    else
        record overhead overhead "" "" "torch is not importable"
    fi
fi

# ---- NVML ------------------------------------------------------------------------------------
NVML=""
if wanted nvml && command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-validate: nvml (nvidia-smi and gpuprofd's NVML sampling during one run)"
    NVML="$OUT/nvml.json"
    NCAP="$OUT/runs/nvml.gpuprof"
    DPID=""
    if [ "$BPF_OK" = 1 ]; then
        "$BIN" --all-jobs --no-live --output "$NCAP" \
            >"$OUT/runs/nvml.gpuprofd.out" 2>"$OUT/runs/nvml.gpuprofd.err" &
        DPID=$!
        wait_line "$OUT/runs/nvml.gpuprofd.err" "gpuprofd: ready" 60 || true
    fi
    if have_py_mod torch; then
        "$PY" "$WL/launch_bound.py" --out "$OUT/runs/nvml.result.json" --steps $((STEPS * 10)) 2>/dev/null &
        NP=$!
        sleep 3
    fi
    SMI="$OUT/runs/nvml.smi.json"
    "$PY" - "$SMI" <<'PYEOF'
import json, subprocess, sys
def q(*a):
    r = subprocess.run(["nvidia-smi", *a, "--format=csv,noheader,nounits"], capture_output=True, text=True)
    return [l.strip() for l in r.stdout.splitlines() if l.strip()]
json.dump({
    "query_gpu": q("--query-gpu=index,utilization.gpu,memory.used,memory.total"),
    "query_compute_apps": q("--query-compute-apps=pid,used_memory"),
}, open(sys.argv[1], "w"), indent=1)
PYEOF
    [ -n "${NP:-}" ] && wait "$NP" 2>/dev/null || true
    if [ -n "$DPID" ]; then
        kill -INT "$DPID" 2>/dev/null || true
        wait "$DPID" 2>/dev/null || true
        "$BIN" report "$NCAP" --format json -o "$OUT/runs/nvml.report.json" 2>>"$OUT/runs/nvml.gpuprofd.err" || true
    fi
    "$PY" - "$NVML" "$SMI" "$OUT/runs/nvml.report.json" "$OUT/runs/nvml.result.json" <<'PYEOF'
import json, os, sys
out, smi, rep, res = sys.argv[1:5]
load = lambda p: json.load(open(p)) if os.path.exists(p) else None
smi, rep, res = load(smi), load(rep), load(res)
g = {"nvidia_smi": smi}
if rep is None:
    g["gpuprofd"] = "no gpuprofd capture (BPF unavailable, or it failed: runs/nvml.gpuprofd.err)"
else:
    g["gpuprofd"] = {"nvml": rep.get("nvml"), "gpus": rep.get("gpus")}
    pid = (res or {}).get("pid")
    proc = next((p for p in rep.get("processes", []) if p.get("tgid") == pid), None)
    g["gpuprofd_workload_process"] = (proc or {}).get("gpu")
json.dump(g, open(out, "w"), indent=1)
PYEOF
fi

# ---- GPM ---------------------------------------------------------------------------------------
# gpuprofd samples NVML every second during phases of known activity; nvidia-smi dmon reads the
# same GPM metrics (NVML's ids) every second beside it. Both are cut into the workload's phases
# (wall clock; gpuprofd's rounds placed from the report's started_at, whole seconds, so the
# first 2 s and the last 1 s of each phase are left out) and compared by their medians.
GPM=""
GPM_IDS="1,2,3,4,5,6,7,9,10,11,12,13,20,21,60,61"
if wanted gpm && command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-validate: gpm (gpuprofd's GPM figures beside nvidia-smi dmon --gpm-metrics $GPM_IDS)"
    GPM="$OUT/gpm.json"
    GCAP="$OUT/runs/gpm.gpuprof"
    GDPID=""
    if [ "$BPF_OK" = 1 ]; then
        "$BIN" --all-jobs --no-live --nvml-interval 1s --output "$GCAP" \
            >"$OUT/runs/gpm.gpuprofd.out" 2>"$OUT/runs/gpm.gpuprofd.err" &
        GDPID=$!
        wait_line "$OUT/runs/gpm.gpuprofd.err" "gpuprofd: ready" 30 || true
    fi
    # dmon stamps its rows (-o T, UTC); an nvidia-smi that refuses -o T beside --gpm-metrics is
    # run again without it, and its rows are placed one second apart from its start.
    TZ=UTC timeout 70 nvidia-smi dmon --gpm-metrics "$GPM_IDS" -d 1 -c 60 -o T \
        >"$OUT/runs/gpm.dmon.txt" 2>"$OUT/runs/gpm.dmon.err" &
    DMPID=$!
    sleep 2
    if ! kill -0 "$DMPID" 2>/dev/null && ! grep -q '^ *[0-9]' "$OUT/runs/gpm.dmon.txt"; then
        mv "$OUT/runs/gpm.dmon.err" "$OUT/runs/gpm.dmon-with-time.err"
        date +%s.%N >"$OUT/runs/gpm.dmon.start"
        timeout 70 nvidia-smi dmon --gpm-metrics "$GPM_IDS" -d 1 -c 60 \
            >"$OUT/runs/gpm.dmon.txt" 2>"$OUT/runs/gpm.dmon.err" &
        DMPID=$!
    fi
    if have_py_mod torch; then
        timeout 90 "$PY" "$WL/gpm_phases.py" --out "$OUT/runs/gpm.result.json" --seconds 8 \
            >/dev/null 2>"$OUT/runs/gpm.workload.err" || true
    else
        echo "torch is not importable" >"$OUT/runs/gpm.workload.err"
    fi
    kill "$DMPID" 2>/dev/null || true
    wait "$DMPID" 2>/dev/null || true
    if [ -n "$GDPID" ]; then
        kill -INT "$GDPID" 2>/dev/null || true
        wait "$GDPID" 2>/dev/null || true
        "$BIN" report "$GCAP" --format json -o "$OUT/runs/gpm.report.json" 2>>"$OUT/runs/gpm.gpuprofd.err" || true
        "$BIN" export "$GCAP" -o "$OUT/runs/gpm.trace.json" 2>>"$OUT/runs/gpm.gpuprofd.err" || true
        "$BIN" report "$GCAP" >"$OUT/runs/gpm.report.txt" 2>>"$OUT/runs/gpm.gpuprofd.err" || true
    fi
    "$PY" - "$GPM" "$OUT/runs" "$GPM_IDS" <<'PYEOF'
import calendar, datetime, json, os, statistics, sys
out, runs, ids = sys.argv[1], sys.argv[2], [int(i) for i in sys.argv[3].split(",")]
load = lambda p: json.load(open(p)) if os.path.exists(p) else None
text = lambda p: open(p).read() if os.path.exists(p) else ""
res, rep, trace = (load(os.path.join(runs, f)) for f in ("gpm.result.json", "gpm.report.json", "gpm.trace.json"))
# NVML's GPM metric ids -> the names of gpuprofd's counter (only those it draws).
NAMES = {2: "sm_activity", 3: "sm_occupancy", 5: "tensor", 7: "tensor_hmma", 10: "dram_bandwidth",
         11: "fp64", 12: "fp32", 13: "fp16"}
g = {"metric_ids": ids, "workload": res, "dmon_error": text(os.path.join(runs, "gpm.dmon.err")).strip() or None,
     "workload_error": text(os.path.join(runs, "gpm.workload.err")).strip()[-2000:] or None}
# nvidia-smi dmon: '#' header lines, then one row per GPU per second; '-' = not reported.
dmon_rows, header = [], None
for line in text(os.path.join(runs, "gpm.dmon.txt")).splitlines():
    if line.startswith("#"):
        header = header or line.lstrip("#").split()
        continue
    cols = line.split()
    if not cols:
        continue
    dmon_rows.append(cols)
g["dmon_header"] = header
g["dmon_rows"] = len(dmon_rows)
day = None
if res and res.get("phases"):
    day = datetime.datetime.fromtimestamp(res["phases"][0]["start"], datetime.timezone.utc).date()
start = text(os.path.join(runs, "gpm.dmon.start")).strip()
g["dmon_timed"] = not start
# dmon's column names for the GPM metrics (580's nvidia-smi prints its default columns, power,
# temperatures, utilisation and clocks, before them: the columns are found by name).
DMON = {"smutil": "sm_activity", "smocc": "sm_occupancy", "mmaact": "tensor",
        "hmmat": "tensor_hmma", "dram": "dram_bandwidth", "fp64": "fp64", "fp32": "fp32",
        "fp16": "fp16"}
def dmon_series():
    """[(unix time, {name: value})] for GPU 0, the GPM columns found by their header names
    (time first with -o T; from an nvidia-smi that refused -o T, a row a second from its
    start)."""
    timed = not start
    lead = 2 if timed else 1
    if not header or (timed and day is None):
        return []
    at = {n: header.index(h) for h, n in DMON.items() if h in header}
    if not at:
        return []
    out, k = [], 0
    for cols in dmon_rows:
        if len(cols) != len(header) or cols[lead - 1] != "0":
            continue
        if timed:
            try:
                hh, mm, ss = (int(x) for x in cols[0].split(":"))
            except ValueError:
                continue
            t = calendar.timegm((day.year, day.month, day.day, hh, mm, ss))
        else:
            k += 1
            t = float(start) + k
        vals = {}
        for n, i in at.items():
            try:
                vals[n] = float(cols[i])
            except ValueError:
                pass
        out.append((t, vals))
    return out
def gpuprofd_series():
    """[(unix time, {name: value})] of GPU 0's GPM counter in the trace."""
    if not trace or not rep:
        return []
    t0 = calendar.timegm(datetime.datetime.strptime(rep["started_at"], "%Y-%m-%dT%H:%M:%SZ").timetuple())
    return [(t0 + e["ts"] / 1e6, {k: float(v) for k, v in e["args"].items()})
            for e in trace.get("traceEvents", [])
            if e.get("ph") == "C" and e.get("name") == "GPU 0 activity % (GPM, measured)"]
dm, gp = dmon_series(), gpuprofd_series()
g["dmon_series_points"], g["gpuprofd_series_points"] = len(dm), len(gp)
phases = []
for ph in (res or {}).get("phases", []):
    lo, hi = ph["start"] + 2.0, ph["end"] - 1.0
    row = {"phase": ph["name"], "seconds": round(ph["end"] - ph["start"], 1)}
    for src, series in (("dmon", dm), ("gpuprofd", gp)):
        pts = [v for t, v in series if lo <= t <= hi]
        row[src + "_points"] = len(pts)
        for name in NAMES.values():
            vals = [v[name] for v in pts if name in v]
            if vals:
                row[f"{src}_{name}"] = round(statistics.median(vals), 1)
    for name in NAMES.values():
        a, b = row.get(f"dmon_{name}"), row.get(f"gpuprofd_{name}")
        if a is not None and b is not None:
            row[f"diff_{name}"] = round(b - a, 1)
    phases.append(row)
g["phases"] = phases
if rep is None:
    g["gpuprofd"] = "no gpuprofd capture (BPF unavailable, or it failed: runs/gpm.gpuprofd.err)"
else:
    g["gpuprofd"] = {"nvml": rep.get("nvml"),
                     "gpus": [{"index": x.get("index"), "name": x.get("name"), "gpu_util_avg": x.get("gpu_util_avg"),
                               "gpm": x.get("gpm")} for x in rep.get("gpus", [])],
                     "jobs": [{"job": f"{j.get('kind')}:{j.get('id')}", "gpm": j.get("gpm")} for j in rep.get("jobs", [])]}
json.dump(g, open(out, "w"), indent=1)
PYEOF
fi

# ---- compare ---------------------------------------------------------------------------------
"$PY" - "$OUT" "$RUNS" "$ENV_JSON" "$DOCTOR" "$PROCADDR" "$NVML" "$GPM" <<'PYEOF'
import json, sys
out, runs, env, doctor, procaddr, nvml, gpm = sys.argv[1:8]
man = {"env": json.load(open(env)), "doctor": doctor or None, "procaddr": procaddr or None,
       "nvml": nvml or None, "gpm": gpm or None,
       "runs": [json.loads(l) for l in open(runs) if l.strip()]}
json.dump(man, open(f"{out}/manifest.json", "w"), indent=1)
PYEOF
"$PY" "$WL/compare.py" "$OUT/manifest.json" "$OUT"
echo "gpu-validate: done: $OUT/summary.md (copy its tables into docs/VALIDATION.md)"
