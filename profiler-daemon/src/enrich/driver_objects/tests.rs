use super::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A made-up address space: regions of bytes; a read stops at the end of its region.
#[derive(Clone, Default)]
struct FakeMem(Arc<Mutex<BTreeMap<u64, Vec<u8>>>>);

impl FakeMem {
    fn put(&self, addr: u64, bytes: &[u8]) {
        self.0.lock().unwrap().insert(addr, bytes.to_vec());
    }

    fn string(&self, addr: u64, s: &str) {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        self.put(addr, &b);
    }

    /// An object of `size` bytes at `addr` with pointer `words` at their offsets.
    fn object(&self, addr: u64, size: usize, words: &[(usize, u64)]) {
        let mut b = vec![0u8; size];
        for &(off, v) in words {
            b[off..off + 8].copy_from_slice(&v.to_le_bytes());
        }
        self.put(addr, &b);
    }
}

impl Memory for FakeMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let m = self.0.lock().unwrap();
        let Some((&start, bytes)) = m.range(..=addr).next_back() else {
            return 0;
        };
        let off = (addr - start) as usize;
        if off >= bytes.len() {
            return 0;
        }
        let n = buf.len().min(bytes.len() - off);
        buf[..n].copy_from_slice(&bytes[off..off + n]);
        n
    }
}

const MODULE: u64 = 0x7000_0000;

/// A function object as the driver lays it out (550.163.01: the name pointer at +8), with a
/// pointer to its module at +0 and a pointer to another string at +0x18 to mislead.
fn function(mem: &FakeMem, handle: u64, name: &str) {
    let name_at = handle + 0x1000;
    mem.string(name_at, name);
    mem.string(handle + 0x2000, "some_other_string");
    mem.object(
        handle,
        0x60,
        &[(0, MODULE), (8, name_at), (0x18, handle + 0x2000)],
    );
}

fn learner_of(mem: &FakeMem, samples: &[(u64, &str)]) -> Learner {
    let mut l = Learner::default();
    for &(h, n) in samples {
        function(mem, h, n);
        assert_eq!(
            l.calibrate(mem, h, n.as_bytes(), false),
            Sample::Agreed,
            "{n}"
        );
    }
    l
}

fn base() -> FakeMem {
    let mem = FakeMem::default();
    mem.object(MODULE, 0x40, &[(8, 0x1234)]);
    mem
}

#[test]
fn three_agreeing_handles_confirm_the_layout_and_name_an_unknown_one() {
    let mem = base();
    let mut l = learner_of(
        &mem,
        &[(0x10_0000, "_Z4gemmPfi"), (0x20_0000, "triton_poi_0")],
    );
    assert_eq!(l.state(), State::Learning);
    assert_eq!(l.layout(), None);
    function(&mem, 0x30_0000, "cupy_scale");
    assert_eq!(
        l.calibrate(&mem, 0x30_0000, b"cupy_scale", false),
        Sample::Agreed
    );
    assert_eq!(l.state(), State::Confirmed);
    assert_eq!(l.layout(), Some(&[Chain::Direct(8)][..]));
    assert_eq!(Chain::Direct(8).to_string(), "*(handle+0x8)");
    function(&mem, 0x40_0000, "_Z6vecAddPKfS0_Pfi");
    let layout = l.layout().unwrap();
    assert_eq!(
        read_name(&mem, 0x40_0000, &[layout]),
        Some(b"_Z6vecAddPKfS0_Pfi".to_vec())
    );
}

#[test]
fn too_few_handles_confirm_nothing() {
    let mem = base();
    let l = learner_of(&mem, &[(0x10_0000, "a_kernel"), (0x20_0000, "b_kernel")]);
    assert_eq!(
        (l.state(), l.agreed(), l.layout()),
        (State::Learning, 2, None)
    );
}

