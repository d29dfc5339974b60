//! An Itanium C++ ABI demangler that prints names the way `c++filt` does (GNU libiberty with
//! its default options `DMGL_PARAMS | DMGL_ANSI | DMGL_VERBOSE`), the form torch.profiler's
//! kernel names (from CUPTI) took in our GPU runs.
//!
//! Written for the names a GPU profiler meets: kernels (templates, lambdas, literals, packs) and
//! the native frames of CUDA programs. It covers the grammar those use and says `None` for
//! anything else (expressions in template arguments other than `&function`, `decltype`,
//! floating literals, vendor qualifiers, …), where
//! [`super::names::demangle`] falls back to the `cpp_demangle` crate. It
//! exists because that crate prints some common PyTorch kernel names wrongly (the `const&` of
//! a lambda passed by reference lands inside the lambda's parameter list) and spells many
//! others differently from every CUDA tool.
//!
//! Input is untrusted (any process's symbol tables and kernel names): parsing and printing are
//! bounded in depth, nodes and output, and nothing here can panic on any input.

/// How deep parsing and printing may recurse.
const MAX_DEPTH: u32 = 192;
/// How many nodes one name may make.
const MAX_NODES: usize = 1 << 14;
/// Longest output: a name's substitutions can make its text grow exponentially.
const MAX_OUT: usize = 1 << 16;
/// Nodes a name's pack expansions may visit looking for their packs, all together: the nodes
/// form a DAG (substitutions), which a walk that prints nothing could take exponential time
/// to cover.
const MAX_PACK_VISITS: u32 = 1 << 16;

type Id = u32;

/// `K` const, `V` volatile, `r` restrict.
const Q_CONST: u8 = 1;
const Q_VOLATILE: u8 = 2;
const Q_RESTRICT: u8 = 4;

/// The standard abbreviations `Sa`, `Sb`, `Ss`, `Si`, `So`, `Sd`: the full text (verbose form,
/// as c++filt prints it) and the class's own name (for a constructor).
const ABBREVS: [(u8, &str, &str); 6] = [
    (b'a', "std::allocator", "allocator"),
    (b'b', "std::basic_string", "basic_string"),
    (
        b's',
        "std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
        "basic_string",
    ),
    (
        b'i',
        "std::basic_istream<char, std::char_traits<char> >",
        "basic_istream",
    ),
    (
        b'o',
        "std::basic_ostream<char, std::char_traits<char> >",
        "basic_ostream",
    ),
    (
        b'd',
        "std::basic_iostream<char, std::char_traits<char> >",
        "basic_iostream",
    ),
];

#[derive(Clone, Debug)]
enum Node {
    /// A name or builtin type printed as it is.
    Text(Box<str>),
    /// One of [`ABBREVS`].
    Abbrev(usize),
    /// `prefix::name`.
    Nested(Id, Id),
    /// `name<args>`.
    Template(Id, Vec<Id>),
    /// The constructor (or destructor) of the class named by the node.
    Ctor {
        of: Id,
        dtor: bool,
    },
    /// `name[abi:tag]`.
    AbiTag(Id, Box<str>),
    /// `function(…)::entity` (the function's return type left out).
    Local(Id, Id),
    /// `{lambda(params)#n}`.
    Closure(Vec<Id>, u32),
    /// `{unnamed type#n}`.
    Unnamed(u32),
    /// `operator type`.
    Conversion(Id),
    /// `vtable for …`, `non-virtual thunk to …`, ….
    Special(&'static str, Id),
    /// A function: name, return type when mangled, parameters, its cv and ref qualifiers.
    Encoding {
        name: Id,
        ret: Option<Id>,
        params: Vec<Id>,
        cv: u8,
        refq: u8,
    },
    Cv(Id, u8),
    Pointer(Id),
    LRef(Id),
    RRef(Id),
    Function {
        ret: Id,
        params: Vec<Id>,
        cv: u8,
        refq: u8,
    },
    Array(Box<str>, Id),
    PtrMem(Id, Id),
    /// A template argument pack.
    Pack(Vec<Id>),
    /// `&name`: the address of a function or object as a template argument.
    AddrOf(Id),
    /// `T_`, `T0_`, …: the argument of the template whose function is being printed (what a
    /// substitution of it means depends on where it is used, as c++filt resolves it).
    TParam(u32),
    /// `Dp`: a pattern repeated for each element of the pack in it.
    Expansion(Id),
}

/// What a parsed name says about the function it may name.
#[derive(Clone, Copy)]
struct NameInfo {
    id: Id,
    cv: u8,
    refq: u8,
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    nodes: Vec<Node>,
    subs: Vec<Id>,
    depth: u32,
}

type R<T> = Option<T>;

impl<'a> Parser<'a> {
    fn peek(&self) -> u8 {
        self.s.get(self.i).copied().unwrap_or(0)
    }

    fn peek_at(&self, k: usize) -> u8 {
        self.s.get(self.i + k).copied().unwrap_or(0)
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == c {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn eat_str(&mut self, p: &[u8]) -> bool {
        if self.s[self.i.min(self.s.len())..].starts_with(p) {
            self.i += p.len();
            true
        } else {
            false
        }
    }

    fn make(&mut self, n: Node) -> R<Id> {
        if self.nodes.len() >= MAX_NODES {
            return None;
        }
        self.nodes.push(n);
        Some((self.nodes.len() - 1) as Id)
    }

    fn text(&mut self, s: &str) -> R<Id> {
        self.make(Node::Text(s.into()))
    }

    /// Runs `f` one level deeper; `None` past [`MAX_DEPTH`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        if self.depth >= MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn number(&mut self) -> R<u64> {
        let start = self.i;
        let mut v: u64 = 0;
        while self.peek().is_ascii_digit() {
            v = v
                .checked_mul(10)?
                .checked_add(u64::from(self.peek() - b'0'))?;
            self.i += 1;
        }
        (self.i > start).then_some(v)
    }

    /// `[n] <number>` as text, `n` printed as `-`.
    fn signed_number(&mut self) -> R<String> {
        let neg = self.eat(b'n');
        let v = self.number()?;
        Some(if neg { format!("-{v}") } else { v.to_string() })
    }

    /// `<seq-id>`: base 36, digits and upper-case letters.
    fn seq_id(&mut self) -> R<u64> {
        let start = self.i;
        let mut v: u64 = 0;
        loop {
            let c = self.peek();
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'A'..=b'Z' => c - b'A' + 10,
                _ => break,
            };
            v = v.checked_mul(36)?.checked_add(u64::from(d))?;
            self.i += 1;
        }
        (self.i > start).then_some(v)
    }

    fn cv_quals(&mut self) -> u8 {
        let mut q = 0;
        if self.eat(b'r') {
            q |= Q_RESTRICT;
        }
        if self.eat(b'V') {
            q |= Q_VOLATILE;
        }
        if self.eat(b'K') {
            q |= Q_CONST;
        }
        q
    }

    fn ref_qual(&mut self) -> u8 {
        if self.eat(b'R') {
            1
        } else if self.eat(b'O') {
            2
        } else {
            0
        }
    }

    // -- names -----------------------------------------------------------------------------

    /// `<mangled-name>` without `_Z`, clone suffixes included; the whole input must be used.
    fn mangled(&mut self) -> R<(Id, Vec<String>)> {
        let enc = self.encoding()?;
        let mut clones = Vec::new();
        while self.peek() == b'.' {
            let c = self.peek_at(1);
            if !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_') {
                return None;
            }
            let start = self.i;
            self.i += 2;
            while matches!(self.peek(), b'a'..=b'z' | b'0'..=b'9' | b'_') {
                self.i += 1;
            }
            while self.peek() == b'.' && self.peek_at(1).is_ascii_digit() {
                self.i += 2;
                while self.peek().is_ascii_digit() {
                    self.i += 1;
                }
            }
            clones.push(String::from_utf8_lossy(&self.s[start..self.i]).into_owned());
        }
        (self.i == self.s.len()).then_some((enc, clones))
    }

