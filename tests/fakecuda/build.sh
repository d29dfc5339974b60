#!/bin/sh
# Builds the fake CUDA libraries and workloads the privileged tests and `gpuprofd demo` use.
#   tests/fakecuda/build.sh OUTDIR      (default: target/fakecuda)
# OUTDIR/lib      libcuda.so.1 (driver trampolines), libcudart.so.12 (push %rbp entries),
#                 liblookalike.so (exports cuLaunchKernel but is not CUDA)
# OUTDIR/lib-cet  libcudart.so.12 built with -fcf-protection=full (endbr64 entries)
# OUTDIR/lib-tail libcudart.so.12 whose wrappers tail-jump into the driver (-DFAKE_TAILCALL)
# OUTDIR/lib-static libcudart_static.a (the fake runtime as an archive)
# OUTDIR/lib-nvml libnvidia-ml.so.1 (values scripted by $FAKENVML_CONFIG, see nvml.c)
# OUTDIR/lib-nccl libnccl.so.2 (NCCL's prototypes and entry shapes; see nccl.c)
# OUTDIR/lib-cupti libcupti.so.12 (CUPTI 12.9's activity API and record layouts; see cupti.c)
# OUTDIR/lib-cupti-system libcupti.so: another file of the same library, as a CUDA toolkit on
#                 the loader's path has beside a framework's own CUPTI
# OUTDIR/lib-inject-standin libgpuprofd_inject.so (the injection library's sites and semaphore
#                 only, no CUPTI; see inject_standin.c)
# OUTDIR/bin      workload, workload_nofp (no frame pointers), workload_stripped,
#                 workload_minidebug (stripped, .gnu_debugdata), workload_drv, workload_late, workload_static (runtime linked in),
#                 nccl_workload (links libnccl.so.2, libcudart.so.12, libcuda.so.1),
#                 inject_workload (links the stand-in libgpuprofd_inject.so)
# OUTDIR/demo.script
# Needs only gcc and binutils. Checks the entry shapes it promises and fails loudly if a
# compiler produced something else (the probe placement tests depend on them).
# $CFLAGS is split into words on purpose (POSIX sh has no arrays), and the single-quoted
# $ORIGIN / regex strings must reach gcc and grep unexpanded.
# shellcheck disable=SC2086,SC2016
set -eu
SRC=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$SRC/../../target/fakecuda}
mkdir -p "$OUT/lib" "$OUT/lib-cet" "$OUT/lib-tail" "$OUT/lib-static" "$OUT/lib-nvml" "$OUT/bin"
OUT=$(cd "$OUT" && pwd)
CC=${CC:-gcc}
CFLAGS="-O2 -g -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation"
cd "$SRC"

# Driver: asm trampolines (driver_tramp.S) in front of hidden C implementations.
$CC $CFLAGS -shared -fPIC -fvisibility=hidden -fcf-protection=none \
    -Wl,-soname,libcuda.so.1 -Wl,--no-undefined \
    -o "$OUT/lib/libcuda.so.1" driver.c driver_tramp.S -ldl -lpthread
cp "$OUT/lib/libcuda.so.1" "$OUT/lib-cet/libcuda.so.1"
cp "$OUT/lib/libcuda.so.1" "$OUT/lib-tail/libcuda.so.1"

# Runtime, twice: frame-pointer prologue and CET prologue. -fno-shrink-wrap keeps the frame
# setup at the entry of leaf functions too, as every hooked export of the real libcudart has
# it (`push %rbp; mov %rsp,%rbp`); shrink-wrapped, a leaf such as __cudaGetKernel began with a
# `lock`-prefixed add, an instruction the kernel's uprobes refuse.
$CC $CFLAGS -shared -fPIC -fvisibility=hidden -fno-omit-frame-pointer -fno-shrink-wrap -fcf-protection=none \
    -Wl,-soname,libcudart.so.12 -Wl,--no-undefined \
    -o "$OUT/lib/libcudart.so.12" runtime.c -ldl -lpthread
$CC $CFLAGS -shared -fPIC -fvisibility=hidden -fno-omit-frame-pointer -fno-shrink-wrap -fcf-protection=full \
    -Wl,-soname,libcudart.so.12 -Wl,--no-undefined \
    -o "$OUT/lib-cet/libcudart.so.12" runtime.c -ldl -lpthread
# ... and a third time as a compiler's sibling-call optimisation shapes `return cuX(...)`: the
# driver entry then runs on the runtime entry's stack pointer (checked below).
$CC $CFLAGS -DFAKE_TAILCALL -shared -fPIC -fvisibility=hidden -fno-omit-frame-pointer -fno-shrink-wrap \
    -fcf-protection=none -Wl,-soname,libcudart.so.12 -Wl,--no-undefined \
    -o "$OUT/lib-tail/libcudart.so.12" runtime.c -ldl -lpthread