#[test]
fn one_disagreeing_handle_refutes_the_layout_for_good() {
    let mem = base();
    // Before confirmation: two agree, the third keeps its name elsewhere.
    let mut l = learner_of(&mem, &[(0x10_0000, "a_kernel"), (0x20_0000, "b_kernel")]);
    mem.string(0x30_1000, "c_kernel");
    mem.object(0x30_0000, 0x60, &[(0x10, 0x30_1000)]);
    assert_eq!(
        l.calibrate(&mem, 0x30_0000, b"c_kernel", false),
        Sample::Disagreed
    );
    assert_eq!((l.state(), l.layout()), (State::Refuted, None));
    // Later agreeing handles do not bring it back.
    function(&mem, 0x40_0000, "d_kernel");
    assert_eq!(
        l.calibrate(&mem, 0x40_0000, b"d_kernel", false),
        Sample::Disagreed
    );
    assert_eq!(l.state(), State::Refuted);

    // After confirmation: a contradiction drops the layout.
    let mut l = learner_of(
        &mem,
        &[(0x50_0000, "e"), (0x60_0000, "f"), (0x70_0000, "g")],
    );
    assert_eq!(l.state(), State::Confirmed);
    mem.string(0x80_1000, "h_kernel");
    mem.string(0x80_2000, "not_h");
    mem.object(0x80_0000, 0x60, &[(8, 0x80_2000), (0x20, 0x80_1000)]);
    assert_eq!(
        l.calibrate(&mem, 0x80_0000, b"h_kernel", false),
        Sample::Disagreed
    );
    assert_eq!((l.state(), l.layout()), (State::Refuted, None));
}

#[test]
fn a_wrong_name_at_the_place_disagrees() {
    // The pointer is where the others' are, but the string is another kernel's.
    let mem = base();
    let mut l = learner_of(&mem, &[(0x10_0000, "a_kernel"), (0x20_0000, "b_kernel")]);
    function(&mem, 0x30_0000, "c_kernel");
    assert_eq!(
        l.calibrate(&mem, 0x30_0000, b"c_kernel_v2", false),
        Sample::Disagreed
    );
    // A prefix is not the name unless the probe truncated it.
    let mut l = learner_of(&mem, &[(0x10_0000, "a_kernel"), (0x20_0000, "b_kernel")]);
    assert_eq!(
        l.calibrate(&mem, 0x30_0000, b"c_ker", false),
        Sample::Disagreed
    );
    let mut l = learner_of(&mem, &[(0x10_0000, "a_kernel"), (0x20_0000, "b_kernel")]);
    assert_eq!(l.calibrate(&mem, 0x30_0000, b"c_ker", true), Sample::Agreed);
    assert_eq!(l.state(), State::Confirmed);
}

#[test]
fn bad_pointers_are_no_evidence_and_no_name() {
    let mem = base();
    let mut l = Learner::default();
    // Unmapped handle, null name: no evidence either way.
    assert_eq!(
        l.calibrate(&mem, 0xdead_0000, b"a_kernel", false),
        Sample::Unreadable
    );
    assert_eq!(
        l.calibrate(&mem, 0x10, b"a_kernel", false),
        Sample::Unreadable
    );
    assert_eq!(l.calibrate(&mem, 0x10_0000, b"", false), Sample::Unreadable);
    assert_eq!((l.state(), l.agreed()), (State::Learning, 0));
    let l = learner_of(
        &mem,
        &[(0x10_0000, "a"), (0x20_0000, "b"), (0x30_0000, "c")],
    );
    let layout = l.layout().unwrap();
    // The unknown handle's name pointer leads nowhere, to a pointer-sized non-string, to a
    // name with a space, to one without an end, to null, or the handle itself is unmapped.
    mem.object(0x40_0000, 0x60, &[(8, 0xdead_0000)]);
    mem.object(0x41_0000, 0x60, &[(8, 0x41_1000)]);
    mem.put(0x41_1000, &[0x10, 0x20, 0x30, 0x7f, 0x80, 0, 0, 0]);
    mem.object(0x42_0000, 0x60, &[(8, 0x42_1000)]);
    mem.string(0x42_1000, "two words");
    mem.object(0x43_0000, 0x60, &[(8, 0x43_1000)]);
    mem.put(0x43_1000, &[b'a'; 300]);
    mem.object(0x44_0000, 0x60, &[]);
    for h in [
        0x40_0000, 0x41_0000, 0x42_0000, 0x43_0000, 0x44_0000, 0xbad_0000,
    ] {
        assert_eq!(read_name(&mem, h, &[layout]), None, "{h:#x}");
    }
    // A long name that ends is read whole.
    let long = "k".repeat(1000);
    mem.object(0x45_0000, 0x60, &[(8, 0x45_1000)]);
    mem.string(0x45_1000, &long);
    assert_eq!(
        read_name(&mem, 0x45_0000, &[layout]),
        Some(long.into_bytes())
    );
}