    fn encoding(&mut self) -> R<Id> {
        self.nested(|p| p.encoding_inner())
    }

    fn encoding_inner(&mut self) -> R<Id> {
        if matches!(self.peek(), b'T' | b'G') {
            return self.special_name();
        }
        let info = self.name()?;
        if matches!(self.peek(), 0 | b'E' | b'.') {
            Some(info.id)
        } else {
            let ret = if self.has_return_type(info.id) {
                Some(self.ty()?)
            } else {
                None
            };
            let params = self.params()?;
            self.make(Node::Encoding {
                name: info.id,
                ret,
                params,
                cv: info.cv,
                refq: info.refq,
            })
        }
    }

    /// Parameter types up to the end, an `E` or a clone suffix; `v` alone is none.
    fn params(&mut self) -> R<Vec<Id>> {
        if self.peek() == b'v' && matches!(self.peek_at(1), 0 | b'E' | b'.') {
            self.i += 1;
            return Some(Vec::new());
        }
        let mut params = Vec::new();
        while !matches!(self.peek(), 0 | b'E' | b'.') {
            params.push(self.ty()?);
        }
        (!params.is_empty()).then_some(params)
    }

    fn has_return_type(&self, id: Id) -> bool {
        match self.nodes.get(id as usize) {
            Some(Node::Local(_, e)) => self.has_return_type(*e),
            Some(Node::Template(n, _)) => !self.is_ctor_or_conversion(*n),
            _ => false,
        }
    }

    fn is_ctor_or_conversion(&self, id: Id) -> bool {
        match self.nodes.get(id as usize) {
            Some(Node::Nested(_, n)) | Some(Node::Local(_, n)) => self.is_ctor_or_conversion(*n),
            Some(Node::AbiTag(n, _)) => self.is_ctor_or_conversion(*n),
            Some(Node::Ctor { .. }) | Some(Node::Conversion(_)) => true,
            _ => false,
        }
    }

    fn special_name(&mut self) -> R<Id> {
        let two = [self.peek(), self.peek_at(1)];
        self.i += 2;
        match &two {
            b"TV" => self.special_of_type("vtable for "),
            b"TT" => self.special_of_type("VTT for "),
            b"TI" => self.special_of_type("typeinfo for "),
            b"TS" => self.special_of_type("typeinfo name for "),
            b"Th" => {
                self.call_offset(b'h')?;
                let e = self.encoding()?;
                self.make(Node::Special("non-virtual thunk to ", e))
            }
            b"Tv" => {
                self.call_offset(b'v')?;
                let e = self.encoding()?;
                self.make(Node::Special("virtual thunk to ", e))
            }
            b"Tc" => {
                let k = self.peek();
                self.i += 1;
                self.call_offset(k)?;
                let k = self.peek();
                self.i += 1;
                self.call_offset(k)?;
                let e = self.encoding()?;
                self.make(Node::Special("covariant return thunk to ", e))
            }
            b"GV" => {
                let n = self.name()?.id;
                self.make(Node::Special("guard variable for ", n))
            }
            b"TH" => {
                let n = self.name()?.id;
                self.make(Node::Special("TLS init function for ", n))
            }
            b"TW" => {
                let n = self.name()?.id;
                self.make(Node::Special("TLS wrapper function for ", n))
            }
            _ => None,
        }
    }

    fn special_of_type(&mut self, what: &'static str) -> R<Id> {
        let t = self.ty()?;
        self.make(Node::Special(what, t))
    }

    /// The offsets after `Th` (`h <number> _`) or `Tv` (`v <number> _ <number> _`); the letter
    /// is already consumed for `Th`/`Tv`, read here for `Tc`.
    fn call_offset(&mut self, kind: u8) -> R<()> {
        match kind {
            b'h' => {
                self.signed_number()?;
                self.eat(b'_').then_some(())
            }
            b'v' => {
                self.signed_number()?;
                if !self.eat(b'_') {
                    return None;
                }
                self.signed_number()?;
                self.eat(b'_').then_some(())
            }
            _ => None,
        }
    }

    /// `<name>`.
    fn name(&mut self) -> R<NameInfo> {
        self.nested(|p| p.name_inner())
    }

    fn name_inner(&mut self) -> R<NameInfo> {
        let plain = |id| NameInfo { id, cv: 0, refq: 0 };
        match self.peek() {
            b'N' => self.nested_name(),
            b'Z' => self.local_name(),
            b'S' if self.peek_at(1) != b't' => {
                let sub = self.substitution()?;
                if self.peek() != b'I' {
                    return Some(plain(sub));
                }
                let args = self.template_args()?;
                self.make(Node::Template(sub, args)).map(plain)
            }
            _ => {
                let std = self.eat_str(b"St");
                let mut n = self.unqualified(None)?;
                if std {
                    let s = self.text("std")?;
                    n = self.make(Node::Nested(s, n))?;
                }
                if self.peek() == b'I' {
                    self.subs.push(n);
                    let args = self.template_args()?;
                    n = self.make(Node::Template(n, args))?;
                }
                Some(plain(n))
            }
        }
    }

    fn nested_name(&mut self) -> R<NameInfo> {
        if !self.eat(b'N') {
            return None;
        }
        let cv = self.cv_quals();
        let refq = self.ref_qual();
        let mut so_far: Option<Id> = None;
        let mut pushed = false;
        loop {
            if self.eat(b'E') {
                break;
            }
            let c = self.peek();
            let next = match c {
                0 => return None,
                b'T' => {
                    if so_far.is_some() {
                        return None;
                    }
                    self.template_param()?
                }
                b'I' => {
                    let p = so_far?;
                    let args = self.template_args()?;
                    self.make(Node::Template(p, args))?
                }
                b'S' if self.peek_at(1) == b't' => {
                    if so_far.is_some() {
                        return None;
                    }
                    self.i += 2;
                    so_far = Some(self.text("std")?);
                    continue;
                }
                b'S' => {
                    if so_far.is_some() {
                        return None;
                    }
                    so_far = Some(self.substitution()?);
                    continue;
                }
                b'M' => {
                    // A data-member prefix (a lambda in a member initializer): nothing to print.
                    self.i += 1;
                    continue;
                }
                b'D' if matches!(self.peek_at(1), b't' | b'T' | b'C') => return None,
                b'C' | b'D' => {
                    let of = so_far?;
                    let ctor = self.ctor_dtor(of)?;
                    self.make(Node::Nested(of, ctor))?
                }
                _ => {
                    let uq = self.unqualified(so_far)?;
                    match so_far {
                        Some(p) => self.make(Node::Nested(p, uq))?,
                        None => uq,
                    }
                }
            };
            so_far = Some(next);
            self.subs.push(next);
            pushed = true;
        }
        if !pushed {
            return None;
        }
        self.subs.pop();
        Some(NameInfo {
            id: so_far?,
            cv,
            refq,
        })
    }

    /// `Z <encoding> E <entity>`: the entity's cv and ref qualifiers are those of the function
    /// it names, if it is one.
    fn local_name(&mut self) -> R<NameInfo> {
        if !self.eat(b'Z') {
            return None;
        }
        let f = self.encoding()?;
        if !self.eat(b'E') {
            return None;
        }
        if matches!(self.peek(), b's' | b'd') {
            return None;
        }
        let info = self.name()?;
        let entity = info.id;
        if !matches!(
            self.nodes.get(entity as usize),
            Some(Node::Closure(..)) | Some(Node::Unnamed(_))
        ) {
            self.discriminator()?;
        }
        let id = self.make(Node::Local(f, entity))?;
        Some(NameInfo { id, ..info })
    }

    /// `_ <digit>` or `__ <number> _`, optional; not printed.
    fn discriminator(&mut self) -> R<()> {
        if self.peek() != b'_' {
            return Some(());
        }
        if self.peek_at(1) == b'_' {
            self.i += 2;
            self.number()?;
            self.eat(b'_').then_some(())
        } else {
            self.i += 1;
            self.number().map(|_| ())
        }
    }

