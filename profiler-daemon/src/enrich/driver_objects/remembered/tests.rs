use super::*;

const BUILD: &str = "d47d5faef020f05b1a7a3293dbc88644fecb50aa";

fn entry(chains: &[Chain], samples: u32, t: u64) -> Entry {
    Entry {
        chains: chains.to_vec(),
        samples,
        confirmed_unix_s: t,
        refreshed_unix_s: t,
    }
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gpuprofd-layouts-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_file_reads_back_as_written() {
    let mut l = Layouts::new();
    l.insert(
        (BUILD.to_owned(), HandleKind::Function),
        entry(&[Chain::Direct(8)], 3, 100),
    );
    l.insert(
        (BUILD.to_owned(), HandleKind::Kernel),
        entry(&[Chain::Direct(8), Chain::Indirect(0x10, 0xf8)], 7, 200),
    );
    let text = render(&l);
    assert!(
        text.starts_with("{\n  \"format\": \"gpuprofd.driver-layouts/1\""),
        "{text}"
    );
    assert_eq!(parse(text.as_bytes()).unwrap(), l);
}

#[test]
fn the_exact_text_of_one_layout() {
    let mut l = Layouts::new();
    l.insert(
        ("ab".to_owned(), HandleKind::Kernel),
        entry(&[Chain::Indirect(0, 0x30)], 4, 5),
    );
    assert_eq!(
        render(&l),
        "{\n  \"format\": \"gpuprofd.driver-layouts/1\",\n  \"layouts\": [\n    {\n      \
         \"build_id\": \"ab\",\n      \"kind\": \"kernel\",\n      \"chains\": [\n        {\n          \
         \"outer\": 0,\n          \"inner\": 48\n        }\n      ],\n      \"samples\": 4,\n      \
         \"confirmed_unix_s\": 5,\n      \"refreshed_unix_s\": 5\n    }\n  ]\n}\n"
    );
}

#[test]
fn the_oldest_builds_go_first_past_the_bound() {
    let mut l = Layouts::new();
    for n in 0..(MAX_BUILDS as u64 + 3) {
        let b = format!("{n:04x}");
        l.insert(
            (b.clone(), HandleKind::Function),
            entry(&[Chain::Direct(8)], 3, 1000 + n),
        );
        // A build's newest layout counts: this old one's kernel layout is recent.
        if n == 0 {
            l.insert((b, HandleKind::Kernel), entry(&[Chain::Direct(8)], 3, 5000));
        }
    }
    bound(&mut l);
    let kept = builds(&l);
    assert_eq!(kept.len(), MAX_BUILDS);
    assert!(kept.contains("0000"));
    assert!(!kept.contains("0001") && !kept.contains("0002") && !kept.contains("0003"));
    assert!(kept.contains("0004"));
    // A file with more builds than the bound is not taken.
    let mut over = l.clone();
    over.insert(
        ("ffff".to_owned(), HandleKind::Function),
        entry(&[Chain::Direct(8)], 3, 1),
    );
    let e = parse(render(&over).as_bytes()).unwrap_err();
    assert_eq!(e.to_string(), "more than 64 driver builds");
}

fn err(text: &str) -> String {
    parse(text.as_bytes()).unwrap_err().to_string()
}

fn one(layout: &str) -> String {
    format!("{{\"format\":\"gpuprofd.driver-layouts/1\",\"layouts\":[{layout}]}}")
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    let good = r#"{"build_id":"abcd","kind":"function","chains":[{"outer":8}],"samples":3,"confirmed_unix_s":1,"refreshed_unix_s":1}"#;
    assert_eq!(parse(one(good).as_bytes()).unwrap().len(), 1);
    // Truncated, not JSON, wrong types, unknown fields.
    assert!(err(&one(good)[..40]).starts_with("it is not JSON of the expected shape"));
    assert!(err("\u{0}\u{1}garbage").starts_with("it is not JSON of the expected shape"));
    assert!(err("[]").starts_with("it is not JSON of the expected shape"));
    assert!(
        err(&one(&good.replace("\"samples\":3", "\"samples\":\"3\"")))
            .starts_with("it is not JSON")
    );
    assert!(
        err(&one(&good.replace("\"outer\":8", "\"outer\":70000"))).starts_with("it is not JSON")
    );
    assert!(
        err(&one(
            &good.replace("\"kind\":\"function\"", "\"kind\":\"module\"")
        ))
        .starts_with("it is not JSON")
    );
    assert!(
        err(&one(&good.replace("\"samples\"", "\"extra\":1,\"samples\"")))
            .starts_with("it is not JSON")
    );
    // Another format.
    assert_eq!(
        err(r#"{"format":"gpuprofd.driver-layouts/2","layouts":[]}"#),
        "its format is \"gpuprofd.driver-layouts/2\", not \"gpuprofd.driver-layouts/1\""
    );
    // Values out of bounds.
    assert_eq!(
        err(&one(&good.replace("abcd", "ABCD"))),
        "layout 0: the build id is not 1 to 64 bytes in lowercase hex"
    );
    assert_eq!(
        err(&one(&good.replace("abcd", "abc"))),
        "layout 0: the build id is not 1 to 64 bytes in lowercase hex"
    );
    assert_eq!(
        err(&one(&good.replace("\"outer\":8", "\"outer\":9"))),
        "layout 0: a chain's offsets are not words within the scanned bytes"
    );
    assert_eq!(
        err(&one(&good.replace("\"outer\":8", "\"outer\":512"))),
        "layout 0: a chain's offsets are not words within the scanned bytes"
    );
    assert_eq!(
        err(&one(
            &good.replace("{\"outer\":8}", "{\"outer\":8,\"inner\":256}")
        )),
        "layout 0: a chain's offsets are not words within the scanned bytes"
    );
    assert_eq!(
        err(&one(&good.replace("[{\"outer\":8}]", "[]"))),
        "layout 0: 1 to 16 chains expected"
    );
    assert_eq!(
        err(&one(
            &good.replace("{\"outer\":8}", "{\"outer\":8},{\"outer\":8}")
        )),
        "layout 0: a chain appears twice"
    );
    assert_eq!(
        err(&one(&good.replace("\"samples\":3", "\"samples\":2"))),
        "layout 0: 2 samples, fewer than the 3 that confirm a layout"
    );
    assert_eq!(
        err(&one(&format!("{good},{good}"))),
        "layout 1: a second layout for the same build and kind"
    );
    // Huge: refused before parsing.
    let huge = one(&vec![good; 3000].join(","));
    assert_eq!(err(&huge), "it is larger than 262144 bytes");
    // Deeply nested: serde_json's recursion limit, no stack overflow.
    let deep = format!("{}{}", "[".repeat(150_000), "]".repeat(150_000));
    assert!(err(&deep[..MAX_FILE as usize]).starts_with("it is not JSON"));
}

#[test]
fn a_session_confirms_refreshes_and_drops_in_the_file() {
    let d = scratch("session");
    let file = d.join(FILE_NAME);
    {
        let mut r = Remembered::open(&d);
        assert_eq!(r.get(BUILD, HandleKind::Function), None);
        r.confirmed(BUILD, HandleKind::Function, &[Chain::Direct(8)], 3);
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&d), 0o750);
    assert_eq!(mode(&file) & !0o640, 0);
    let mut r = Remembered::open(&d);
    let e = r.get(BUILD, HandleKind::Function).unwrap().clone();
    assert_eq!(
        (e.chains.as_slice(), e.samples),
        (&[Chain::Direct(8)][..], 3)
    );
    r.agreed(BUILD, HandleKind::Function, &[Chain::Direct(8)], 4);
    r.flush();
    let on_disk = parse(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        on_disk[&(BUILD.to_owned(), HandleKind::Function)].samples,
        4
    );
    // Another daemon drops it; this one's refresh does not bring it back.
    let mut other = Remembered::open(&d);
    assert!(other.refuted(BUILD, HandleKind::Function));
    r.agreed(BUILD, HandleKind::Function, &[Chain::Direct(8)], 5);
    r.flush();
    assert_eq!(
        parse(&std::fs::read(&file).unwrap()).unwrap(),
        Layouts::new()
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_bad_file_is_ignored_and_rewritten() {
    let d = scratch("bad");
    std::fs::create_dir_all(&d).unwrap();
    let file = d.join(FILE_NAME);
    std::fs::write(&file, b"{\"format\":\"gpuprofd.driver-layouts/1\",\"layo").unwrap();
    let mut r = Remembered::open(&d);
    assert_eq!(r.get(BUILD, HandleKind::Kernel), None);
    r.confirmed(BUILD, HandleKind::Kernel, &[Chain::Direct(8)], 3);
    assert_eq!(parse(&std::fs::read(&file).unwrap()).unwrap().len(), 1);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn no_state_reads_and_writes_nothing() {
    let mut r = Remembered::none();
    r.confirmed(BUILD, HandleKind::Kernel, &[Chain::Direct(8)], 3);
    assert!(r.get(BUILD, HandleKind::Kernel).is_some());
}