#[test]
fn a_name_one_pointer_further_is_found() {
    let mem = base();
    let mut l = Learner::default();
    for (h, n) in [
        (0x10_0000u64, "a_kernel"),
        (0x20_0000, "b_kernel"),
        (0x30_0000, "c_kernel"),
    ] {
        // handle+0x18 → symbol entry; entry+0x10 → name.
        mem.string(h + 0x1000, n);
        mem.object(h + 0x800, 0x40, &[(0x10, h + 0x1000)]);
        mem.object(h, 0x60, &[(0, MODULE), (0x18, h + 0x800)]);
        assert_eq!(l.calibrate(&mem, h, n.as_bytes(), false), Sample::Agreed);
    }
    assert_eq!(l.layout(), Some(&[Chain::Indirect(0x18, 0x10)][..]));
    assert_eq!(
        Chain::Indirect(0x18, 0x10).to_string(),
        "*(*(handle+0x18)+0x10)"
    );
}

#[test]
fn layouts_that_read_differently_give_no_name() {
    let mem = base();
    // Every calibration object has its name at both +8 and +0x20: both chains survive.
    let mut l = Learner::default();
    for (h, n) in [
        (0x10_0000u64, "a_kernel"),
        (0x20_0000, "b_kernel"),
        (0x30_0000, "c_kernel"),
    ] {
        mem.string(h + 0x1000, n);
        mem.object(h, 0x60, &[(8, h + 0x1000), (0x20, h + 0x1000)]);
        assert_eq!(l.calibrate(&mem, h, n.as_bytes(), false), Sample::Agreed);
    }
    let both = l.layout().unwrap().to_vec();
    assert_eq!(both, vec![Chain::Direct(8), Chain::Direct(0x20)]);
    // An unknown handle whose two places agree is named; one whose places differ is not.
    mem.string(0x40_1000, "d_kernel");
    mem.object(0x40_0000, 0x60, &[(8, 0x40_1000), (0x20, 0x40_1000)]);
    assert_eq!(
        read_name(&mem, 0x40_0000, &[&both]),
        Some(b"d_kernel".to_vec())
    );
    mem.string(0x41_1000, "e_kernel");
    mem.string(0x41_2000, "f_kernel");
    mem.object(0x41_0000, 0x60, &[(8, 0x41_1000), (0x20, 0x41_2000)]);
    assert_eq!(read_name(&mem, 0x41_0000, &[&both]), None);
    // Two kinds' layouts: both must agree where both read a name.
    let at8: &[Chain] = &[Chain::Direct(8)];
    let at20: &[Chain] = &[Chain::Direct(0x20)];
    assert_eq!(read_name(&mem, 0x41_0000, &[at8, at20]), None);
    assert_eq!(
        read_name(&mem, 0x41_0000, &[at8]),
        Some(b"e_kernel".to_vec())
    );
    mem.object(0x42_0000, 0x60, &[(8, 0x41_1000)]);
    assert_eq!(
        read_name(&mem, 0x42_0000, &[at8, at20]),
        Some(b"e_kernel".to_vec())
    );
}

/// Processes made up for [`DriverObjects`]: one address space each, a build per tgid.
struct Fake {
    mem: HashMap<u32, FakeMem>,
    builds: HashMap<u32, String>,
}

impl Processes for Fake {
    fn memory(&self, tgid: u32) -> Option<Box<dyn Memory>> {
        self.mem
            .get(&tgid)
            .map(|m| Box::new(m.clone()) as Box<dyn Memory>)
    }

    fn driver_build(&mut self, tgid: u32) -> Option<String> {
        self.builds.get(&tgid).cloned()
    }
}