    fn ctor_dtor(&mut self, of: Id) -> R<Id> {
        let c = self.peek();
        let d = self.peek_at(1);
        match (c, d) {
            (b'C', b'1'..=b'5') | (b'D', b'0'..=b'5') => {
                self.i += 2;
                self.make(Node::Ctor {
                    of,
                    dtor: c == b'D',
                })
            }
            _ => None,
        }
    }

    /// `<unqualified-name>` (with its ABI tags). `prefix`: the enclosing name, for a
    /// constructor.
    fn unqualified(&mut self, prefix: Option<Id>) -> R<Id> {
        // `L`: internal linkage, not printed.
        self.eat(b'L');
        let c = self.peek();
        let n = match c {
            b'0'..=b'9' => self.source_name()?,
            b'C' | b'D' => self.ctor_dtor(prefix?)?,
            b'U' => match self.peek_at(1) {
                b't' => {
                    self.i += 2;
                    let n = if self.peek() == b'_' {
                        1
                    } else {
                        self.number()?.checked_add(2)?
                    };
                    if !self.eat(b'_') {
                        return None;
                    }
                    self.make(Node::Unnamed(u32::try_from(n).ok()?))?
                }
                b'l' => {
                    self.i += 2;
                    self.closure()?
                }
                _ => return None,
            },
            b'a'..=b'z' => self.operator_name()?,
            _ => return None,
        };
        self.abi_tags(n)
    }

    fn abi_tags(&mut self, mut n: Id) -> R<Id> {
        while self.peek() == b'B' {
            self.i += 1;
            let len = usize::try_from(self.number()?).ok()?;
            let tag = self.s.get(self.i..self.i.checked_add(len)?)?;
            self.i += len;
            let tag = std::str::from_utf8(tag).ok()?;
            n = self.make(Node::AbiTag(n, tag.into()))?;
        }
        Some(n)
    }

    fn source_name(&mut self) -> R<Id> {
        let len = usize::try_from(self.number()?).ok()?;
        let bytes = self.s.get(self.i..self.i.checked_add(len)?)?;
        self.i += len;
        let s = std::str::from_utf8(bytes).ok()?;
        if s.len() >= 10
            && s.starts_with("_GLOBAL_")
            && matches!(s.as_bytes()[8], b'.' | b'_' | b'$')
            && s.as_bytes()[9] == b'N'
        {
            return self.text("(anonymous namespace)");
        }
        self.text(s)
    }

    /// After `Ul`: `<type>+ E [<number>] _`.
    fn closure(&mut self) -> R<Id> {
        let params = self.params()?;
        if !self.eat(b'E') {
            return None;
        }
        let n = if self.peek() == b'_' {
            1
        } else {
            self.number()?.checked_add(2)?
        };
        if !self.eat(b'_') {
            return None;
        }
        self.make(Node::Closure(params, u32::try_from(n).ok()?))
    }

    fn operator_name(&mut self) -> R<Id> {
        const OPS: [(&[u8; 2], &str); 49] = [
            (b"nw", "new"),
            (b"na", "new[]"),
            (b"dl", "delete"),
            (b"da", "delete[]"),
            (b"ps", "+"),
            (b"ng", "-"),
            (b"ad", "&"),
            (b"de", "*"),
            (b"co", "~"),
            (b"pl", "+"),
            (b"mi", "-"),
            (b"ml", "*"),
            (b"dv", "/"),
            (b"rm", "%"),
            (b"an", "&"),
            (b"or", "|"),
            (b"eo", "^"),
            (b"aS", "="),
            (b"pL", "+="),
            (b"mI", "-="),
            (b"mL", "*="),
            (b"dV", "/="),
            (b"rM", "%="),
            (b"aN", "&="),
            (b"oR", "|="),
            (b"eO", "^="),
            (b"ls", "<<"),
            (b"rs", ">>"),
            (b"lS", "<<="),
            (b"rS", ">>="),
            (b"eq", "=="),
            (b"ne", "!="),
            (b"lt", "<"),
            (b"gt", ">"),
            (b"le", "<="),
            (b"ge", ">="),
            (b"ss", "<=>"),
            (b"nt", "!"),
            (b"aa", "&&"),
            (b"oo", "||"),
            (b"pp", "++"),
            (b"mm", "--"),
            (b"cm", ","),
            (b"pm", "->*"),
            (b"pt", "->"),
            (b"cl", "()"),
            (b"ix", "[]"),
            (b"qu", "?"),
            (b"aw", "co_await"),
        ];
        let two = [self.peek(), self.peek_at(1)];
        if &two == b"cv" {
            self.i += 2;
            let t = self.ty()?;
            return self.make(Node::Conversion(t));
        }
        if &two == b"li" {
            self.i += 2;
            let n = self.source_name()?;
            let Some(Node::Text(s)) = self.nodes.get(n as usize) else {
                return None;
            };
            let s = format!("operator\"\" {s}");
            return self.text(&s);
        }
        let (_, op) = OPS.iter().find(|(m, _)| **m == two)?;
        self.i += 2;
        // `operator new`, `operator co_await`: a space before a word.
        let s = if op.as_bytes()[0].is_ascii_alphabetic() {
            format!("operator {op}")
        } else {
            format!("operator{op}")
        };
        self.text(&s)
    }

    fn substitution(&mut self) -> R<Id> {
        if !self.eat(b'S') {
            return None;
        }
        if self.eat(b'_') {
            return self.subs.first().copied();
        }
        let c = self.peek();
        if let Some(k) = ABBREVS.iter().position(|(a, _, _)| *a == c) {
            self.i += 1;
            return self.make(Node::Abbrev(k));
        }
        let n = self.seq_id()?;
        if !self.eat(b'_') {
            return None;
        }
        let k = usize::try_from(n.checked_add(1)?).ok()?;
        self.subs.get(k).copied()
    }

    fn template_param(&mut self) -> R<Id> {
        if !self.eat(b'T') {
            return None;
        }
        let idx = if self.eat(b'_') {
            0
        } else {
            let n = self.number()?.checked_add(1)?;
            if !self.eat(b'_') {
                return None;
            }
            n
        };
        self.make(Node::TParam(u32::try_from(idx).ok()?))
    }

    fn template_args(&mut self) -> R<Vec<Id>> {
        self.nested(|p| p.template_args_inner())
    }

    fn template_args_inner(&mut self) -> R<Vec<Id>> {
        if !self.eat(b'I') {
            return None;
        }
        let mut args = Vec::new();
        while !self.eat(b'E') {
            args.push(self.template_arg()?);
        }
        Some(args)
    }

    fn template_arg(&mut self) -> R<Id> {
        match self.peek() {
            // `X ad L _Z <encoding> E E`, the one expression we cover: a pointer to a function
            // or object (`TORCH_FN(f)`, `&cudnnDestroyTensorDescriptor`).
            b'X' => {
                if !(self.eat_str(b"Xad") && self.peek() == b'L' && self.peek_at(1) == b'_') {
                    return None;
                }
                let e = self.literal()?;
                if !self.eat(b'E') {
                    return None;
                }
                self.make(Node::AddrOf(e))
            }
            b'L' => self.literal(),
            b'J' => {
                self.i += 1;
                let mut items = Vec::new();
                while !self.eat(b'E') {
                    items.push(self.template_arg()?);
                }
                self.make(Node::Pack(items))
            }
            _ => self.ty(),
        }
    }

