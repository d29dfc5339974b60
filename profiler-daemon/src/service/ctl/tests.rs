//! The control protocol: requests, the authorisation matrix on known peers, a real socket.

use super::*;
use serde_json::json;

fn report() -> Report {
    let z = json!({"calls": 0, "bytes": 0});
    let proc_ = |tgid: u32, job: &str, launches: u64| {
        json!({"tgid": tgid, "comm": format!("w{tgid}"), "cmdline": "", "exited": false,
           "job": {"kind": "slurm", "id": job, "cgroup": format!("/job_{job}")},
           "launches": launches, "unnamed_launches": 0, "kernels": [],
           "copies": [{"direction": "h2d", "calls": 1, "bytes": 100 * tgid as u64,
                       "async_calls": 0, "blocked_ns": 7}],
           "api": [], "graphs": {"launches": 0},
           "allocations": {"calls": 0, "failed": 0, "bytes": 0, "frees": 0, "live_bytes": 0,
               "peak_bytes": 0, "untracked": 0, "by_kind": {"device": z, "host_pinned": z,
               "managed": z, "async": z, "pitched": z, "vmm": z}},
           "gpu": null})
    };
    let mut r: Report = serde_json::from_value(json!({
        "schema": "gpuprofd.report/1", "host": "n", "started_at": "2026-11-23T07:00:00Z",
        "duration_ns": 1, "drops": {}, "submitted": {}, "decode_errors": 0, "jobs": [],
        "processes": [proc_(10, "1", 5), proc_(11, "1", 7), proc_(12, "2", 9), proc_(11, "3", 4)],
        "nvml": {"state": "off", "samples": 0},
        "gpus": [{"index": 0, "name": "H100", "uuid": "GPU-1", "samples": 1,
                  "gpu_util_avg": null, "gpu_util_max": null, "mem_util_avg": null,
                  "memory_used_max_bytes": null, "memory_total_bytes": null,
                  "sm_clock_avg_mhz": null, "power_avg_w": null, "temp_max_c": null,
                  "unprofiled_pids": [4242]}]
    }))
    .unwrap();
    // The last is an ended process of uid 1000's whose pid 11 uid 2000's process has now:
    // each entry keeps its own owner.
    for (p, owner) in r.processes.iter_mut().zip([1000, 2000, 1000, 1000]) {
        p.owner = Some(owner);
    }
    r.processes[3].exited = true;
    r
}

/// Processes 10 and 12 belong to uid 1000, 11 to uid 2000 (and an ended one that had pid 11 to
/// uid 1000); group 500 is the admin group.
fn handler() -> (
    Handler,
    mpsc::Receiver<oneshot::Sender<Result<serde_json::Value, String>>>,
) {
    let (tx, rx) = mpsc::channel(1);
    let h = Handler {
        status: Box::new(|| json!({"version": "t", "config": {"secret": 1}})),
        snapshot: Box::new(|| Box::pin(async { Some(Snapshot { report: report() }) })),
        reload: tx,
        admin_gid: Box::new(|| Some(500)),
        admin_group: Box::new(|| "gpuops".into()),
        streaming: Default::default(),
        // A capture that is over at once: a few bytes, then the sink closes.
        capture: Box::new(|req| {
            Box::pin(async move {
                use std::io::Write;
                let mut sink = req.sink;
                if req.role != Role::Admin
                    && matches!(req.target, crate::session::deep::Target::Job(_))
                {
                    return Err("jobs are for admins".to_string());
                }
                sink.write_all(b"GPUPROF\0 bytes").unwrap();
                sink.flush().unwrap();
                Ok(7)
            })
        }),
    };
    (h, rx)
}

fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
    Peer {
        pid: 1,
        uid,
        gid,
        groups: groups.to_vec(),
    }
}

fn pids(v: &serde_json::Value) -> Vec<u64> {
    v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tgid"].as_u64().unwrap())
        .collect()
}