#[test]
fn handles_wait_for_a_layout_then_are_named_once() {
    let (a, b) = (base(), base());
    let procs = Fake {
        mem: HashMap::from([(1, a.clone()), (2, b.clone())]),
        builds: HashMap::from([(1, "d47d5f".to_owned()), (2, "d47d5f".to_owned())]),
    };
    let mut d = DriverObjects::new(Box::new(procs), Remembered::none());
    // Made before the attach: launched, never named by a probe.
    function(&a, 0x90_0000, "_Z3oldv");
    function(&b, 0x91_0000, "_Z4old2v");
    d.launched(1, 0x90_0000, || false);
    d.launched(1, 0x90_0000, || false);
    d.launched(2, 0x91_0000, || false);
    d.launched(1, 0x92_0000, || true);
    assert_eq!(d.take(), vec![]);
    // Two samples in one process, one in another of the same driver build.
    for (tgid, mem, h, n) in [(1, &a, 0x10_0000, "n1"), (1, &a, 0x20_0000, "n2")] {
        function(mem, h, n);
        d.calibrate(tgid, HandleKind::Function, h, n.as_bytes(), false);
    }
    assert_eq!(d.take(), vec![]);
    function(&b, 0x30_0000, "n3");
    d.calibrate(2, HandleKind::Function, 0x30_0000, b"n3", false);
    let mut got = d.take();
    got.sort_by_key(|l| l.tgid);
    assert_eq!(
        got,
        vec![
            Learned {
                tgid: 1,
                handle: 0x90_0000,
                name: b"_Z3oldv".to_vec(),
                remembered: false,
            },
            Learned {
                tgid: 2,
                handle: 0x91_0000,
                name: b"_Z4old2v".to_vec(),
                remembered: false,
            },
        ]
    );
    // Once each: later launches of it, or of a calibration handle, bring nothing.
    d.launched(1, 0x90_0000, || false);
    d.launched(1, 0x10_0000, || false);
    assert_eq!(d.take(), vec![]);
}

#[test]
fn a_refuted_or_unknown_build_gives_up_its_handles() {
    let a = base();
    let procs = Fake {
        mem: HashMap::from([(1, a.clone()), (3, base())]),
        builds: HashMap::from([(1, "b1".to_owned())]),
    };
    let mut d = DriverObjects::new(Box::new(procs), Remembered::none());
    function(&a, 0x90_0000, "_Z3oldv");
    d.launched(1, 0x90_0000, || false);
    d.launched(3, 0x90_0000, || false);
    for (h, n) in [(0x10_0000, "n1"), (0x20_0000, "n2")] {
        function(&a, h, n);
        d.calibrate(1, HandleKind::Function, h, n.as_bytes(), false);
    }
    a.string(0x30_1000, "n3");
    a.object(0x30_0000, 0x60, &[(0x30, 0x30_1000)]);
    d.calibrate(1, HandleKind::Function, 0x30_0000, b"n3", false);
    // More agreeing handles after the contradiction change nothing.
    for (h, n) in [(0x40_0000, "n4"), (0x50_0000, "n5"), (0x60_0000, "n6")] {
        function(&a, h, n);
        d.calibrate(1, HandleKind::Function, h, n.as_bytes(), false);
    }
    assert_eq!(d.take(), vec![]);
    assert!(d.pending.is_empty(), "{:?}", d.pending);
}

#[test]
fn a_longer_chain_cannot_stand_in_for_a_broken_shorter_one() {
    let mem = base();
    // Objects whose module's name table sits right after the module: the name is reachable at
    // +8 and, by coincidence, through +0 (the module) and +0x30 (its table's first entry).
    let object = |h: u64, n: &str, direct: bool| {
        mem.string(h + 0x1000, n);
        mem.object(h + 0x800, 0x40, &[(0x30, h + 0x1000)]);
        let at8 = if direct { h + 0x1000 } else { 0 };
        mem.object(h, 0x60, &[(0, h + 0x800), (8, at8)]);
    };
    let mut l = Learner::default();
    object(0x10_0000, "a_kernel", true);
    object(0x20_0000, "b_kernel", true);
    for (h, n) in [(0x10_0000u64, "a_kernel"), (0x20_0000, "b_kernel")] {
        assert_eq!(l.calibrate(&mem, h, n.as_bytes(), false), Sample::Agreed);
    }
    // The coincidence breaks (a kernel that is not its module's first): only +8 is left.
    let mut narrowed = l.clone();
    mem.string(0x30_1000, "c_kernel");
    mem.string(0x30_2000, "first_of_module");
    mem.object(0x30_0800, 0x40, &[(0x30, 0x30_2000)]);
    mem.object(0x30_0000, 0x60, &[(0, 0x30_0800), (8, 0x30_1000)]);
    assert_eq!(
        narrowed.calibrate(&mem, 0x30_0000, b"c_kernel", false),
        Sample::Agreed
    );
    assert_eq!(narrowed.layout(), Some(&[Chain::Direct(8)][..]));
    // An object with nothing at +8 but the coincidence: a disagreement, not a narrowing.
    object(0x40_0000, "d_kernel", false);
    assert_eq!(
        l.calibrate(&mem, 0x40_0000, b"d_kernel", false),
        Sample::Disagreed
    );
    assert_eq!(l.state(), State::Refuted);
}

