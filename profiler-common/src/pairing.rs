//! The runtime/driver pairing decision: is this driver call the runtime call in flight on the
//! same thread, seen one layer down? Pure, so the probes (which call it inline) and the unit
//! tests below share one definition.
//!
//! A runtime call reaches the driver in one of two frame shapes:
//!
//! * an ordinary call: the driver's entry runs on a deeper stack than the runtime's entry
//!   (`sp < slot.sp`);
//! * a tail call (`jmp` into the driver, as a compiler's sibling-call optimisation emits for
//!   `return cuX(...)`): the runtime's frame is gone and the driver's entry runs on *the same*
//!   stack pointer as the runtime's entry (`sp == slot.sp`), with the runtime caller's return
//!   address in the same slot.
//!
//! A call on a shallower stack (`sp > slot.sp`) was made by a caller above the runtime call,
//! which has therefore returned: never nested.

use crate::{PENDING_ENTRY_ONLY, PENDING_ENTRY_ONLY_MAX_JIFFIES, PENDING_HAS_RETURN};

/// What the probe knows about the thread's runtime slot (`PEND_RT`) when a driver call enters.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeSlot {
    /// `Pending::state`.
    pub state: u32,
    /// Stack pointer at the runtime call's entry.
    pub sp: u64,
    /// `Pending::class` of the runtime call.
    pub class: u32,
    /// Entry-only slots: the runtime call's return address at entry (`Pending::v[0]`).
    pub ret: u64,
    /// Entry-only slots: `bpf_jiffies64()` at entry (`Pending::v[1]`).
    pub jiffies: u64,
}

/// The driver call's side of the decision.
#[derive(Clone, Copy, Debug)]
pub struct DriverCall {
    /// Stack pointer at the driver call's entry.
    pub sp: u64,
    /// `class` of the driver call.
    pub class: u32,
    /// `bpf_jiffies64()` now.
    pub jiffies: u64,
}

/// How a driver call relates to the runtime call in flight on its thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nesting {
    /// Not inside a runtime call: the driver call is recorded.
    Outside,
    /// Inside a runtime call that has a return probe: not recorded; the slot stays until the
    /// runtime's return probe clears it (every driver call beneath it is nested).
    InReturning,
    /// The driver call an entry-only runtime call (a launch, an async copy) was waiting for:
    /// not recorded, and the slot is consumed so a later driver call is recorded again.
    ConsumesEntryOnly,
}