    /// `L <type> <value> E` for an integer or bool, `L _Z <encoding> E` for a function or
    /// object; `None` for the rest.
    fn literal(&mut self) -> R<Id> {
        if !self.eat(b'L') {
            return None;
        }
        if self.eat_str(b"_Z") {
            let e = self.encoding()?;
            return self.eat(b'E').then_some(e);
        }
        // `nullptr` as an argument: c++filt prints its type.
        if self.eat_str(b"DnE") {
            return self.text("decltype(nullptr)");
        }
        let c = self.peek();
        let suffix = match c {
            b'i' => Some(""),
            b'j' => Some("u"),
            b'l' => Some("l"),
            b'm' => Some("ul"),
            b'x' => Some("ll"),
            b'y' => Some("ull"),
            _ => None,
        };
        let text = if let Some(sfx) = suffix {
            self.i += 1;
            format!("{}{sfx}", self.signed_number()?)
        } else if c == b'b' {
            self.i += 1;
            match self.signed_number()?.as_str() {
                "0" => "false".to_owned(),
                "1" => "true".to_owned(),
                v => format!("(bool){v}"),
            }
        } else if matches!(c, b'_' | b'f' | b'd' | b'e' | b'g' | b'D') {
            return None;
        } else {
            let t = self.ty()?;
            let ty = self.render_type(t)?;
            format!("({ty}){}", self.signed_number()?)
        };
        if !self.eat(b'E') {
            return None;
        }
        self.text(&text)
    }

    // -- types -----------------------------------------------------------------------------

    fn ty(&mut self) -> R<Id> {
        self.nested(|p| p.ty_inner())
    }

    fn ty_inner(&mut self) -> R<Id> {
        let c = self.peek();
        let builtin = match c {
            b'v' => Some("void"),
            b'w' => Some("wchar_t"),
            b'b' => Some("bool"),
            b'c' => Some("char"),
            b'a' => Some("signed char"),
            b'h' => Some("unsigned char"),
            b's' => Some("short"),
            b't' => Some("unsigned short"),
            b'i' => Some("int"),
            b'j' => Some("unsigned int"),
            b'l' => Some("long"),
            b'm' => Some("unsigned long"),
            b'x' => Some("long long"),
            b'y' => Some("unsigned long long"),
            b'n' => Some("__int128"),
            b'o' => Some("unsigned __int128"),
            b'f' => Some("float"),
            b'd' => Some("double"),
            b'e' => Some("long double"),
            b'g' => Some("__float128"),
            b'z' => Some("..."),
            _ => None,
        };
        if let Some(b) = builtin {
            self.i += 1;
            return self.text(b);
        }
        let r = match c {
            b'D' => {
                let d = self.peek_at(1);
                let builtin = match d {
                    b'd' => Some("decimal64"),
                    b'e' => Some("decimal128"),
                    b'f' => Some("decimal32"),
                    b'h' => Some("half"),
                    b'i' => Some("char32_t"),
                    b's' => Some("char16_t"),
                    b'u' => Some("char8_t"),
                    b'a' => Some("auto"),
                    b'c' => Some("decltype(auto)"),
                    b'n' => Some("decltype(nullptr)"),
                    _ => None,
                };
                if let Some(b) = builtin {
                    self.i += 2;
                    return self.text(b);
                }
                match d {
                    b'F' => {
                        self.i += 2;
                        let n = self.number()?;
                        if !self.eat(b'_') {
                            return None;
                        }
                        return self.text(&format!("_Float{n}"));
                    }
                    b'p' => {
                        self.i += 2;
                        let t = self.ty()?;
                        self.make(Node::Expansion(t))?
                    }
                    _ => return None,
                }
            }
            b'r' | b'V' | b'K' => {
                let q = self.cv_quals();
                // Qualifiers before a function type are its `this`'s: the unqualified
                // function type is no substitution.
                let t = if self.peek() == b'F' {
                    self.function_type()?
                } else {
                    self.ty()?
                };
                self.make(Node::Cv(t, q))?
            }
            b'P' => {
                self.i += 1;
                let t = self.ty()?;
                self.make(Node::Pointer(t))?
            }
            b'R' => {
                self.i += 1;
                let t = self.ty()?;
                self.make(Node::LRef(t))?
            }
            b'O' => {
                self.i += 1;
                let t = self.ty()?;
                self.make(Node::RRef(t))?
            }
            b'F' => self.function_type()?,
            b'A' => {
                self.i += 1;
                let dim = if self.peek() == b'_' {
                    String::new()
                } else {
                    self.number()?.to_string()
                };
                if !self.eat(b'_') {
                    return None;
                }
                let t = self.ty()?;
                self.make(Node::Array(dim.into(), t))?
            }
            b'M' => {
                self.i += 1;
                let class = self.ty()?;
                let member = self.ty()?;
                self.make(Node::PtrMem(class, member))?
            }
            b'T' => {
                let p = self.template_param()?;
                if self.peek() == b'I' {
                    self.subs.push(p);
                    let args = self.template_args()?;
                    self.make(Node::Template(p, args))?
                } else {
                    p
                }
            }
            b'S' if self.peek_at(1) != b't' => {
                let sub = self.substitution()?;
                if self.peek() != b'I' {
                    // A substitution is not entered again.
                    return Some(sub);
                }
                let args = self.template_args()?;
                self.make(Node::Template(sub, args))?
            }
            b'N' | b'Z' | b'S' | b'0'..=b'9' => self.name()?.id,
            _ => return None,
        };
        self.subs.push(r);
        Some(r)
    }

    /// `F [Y] <return type> <parameter types> [<ref-qualifier>] E`.
    fn function_type(&mut self) -> R<Id> {
        if !self.eat(b'F') {
            return None;
        }
        // `Y`: extern "C"; not printed.
        self.eat(b'Y');
        let ret = self.ty()?;
        let mut params = Vec::new();
        let mut refq = 0;
        loop {
            if self.eat(b'E') {
                break;
            }
            if matches!(self.peek(), b'R' | b'O') && self.peek_at(1) == b'E' {
                refq = self.ref_qual();
                continue;
            }
            if self.peek() == 0 {
                return None;
            }
            params.push(self.ty()?);
        }
        if params.len() == 1
            && matches!(self.nodes.get(params[0] as usize), Some(Node::Text(t)) if &**t == "void")
        {
            params.clear();
        }
        self.make(Node::Function {
            ret,
            params,
            cv: 0,
            refq,
        })
    }

    /// A type as text, for a literal's cast.
    fn render_type(&self, t: Id) -> R<String> {
        let mut p = Printer::new(&self.nodes);
        p.ty(t)?;
        Some(p.out)
    }
}

/// Which part of a node a template parameter's argument is printed for.
#[derive(Clone, Copy)]
enum Part {
    Left,
    LeftUnref,
    Right,
    RightUnref,
    Name,
}

struct Printer<'n> {
    nodes: &'n [Node],
    out: String,
    depth: u32,
    /// The element of the pack being printed, inside a pack expansion.
    pack_index: Option<usize>,
    /// The templates whose functions are being printed, innermost last: what `T_` means.
    templates: Vec<Id>,
    /// Printing a lambda's parameters: template parameters print as `auto:N`.
    in_lambda: u32,
    /// c++filt's printer writes ", " before each list element and takes it back when the
    /// element printed nothing (an empty pack), but still takes the last character for the
    /// space: a list that ends in an empty pack closes with `>>`, not `> >`.
    ghost_space: bool,
    /// For a template parameter first printed under a reference: the templates it was read
    /// against then. c++filt reads it against them again wherever a substitution brings the
    /// same parameter back under a reference.
    scopes: std::collections::HashMap<Id, Vec<Id>>,
    /// What is left of [`MAX_PACK_VISITS`].
    pack_visits: std::cell::Cell<u32>,
}

impl<'n> Printer<'n> {
    fn new(nodes: &'n [Node]) -> Self {
        Printer {
            nodes,
            out: String::new(),
            depth: 0,
            pack_index: None,
            templates: Vec::new(),
            in_lambda: 0,
            ghost_space: false,
            scopes: std::collections::HashMap::new(),
            pack_visits: std::cell::Cell::new(MAX_PACK_VISITS),
        }
    }