# The runtime as a static archive, as nvcc links it by default (-cudart static).
$CC $CFLAGS -c -fPIC -fvisibility=hidden -fno-omit-frame-pointer -fno-shrink-wrap -fcf-protection=none \
    -o "$OUT/lib-static/runtime.o" runtime.c
rm -f "$OUT/lib-static/libcudart_static.a"
ar rcs "$OUT/lib-static/libcudart_static.a" "$OUT/lib-static/runtime.o"

$CC $CFLAGS -shared -fPIC -Wl,-soname,liblookalike.so -o "$OUT/lib/liblookalike.so" lookalike.c

$CC $CFLAGS -shared -fPIC -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 -Wl,--no-undefined \
    -o "$OUT/lib-nvml/libnvidia-ml.so.1" nvml.c

# CUPTI, in a folder of its own: a test puts it on LD_LIBRARY_PATH where CUPTI should exist.
mkdir -p "$OUT/lib-cupti"
$CC $CFLAGS -shared -fPIC -fvisibility=hidden -Wl,-soname,libcupti.so.12 -Wl,--no-undefined \
    -o "$OUT/lib-cupti/libcupti.so.12" cupti.c -ldl -lpthread
mkdir -p "$OUT/lib-cupti-system"
rm -f "$OUT/lib-cupti-system/libcupti.so"
cp "$OUT/lib-cupti/libcupti.so.12" "$OUT/lib-cupti-system/libcupti.so"

# NCCL: the real SONAME, each function as `pncclX` with a weak `ncclX` at the same address.
# -O0 gives every function the real library's `push %rbp; mov %rsp,%rbp` entry (-O2 let a
# leaf's early return skip the frame); nccl_tramp.S gives ncclCommInitRankConfig and
# ncclCommInitAll the real `movabs …,%rax` before it. Kept out of lib/: only the NCCL
# workload maps it (lib-nccl/ holds it and links to the fake runtime and driver).
mkdir -p "$OUT/lib-nccl"
$CC $(echo "$CFLAGS" | sed 's/-O2/-O0/') -shared -fPIC -fvisibility=hidden -fno-omit-frame-pointer \
    -fcf-protection=none -Wl,-soname,libnccl.so.2 -Wl,--no-undefined \
    -o "$OUT/lib-nccl/libnccl.so.2" nccl.c nccl_tramp.S -ldl -lpthread

# Workloads. The executable's RUNPATH finds the libraries next to it ($ORIGIN/../lib).
RPATH='-Wl,-rpath,$ORIGIN/../lib'
$CC $CFLAGS -fno-omit-frame-pointer -o "$OUT/bin/workload" workload.c "$RPATH" -L"$OUT/lib" \
    -Wl,--no-as-needed -l:libcudart.so.12 -l:libcuda.so.1 -Wl,--as-needed -ldl -lpthread
# The same workload without frame pointers (what most distribution builds are): stacks past
# the direct caller are not recoverable there.
$CC $CFLAGS -fomit-frame-pointer -o "$OUT/bin/workload_nofp" workload.c "$RPATH" -L"$OUT/lib" \
    -Wl,--no-as-needed -l:libcudart.so.12 -l:libcuda.so.1 -Wl,--as-needed -ldl -lpthread
# ... and stripped (no symbol table, no DWARF): its frames can only be file offsets.
strip -o "$OUT/bin/workload_stripped" "$OUT/bin/workload"
# ... and stripped with MiniDebugInfo (as Fedora ships binaries): its function symbols in an
# xz-compressed ELF in .gnu_debugdata.
MINI="$OUT/mini.tmp"
rm -rf "$MINI" && mkdir -p "$MINI"
nm "$OUT/bin/workload" --format=posix --defined-only |
    awk '$2 == "T" || $2 == "t" { print $1 }' | sort -u >"$MINI/funcs"
objcopy --only-keep-debug "$OUT/bin/workload" "$MINI/debug"
objcopy -S --remove-section .gdb_index --remove-section .comment \
    --keep-symbols="$MINI/funcs" "$MINI/debug" "$MINI/mini"
xz -k "$MINI/mini"
objcopy --add-section .gnu_debugdata="$MINI/mini.xz" "$OUT/bin/workload_stripped" \
    "$OUT/bin/workload_minidebug"