/// Decides [`Nesting`]. `ret_at_slot_sp` reads the 8 bytes at `slot.sp` (the return-address
/// slot of the runtime call); it is called only for an entry-only slot that could match, so a
/// probe pays the user-memory read only then.
///
/// * With a return probe (`PENDING_HAS_RETURN`): every driver call at or beneath the runtime
///   call's entry stack pointer is nested. At the same stack pointer it is a tail call: the
///   runtime call has not returned (its return probe clears the slot), so a driver call on its
///   stack pointer can only come from the runtime's own `jmp`.
/// * Entry-only (`PENDING_ENTRY_ONLY`): the first driver call of the same class, at or beneath
///   the runtime call's entry stack pointer, while the runtime call is still running — its
///   return address still in its slot (a tail call leaves it there too) — and within
///   [`PENDING_ENTRY_ONLY_MAX_JIFFIES`].
///
/// Known limit: an entry-only runtime call and a direct driver call of the same class made
/// through one call instruction of one frame (a function pointer that is the runtime launch
/// one time and the driver launch the next) are indistinguishable from a tail call while the
/// slot is fresh; the driver call is then not counted. No runtime or framework we know calls
/// this way.
#[inline(always)]
pub fn nesting(
    slot: &RuntimeSlot,
    call: &DriverCall,
    ret_at_slot_sp: impl FnOnce() -> u64,
) -> Nesting {
    if call.sp > slot.sp {
        return Nesting::Outside;
    }
    if slot.state == PENDING_HAS_RETURN {
        return Nesting::InReturning;
    }
    if slot.state == PENDING_ENTRY_ONLY
        && slot.class == call.class
        && call.jiffies.wrapping_sub(slot.jiffies) < PENDING_ENTRY_ONLY_MAX_JIFFIES
        && ret_at_slot_sp() == slot.ret
    {
        return Nesting::ConsumesEntryOnly;
    }
    Nesting::Outside
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PENDING_NONE, class};

    const SP: u64 = 0x7ffd_0000_1000;
    const RET: u64 = 0x5555_0000_4242;

    fn slot(state: u32, class: u32) -> RuntimeSlot {
        RuntimeSlot {
            state,
            sp: SP,
            class,
            ret: RET,
            jiffies: 1_000,
        }
    }

    fn call(sp: u64, class: u32) -> DriverCall {
        DriverCall {
            sp,
            class,
            jiffies: 1_001,
        }
    }

    #[test]
    fn an_ordinary_call_beneath_a_returning_runtime_call_is_nested() {
        let s = slot(PENDING_HAS_RETURN, class::COPY);
        assert_eq!(
            nesting(&s, &call(SP - 0x40, class::COPY), || RET),
            Nesting::InReturning
        );
        // Whatever the class: a sync inside a copy is the copy's own work.
        assert_eq!(
            nesting(&s, &call(SP - 0x40, class::SYNC), || 0),
            Nesting::InReturning
        );
    }

    #[test]
    fn a_tail_call_from_a_returning_runtime_call_is_nested() {
        // `jmp cuMemcpyHtoD_v2`: same stack pointer; the return-address slot holds the
        // uretprobe trampoline, which must not matter.
        let s = slot(PENDING_HAS_RETURN, class::COPY);
        let mut read = false;
        let n = nesting(&s, &call(SP, class::COPY), || {
            read = true;
            0xffff_ffff_ffff_e000
        });
        assert_eq!(n, Nesting::InReturning);
        assert!(!read, "no user read is needed for a returning slot");
    }

    #[test]
    fn a_call_above_the_runtime_frame_is_outside() {
        for state in [PENDING_HAS_RETURN, PENDING_ENTRY_ONLY, PENDING_NONE] {
            let s = slot(state, class::LAUNCH);
            assert_eq!(
                nesting(&s, &call(SP + 8, class::LAUNCH), || RET),
                Nesting::Outside
            );
        }
    }

    #[test]
    fn a_cleared_slot_nests_nothing() {
        let s = slot(PENDING_NONE, class::LAUNCH);
        assert_eq!(
            nesting(&s, &call(SP, class::LAUNCH), || RET),
            Nesting::Outside
        );
        assert_eq!(
            nesting(&s, &call(SP - 64, class::LAUNCH), || RET),
            Nesting::Outside
        );
    }

    #[test]
    fn an_entry_only_call_is_consumed_by_its_driver_call_deeper_or_tail_called() {
        let s = slot(PENDING_ENTRY_ONLY, class::LAUNCH);
        assert_eq!(
            nesting(&s, &call(SP - 0x80, class::LAUNCH), || RET),
            Nesting::ConsumesEntryOnly
        );
        assert_eq!(
            nesting(&s, &call(SP, class::LAUNCH), || RET),
            Nesting::ConsumesEntryOnly
        );
    }

    #[test]
    fn an_entry_only_slot_after_its_runtime_call_returned_is_not_consumed() {
        // The caller made another call from the same frame: its return address differs.
        let s = slot(PENDING_ENTRY_ONLY, class::LAUNCH);
        assert_eq!(
            nesting(&s, &call(SP, class::LAUNCH), || RET + 5),
            Nesting::Outside
        );
        assert_eq!(
            nesting(&s, &call(SP - 32, class::LAUNCH), || 0),
            Nesting::Outside
        );
    }

    #[test]
    fn an_entry_only_slot_takes_only_its_own_class_while_fresh() {
        let s = slot(PENDING_ENTRY_ONLY, class::LAUNCH);
        assert_eq!(
            nesting(&s, &call(SP - 8, class::COPY), || RET),
            Nesting::Outside
        );
        let stale = DriverCall {
            jiffies: 1_000 + PENDING_ENTRY_ONLY_MAX_JIFFIES,
            ..call(SP - 8, class::LAUNCH)
        };
        assert_eq!(nesting(&s, &stale, || RET), Nesting::Outside);
        let just_fresh = DriverCall {
            jiffies: 1_000 + PENDING_ENTRY_ONLY_MAX_JIFFIES - 1,
            ..call(SP - 8, class::LAUNCH)
        };
        assert_eq!(nesting(&s, &just_fresh, || RET), Nesting::ConsumesEntryOnly);
    }
}