#[test]
fn requests_parse_and_bad_ones_are_refused() {
    assert_eq!(
        serde_json::from_str::<Request>(r#"{"cmd":"status"}"#).unwrap(),
        Request::Status
    );
    assert!(serde_json::from_str::<Request>(r#"{"cmd":"rm -rf"}"#).is_err());
}

#[tokio::test]
async fn who_sees_what() {
    let (h, mut reloads) = handler();
    // Root and members of the admin group (primary or supplementary) see every process.
    for p in [
        peer(0, 0, &[]),
        peer(3000, 500, &[]),
        peer(3000, 3000, &[7, 500]),
    ] {
        let r = h.answer(&p, Request::Snapshot).await;
        assert!(r.ok, "{p:?}");
        let v = r.result.unwrap();
        assert_eq!(pids(&v), [10, 11, 12, 11], "{p:?}");
        assert_eq!(v["gpus"][0]["unprofiled_pids"], json!([4242]));
        let s = h.answer(&p, Request::Status).await.result.unwrap();
        assert_eq!(s["you"]["role"], "admin");
        assert_eq!(s["config"]["secret"], 1);
    }
    // uid 1000 sees its two processes, and jobs made of them only.
    let u = peer(1000, 1000, &[]);
    let v = h.answer(&u, Request::Snapshot).await.result.unwrap();
    assert_eq!(pids(&v), [10, 12, 11]);
    // uid 2000 sees its live pid 11, not the ended process of uid 1000 that had it before.
    let other = h
        .answer(&peer(2000, 2000, &[]), Request::Snapshot)
        .await
        .result
        .unwrap();
    assert_eq!(pids(&other), [11]);
    assert_eq!(other["processes"][0]["exited"], false);
    assert_eq!(other["processes"][0]["launches"], 7);
    let jobs: Vec<(String, Vec<u64>, u64)> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_string(),
                j["processes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_u64().unwrap())
                    .collect(),
                j["launches"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        jobs,
        [
            ("2".into(), vec![12], 9),
            ("1".into(), vec![10], 5),
            ("3".into(), vec![11], 4)
        ]
    );
    assert_eq!(v["gpus"][0]["unprofiled_pids"], json!([]));
    let rows: Vec<ProcessRow> =
        serde_json::from_value(h.answer(&u, Request::Processes).await.result.unwrap()).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.pid, r.owner, r.copy_bytes))
            .collect::<Vec<_>>(),
        [
            (10, Some(1000), 1000),
            (12, Some(1000), 1200),
            (11, Some(1000), 1100)
        ]
    );
    let s = h.answer(&u, Request::Status).await.result.unwrap();
    assert_eq!(s["you"]["role"], "user");
    assert!(s.get("config").is_none(), "the configuration is for admins");
    // A user with no process sees none.
    let v = h
        .answer(&peer(4000, 4000, &[]), Request::Snapshot)
        .await
        .result
        .unwrap();
    assert_eq!(pids(&v), Vec::<u64>::new());
    // Reload: refused to users, passed to the main loop for admins.
    let r = h.answer(&u, Request::Reload).await;
    assert!(!r.ok);
    assert_eq!(
        r.error.unwrap(),
        "reload is for root and members of group \"gpuops\" (you are uid 1000)"
    );
    assert!(reloads.try_recv().is_err(), "nothing reached the main loop");
    let answer = tokio::spawn(async move {
        let tx = reloads.recv().await.unwrap();
        tx.send(Ok(json!({"changed": ["log.level"]}))).unwrap();
    });
    let r = h.answer(&peer(0, 0, &[]), Request::Reload).await;
    answer.await.unwrap();
    assert_eq!(r.result.unwrap(), json!({"changed": ["log.level"]}));
}

#[tokio::test]
async fn over_a_real_socket() {
    let dir = std::env::temp_dir().join(format!("gpuprofd-ctl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("ctl.sock");
    let listener = bind(&path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o666
    );
    // A second daemon on the same socket is refused while the first one listens.
    assert!(matches!(bind(&path), Err(BindError::InUse(_))));
    let (h, _reloads) = handler();
    let server = tokio::spawn(serve(listener, Arc::new(h)));
    let p = path.clone();
    let (status, bad, snapshot) = tokio::task::spawn_blocking(move || {
        let mut c = Client::connect(&p).unwrap();
        let status = c.call(&Request::Status).unwrap();
        // A malformed line is answered, and the connection stays usable.
        use std::io::{BufRead, Write};
        c.stream
            .get_mut()
            .write_all(b"{\"cmd\":\"launch\"}\n")
            .unwrap();
        let mut bad = String::new();
        c.stream.read_line(&mut bad).unwrap();
        let snapshot = c.call(&Request::Snapshot).unwrap();
        (status, bad, snapshot)
    })
    .await
    .unwrap();
    // The tests run as root: the kernel says so, whatever the client claims.
    assert_eq!(status["you"]["uid"], 0);
    assert_eq!(status["you"]["pid"], std::process::id());
    assert_eq!(status["you"]["role"], "admin");
    let bad: Response = serde_json::from_str(&bad).unwrap();
    assert!(!bad.ok);
    assert!(bad.error.unwrap().contains("unknown variant `launch`"));
    assert_eq!(pids(&snapshot), [10, 11, 12, 11]);
    // A capture: its answer line, then the file's bytes until the daemon closes the connection.
    let p = path.clone();
    let streamed = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&p).unwrap();
        s.write_all(b"{\"cmd\":\"capture\",\"pid\":1,\"job\":\"x\",\"duration\":\"1s\"}\n")
            .unwrap();
        s.write_all(b"{\"cmd\":\"capture\",\"pid\":1,\"duration\":\"25h\"}\n")
            .unwrap();
        s.write_all(b"{\"cmd\":\"capture\",\"pid\":1,\"duration\":\"2s\"}\n")
            .unwrap();
        let mut all = String::new();
        s.read_to_string(&mut all).unwrap();
        all
    })
    .await
    .unwrap();
    assert_eq!(
        streamed,
        "{\"ok\":false,\"error\":\"a capture names either a pid or a job\"}\n\
         {\"ok\":false,\"error\":\"\\\"25h\\\": a deep capture lasts at most 24h\"}\n\
         {\"ok\":true,\"result\":{\"duration_s\":2.0,\"id\":7,\"target\":{\"pid\":1}}}\n\
         GPUPROF\0 bytes"
    );
    server.abort();
    // A stale socket file (its daemon gone) is replaced.
    let _ = server.await;
    let _again = bind(&path).unwrap();
    let e = Client::connect(&dir.join("none.sock")).err().unwrap();
    assert_eq!(e.exit_code(), 12);
    assert!(
        e.to_string().contains("no gpuprofd service is listening"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn connections_are_bounded_per_user_and_in_all() {
    let c = Connections::default();
    for _ in 0..MAX_CONNECTIONS_PER_USER {
        c.enter(1000).unwrap();
    }
    assert_eq!(
        c.enter(1000).unwrap_err(),
        format!("you have {MAX_CONNECTIONS_PER_USER} connections open already; close one")
    );
    c.enter(1001).unwrap();
    c.leave(1000);
    c.enter(1000).unwrap();
    // Root is bounded only by the total.
    let used = MAX_CONNECTIONS_PER_USER + 1;
    for _ in used..MAX_CONNECTIONS {
        c.enter(0).unwrap();
    }
    assert_eq!(
        c.enter(0).unwrap_err(),
        format!("{MAX_CONNECTIONS} connections are open; try again later")
    );
}

/// A client that asks and then stops reading loses its connection after the write timeout,
/// rather than holding it (and its slot, and the reply's bytes) for ever.
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off() {
    let dir = std::env::temp_dir().join(format!("gpuprofd-ctl-w-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("ctl.sock");
    let listener = bind(&path).unwrap();
    let (mut h, _reloads) = handler();
    // A reply of several MiB: more than the socket's buffers hold.
    h.snapshot = Box::new(|| {
        Box::pin(async {
            let mut report = report();
            let one = report.processes[0].clone();
            report.processes = (0..4000)
                .map(|i| {
                    let mut p = one.clone();
                    p.tgid = 100 + i;
                    p.cmdline = "x".repeat(1000);
                    p
                })
                .collect();
            Some(Snapshot { report })
        })
    });
    let server = tokio::spawn(serve(listener, Arc::new(h)));
    let p = path.clone();
    let (got, end) = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&p).unwrap();
        s.write_all(b"{\"cmd\":\"snapshot\"}\n").unwrap();
        // Not reading for longer than the write timeout (1 s in tests) plus the time the
        // server takes to make a reply of several MiB (over 2 s on a loaded two-CPU machine:
        // with 2.5 s here the whole reply was sometimes still to come) ...
        std::thread::sleep(std::time::Duration::from_millis(6000));
        // ... then reading: what the socket held, then the end (not the rest of the reply).
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let end = s.read_to_end(&mut got).map(|_| ());
        (got, end)
    })
    .await
    .unwrap();
    assert!(
        end.is_ok(),
        "closed by the daemon, not a read timeout: {end:?}"
    );
    assert!(
        !got.is_empty() && got.len() < 4_000_000 && !got.ends_with(b"\n"),
        "a part of the reply: {} bytes",
        got.len()
    );
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A GPU's GPM names only the jobs the client sees; each job it sees keeps its GPM.
#[test]
fn gpm_names_only_the_jobs_a_client_sees() {
    let mut r = report();
    r.gpus[0].gpm = Some(
        serde_json::from_value(json!({
            "state": "measured", "samples": 4, "avg": {"sm_activity_pct": 50.0},
            "jobs": [{"workload": "slurm:1", "samples": 2, "avg": {"sm_activity_pct": 60.0}},
                     {"workload": "slurm:2", "samples": 2, "avg": {"sm_activity_pct": 40.0}}]
        }))
        .unwrap(),
    );
    // uid 2000's view: its pid 11, of job 1.
    let v = restrict(r, |p| p.owner == Some(2000));
    let g = v.gpus[0].gpm.as_ref().unwrap();
    let named: Vec<&str> = g.jobs.iter().map(|j| j.workload.as_str()).collect();
    assert_eq!(named, ["slurm:1"]);
    assert_eq!(g.samples, 4, "the GPU's own figures stay");
    assert_eq!(v.jobs.len(), 1);
    let j = &v.jobs[0].gpm;
    assert_eq!(
        (j.len(), j[0].gpu, j[0].samples, j[0].avg.sm_activity_pct),
        (1, 0, 2, Some(60.0))
    );
}
