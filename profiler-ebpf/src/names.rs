//! Kernel names: handles named by lookups, registrations and aliases.

use super::*;

// Kernel names

/// Name-learning calls, saved for their return probe ([`name_ret`]). Cookie p = source:
/// * `cuModuleGetFunction(CUfunction *out, CUmodule mod, const char *name)` and
///   `cuLibraryGetKernel(CUkernel *out, CUlibrary lib, const char *name)`: a = out, b = scope,
///   c = name (MODULE_GET_FUNCTION / LIBRARY_GET_KERNEL);
/// * `cuFuncGetName(const char **name, CUfunction f)` / `cuKernelGetName`: a = name out, b = f
///   (GET_NAME);
/// * `cuKernelGetFunction(CUfunction *out, CUkernel k)` / `__cudaGetKernel(cudaKernel_t *out,
///   const void *hostFun)`: a = out, b = what `*out` stands for (source 0: alias).
#[uprobe]
pub fn name_entry(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((_, c)) = start(&ctx) else { return 0 };
    let r = regs(&ctx);
    let now = unsafe { bpf_ktime_get_ns() };
    save(
        &c,
        class::NAME,
        kind::NAME,
        r.rsp,
        now,
        [arg(r, c.a), arg(r, c.b), arg(r, c.c), 0, 0, 0],
    );
    0
}

#[inline(always)]
pub(crate) fn emit_name(
    pt: u64,
    api: u16,
    ts: u64,
    handle: u64,
    scope: u64,
    source: u32,
    name: u64,
) {
    let Some(mut e) = EVENTS.reserve::<Record<NameBody>>(0) else {
        bump(&DROPS, kind::NAME);
        return;
    };
    let rec = e.as_mut_ptr();
    // SAFETY: `rec` points at our reserved ring-buffer slot, sized for Record<NameBody>.
    unsafe {
        (*rec).header = header(kind::NAME, api, pt, ts);
        (*rec).body.handle = handle;
        (*rec).body.scope = scope;
        (*rec).body.source = source;
        (*rec).body._pad = 0;
        let buf: &mut [u8; NAME_CAP] = &mut (*rec).body.name;
        let n = match bpf_probe_read_user_str_bytes(name as *const u8, buf) {
            Ok(s) => s.len(),
            Err(_) => 0,
        };
        (*rec).body.len = n as u32;
        (*rec).body.flags = if n >= NAME_CAP - 1 {
            flags::TRUNCATED
        } else {
            0
        };
    }
    e.submit(submit_flags(ring_bytes::<Record<NameBody>>()));
    bump(&SUBMITTED, kind::NAME);
}

#[uretprobe]
pub fn name_ret(ctx: RetProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let pid_tgid = bpf_get_current_pid_tgid();
    let c = Cookie::unpack(unsafe { bpf_get_attach_cookie(ctx.as_ptr()) });
    let Some(p) = take(slots(&c)) else {
        return 0;
    };
    let ret: i64 = ctx.ret();
    if p.kind != kind::NAME || p.cookie != c.pack() || ret as i32 != 0 {
        return 0;
    }
    let out = user::<u64>(p.v[0], 0);
    let source = c.p as u32;
    if source == 0 {
        if out != 0 && out != p.v[1] {
            emit(
                kind::ALIAS,
                c.api,
                pid_tgid,
                p.ts_ns,
                AliasBody {
                    from: out,
                    to: p.v[1],
                },
            );
        }
    } else if source == profiler_common::namesrc::GET_NAME {
        emit_name(pid_tgid, c.api, p.ts_ns, p.v[1], 0, source, out);
    } else if out != 0 {
        emit_name(pid_tgid, c.api, p.ts_ns, out, p.v[1], source, p.v[2]);
    }
    0
}

/// `void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
///  const char *deviceName, …)`: rsi = host stub (the `func` later passed to cudaLaunchKernel),
/// rdx = mangled device name. Entry only; fires at module registration.
#[uprobe]
pub fn register_function(ctx: ProbeContext) -> u32 {
    kernel_stack(&ctx, &NO_PRIV_STACK);
    let Some((pt, c)) = start(&ctx) else { return 0 };
    let r = regs(&ctx);
    let now = unsafe { bpf_ktime_get_ns() };
    emit_name(
        pt,
        c.api,
        now,
        r.rsi,
        r.rdi,
        profiler_common::namesrc::REGISTER_FUNCTION,
        r.rdx,
    );
    0
}
