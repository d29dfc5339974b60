//! Kernel names: demangling, the per-process handle → name table, and the symbol-table fallback.

use std::collections::HashMap;

/// Names longer than this are not demangled (bounded work on untrusted input).
pub const MAX_DEMANGLE_LEN: usize = 4096;
/// Recursion bound handed to the demangler's parser and printer.
const RECURSION_LIMIT: u32 = 96;
/// How many alias hops [`NameTable::resolve`] follows.
pub const MAX_ALIAS_DEPTH: usize = 4;

/// Demangles an Itanium C++ name the way `c++filt` prints it (return type of templates and
/// parameters kept), e.g. `_Z6vecAddPKfS0_Pfi` → `vecAdd(float const*, float const*, float*, int)`.
///
/// Names that are not mangled (`triton_poi_fused_add_0`) or fail to demangle come back unchanged;
/// names over [`MAX_DEMANGLE_LEN`] bytes are cut there (on a character boundary) and marked `…`.
/// Never panics.
pub fn demangle(mangled: &str) -> String {
    if mangled.len() > MAX_DEMANGLE_LEN {
        let mut end = MAX_DEMANGLE_LEN;
        while !mangled.is_char_boundary(end) {
            end -= 1;
        }
        return format!("{}…", &mangled[..end]);
    }
    if !mangled.starts_with("_Z") {
        return mangled.to_owned();
    }
    // Our own demangler prints what c++filt (and the CUDA tools) print; it declines the few
    // constructs it does not cover, which go to the cpp_demangle crate. Neither can panic on
    // any input by design; the guard is for a bug in either.
    if let Ok(Some(s)) = std::panic::catch_unwind(|| super::itanium::demangle(mangled))
        && !s.is_empty()
    {
        return s;
    }
    let work = || {
        let parse = cpp_demangle::ParseOptions::default().recursion_limit(RECURSION_LIMIT);
        let sym = cpp_demangle::Symbol::new_with_options(mangled.as_bytes(), &parse).ok()?;
        let opts = cpp_demangle::DemangleOptions::new().recursion_limit(RECURSION_LIMIT);
        let full = sym.demangle(&opts).ok()?;
        // c++filt (and CUPTI, Nsight, torch.profiler) print the return type of the outermost
        // function only; the demangler also prints it for a function that encloses a local
        // entity (`void f<T>(…)::{lambda(int)#1}`), as in every TensorIterator kernel of
        // PyTorch. A kernel returns void, so where the two differ inside, the name is `void `
        // and the rest without return types.
        let name = match sym.demangle(&opts.no_return_type()) {
            Ok(bare) if full.starts_with("void ") && !full.ends_with(bare.as_str()) => {
                format!("void {bare}")
            }
            _ => full,
        };
        Some(literal_suffixes(&name))
    };
    // The demangler has had panics on hostile input in the past; a name is not worth a crash.
    match std::panic::catch_unwind(work) {
        Ok(Some(s)) if !s.is_empty() => s,
        _ => mangled.to_owned(),
    }
}

