//! The rules: which symbol gets which program, entry and return.

use super::*;

#[test]
fn variants_share_their_base_rule() {
    let plain = rule_for(Layer::Driver, "cuLaunchKernel").unwrap();
    assert_eq!(rule_for(Layer::Driver, "cuLaunchKernel_ptsz"), Some(plain));
    assert_eq!(
        rule_for(Layer::Driver, "cuMemcpyHtoD_v2_ptds"),
        rule_for(Layer::Driver, "cuMemcpyHtoD_v2")
    );
    assert_eq!(
        rule_for(Layer::Runtime, "cudaMemcpyAsync_ptsz"),
        rule_for(Layer::Runtime, "cudaMemcpyAsync")
    );
}

#[test]
fn legacy_v1_and_lookalikes_are_not_hooked() {
    // v1 ABI: 32-bit device pointers and sizes; never read them as the v2 ABI.
    assert_eq!(rule_for(Layer::Driver, "cuMemcpyHtoD"), None);
    assert_eq!(rule_for(Layer::Driver, "cuMemAlloc"), None);
    assert_eq!(rule_for(Layer::Driver, "cuMemFree"), None);
    // would double count: tail-jumps into cudaLaunchKernel
    assert_eq!(rule_for(Layer::Runtime, "__cudaLaunchKernel"), None);
    assert_eq!(rule_for(Layer::Runtime, "__cudaLaunchKernel_ptsz"), None);
    // a driver name in the runtime table (and vice versa) is not a rule
    assert_eq!(rule_for(Layer::Runtime, "cuLaunchKernel"), None);
    assert_eq!(
        driver_launch_of("cudaLaunchKernel_ptsz").as_deref(),
        Some("cuLaunchKernel_ptsz")
    );
    assert_eq!(
        driver_launch_of("cudaLaunchKernelExC").as_deref(),
        Some("cuLaunchKernelEx")
    );
    assert_eq!(
        driver_launch_of("cudaLaunchCooperativeKernel").as_deref(),
        Some("cuLaunchCooperativeKernel")
    );
    assert_eq!(driver_launch_of("__cudaLaunchKernel"), None);
    assert_eq!(driver_launch_of("cudaGraphLaunch"), None);
    assert_eq!(driver_launch_of("cudaMemcpyAsync"), None);
    assert_eq!(rule_for(Layer::Driver, "cudaLaunchKernel"), None);
}

#[test]
fn argument_positions_match_the_abi_notes() {
    let r = rule_for(Layer::Runtime, "cudaMemcpy2DAsync").unwrap();
    assert_eq!(r.prog, Prog::CopyLinear);
    assert_eq!(
        (r.cookie.a, r.cookie.b, r.cookie.c, r.cookie.e, r.cookie.d),
        (0, 2, 4, 6, 7)
    );
    assert!(r.cookie.has(F_2D) && r.cookie.has(F_KIND_ARG) && r.cookie.has(F_RUNTIME));
    assert!(!r.has_return());
    let r = rule_for(Layer::Driver, "cuMemcpyPeerAsync").unwrap();
    assert_eq!(
        (r.cookie.a, r.cookie.b, r.cookie.c, r.cookie.d),
        (0, 2, 4, 5)
    );
    assert_eq!(r.cookie.p as u32, dir::PEER);
    let r = rule_for(Layer::Driver, "cuMemAllocPitch_v2").unwrap();
    assert_eq!((r.cookie.a, r.cookie.b, r.cookie.c), (0, 1, 3));
    assert!(r.has_return());
    let r = rule_for(Layer::Driver, "cuCtxSynchronize").unwrap();
    assert_eq!(r.cookie.a, NO_ARG);
}

#[test]
fn memsets_read_their_arguments_where_the_abi_puts_them() {
    // (dst, count/width, height, depth, stream, element bytes)
    let at = |layer, sym| {
        let r = rule_for(layer, sym).unwrap_or_else(|| panic!("{sym} not hooked"));
        assert_eq!(r.prog, Prog::Memset, "{sym}");
        let c = r.cookie;
        (c.a, c.c, c.b, c.e, c.d, c.q)
    };
    let n = NO_ARG;
    assert_eq!(at(Layer::Driver, "cuMemsetD8_v2"), (0, 2, n, n, n, 1));
    assert_eq!(at(Layer::Driver, "cuMemsetD16_v2_ptds"), (0, 2, n, n, n, 2));
    assert_eq!(
        at(Layer::Driver, "cuMemsetD32Async_ptsz"),
        (0, 2, n, n, 3, 4)
    );
    assert_eq!(at(Layer::Driver, "cuMemsetD2D8_v2"), (0, 3, 4, n, n, 1));
    assert_eq!(at(Layer::Driver, "cuMemsetD2D16Async"), (0, 3, 4, n, 5, 2));
    assert_eq!(
        at(Layer::Driver, "cuMemsetD2D32_v2_ptds"),
        (0, 3, 4, n, n, 4)
    );
    assert_eq!(at(Layer::Runtime, "cudaMemset"), (0, 2, n, n, n, 1));
    assert_eq!(
        at(Layer::Runtime, "cudaMemsetAsync_ptsz"),
        (0, 2, n, n, 3, 1)
    );
    assert_eq!(at(Layer::Runtime, "cudaMemset2D_ptds"), (0, 3, 4, n, n, 1));
    assert_eq!(at(Layer::Runtime, "cudaMemset2DAsync"), (0, 3, 4, n, 5, 1));
    assert_eq!(at(Layer::Runtime, "cudaMemset3D"), (6, 10, 11, 12, n, 1));
    assert_eq!(
        at(Layer::Runtime, "cudaMemset3DAsync_ptsz"),
        (6, 10, 11, 12, 1, 1)
    );
    // Blocking variants have a return probe (blocked time), async ones none; the runtime's
    // are marked so that the driver memset inside them is not counted again.
    for (layer, s) in [
        (Layer::Driver, "cuMemsetD8_v2"),
        (Layer::Driver, "cuMemsetD2D32_v2"),
        (Layer::Runtime, "cudaMemset"),
        (Layer::Runtime, "cudaMemset3D"),
    ] {
        let r = rule_for(layer, s).unwrap();
        assert!(r.has_return() && !r.cookie.has(F_ASYNC), "{s}");
    }
    for (layer, s) in [
        (Layer::Driver, "cuMemsetD8Async"),
        (Layer::Driver, "cuMemsetD2D16Async_ptsz"),
        (Layer::Runtime, "cudaMemsetAsync"),
        (Layer::Runtime, "cudaMemset3DAsync"),
    ] {
        let r = rule_for(layer, s).unwrap();
        assert!(!r.has_return() && r.cookie.has(F_ASYNC), "{s}");
    }
    assert!(
        rule_for(Layer::Runtime, "cudaMemset2D")
            .unwrap()
            .cookie
            .has(F_RUNTIME)
    );
    // v1 ABI (32-bit pointer and count): not read as the v2 one.
    for s in [
        "cuMemsetD8",
        "cuMemsetD16",
        "cuMemsetD32",
        "cuMemsetD2D8",
        "cuMemsetD2D32",
    ] {
        assert_eq!(rule_for(Layer::Driver, s), None, "{s}");
    }
}