rm -rf "$MINI"
$CC $CFLAGS -DWORKLOAD_DRV -o "$OUT/bin/workload_drv" workload.c "$RPATH" -L"$OUT/lib" \
    -Wl,--no-as-needed -l:libcuda.so.1 -Wl,--as-needed -ldl
$CC $CFLAGS -DWORKLOAD_STATIC -fno-omit-frame-pointer -o "$OUT/bin/workload_static" workload.c \
    "$OUT/lib-static/libcudart_static.a" "$RPATH" -L"$OUT/lib" \
    -Wl,--no-as-needed -l:libcuda.so.1 -Wl,--as-needed -ldl -lpthread
$CC $CFLAGS -DWORKLOAD_LATE -o "$OUT/bin/workload_late" workload.c "$RPATH" -ldl
$CC $CFLAGS -o "$OUT/bin/nccl_workload" nccl_workload.c -Wl,-rpath,'$ORIGIN/../lib-nccl' "$RPATH" \
    -L"$OUT/lib-nccl" -L"$OUT/lib" -Wl,--no-as-needed -l:libnccl.so.2 -l:libcudart.so.12 -l:libcuda.so.1 \
    -Wl,--as-needed -ldl -lpthread
# The injection library's stand-in: its SONAME, sites and `.probes` semaphore (the wire ABI of
# profiler-common/src/gpu.rs), and the program that drives its sites with scripted records.
mkdir -p "$OUT/lib-inject-standin"
$CC $CFLAGS -shared -fPIC -fvisibility=hidden -fno-omit-frame-pointer -fcf-protection=none \
    -Wl,-soname,libgpuprofd_inject.so -Wl,--no-undefined \
    -o "$OUT/lib-inject-standin/libgpuprofd_inject.so" inject_standin.c
$CC $CFLAGS -o "$OUT/bin/inject_workload" inject_workload.c \
    -Wl,-rpath,'$ORIGIN/../lib-inject-standin' -L"$OUT/lib-inject-standin" \
    -Wl,--no-as-needed -l:libgpuprofd_inject.so -Wl,--as-needed
# The semaphore must be file-backed data in `.probes` (the kernel maps its file offset into the
# writable mapping), not .bss.
readelf -SW "$OUT/lib-inject-standin/libgpuprofd_inject.so" | grep -Eq '\.probes +PROGBITS' || {
    echo "fakecuda/build.sh: the stand-in's .probes section is not PROGBITS" >&2
    exit 1
}
cp demo.script "$OUT/demo.script"

# ---- check the promised entry shapes ------------------------------------------------------
first_insns() { # LIB SYMBOL N -> the first N instruction mnemonics+operands
    objdump -d --no-show-raw-insn "--disassemble=$2" "$1" |
        awk -v n="$3" '/^ *[0-9a-f]+:\t/ { sub(/^ *[0-9a-f]+:\t/, ""); print; if (++c == n) exit }'
}
expect() { # LIB SYMBOL N PATTERN
    got=$(first_insns "$1" "$2" "$3" | tr '\n' ';' | tr -s ' \t' ' ')
    if ! printf '%s' "$got" | grep -Eq "$4"; then
        echo "fakecuda/build.sh: $2 in $1 starts with '$got', expected /$4/" >&2
        exit 1
    fi
}
expect "$OUT/lib/libcuda.so.1" cuLaunchKernel 3 '^cmpl \$0x321cba00,0x[0-9a-f]+\(%rip\).*;je [0-9a-f]+.*;jmp \*0x[0-9a-f]+\(%rip\)'
expect "$OUT/lib/libcuda.so.1" cuMemcpyHtoD_v2 3 '^cmpl \$0x321cba00.*;je .*;jmp \*'
# The memsets: the 8- and 16-bit ones zero-extend the value between the je and the jmp, as the
# real driver's do (a probe placed on the je still sees the caller's registers).
expect "$OUT/lib/libcuda.so.1" cuMemsetD8_v2 4 '^cmpl \$0x321cba00.*;je .*;movzbl %sil,%esi;jmp \*0x[0-9a-f]+\(%rip\)'
expect "$OUT/lib/libcuda.so.1" cuMemsetD16Async_ptsz 4 '^cmpl \$0x321cba00.*;je .*;movzwl %si,%esi;jmp \*'
expect "$OUT/lib/libcuda.so.1" cuMemsetD2D8_v2_ptds 4 '^cmpl \$0x321cba00.*;je .*;movzbl %dl,%edx;jmp \*'
expect "$OUT/lib/libcuda.so.1" cuMemsetD2D16Async 4 '^cmpl \$0x321cba00.*;je .*;movzwl %dx,%edx;jmp \*'
expect "$OUT/lib/libcuda.so.1" cuMemsetD2D32_v2 3 '^cmpl \$0x321cba00.*;je .*;jmp \*'
expect "$OUT/lib/libcudart.so.12" cudaMemset 1 '^push %rbp;'
expect "$OUT/lib/libcudart.so.12" cudaMemset3DAsync 1 '^push %rbp;'
expect "$OUT/lib/libcudart.so.12" cudaLaunchKernel 2 '^push %rbp;mov %rsp,%rbp;'
expect "$OUT/lib/libcudart.so.12" cudaMemcpy 1 '^push %rbp;'
expect "$OUT/lib-cet/libcudart.so.12" cudaLaunchKernel 2 '^endbr64 ?;push %rbp;'
for f in pncclCommInitRank pncclAllReduce pncclAllGather pncclReduceScatter pncclBroadcast pncclReduce \
    pncclAlltoAll pncclSend pncclRecv pncclGroupStart pncclGroupEnd pncclCommSplit pncclCommDestroy \
    pncclCommAbort pncclCommCount pncclCommUserRank pncclCommCuDevice; do
    expect "$OUT/lib-nccl/libnccl.so.2" "$f" 2 '^push %rbp;mov %rsp,%rbp;'