const BUILD: &str = "d47d5faef020f05b1a7a3293dbc88644fecb50aa";

fn state_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("gpuprofd-do-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// One process (tgid 1) of driver build [`BUILD`], and the session's objects with the state
/// of `dir`.
fn session(dir: &std::path::Path) -> (FakeMem, DriverObjects) {
    let a = base();
    let procs = Fake {
        mem: HashMap::from([(1, a.clone())]),
        builds: HashMap::from([(1, BUILD.to_owned())]),
    };
    (
        a,
        DriverObjects::new(Box::new(procs), Remembered::open(dir)),
    )
}

fn remembered_file(dir: &std::path::Path) -> remembered::Layouts {
    remembered::parse(&std::fs::read(dir.join(remembered::FILE_NAME)).unwrap()).unwrap()
}

#[test]
fn a_confirmed_layout_names_the_next_sessions_old_handles_from_the_start() {
    let dir = state_dir("next");
    {
        let (a, mut d) = session(&dir);
        for (h, n) in [(0x10_0000, "n1"), (0x20_0000, "n2"), (0x30_0000, "n3")] {
            function(&a, h, n);
            d.calibrate(1, HandleKind::Function, h, n.as_bytes(), false);
        }
    }
    let file = remembered_file(&dir);
    let e = &file[&(BUILD.to_owned(), HandleKind::Function)];
    assert_eq!(
        (e.chains.as_slice(), e.samples),
        (&[Chain::Direct(8)][..], 3)
    );
    // The next session: no calibration at all, the old handle is named at once.
    let (a, mut d) = session(&dir);
    function(&a, 0x90_0000, "_Z3oldv");
    d.launched(1, 0x90_0000, || false);
    assert_eq!(
        d.take(),
        vec![Learned {
            tgid: 1,
            handle: 0x90_0000,
            name: b"_Z3oldv".to_vec(),
            remembered: true,
        }]
    );
    // Three samples of its own: its names are its own from then on, and the file counts them.
    for (h, n) in [(0x40_0000, "n4"), (0x50_0000, "n5"), (0x60_0000, "n6")] {
        function(&a, h, n);
        d.calibrate(1, HandleKind::Function, h, n.as_bytes(), false);
    }
    function(&a, 0x91_0000, "_Z4old2v");
    d.launched(1, 0x91_0000, || false);
    assert!(!d.take()[0].remembered);
    drop(d);
    assert_eq!(
        remembered_file(&dir)[&(BUILD.to_owned(), HandleKind::Function)].samples,
        6
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_remembered_layout_one_sample_contradicts_is_dropped_from_the_file() {
    let dir = state_dir("drop");
    {
        let (a, mut d) = session(&dir);
        for (h, n) in [(0x10_0000, "n1"), (0x20_0000, "n2"), (0x30_0000, "n3")] {
            function(&a, h, n);
            d.calibrate(1, HandleKind::Function, h, n.as_bytes(), false);
        }
    }
    let (a, mut d) = session(&dir);
    a.string(0x30_1000, "n3");
    a.object(0x30_0000, 0x60, &[(0x30, 0x30_1000)]);
    d.calibrate(1, HandleKind::Function, 0x30_0000, b"n3", false);
    assert_eq!(remembered_file(&dir), remembered::Layouts::new());
    function(&a, 0x90_0000, "_Z3oldv");
    d.launched(1, 0x90_0000, || false);
    assert_eq!(d.take(), vec![]);
    std::fs::remove_dir_all(&dir).unwrap();
}