#[test]
fn context_calls_feed_the_device_tracker_where_the_abi_puts_their_arguments() {
    use profiler_common::device::op;
    // (layer, symbol, op, arg a, arg b, return probe)
    let want: [(Layer, &str, u8, u8, u8, bool); 14] = [
        (
            Layer::Driver,
            "cuCtxSetCurrent",
            op::SET_CURRENT,
            0,
            NONE,
            false,
        ),
        (
            Layer::Driver,
            "cuCtxPushCurrent_v2",
            op::PUSH,
            0,
            NONE,
            false,
        ),
        (Layer::Driver, "cuCtxPopCurrent_v2", op::POP, 0, NONE, false),
        (
            Layer::Driver,
            "cuDevicePrimaryCtxRetain",
            op::PRIMARY_RETAIN,
            0,
            1,
            true,
        ),
        (Layer::Driver, "cuCtxCreate_v2", op::CREATE, 0, 2, true),
        (Layer::Driver, "cuCtxCreate_v3", op::CREATE, 0, 4, true),
        (Layer::Driver, "cuCtxCreate_v4", op::CREATE, 0, 3, true),
        (
            Layer::Driver,
            "cuCtxGetCurrent",
            op::GET_CURRENT,
            0,
            NONE,
            true,
        ),
        (
            Layer::Driver,
            "cuCtxGetDevice",
            op::GET_DEVICE,
            0,
            NONE,
            true,
        ),
        (
            Layer::Driver,
            "cuStreamCreate",
            op::STREAM_CREATE,
            0,
            NONE,
            true,
        ),
        (
            Layer::Driver,
            "cuStreamCreateWithPriority",
            op::STREAM_CREATE,
            0,
            NONE,
            true,
        ),
        (Layer::Runtime, "cudaSetDevice", op::SET_DEVICE, 0, 0, true),
        (
            Layer::Runtime,
            "cudaStreamCreateWithFlags",
            op::STREAM_CREATE,
            0,
            NONE,
            true,
        ),
        (
            Layer::Runtime,
            "cudaStreamCreateWithPriority",
            op::STREAM_CREATE,
            0,
            NONE,
            true,
        ),
    ];
    for (layer, s, o, a, b, ret) in want {
        let r = rule_for(layer, s).unwrap_or_else(|| panic!("{s} not hooked"));
        assert_eq!(
            (r.prog, r.cookie.q, r.cookie.a, r.cookie.b, r.has_return()),
            (Prog::CtxEntry, o, a, b, ret),
            "{s}"
        );
    }
    // Called around every framework operation: probed only while learning.
    let r = rule_for(Layer::Runtime, "cudaGetDevice").unwrap();
    assert_eq!(
        (r.prog, r.cookie.q, r.has_return()),
        (Prog::CtxEntry, op::GET_DEVICE, true)
    );
    assert!(learning_only("cudaGetDevice"));
    assert!(!learning_only("cudaSetDevice") && !learning_only("cuCtxGetDevice"));
}

#[test]
fn hot_paths_have_no_return_probe() {
    for s in [
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuMemcpyHtoDAsync_v2",
        "cuGraphLaunch",
        "cuStreamWaitEvent",
    ] {
        assert!(!rule_for(Layer::Driver, s).unwrap().has_return(), "{s}");
    }
    for s in ["cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync"] {
        assert!(!rule_for(Layer::Runtime, s).unwrap().has_return(), "{s}");
    }
    for s in [
        "cuStreamSynchronize",
        "cuMemcpyDtoH_v2",
        "cuMemAlloc_v2",
        "cuModuleGetFunction",
    ] {
        assert!(rule_for(Layer::Driver, s).unwrap().has_return(), "{s}");
    }
}