done
expect "$OUT/lib-nccl/libnccl.so.2" pncclCommInitRankConfig 2 '^movabs \$0x5aa3cafebeef,%rax;push %rbp;'
expect "$OUT/lib-nccl/libnccl.so.2" pncclCommInitAll 2 '^movabs \$0x5aa3cafebeef,%rax;push %rbp;'
# ncclX and pncclX at one address, ncclBcast through ncclBroadcast's PLT entry.
if [ "$(nm -D "$OUT/lib-nccl/libnccl.so.2" | awk '$3 == "ncclAllReduce" || $3 == "pncclAllReduce" { print $1 }' | sort -u | wc -l)" != 1 ]; then
    echo "fakecuda/build.sh: ncclAllReduce and pncclAllReduce differ in address" >&2
    exit 1
fi
objdump -d --no-show-raw-insn --disassemble=pncclBcast "$OUT/lib-nccl/libnccl.so.2" |
    grep -Eq 'call .*<ncclBroadcast@plt>' || {
    echo "fakecuda/build.sh: ncclBcast does not call ncclBroadcast through the PLT" >&2
    exit 1
}
# __cudaLaunchKernel must reach cudaLaunchKernel through the PLT, as in the real runtime.
objdump -d --no-show-raw-insn --disassemble=__cudaLaunchKernel "$OUT/lib/libcudart.so.12" |
    grep -Eq 'jmp .*<cudaLaunchKernel@plt>' || {
    echo "fakecuda/build.sh: __cudaLaunchKernel does not tail-jump to cudaLaunchKernel@plt" >&2
    exit 1
}
# lib-tail: each wrapper the tail-call test drives reaches the driver through a jump, never a call.
jumps() { # LIB SYMBOL PATTERN
    if ! objdump -d --no-show-raw-insn "--disassemble=$2" "$1" | grep -Eq "$3"; then
        echo "fakecuda/build.sh: $2 in $1 does not tail-jump (/$3/)" >&2
        exit 1
    fi
}
TAIL="$OUT/lib-tail/libcudart.so.12"
for f in cudaDeviceSynchronize cudaStreamSynchronize cudaMalloc cudaFree cudaMallocHost cudaMemset cudaMemsetAsync; do
    jumps "$TAIL" "$f" 'jmp +\*0x[0-9a-f]+\(%rip\)'
done
jumps "$TAIL" cudaMemcpy 'jmp +[0-9a-f]+ <memcpy_sync>'
jumps "$TAIL" cudaMemcpyAsync 'jmp +[0-9a-f]+ <memcpy_async>'
# The copy helpers reach the driver through its function table: a jump, and no indirect call.
for f in memcpy_sync memcpy_async; do
    jumps "$TAIL" "$f" 'jmp +\*%r'
    if objdump -d --no-show-raw-insn "--disassemble=$f" "$TAIL" | grep -Eq 'call +\*'; then
        echo "fakecuda/build.sh: $f in $TAIL calls the driver instead of jumping" >&2
        exit 1
    fi
done
# workload_static: the runtime is in .symtab only (an executable exports nothing).
if ! nm "$OUT/bin/workload_static" | grep -q ' T cudaLaunchKernel$' ||
    nm -D "$OUT/bin/workload_static" | grep -q ' T cudaLaunchKernel$'; then
    echo "fakecuda/build.sh: workload_static should define cudaLaunchKernel in .symtab only" >&2
    exit 1
fi
echo "fakecuda: built in $OUT"