    fn node(&self, id: Id) -> R<&'n Node> {
        self.nodes.get(id as usize)
    }

    fn push(&mut self, s: &str) -> R<()> {
        if self.out.len() + s.len() > MAX_OUT {
            return None;
        }
        self.out.push_str(s);
        if !s.is_empty() {
            self.ghost_space = false;
        }
        Some(())
    }

    /// Runs `f` one level deeper; `None` past [`MAX_DEPTH`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        if self.depth >= MAX_DEPTH {
            return None;
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    /// The argument `T_<idx>` stands for where the innermost `level` templates are left out,
    /// the pack element being expanded taken from a pack.
    fn argument(&self, idx: u32, level: usize) -> R<Id> {
        let t = *self
            .templates
            .get(self.templates.len().checked_sub(level + 1)?)?;
        let Node::Template(_, args) = self.node(t)? else {
            return None;
        };
        let a = *args.get(idx as usize)?;
        match (self.node(a)?, self.pack_index) {
            (Node::Pack(items), Some(k)) => items.get(k).copied(),
            _ => Some(a),
        }
    }

    /// What a node is once template parameters are looked up, for deciding how to print it.
    fn deref(&self, mut id: Id) -> R<Id> {
        // In a lambda's parameters a template parameter is `auto:N`, not its argument.
        if self.in_lambda > 0 {
            return Some(id);
        }
        let mut level = 0;
        for _ in 0..32 {
            match self.node(id)? {
                Node::TParam(i) => {
                    id = self.argument(*i, level)?;
                    level += 1;
                }
                _ => return Some(id),
            }
        }
        None
    }

    /// Prints `T_<idx>`'s argument with `f`, outside the template that gave it (the argument
    /// may itself name a parameter of an enclosing template), as c++filt does.
    fn with_argument(&mut self, idx: u32, f: fn(&mut Self, Id) -> R<()>) -> R<()> {
        let a = self.argument(idx, 0)?;
        let top = self.templates.pop()?;
        let r = f(self, a);
        self.templates.push(top);
        r
    }

    /// `T_<idx>`: `auto:N` in a lambda's parameters, else its argument printed with `f`
    /// (nothing for the right-hand part of `auto:N`).
    fn param(&mut self, idx: u32, part: Part) -> R<()> {
        if self.in_lambda > 0 {
            return match part {
                Part::Left | Part::LeftUnref | Part::Name => {
                    self.push(&format!("auto:{}", idx.checked_add(1)?))
                }
                Part::Right | Part::RightUnref => Some(()),
            };
        }
        let f = match part {
            Part::Left => Self::left,
            Part::LeftUnref => Self::left_unref,
            Part::Right => Self::right,
            Part::RightUnref => Self::right_unref,
            Part::Name => Self::name,
        };
        self.with_argument(idx, f)
    }

    /// Runs `f` for a reference to `t`: when `t` is a template parameter seen under a
    /// reference before, against the templates of that time (see [`Printer::scopes`]).
    fn in_scope_of(&mut self, t: Id, f: impl FnOnce(&mut Self) -> R<()>) -> R<()> {
        if self.in_lambda > 0 || !matches!(self.node(t)?, Node::TParam(_)) {
            return f(self);
        }
        match self.scopes.get(&t) {
            None => {
                self.scopes.insert(t, self.templates.clone());
                f(self)
            }
            Some(saved) => {
                let held = std::mem::replace(&mut self.templates, saved.clone());
                let r = f(self);
                self.templates = held;
                r
            }
        }
    }

    /// A whole type: the part before a declarator and the part after it.
    fn ty(&mut self, id: Id) -> R<()> {
        self.left(id)?;
        self.right(id)
    }

    fn quals(&mut self, q: u8) -> R<()> {
        if q & Q_CONST != 0 {
            self.push(" const")?;
        }
        if q & Q_VOLATILE != 0 {
            self.push(" volatile")?;
        }
        if q & Q_RESTRICT != 0 {
            self.push(" restrict")?;
        }
        Some(())
    }

    /// Whether a reference to `id` collapses to an rvalue reference (`T&&` with `T = int&` is
    /// `int&`), given that the outer one is `rvalue`.
    fn collapses_to_rvalue(&self, mut id: Id, mut rvalue: bool) -> R<bool> {
        for _ in 0..32 {
            match self.node(self.deref(id)?)? {
                Node::LRef(t) => {
                    rvalue = false;
                    id = *t;
                }
                Node::RRef(t) => id = *t,
                _ => return Some(rvalue),
            }
        }
        None
    }

    /// (function, array): what a declarator around `id` must put in parentheses.
    fn is_fn_or_array(&self, mut id: Id) -> R<(bool, bool)> {
        // A loop, not recursion: substitutions can chain qualifiers and references as long
        // as the name allows.
        for _ in 0..MAX_DEPTH {
            match self.node(self.deref(id)?)? {
                Node::Function { .. } => return Some((true, false)),
                Node::Array(..) => return Some((false, true)),
                Node::Cv(t, _) | Node::LRef(t) | Node::RRef(t) => id = *t,
                _ => return Some((false, false)),
            }
        }
        None
    }

    fn left(&mut self, id: Id) -> R<()> {
        self.nested(|p| p.left_inner(id))
    }

    fn left_inner(&mut self, id: Id) -> R<()> {
        match self.node(id)? {
            Node::TParam(i) => self.param(*i, Part::Left),
            Node::Cv(t, q) => {
                let (func, _) = self.is_fn_or_array(*t)?;
                // `K T_` with `T_ = int const`: c++filt prints the qualifier once.
                let has = match self.node(self.deref(*t)?)? {
                    Node::Cv(_, q2) => *q2,
                    _ => 0,
                };
                self.left(*t)?;
                if !func {
                    self.quals(*q & !has)?;
                }
                Some(())
            }
            Node::Pointer(t) => self.declarator_left(*t, "*"),
            Node::LRef(t) | Node::RRef(t) => {
                let rvalue = matches!(self.node(id)?, Node::RRef(_));
                let t = *t;
                self.in_scope_of(t, |p| {
                    let rv = p.collapses_to_rvalue(t, rvalue)?;
                    p.declarator_left(t, if rv { "&&" } else { "&" })
                })
            }
            Node::Function { ret, .. } => {
                self.left(*ret)?;
                // `bool (*(int))(char)`: a returned declarator takes the parameters inside.
                if self.has_right(*ret)? {
                    Some(())
                } else {
                    self.push(" ")
                }
            }
            Node::Array(_, t) => self.left(*t),
            Node::PtrMem(class, member) => {
                let (func, array) = self.is_fn_or_array(*member)?;
                self.left(*member)?;
                if func || array {
                    if array {
                        self.push(" ")?;
                    }
                    self.push("(")?;
                } else {
                    self.push(" ")?;
                }
                self.ty(*class)?;
                self.push("::*")
            }
            Node::Expansion(_) => self.list(&[id]),
            Node::Pack(items) => self.list(items),
            _ => self.name(id),
        }
    }

    /// The part of a pointer or reference before its name: the pointee's, then the symbol
    /// (references to references collapse: only the innermost non-reference is printed).
    fn declarator_left(&mut self, t: Id, sym: &str) -> R<()> {
        let (func, array) = self.is_fn_or_array(t)?;
        self.left_unref(t)?;
        if array {
            self.push(" ")?;
        }
        if func || array {
            self.push("(")?;
        }
        self.push(sym)
    }

    fn left_unref(&mut self, id: Id) -> R<()> {
        self.nested(|p| match p.node(id)? {
            Node::TParam(i) => p.param(*i, Part::LeftUnref),
            Node::LRef(t) | Node::RRef(t) => p.left_unref(*t),
            _ => p.left(id),
        })
    }

    fn right_unref(&mut self, id: Id) -> R<()> {
        self.nested(|p| match p.node(id)? {
            Node::TParam(i) => p.param(*i, Part::RightUnref),
            Node::LRef(t) | Node::RRef(t) => p.right_unref(*t),
            _ => p.right(id),
        })
    }

    fn right(&mut self, id: Id) -> R<()> {
        self.nested(|p| p.right_inner(id))
    }

    fn right_inner(&mut self, id: Id) -> R<()> {
        match self.node(id)? {
            Node::TParam(i) => self.param(*i, Part::Right),
            Node::Cv(t, q) => {
                let (func, _) = self.is_fn_or_array(*t)?;
                self.right(*t)?;
                if func {
                    self.quals(*q)?;
                }
                Some(())
            }
            Node::Pointer(t) => self.declarator_right(*t),
            Node::LRef(t) | Node::RRef(t) => {
                let t = *t;
                self.in_scope_of(t, |p| p.declarator_right(t))
            }
            Node::PtrMem(_, member) => {
                let (func, array) = self.is_fn_or_array(*member)?;
                if func || array {
                    self.push(")")?;
                }
                self.right(*member)
            }
            Node::Function {
                ret,
                params,
                cv,
                refq,
            } => {
                self.push("(")?;
                self.list(params)?;
                self.push(")")?;
                self.right(*ret)?;
                self.quals(*cv)?;
                self.refq(*refq)
            }
            Node::Array(dim, t) => {
                if !self.out.ends_with(']') {
                    self.push(" ")?;
                }
                self.push("[")?;
                self.push(dim)?;
                self.push("]")?;
                self.right(*t)
            }
            _ => Some(()),
        }
    }

    fn declarator_right(&mut self, t: Id) -> R<()> {
        let (func, array) = self.is_fn_or_array(t)?;
        if func || array {
            self.push(")")?;
        }
        self.right_unref(t)
    }

    fn refq(&mut self, r: u8) -> R<()> {
        match r {
            1 => self.push(" &"),
            2 => self.push(" &&"),
            _ => Some(()),
        }
    }

    /// Comma-separated types or template arguments, packs and expansions spread out.
    fn list(&mut self, ids: &[Id]) -> R<()> {
        let mut first = true;
        self.list_into(ids, &mut first)
    }

    /// [`Printer::list`] continuing a list (`first`: nothing printed in it yet).
    fn list_into(&mut self, ids: &[Id], first: &mut bool) -> R<()> {
        self.nested(|p| p.list_items(ids, first))
    }

    fn list_items(&mut self, ids: &[Id], first: &mut bool) -> R<()> {
        for &id in ids {
            let before = self.out.len();
            let had_one = !*first;
            let shown = if self.in_lambda > 0 {
                id
            } else {
                self.deref(id)?
            };
            match self.node(shown)? {
                Node::Expansion(pattern) if shown == id => {
                    let pattern = *pattern;
                    let outer = self.pack_index;
                    match self.pack_len(pattern, 0)? {
                        Some(n) => {
                            for k in 0..n {
                                self.sep(first)?;
                                self.pack_index = Some(k);
                                self.ty(pattern)?;
                            }
                        }
                        None => {
                            self.sep(first)?;
                            self.push("(")?;
                            self.ty(pattern)?;
                            self.push(")...")?;
                        }
                    }
                    self.pack_index = outer;
                }
                // A pack written out (`J…E`) is spread whatever is being expanded around it.
                Node::Pack(items) if shown == id => self.list_into(items, first)?,
                Node::Pack(items) if self.pack_index.is_none() && items.is_empty() => {}
                _ => {
                    self.sep(first)?;
                    self.ty(id)?;
                }
            }
            if had_one && self.out.len() == before {
                self.ghost_space = true;
            }
        }
        Some(())
    }

    fn sep(&mut self, first: &mut bool) -> R<()> {
        if !*first {
            self.push(", ")?;
        }
        *first = false;
        Some(())
    }

    /// The length of the first pack a pattern refers to; `Some(None)` when it has none.
    fn pack_len(&self, id: Id, depth: u32) -> R<Option<usize>> {
        let left = self.pack_visits.get().checked_sub(1)?;
        self.pack_visits.set(left);
        if depth > MAX_DEPTH {
            return None;
        }
        let d = depth + 1;
        Some(match self.node(id)? {
            Node::TParam(i) => {
                let t = *self.templates.last()?;
                let Node::Template(_, args) = self.node(t)? else {
                    return None;
                };
                match self.node(*args.get(*i as usize)?)? {
                    Node::Pack(items) => Some(items.len()),
                    _ => None,
                }
            }
            Node::Pack(items) => Some(items.len()),
            Node::Cv(t, _)
            | Node::Pointer(t)
            | Node::LRef(t)
            | Node::RRef(t)
            | Node::Array(_, t) => self.pack_len(*t, d)?,
            Node::PtrMem(a, b) | Node::Nested(a, b) => {
                self.pack_len(*a, d)?.or(self.pack_len(*b, d)?)
            }
            Node::Template(n, args) => {
                let mut found = self.pack_len(*n, d)?;
                for a in args {
                    if found.is_some() {
                        break;
                    }
                    found = self.pack_len(*a, d)?;
                }
                found
            }
            Node::Function { ret, params, .. } => {
                let mut found = self.pack_len(*ret, d)?;
                for a in params {
                    if found.is_some() {
                        break;
                    }
                    found = self.pack_len(*a, d)?;
                }
                found
            }
            _ => None,
        })
    }

    fn template_args(&mut self, args: &[Id]) -> R<()> {
        if self.out.ends_with('<') {
            self.push(" ")?;
        }
        self.push("<")?;
        self.list(args)?;
        if self.out.ends_with('>') && !self.ghost_space {
            self.push(" ")?;
        }
        self.push(">")
    }

    /// The class's own name, for its constructor.
    fn base_name(&mut self, mut id: Id) -> R<()> {
        for _ in 0..MAX_DEPTH {
            match self.node(self.deref(id)?)? {
                Node::Nested(_, n) | Node::Template(n, _) | Node::AbiTag(n, _) => id = *n,
                Node::Abbrev(k) => return self.push(ABBREVS.get(*k)?.2),
                Node::Text(s) => return self.push(s),
                _ => return None,
            }
        }
        None
    }

    fn name(&mut self, id: Id) -> R<()> {
        self.nested(|p| p.name_inner(id))
    }

    fn name_inner(&mut self, id: Id) -> R<()> {
        match self.node(id)? {
            Node::TParam(i) => self.param(*i, Part::Name),
            Node::Text(s) => self.push(s),
            Node::Abbrev(k) => self.push(ABBREVS.get(*k)?.1),
            Node::Nested(p, n) => {
                self.name(*p)?;
                self.push("::")?;
                self.name(*n)
            }
            Node::Template(n, args) => {
                self.name(*n)?;
                self.template_args(args)
            }
            Node::Ctor { of, dtor } => {
                if *dtor {
                    self.push("~")?;
                }
                self.base_name(*of)
            }
            Node::AbiTag(n, tag) => {
                self.name(*n)?;
                self.push("[abi:")?;
                self.push(tag)?;
                self.push("]")
            }
            Node::Local(f, e) => {
                self.encoding(*f, false)?;
                self.push("::")?;
                self.name(*e)
            }
            Node::Closure(params, n) => {
                self.push("{lambda(")?;
                self.in_lambda += 1;
                let r = self.list(params);
                self.in_lambda -= 1;
                r?;
                self.push(&format!(")#{n}}}"))
            }
            Node::Unnamed(n) => self.push(&format!("{{unnamed type#{n}}}")),
            Node::Conversion(t) => {
                self.push("operator ")?;
                self.ty(*t)
            }
            Node::Special(what, inner) => {
                self.push(what)?;
                self.top(*inner)
            }
            Node::Encoding { .. } => self.encoding(id, true),
            Node::AddrOf(e) => {
                // As c++filt: a qualified function's parameters are left out (`&A::f`, read
                // as a pointer to member) unless it has cv or ref qualifiers; any other
                // function is printed whole in parentheses (`&(f())`, `&(void g<int>(int))`,
                // `&(A::f() const)`); an object's name is printed bare.
                let e = *e;
                self.push("&")?;
                match self.node(e)? {
                    Node::Encoding {
                        name,
                        cv: 0,
                        refq: 0,
                        ..
                    } if matches!(self.node(*name)?, Node::Nested(..)) => self.name(*name),
                    Node::Encoding { .. } => {
                        self.push("(")?;
                        self.encoding(e, true)?;
                        self.push(")")
                    }
                    Node::Text(_) | Node::Nested(..) => self.name(e),
                    _ => {
                        self.push("(")?;
                        self.name(e)?;
                        self.push(")")
                    }
                }
            }
            // A type where a name is expected (a template parameter as a name's prefix).
            _ => self.ty(id),
        }
    }

    /// The template a function's parameters are read against: its name's, when that is a
    /// template (a local entity's, for a function local to another); c++filt looks no further.
    fn template_of(&self, name: Id) -> R<Option<Id>> {
        Some(match self.node(name)? {
            Node::Template(..) => Some(name),
            Node::Local(_, e) => match self.node(*e)? {
                Node::Template(..) => Some(*e),
                _ => None,
            },
            _ => None,
        })
    }

    /// A function with its signature; `with_ret`: print its return type (not for the function
    /// a local name sits in).
    fn encoding(&mut self, id: Id, with_ret: bool) -> R<()> {
        let Node::Encoding {
            name,
            ret,
            params,
            cv,
            refq,
        } = self.node(id)?
        else {
            return self.name(id);
        };
        let tpl = self.template_of(*name)?;
        if let Some(t) = tpl {
            self.templates.push(t);
        }
        let r = (|| {
            let ret = if with_ret { *ret } else { None };
            if let Some(r) = ret {
                // A function returning a pointer to a function or array prints its name inside
                // the return type's declarator; not covered.
                if self.has_right(r)? {
                    return None;
                }
                self.left(r)?;
                self.push(" ")?;
            }
            self.name(*name)?;
            self.push("(")?;
            self.list(params)?;
            self.push(")")?;
            self.quals(*cv)?;
            self.refq(*refq)
        })();
        if tpl.is_some() {
            self.templates.pop();
        }
        r
    }

    fn has_right(&self, id: Id) -> R<bool> {
        let r = self.deref(id)?;
        Some(match self.node(r)? {
            Node::Function { .. } | Node::Array(..) => true,
            Node::Pointer(t) | Node::LRef(t) | Node::RRef(t) | Node::Cv(t, _) => {
                let (f, a) = self.is_fn_or_array(*t)?;
                f || a
            }
            _ => false,
        })
    }

    /// What a mangled name stands for.
    fn top(&mut self, id: Id) -> R<()> {
        match self.node(id)? {
            Node::Encoding { .. } => self.encoding(id, true),
            Node::Special(..) | Node::Local(..) => self.name(id),
            _ => self.ty(id),
        }
    }
}

