use super::*;

#[test]
fn a_thread_id_is_not_a_live_process() {
    assert!(is_live_process(std::process::id()));
    // A thread of this process: /proc/TID exists, but it is no process of its own.
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() } as u32).unwrap();
        let _ = done_rx.recv();
    });
    let tid = rx.recv().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{tid}")).exists());
    assert!(!is_live_process(tid));
    done_tx.send(()).unwrap();
    t.join().unwrap();
    assert!(!is_live_process(u32::MAX));
}

#[test]
fn batch_frames_records() {
    let mut b = Batch::default();
    b.push(&[1, 2, 3]);
    b.push(&[]);
    b.push(&[9; 80]);
    let v: Vec<&[u8]> = b.iter().collect();
    assert_eq!(v.len(), 3);
    assert_eq!(v[0], &[1, 2, 3]);
    assert_eq!(v[1].len(), 0);
    assert_eq!(v[2], &[9; 80][..]);
    assert_eq!(b.records, 3);
}

#[test]
fn truncated_batch_stops() {
    let mut b = Batch::default();
    b.push(&[1, 2, 3, 4]);
    b.bytes.truncate(6);
    assert_eq!(b.iter().count(), 0);
}

#[test]
fn drops() {
    let d = drops_by_kind(&[0, 5, 0, 1, 0, 0, 0, 2, 0, 0, 3, 0, 4]);
    let got: Vec<(&str, u64)> = d.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        got,
        [
            ("alias", 2),
            ("copy", 0),
            ("exec", 0),
            ("exit", 0),
            ("gpu_activity", 0),
            ("gpu_name", 0),
            ("gpu_state", 0),
            ("graph", 0),
            ("launch", 5),
            ("map", 0),
            ("mem", 0),
            ("name", 0),
            ("nccl", 0),
            ("other", 4),
            ("stack", 3),
            ("sync", 1)
        ]
    );
    assert_eq!(drops_by_kind(&[]).len(), 15);
    // The NCCL kind (14) comes after the daemon's own kinds, which are no probe's: counted as
    // what they are.
    let d = drops_by_kind(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 6]);
    assert_eq!((d["nccl"], d["other"]), (6, 7));
    // The GPU activity kinds (15–17) follow NCCL; indexes past them up to MAX_KINDS (24) are
    // no kind.
    let mut c = [0u64; 24];
    (c[15], c[16], c[17], c[23]) = (1, 2, 3, 9);
    let d = drops_by_kind(&c);
    assert_eq!(
        (d["gpu_activity"], d["gpu_name"], d["gpu_state"], d["other"]),
        (1, 2, 3, 9)
    );
}

#[test]
fn kind_names_cover_every_kind() {
    let c = KindCounts::default();
    let names: Vec<_> = c.named().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "launch",
            "copy",
            "sync",
            "mem",
            "graph",
            "name",
            "alias",
            "map",
            "exit",
            "stack",
            "exec",
            "nccl",
            "gpu_activity",
            "gpu_name",
            "gpu_state"
        ]
    );
}
