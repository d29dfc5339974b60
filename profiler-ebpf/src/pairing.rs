//! Runtime/driver pairing and return-probe slots: a driver call made inside a runtime call is
//! not recorded again; what an entry probe leaves for its return probe.

use super::*;
use profiler_common::pairing::{DriverCall, Nesting, RuntimeSlot, nesting};

/// A driver call made inside a runtime call on the same thread is that runtime call seen one
/// layer down: it is not recorded again. The decision, for ordinary calls and tail calls
/// alike, is [`profiler_common::pairing::nesting`] (unit-tested there):
///
/// * The runtime call has a return probe (`PENDING_HAS_RETURN`): every driver call at or
///   beneath its stack frame is nested until the return probe clears the slot.
/// * Entry-only runtime call (launch, async copy): the first driver call of the same class,
///   at or beneath its frame while it is still running — the return address it was called
///   with is still in its slot on the stack — consumes the slot (bounded by
///   `PENDING_ENTRY_ONLY_MAX_JIFFIES`). Once the runtime call has returned, whatever the caller
///   calls next overwrites that slot.
///
/// `true` when the call is nested (not recorded).
#[inline(always)]
pub(crate) fn nested_in_runtime(cls: u32, sp: u64) -> bool {
    let Some(slot) = PEND_RT.get_ptr_mut() else {
        return false;
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let p = unsafe { &mut *slot };
    let rt = RuntimeSlot {
        state: p.state,
        sp: p.sp,
        class: p.class,
        ret: p.v[0],
        jiffies: p.v[1],
    };
    let call = DriverCall {
        sp,
        class: cls,
        // SAFETY: plain helper call (inlined by the verifier).
        jiffies: unsafe { bpf_jiffies64() },
    };
    match nesting(&rt, &call, || peek_user::<u64>(rt.sp, 0)) {
        Nesting::Outside => false,
        Nesting::InReturning => true,
        Nesting::ConsumesEntryOnly => {
            // Consumed in place: the thread keeps its slot (freed with the thread).
            p.state = PENDING_NONE;
            true
        }
    }
}

/// The slots of a call of this cookie's layer: runtime calls in `PEND_RT`, driver calls in
/// `PEND_DRV`.
#[inline(always)]
pub(crate) fn slots(c: &Cookie) -> &'static TaskStorage<Pending> {
    if c.has(cookie::F_RUNTIME) {
        &PEND_RT
    } else {
        &PEND_DRV
    }
}

/// For a return probe: the thread's slot and a copy of what [`save`] left in it, the slot
/// cleared in place (it stays the thread's).
#[inline(always)]
pub(crate) fn take(map: &TaskStorage<Pending>) -> Option<Pending> {
    let slot = map.get_ptr_mut()?;
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    let p = unsafe { *slot };
    unsafe { (*slot).state = PENDING_NONE };
    Some(p)
}

/// Clears a thread's slot in place (see [`save`]).
#[inline(always)]
pub(crate) fn clear_slot(map: &TaskStorage<Pending>) {
    if let Some(slot) = map.get_ptr_mut() {
        // SAFETY: as in `save`.
        unsafe { (*slot).state = PENDING_NONE };
    }
}

