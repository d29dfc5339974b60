//! NCCL's rules: which exported NCCL function gets which cookie (argument positions as in
//! `nccl.h` 2.32.3, SysV order: 0–5 registers, 6 = `[rsp+8]`, 7 = `[rsp+16]`).
//!
//! `libnccl.so.2` exports every API function twice at one address: `ncclX` (weak) and `pncclX`
//! (the profiling interface's strong name). Both get the same rule; the attach layer puts one
//! probe per address and records it under the public name ([`public_name`]), so a program
//! that calls either, or a profiler shim that defines `ncclX` and calls `pncclX`, is counted
//! once.

use super::{B, Prog, Rule};
use profiler_common::cookie::{F_RET, NONE};
use profiler_common::nccl::call;

/// `pncclX` → `ncclX`; other names unchanged.
pub fn public_name(sym: &str) -> &str {
    match sym.strip_prefix('p') {
        Some(rest) if rest.starts_with("nccl") => rest,
        _ => sym,
    }
}

/// A call `c` with no argument positions yet (root/peer absent).
fn b(c: u32) -> B {
    B::new().q(c).p(u32::from(NONE))
}

/// A collective or send/receive: count, datatype, reduction op (or none), communicator,
/// stream, root or peer (or none).
fn op(
    c: u32,
    count: u8,
    dt: u8,
    redop: Option<u8>,
    comm: u8,
    stream: u8,
    peer: Option<u8>,
) -> Rule {
    let mut r = b(c).a(count).b(dt).d(comm).e(stream);
    if let Some(o) = redop {
        r = r.c(o);
    }
    if let Some(p) = peer {
        r = r.p(u32::from(p));
    }
    r.rule(Prog::NcclEntry)
}