/// Demangles `mangled` (with its `_Z`) as c++filt does; `None` when it is not a mangled name
/// or uses what this demangler does not cover.
pub fn demangle(mangled: &str) -> Option<String> {
    let rest = mangled.strip_prefix("_Z")?;
    let mut p = Parser {
        s: rest.as_bytes(),
        i: 0,
        nodes: Vec::new(),
        subs: Vec::new(),
        depth: 0,
    };
    let (top, clones) = p.mangled()?;
    let mut pr = Printer::new(&p.nodes);
    pr.top(top)?;
    for c in clones {
        pr.push(" [clone ")?;
        pr.push(&c)?;
        pr.push("]")?;
    }
    Some(pr.out)
}

#[cfg(test)]
mod tests {
    use super::demangle;

    /// Each name as `c++filt` (GNU binutils 2.40, Debian) prints it.
    const CXXFILT: [(&str, &str); 17] = [
        (
            "_Z6vecAddPKfS0_Pfi",
            "vecAdd(float const*, float const*, float*, int)",
        ),
        (
            "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
        ),
        (
            "_Z1fIJifEEvDpRKT_",
            "void f<int, float>(int const&, float const&)",
        ),
        ("_Z1fIJEEvDpT_", "void f<>()"),
        ("_ZN1A1fIcEEvT_S1_", "void A::f<char>(char, char)"),
        (
            "_ZNKSt6vectorIiSaIiEE4sizeEv",
            "std::vector<int, std::allocator<int> >::size() const",
        ),
        (
            "_ZNSsC1EPKcRKSaIcE",
            "std::basic_string<char, std::char_traits<char>, std::allocator<char> >::basic_string(char const*, std::allocator<char> const&)",
        ),
        ("_ZTV1A", "vtable for A"),
        ("_ZThn8_N1A1fEv", "non-virtual thunk to A::f()"),
        ("_ZTv0_n24_N1AD1Ev", "virtual thunk to A::~A()"),
        ("_Z1fM1AKFviE", "f(void (A::*)(int) const)"),
        (
            "_Z1fRA10_KcPFviEPA3_i",
            "f(char const (&) [10], void (*)(int), int (*) [3])",
        ),
        (
            "_Z1fIZ1gvEUlT_E_EvS1_",
            "void f<g()::{lambda(auto:1)#1}>(g()::{lambda(auto:1)#1})",
        ),
        (
            "_Z3fooILb1ELj7ELln3ELc97EEvv",
            "void foo<true, 7u, -3l, (char)97>()",
        ),
        ("_ZN3foo3barB5cxx11Ev", "foo::bar[abi:cxx11]()"),
        (
            "_ZN12_GLOBAL__N_11fEv.constprop.0.cold",
            "(anonymous namespace)::f() [clone .constprop.0] [clone .cold]",
        ),
        (
            "_ZNKSt8functionIFvRKiEEclES1_",
            "std::function<void (int const&)>::operator()(int const&) const",
        ),
    ];