/// Integer literals of template arguments as c++filt writes them: `1ul`, `1u`, `-2l`, not the
/// demangler's `(unsigned long)1` (`std::array<char*, 1ul>`).
fn literal_suffixes(name: &str) -> String {
    const CASTS: [(&str, &str); 5] = [
        ("(unsigned long long)", "ull"),
        ("(unsigned long)", "ul"),
        ("(unsigned int)", "u"),
        ("(long long)", "ll"),
        ("(long)", "l"),
    ];
    if !name.contains(")") {
        return name.to_owned();
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    'scan: while !rest.is_empty() {
        for (cast, suffix) in CASTS {
            if let Some(after) = rest.strip_prefix(cast) {
                let sign = usize::from(after.starts_with('-'));
                let digits = after[sign..].bytes().take_while(u8::is_ascii_digit).count();
                if digits > 0 {
                    out.push_str(&after[..sign + digits]);
                    out.push_str(suffix);
                    rest = &after[sign + digits..];
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Demangles a native function symbol of a stack frame: Rust (legacy and v0 manglings, hash
/// left out) through `rustc-demangle`, C++ as [`demangle`]. Never panics.
pub fn demangle_symbol(mangled: &str) -> String {
    if mangled.len() <= MAX_DEMANGLE_LEN
        && let Ok(d) = rustc_demangle::try_demangle(mangled)
    {
        // Legacy Rust names are Itanium-shaped (`_ZN…17h<hash>E`): only take them as Rust when
        // the demangler recognised the hash, so C++ names stay with the C++ demangler.
        let rust = mangled.starts_with("_R") || format!("{d}") != format!("{d:#}");
        if rust {
            return format!("{d:#}");
        }
    }
    demangle(mangled)
}

/// Where a kernel's name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NameSource {
    /// `__cudaRegisterFunction` (handle = host stub).
    RegisterFunction,
    /// `cuModuleGetFunction` (handle = CUfunction).
    ModuleGetFunction,
    /// `cuLibraryGetKernel` (handle = CUkernel).
    LibraryGetKernel,
    /// `cuFuncGetName` / `cuKernelGetName`.
    GetName,
    /// Read from the driver's function object of a handle created before the attach, through
    /// a layout confirmed for that driver build ([`super::driver_objects`]).
    DriverObject,
    /// As [`Self::DriverObject`], through a layout an earlier run confirmed and remembered
    /// (the state file), not yet confirmed by this run's own samples.
    DriverObjectRemembered,
    /// A name record with a source this daemon does not know.
    Other,
    /// The process's ELF symbol tables ([`SymbolResolver`]).
    Symbols,
    /// No name found.
    Unknown,
}

impl NameSource {
    /// From `NameBody::source` ([`profiler_common::namesrc`]).
    pub fn from_wire(source: u32) -> Self {
        use profiler_common::namesrc;
        match source {
            namesrc::REGISTER_FUNCTION => Self::RegisterFunction,
            namesrc::MODULE_GET_FUNCTION => Self::ModuleGetFunction,
            namesrc::LIBRARY_GET_KERNEL => Self::LibraryGetKernel,
            namesrc::GET_NAME => Self::GetName,
            namesrc::DRIVER_OBJECT => Self::DriverObject,
            namesrc::DRIVER_OBJECT_REMEMBERED => Self::DriverObjectRemembered,
            _ => Self::Other,
        }
    }

    /// The wire value ([`profiler_common::namesrc`]; 0 for the sources no record carries).
    pub fn to_wire(self) -> u32 {
        use profiler_common::namesrc;
        match self {
            Self::RegisterFunction => namesrc::REGISTER_FUNCTION,
            Self::ModuleGetFunction => namesrc::MODULE_GET_FUNCTION,
            Self::LibraryGetKernel => namesrc::LIBRARY_GET_KERNEL,
            Self::GetName => namesrc::GET_NAME,
            Self::DriverObject => namesrc::DRIVER_OBJECT,
            Self::DriverObjectRemembered => namesrc::DRIVER_OBJECT_REMEMBERED,
            _ => 0,
        }
    }

    /// The label used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RegisterFunction => "register_function",
            Self::ModuleGetFunction => "module_get_function",
            Self::LibraryGetKernel => "library_get_kernel",
            Self::GetName => "get_name",
            Self::DriverObject => "driver_object",
            Self::DriverObjectRemembered => "driver_object_remembered",
            Self::Other => "other",
            Self::Symbols => "symbols",
            Self::Unknown => "unknown",
        }
    }
}

/// One learned name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameEntry {
    pub mangled: Box<str>,
    pub source: NameSource,
    /// The probe cut the name at its capacity.
    pub truncated: bool,
}

/// The names one process (tgid) gave its handles. A later name for a handle replaces the earlier
/// one (handles are reused after a module unload).
#[derive(Clone, Debug, Default)]
pub struct NameTable {
    names: HashMap<u64, NameEntry>,
    aliases: HashMap<u64, u64>,
}

impl NameTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// `handle` is named `mangled` (learned from a record of `source`).
    pub fn insert(&mut self, handle: u64, mangled: &str, source: NameSource, truncated: bool) {
        let entry = NameEntry {
            mangled: mangled.into(),
            source,
            truncated,
        };
        self.names.insert(handle, entry);
    }

    /// `from` stands for `to`: it inherits `to`'s name, now or once `to` learns one.
    pub fn alias(&mut self, from: u64, to: u64) {
        if from != to {
            self.aliases.insert(from, to);
        }
    }

    /// The mangled name of `handle`, following up to [`MAX_ALIAS_DEPTH`] aliases.
    pub fn resolve(&self, handle: u64) -> Option<&str> {
        self.resolve_entry(handle).map(|e| &*e.mangled)
    }

    /// Like [`Self::resolve`], with where the name came from.
    pub fn resolve_entry(&self, handle: u64) -> Option<&NameEntry> {
        let mut h = handle;
        for _ in 0..=MAX_ALIAS_DEPTH {
            if let Some(e) = self.names.get(&h) {
                return Some(e);
            }
            h = *self.aliases.get(&h)?;
        }
        None
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Every name learned: (handle, entry).
    pub fn entries(&self) -> impl Iterator<Item = (u64, &NameEntry)> {
        self.names.iter().map(|(&h, e)| (h, e))
    }

    /// Every alias: (from, to).
    pub fn aliases(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.aliases.iter().map(|(&f, &t)| (f, t))
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Names an address in a process from its ELF symbol tables: the fallback for runtime host stubs
/// registered before the profiler attached. Returns the (mangled) symbol name.
pub trait SymbolResolver {
    fn resolve(&self, tgid: u32, addr: u64) -> Option<String>;
}

/// A resolver that knows nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSymbols;

impl SymbolResolver for NoSymbols {
    fn resolve(&self, _tgid: u32, _addr: u64) -> Option<String> {
        None
    }
}

/// A resolver backed by a fixed map (tests, replays).
#[derive(Clone, Debug, Default)]
pub struct MapSymbols(pub HashMap<(u32, u64), String>);

impl SymbolResolver for MapSymbols {
    fn resolve(&self, tgid: u32, addr: u64) -> Option<String> {
        self.0.get(&(tgid, addr)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_symbols_demangle_as_rust_or_cpp() {
        assert_eq!(
            demangle_symbol("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(demangle_symbol("_RNvCs1234_7mycrate4main"), "mycrate::main");
        assert_eq!(
            demangle_symbol("_Z6vecAddPKfS0_Pfi"),
            "vecAdd(float const*, float const*, float*, int)"
        );
        assert_eq!(demangle_symbol("stack_chain_a"), "stack_chain_a");
    }

    #[test]
    fn demangles_like_cxxfilt() {
        assert_eq!(
            demangle("_Z6vecAddPKfS0_Pfi"),
            "vecAdd(float const*, float const*, float*, int)"
        );
        assert_eq!(
            demangle("_ZN4demo6reduceILi256EEEvPKfPfi"),
            "void demo::reduce<256>(float const*, float*, int)"
        );
        assert_eq!(demangle("triton_poi_fused_add_0"), "triton_poi_fused_add_0");
    }

    /// PyTorch kernel names as torch.profiler (CUPTI) named them on an H200 (2026-11-26,
    /// torch 2.11.0+cu130), from the mangled names gpuprofd read in the same run.
    #[test]
    fn pytorch_kernels_demangle_as_the_cuda_tools_name_them() {
        assert_eq!(
            demangle(
                "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
            ),
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
        );
        assert_eq!(
            demangle(
                "_Z15fft2d_r2c_32x32IfLb0ELj1ELb0EEvP6float2PKT_iiiiiiiiiN5cudnn15reduced_divisorEb4int2ii"
            ),
            "void fft2d_r2c_32x32<float, false, 1u, false>(float2*, float const*, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)"
        );
        assert_eq!(
            demangle(
                "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastINS0_15CUDAFunctor_addIfEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_"
            ),
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1})"
        );
        // Negative and wide literals; casts that are parameter lists stay.
        assert_eq!(
            literal_suffixes("k<(long)-2, (unsigned long long)7>(long)"),
            "k<-2l, 7ull>(long)"
        );
    }

    #[test]
    fn nested_templates_still_demangle() {
        // cutlass-like nesting, ten levels deep.
        let mangled = format!("_Z1kI{}iEEEEEEEEEEEvv", "1AI".repeat(10));
        assert_eq!(
            demangle(&mangled),
            format!("void k<{}int{}>()", "A<".repeat(10), "> ".repeat(10))
        );
    }

    #[test]
    fn internal_linkage_matches_device_name() {
        assert_eq!(
            demangle("_ZN4demoL15internal_kernelEPi"),
            "demo::internal_kernel(int*)"
        );
        assert_eq!(
            demangle("_ZN4demo15internal_kernelEPi"),
            "demo::internal_kernel(int*)"
        );
    }

    #[test]
    fn garbage_and_long_names_are_safe() {
        for g in [
            "_Z",
            "_Z9",
            "_ZN",
            "_ZZZZZZZZ",
            "_Z1a\u{fffd}",
            "_ZNKSt3__1",
            "",
        ] {
            let _ = demangle(g);
        }
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
        for unit in [
            "PFvPF", "I", "P", "N1a", "IN1aI", "S_", "T_", "DpT_", "Dt", "A1_",
        ] {
            let deep = format!("_Z1f{}", unit.repeat(4000 / unit.len()));
            let _ = demangle(&deep);
        }
        let long = format!("_Z{}", "a".repeat(5000));
        let got = demangle(&long);
        assert_eq!(got.len(), MAX_DEMANGLE_LEN + '…'.len_utf8());
        assert!(got.ends_with('…'));
        // A multi-byte character across the cut does not split.
        let wide = format!("{}é", "a".repeat(MAX_DEMANGLE_LEN - 1));
        assert_eq!(
            demangle(&wide),
            format!("{}…", "a".repeat(MAX_DEMANGLE_LEN - 1))
        );
    }

    #[test]
    fn aliases_chain_and_cycles_end() {
        let mut t = NameTable::new();
        t.insert(0x10, "_Z1kv", NameSource::LibraryGetKernel, false);
        t.alias(0x20, 0x10); // function → kernel
        t.alias(0x30, 0x20);
        assert_eq!(t.resolve(0x10), Some("_Z1kv"));
        assert_eq!(t.resolve(0x30), Some("_Z1kv"));
        assert_eq!(
            t.resolve_entry(0x20).map(|e| e.source),
            Some(NameSource::LibraryGetKernel)
        );
        assert_eq!(t.resolve(0x99), None);
        // Cycle: a → b → a, no names.
        t.alias(0xa, 0xb);
        t.alias(0xb, 0xa);
        assert_eq!(t.resolve(0xa), None);
        // Too deep: 5 hops.
        t.insert(0x100, "deep", NameSource::GetName, false);
        for i in 0..5u64 {
            t.alias(0x101 + i, 0x100 + i);
        }
        assert_eq!(t.resolve(0x104), Some("deep"));
        assert_eq!(t.resolve(0x105), None);
        // A direct name beats an alias; a later name replaces an earlier one.
        t.insert(0x30, "own", NameSource::ModuleGetFunction, false);
        assert_eq!(t.resolve(0x30), Some("own"));
        t.insert(0x30, "newer", NameSource::GetName, false);
        assert_eq!(t.resolve(0x30), Some("newer"));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn resolvers() {
        assert_eq!(NoSymbols.resolve(1, 2), None);
        let m = MapSymbols([((7, 0x40), "_Z3foov".to_owned())].into_iter().collect());
        assert_eq!(m.resolve(7, 0x40).as_deref(), Some("_Z3foov"));
        assert_eq!(m.resolve(8, 0x40), None);
    }

    #[test]
    fn wire_sources() {
        use profiler_common::namesrc;
        assert_eq!(
            NameSource::from_wire(namesrc::REGISTER_FUNCTION),
            NameSource::RegisterFunction
        );
        assert_eq!(
            NameSource::from_wire(namesrc::GET_NAME).as_str(),
            "get_name"
        );
        assert_eq!(NameSource::from_wire(77), NameSource::Other);
    }
}