/// The rule for NCCL function `sym` (either name), or `None` when it is not hooked.
pub fn rule(sym: &str) -> Option<Rule> {
    let name = public_name(sym);
    // The 2.28+ `…Config` collectives take the plain one's arguments and a config last.
    let base = match name {
        "ncclCommInitRankConfig" => name,
        _ => name.strip_suffix("Config").unwrap_or(name),
    };
    Some(match base {
        // (send, recv, count, datatype, op, comm, stream)
        "ncclAllReduce" => op(call::ALL_REDUCE, 2, 3, Some(4), 5, 6, None),
        "ncclReduceScatter" => op(call::REDUCE_SCATTER, 2, 3, Some(4), 5, 6, None),
        // (send, recv, count, datatype, comm, stream)
        "ncclAllGather" => op(call::ALL_GATHER, 2, 3, None, 4, 5, None),
        "ncclAlltoAll" => op(call::ALL_TO_ALL, 2, 3, None, 4, 5, None),
        // (send, recv, count, datatype, root, comm, stream)
        "ncclBroadcast" => op(call::BROADCAST, 2, 3, None, 5, 6, Some(4)),
        // (send, recv, count, datatype, op, root, comm, stream)
        "ncclReduce" => op(call::REDUCE, 2, 3, Some(4), 6, 7, Some(5)),
        // (buff, count, datatype, peer, comm, stream)
        "ncclSend" => op(call::SEND, 1, 2, None, 4, 5, Some(3)),
        "ncclRecv" => op(call::RECV, 1, 2, None, 4, 5, Some(3)),
        // (ncclComm_t *comm, int nranks, ncclUniqueId id /* [rsp+8], 128 bytes */, int rank
        // /* rdx */[, ncclConfig_t *config])
        "ncclCommInitRank" => b(call::INIT_RANK)
            .a(0)
            .b(1)
            .c(2)
            .f(F_RET)
            .rule(Prog::NcclEntry),
        "ncclCommInitRankConfig" => b(call::INIT_RANK_CONFIG)
            .a(0)
            .b(1)
            .c(2)
            .f(F_RET)
            .rule(Prog::NcclEntry),
        // (ncclComm_t *comms, int ndev, const int *devlist)
        "ncclCommInitAll" => b(call::INIT_ALL)
            .a(0)
            .b(1)
            .c(2)
            .f(F_RET)
            .rule(Prog::NcclEntry),
        // (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
        "ncclCommSplit" => b(call::SPLIT).d(0).p(1).a(3).f(F_RET).rule(Prog::NcclEntry),
        // (ncclComm_t comm)
        "ncclCommDestroy" => b(call::DESTROY).d(0).rule(Prog::NcclEntry),
        "ncclCommAbort" => b(call::ABORT).d(0).rule(Prog::NcclEntry),
        // (const ncclComm_t comm, int *out)
        "ncclCommCount" => b(call::COUNT).d(0).a(1).f(F_RET).rule(Prog::NcclEntry),
        "ncclCommUserRank" => b(call::USER_RANK).d(0).a(1).f(F_RET).rule(Prog::NcclEntry),
        "ncclCommCuDevice" => b(call::CU_DEVICE).d(0).a(1).f(F_RET).rule(Prog::NcclEntry),
        "ncclGroupStart" => b(call::GROUP_START).rule(Prog::NcclEntry),
        "ncclGroupEnd" => b(call::GROUP_END).rule(Prog::NcclEntry),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_names_share_one_rule_and_the_public_name() {
        assert_eq!(public_name("pncclAllReduce"), "ncclAllReduce");
        assert_eq!(public_name("ncclAllReduce"), "ncclAllReduce");
        assert_eq!(public_name("pthread_create"), "pthread_create");
        assert_eq!(rule("pncclAllReduce"), rule("ncclAllReduce"));
        assert_eq!(rule("ncclAllReduceConfig"), rule("ncclAllReduce"));
        assert!(rule("ncclBcast").is_none(), "it calls ncclBroadcast");
        assert!(rule("ncclGetUniqueId").is_none());
    }

    #[test]
    fn argument_positions_follow_nccl_h() {
        let c = rule("ncclAllReduce").unwrap().cookie;
        assert_eq!(
            (c.q, c.a, c.b, c.c, c.d, c.e, c.p),
            (16, 2, 3, 4, 5, 6, NONE)
        );
        // The stream of ncclReduce is its 8th argument: [rsp+16].
        let c = rule("ncclReduce").unwrap().cookie;
        assert_eq!((c.a, c.b, c.c, c.p, c.d, c.e), (2, 3, 4, 5, 6, 7));
        let c = rule("ncclSend").unwrap().cookie;
        assert_eq!((c.a, c.b, c.c, c.p, c.d, c.e), (1, 2, NONE, 3, 4, 5));
        // The unique id goes on the stack: rank is the third integer argument (rdx).
        let r = rule("ncclCommInitRank").unwrap();
        assert!(r.has_return());
        assert_eq!((r.cookie.a, r.cookie.b, r.cookie.c), (0, 1, 2));
        let r = rule("ncclCommSplit").unwrap();
        assert_eq!((r.cookie.d, r.cookie.p, r.cookie.a), (0, 1, 3));
        assert!(!rule("ncclGroupStart").unwrap().has_return());
    }

    /// The entry bytes of pip's nvidia-nccl-cu12 2.32.3 (docs/NCCL.md): the `movabs` entries
    /// are probed on the `push` behind them, with rsp as at entry (the unique id still at
    /// [rsp+8]); the others on their entry push.
    #[test]
    fn the_real_entries_are_probed_on_an_emulated_push() {
        use crate::attach::placement::{Reason, choose};
        let init_config = [
            0x48, 0xb8, 0xef, 0xbe, 0xfe, 0xca, 0xa3, 0x5a, 0x00, 0x00, 0x55, 0x48, 0x89, 0xe5,
            0x41, 0x57,
        ];
        let p = choose(&init_config, 0xda32c);
        assert_eq!((p.offset, p.stack_delta), (10, 0));
        assert_eq!(p.reason, Reason::SkippedToEmulated { skipped: 1 });
        assert_eq!(p.site_insn, "push %rbp");
        // ncclAllReduce, ncclGroupStart, ncclSend.
        for (bytes, site) in [
            (
                &[0x55, 0x48, 0x89, 0xe5, 0x41, 0x57, 0x49, 0x89, 0xff][..],
                "push %rbp",
            ),
            (
                &[0x53, 0x48, 0x83, 0xec, 0x10, 0xc6, 0x44, 0x24, 0x0f, 0x00][..],
                "push %rbx",
            ),
            (&[0x41, 0x56, 0x41, 0x55, 0x49, 0x89, 0xfd][..], "push %r14"),
        ] {
            let p = choose(bytes, 0xb6630);
            assert_eq!(
                (p.offset, p.reason, p.site_insn.as_str()),
                (0, Reason::EntryEmulated, site)
            );
        }
    }
}