    #[test]
    fn prints_what_cxxfilt_prints() {
        for (mangled, want) in CXXFILT {
            assert_eq!(demangle(mangled).as_deref(), Some(want), "{mangled}");
        }
    }

    /// Functions and objects as template arguments, the way PyTorch's dispatcher names every
    /// kernel wrapper (`TORCH_FN`): c++filt leaves a qualified function's parameters out.
    #[test]
    fn addresses_as_template_arguments() {
        for (mangled, want) in [
            ("_Z1fIXadL_Z1gvEEEvv", "void f<&(g())>()"),
            ("_Z1fIXadL_ZN1A1gEvEEEvv", "void f<&A::g>()"),
            ("_Z1fIXadL_Z1xEEEvv", "void f<&x>()"),
            ("_Z1fIXadL_Z1gIiEvT_EEEvv", "void f<&(void g<int>(int))>()"),
            ("_Z1fIL_Z1gvEEvv", "void f<g()>()"),
            ("_Z1fIJ1AIiJEEEEvDpT_", "void f<A<int> >(A<int>)"),
            (
                "_ZN3c104impl6detail24WrapFunctionIntoFunctor_INS_26CompileTimeFunctionPointerIFN2at6TensorERKS5_EXadL_ZNS4_12_GLOBAL__N_115wrapper_CUDA_i0ES7_EEEES5_NS_4guts8typelist8typelistIJS7_EEEED0Ev",
                "c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&), &at::(anonymous namespace)::wrapper_CUDA_i0>, at::Tensor, c10::guts::typelist::typelist<at::Tensor const&> >::~WrapFunctionIntoFunctor_()",
            ),
        ] {
            assert_eq!(demangle(mangled).as_deref(), Some(want), "{mangled}");
        }
    }

    /// Real names from PyTorch 2.11 against c++filt's text for them (testdata/cxxfilt.tsv).
    #[test]
    fn pytorch_names_read_as_cxxfilt_prints_them() {
        let mut n = 0;
        for line in include_str!("testdata/cxxfilt.tsv").lines() {
            if line.starts_with('#') {
                continue;
            }
            let (mangled, want) = line.split_once('\t').expect("two columns");
            assert_eq!(demangle(mangled).as_deref(), Some(want), "{mangled}");
            n += 1;
        }
        assert_eq!(n, 227);
    }