/// Marks an entry-only runtime call in flight so the enclosed driver call is not recorded twice.
/// `ret` is the call's return address (stack slot 0), still there while the call runs.
/// `v[1]` holds `bpf_jiffies64()` at entry, for the staleness bound. Only the fields an
/// entry-only slot is read by are written in place (the rest keeps whatever an earlier call
/// left: nothing reads it while the slot is entry-only, and [`save`] writes all of it), which
/// spares the launch path a whole-slot copy.
#[inline(always)]
pub(crate) fn runtime_slot(cls: u32, sp: u64, c: &Cookie, ret: u64) {
    // SAFETY: plain helper call (inlined by the verifier).
    let jiffies = unsafe { bpf_jiffies64() };
    let Some(slot) = PEND_RT.get_or_create() else {
        return;
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    unsafe {
        (*slot).sp = sp;
        (*slot).cookie = c.pack();
        (*slot).v[0] = ret;
        (*slot).v[1] = jiffies;
        (*slot).class = cls;
        (*slot).kind = 0;
        (*slot).state = PENDING_ENTRY_ONLY;
    }
}

/// Entry bookkeeping shared by every recorded call. Returns `None` when the call is a nested
/// driver call that must not be recorded. `ret`: the return address when the probe has
/// already read it (it is read here otherwise, and only when needed).
#[inline(always)]
pub(crate) fn enter(c: &Cookie, cls: u32, sp: u64, ret: Option<u64>) -> Option<()> {
    if c.has(cookie::F_RUNTIME) {
        if c.has(cookie::F_RET) {
            return Some(());
        }
        let ret = match ret {
            Some(v) => v,
            None => stack(sp, 0),
        };
        runtime_slot(cls, sp, c, ret);
        Some(())
    } else if nested_in_runtime(cls, sp) {
        if c.has(cookie::F_RET) {
            // No stale entry may be picked up by this call's return probe.
            clear_slot(&PEND_DRV);
        }
        None
    } else {
        Some(())
    }
}

/// The common start of a probe that takes part in runtime/driver pairing: the selected calling
/// thread, the cookie, the registers, the entry time — or `None` when the call is not recorded
/// (process not selected, or a driver call made inside a runtime call on this thread).
#[inline(always)]
pub(crate) fn begin(ctx: &ProbeContext, cls: u32) -> Option<(u64, Cookie, &pt_regs, u64)> {
    let (pt, c) = start(ctx)?;
    let r = regs(ctx);
    enter(&c, cls, r.rsp, None)?;
    // After the nesting check: a nested driver call needs no clock read.
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    Some((pt, c, r, now))
}

/// [`begin`] for a launch probe, which needs the first `N` 8-byte stack slots at entry (slot 0
/// is the return address): one user-memory read serves the probe and the runtime slot. Each
/// read costs more than the rest of a launch probe's bookkeeping (the kernel checks the
/// destination of every user copy), so a runtime probe reads once, before the slot is written,
/// and a driver probe reads only once it knows the call is recorded. It reads no clock:
/// [`emit_launch`] reads one only where a time is kept.
#[inline(always)]
pub(crate) fn begin_stack<const N: usize>(
    ctx: &ProbeContext,
    cls: u32,
) -> Option<(u64, Cookie, &pt_regs, [u64; N])> {
    let (pt, c) = start(ctx)?;
    let r = regs(ctx);
    let read = || -> [u64; N] { user(r.rsp, [0; N]) };
    // A runtime probe is never nested: it always records, so it reads now.
    let early = c.has(cookie::F_RUNTIME).then(read);
    enter(&c, cls, r.rsp, early.map(|s| s[0]))?;
    let s = match early {
        Some(s) => s,
        None => read(),
    };
    Some((pt, c, r, s))
}

/// Saves a call for its return probe. Runtime calls also mark the thread as "inside the runtime".
/// The slot is written in place, one store per field: the zero words of `v` do not become a
/// call to the BPF target's byte-wise `memset` (a subprogram call that cost a launch probe
/// about as much as its ring-buffer record). A thread
/// whose slot the kernel cannot make (out of memory) loses this call's record: it is counted
/// as dropped.
#[inline(always)]
pub(crate) fn save(c: &Cookie, cls: u32, k: u32, sp: u64, now: u64, v: [u64; 6]) {
    let Some(slot) = slots(c).get_or_create() else {
        bump(&DROPS, k);
        return;
    };
    // SAFETY: our own map's value; only this thread (its owner) touches it while it runs.
    unsafe {
        (*slot).ts_ns = now;
        (*slot).sp = sp;
        (*slot).cookie = c.pack();
        for (i, x) in v.iter().enumerate() {
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*slot).v[i]), *x);
        }
        (*slot).class = cls;
        (*slot).kind = k;
        (*slot).state = PENDING_HAS_RETURN;
    }
}