    /// From LLVM 22's symbols: an empty pack expanded inside a written-out pack, a `const`
    /// template argument under `const` (printed once), and the address of a `const` member
    /// function (printed whole, in parentheses).
    #[test]
    fn llvm_shapes() {
        for (mangled, want) in [
            (
                "_ZN4llvm20getBestSimplifyQueryINS_8FunctionEJEEEKNS_13SimplifyQueryERNS_15AnalysisManagerIT_JDpT0_EEERS1_",
                "llvm::SimplifyQuery const llvm::getBestSimplifyQuery<llvm::Function>(llvm::AnalysisManager<llvm::Function>&, llvm::Function&)",
            ),
            (
                "_ZN4llvm22containsIrreducibleCFGIPKNS_10BasicBlockEKNS_25ReversePostOrderTraversalIPKNS_8FunctionENS_11GraphTraitsIS7_EEEEKNS_8LoopInfoENS8_IS3_EEEEbRT0_RKT1_",
                "bool llvm::containsIrreducibleCFG<llvm::BasicBlock const*, llvm::ReversePostOrderTraversal<llvm::Function const*, llvm::GraphTraits<llvm::Function const*> > const, llvm::LoopInfo const, llvm::GraphTraits<llvm::BasicBlock const*> >(llvm::ReversePostOrderTraversal<llvm::Function const*, llvm::GraphTraits<llvm::Function const*> > const&, llvm::LoopInfo const&)",
            ),
            (
                "_ZTIN4llvm9sandboxir13GenericSetterIXadL_ZNKS0_10SwitchInst12getConditionEvEEXadL_ZNS2_12setConditionEPNS0_5ValueEEEEE",
                "typeinfo for llvm::sandboxir::GenericSetter<&(llvm::sandboxir::SwitchInst::getCondition() const), &llvm::sandboxir::SwitchInst::setCondition>",
            ),
        ] {
            assert_eq!(demangle(mangled).as_deref(), Some(want), "{mangled}");
        }
    }

    /// A PyTorch kernel (torch 2.11) whose lambda is passed by `const&`: the qualifiers belong
    /// to the closure type, not to the lambda's first parameter (the cpp_demangle crate prints
    /// `{lambda(c10::Half const)#1}&`).
    #[test]
    fn a_lambda_passed_by_const_reference() {
        assert_eq!(
            demangle(
                "_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_15gpu_kernel_implIZZZNS0_16sqrt_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE0_clEvENKUlvE1_clEvEUlN3c104HalfEE_EEvS4_RKT_EUliE_EEviT1_"
            )
            .as_deref(),
            Some(
                "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::sqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#3}::operator()() const::{lambda(c10::Half)#1}>(at::TensorIteratorBase&, at::native::sqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#3}::operator()() const::{lambda(c10::Half)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::sqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#3}::operator()() const::{lambda(c10::Half)#1}>(at::TensorIteratorBase&, at::native::sqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#3}::operator()() const::{lambda(c10::Half)#1} const&)::{lambda(int)#1})"
            )
        );
    }

    /// c++filt's own quirks, kept so names compare equal with the CUDA tools: a template
    /// argument list that ends in an empty pack closes with `>>`; a template parameter brought
    /// back by a substitution under a reference is read against the templates of its first use.
    #[test]
    fn cxxfilt_quirks() {
        assert_eq!(demangle("_Z1fIiJEEvv").as_deref(), Some("void f<int>()"));
        assert_eq!(
            demangle("_Z1fIN1AIiEEJEEvv").as_deref(),
            Some("void f<A<int>>()")
        );
        assert_eq!(
            demangle(
                "_ZZNSt9once_flag18_Prepare_executionC4IZSt9call_onceIMSt6threadFvvEJPS3_EEvRS_OT_DpOT0_EUlvE_EERS8_ENUlvE_4_FUNEv"
            )
            .as_deref(),
            Some(
                "std::once_flag::_Prepare_execution::_Prepare_execution<std::call_once<void (std::thread::*)(), std::thread*>(std::once_flag&, void (std::thread::*&&)(), std::thread*&&)::{lambda()#1}>(void (std::thread::*&)())::{lambda()#1}::_FUN()"
            )
        );
    }

    /// The deepest names it accepts, and deeper ones it declines, fit a 1 MiB stack in a debug
    /// build (256 KiB in release, measured); the daemon's threads have 2 MiB.
    #[test]
    fn deep_names_fit_a_small_stack() {
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(|| {
                for levels in [10, 40, 63, 64, 100] {
                    let nested =
                        format!("_Z1kI{}iEEvv", "1AI".repeat(levels) + &"E".repeat(levels));
                    let _ = demangle(&nested);
                }
                for n in [50, 150, 189, 190, 400] {
                    let ptrs = format!("_Z1fP{}i", "P".repeat(n));
                    let _ = demangle(&ptrs);
                    let refs = format!("_Z1fRK{}i", "PK".repeat(n));
                    let _ = demangle(&refs);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// What this demangler does not cover is declined (the caller falls back), never guessed.
    #[test]
    fn declines_what_it_does_not_cover() {
        // An expression in a template argument; a float literal; not mangled; cut short.
        for name in [
            "_Z1fIXplLi1ELi2EEEvv",
            "_Z1fILf3f800000EEvv",
            "vecAdd",
            "_ZN2at6native",
            "_Z1fIiEvT0_",
            "",
        ] {
            assert_eq!(demangle(name), None, "{name}");
        }
    }

    /// Hostile input: deep nesting and substitutions that double the text at every step stay
    /// within the bounds (no stack overflow, no runaway output).
    #[test]
    fn hostile_names_are_bounded() {
        let deep = format!("_Z1f{}v", "P".repeat(100_000));
        assert_eq!(demangle(&deep), None);
        // Each S<n>_ refers to the pair before it: 2^40 copies if printed in full.
        let mut name = String::from("_Z1fI1AI1B");
        for _ in 0..40 {
            name.push_str("S_S_");
        }
        let _ = demangle(&name);
        let mut doubling = String::from("_Z1fISt4pairIiiE");
        let mut k = 0;
        for _ in 0..40 {
            let sub = if k == 0 {
                "S_".to_owned()
            } else {
                format!("S{}_", k - 1)
            };
            doubling.push_str(&format!("St4pairI{sub}{sub}E"));
            k += 2;
        }
        doubling.push_str("Evv");
        if let Some(s) = demangle(&doubling) {
            assert!(s.len() <= super::MAX_OUT, "{} bytes", s.len());
        }
        // A pack expansion whose pattern is a DAG of 2^60 paths and no pack: the search for
        // the pack gives up (without the bound this does not return).
        fn seq(k: u32) -> String {
            // The substitution with index k: S_, S0_, …, S9_, SA_, …, SZ_, S10_, …
            if k == 0 {
                return "S_".into();
            }
            let (mut n, mut digits) = (k - 1, Vec::new());
            loop {
                digits.push(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"[(n % 36) as usize]);
                n /= 36;
                if n == 0 {
                    break;
                }
            }
            digits.reverse();
            format!("S{}_", String::from_utf8(digits).unwrap())
        }
        // The DAG is built in the parameters of `&A::f`, which are parsed but not printed, so
        // nothing stops the walk but its bound. S_ is g, S0_ A, S1_ C; each step adds B and
        // B<last, last>.
        let mut dag = String::from("_Z1gIXadL_ZN1A1fE1C");
        let mut last = 2;
        for _ in 0..60 {
            dag.push_str(&format!("1BI{}{}E", seq(last), seq(last)));
            last += 2;
        }
        dag.push_str(&format!("EEEvDp{}", seq(last)));
        assert_eq!(demangle(&dag), None);
    }
}
