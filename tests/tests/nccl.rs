//! NCCL without code change, end to end: the fake `libnccl.so.2` (NCCL's prototypes, enum
//! values and entry shapes; the 128-byte unique id by value) driven by `nccl_workload`.
//! Communicators made by rank, by rank with a config, all at once and by split; collectives of
//! known counts and datatypes inside and outside groups, on a stream; communicators made before
//! the daemon attached, unknown until the program asks NCCL for their rank and size. Two
//! processes given one unique id report one communicator id. Real eBPF on the fake libraries.
//!
//! Run through `cargo xtask test` (as root, `--test-threads=1`).

use gpuprofd_tests::*;
use serde_json::Value;

/// The daemon's arguments: every process, the fake CUDA libraries and the fake NCCL.
fn args(lib: &str, nccl: &str) -> Vec<String> {
    [
        "--all-jobs",
        "--no-system-libs",
        "--lib",
        lib,
        "--lib",
        nccl,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The communicator id of ranks made from seed word `seed` (the workload repeats its bytes over
/// the 128-byte unique id): FNV-1a 64 over those bytes, in 16 hex digits, as docs/USAGE.md
/// defines it.
fn id_of(seed: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for i in 0..128 {
        h ^= u64::from(seed.as_bytes()[i % seed.len()]);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn comms(p: &Value) -> &Vec<Value> {
    p["nccl"]["communicators"]
        .as_array()
        .unwrap_or_else(|| panic!("no nccl communicators: {}", p["nccl"]))
}

/// The communicator of `p` that `f` picks (exactly one).
fn comm<'a>(p: &'a Value, what: &str, f: impl Fn(&Value) -> bool) -> &'a Value {
    let v: Vec<&Value> = comms(p).iter().filter(|c| f(c)).collect();
    assert_eq!(v.len(), 1, "{what}: {:#}", p["nccl"]);
    v[0]
}

/// `(op, calls, bytes, in_group, datatypes, reductions, streams, devices)` per operation of
/// communicator `c`, in the report's order (most calls first, then by name).
type Op = (String, u64, u64, u64, Value, Value, usize, Value);

fn ops(c: &Value) -> Vec<Op> {
    c["ops"]
        .as_array()
        .unwrap_or_else(|| panic!("no ops: {c}"))
        .iter()
        .map(|o| {
            let n = |k: &str| o[k].as_u64().unwrap_or_else(|| panic!("{k}: {o}"));
            (
                o["op"].as_str().unwrap().to_owned(),
                n("calls"),
                n("bytes"),
                n("in_group"),
                o["datatypes"].clone(),
                o["reductions"].clone(),
                o["streams"].as_array().unwrap().len(),
                o["devices"].clone(),
            )
        })
        .collect()
}

fn op(name: &str, calls: u64, bytes: u64, in_group: u64, dt: Value, red: Value, dev: Value) -> Op {
    (name.into(), calls, bytes, in_group, dt, red, 1, dev)
}

#[test]
fn communicators_collectives_groups_and_ranks_are_reported_exactly() {
    use serde_json::json;
    let lib = fakecuda().join("lib");
    let nccl = fakecuda().join("lib-nccl");
    let env = [("FAKECUDA_DEVICES", "2")];
    // Process A made two communicators before the daemon attached.
    let mut a = Workload::spawn("nccl_workload", &env);
    a.cmd("init 0 early 2 1");
    a.cmd("init 1 early2 8 5");
    let args = args(lib.to_str().unwrap(), nccl.to_str().unwrap());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = Daemon::capturing(&argv);

    // A, on device 1, stream 1: rank 0 of 4 of the job "job42".
    a.cmd("set_device 1");
    a.cmd("stream 1");
    a.cmd("init 2 job42 4 0");
    a.cmd("allreduce 2 1000 7 0 1 3"); // 3 × 1000 float32, sum: 12000 bytes
    a.cmd("group_start");
    a.cmd("allgather 2 256 9 1 2"); // 2 × 256 bfloat16 (per rank): 1024 bytes, in a group
    a.cmd("send 2 64 4 1 1 1"); // 64 int64 to peer 1: 512 bytes, in a group
    a.cmd("recv 2 64 4 1 1 1");
    a.cmd("group_end");
    a.cmd("reducescatter 2 128 6 4 1 1"); // 128 float16 (per rank), avg: 256 bytes
    a.cmd("broadcast 2 100 0 3 1 1"); // 100 int8 from root 3
    a.cmd("bcast 2 50 0 0 1 1"); // ncclBcast calls ncclBroadcast: counted once, as it
    a.cmd("reduce 2 10 8 2 0 1 1"); // 10 float64, max, root 0: 80 bytes
    a.cmd("alltoall 2 32 2 1 1"); // 32 int32 per peer: 128 bytes
    // The communicators from before the attach: slot 0 is never asked about, slot 1 is.
    a.cmd("allreduce 0 256 7 0 0 2"); // default stream: the thread's device (1)
    assert_eq!(a.cmd("user_rank 1"), "ok user_rank value=5");
    assert_eq!(a.cmd("count 1"), "ok count value=8");
    a.cmd("broadcast 1 16 7 0 0 1");
    // A split of the job's communicator, color 7, used once and destroyed.
    a.cmd("split 3 2 7 0");
    a.cmd("allreduce 3 1 7 0 1 1");
    a.cmd("destroy 3");

    // B, started after the attach, on device 0: rank 3 of the same job, through the config
    // variant; the same split; a clique of two made by ncclCommInitAll (devices 1 and 0).
    let mut b = Workload::spawn("nccl_workload", &env);
    b.cmd("set_device 0");
    b.cmd("init_config 0 job42 4 3");
    b.cmd("allreduce 0 1000 7 0 0 3");
    b.cmd("split 1 0 7 0");
    b.cmd("split 2 0 -1 0"); // NCCL_SPLIT_NOCOLOR: no communicator, nothing reported
    b.cmd("init_all 4 2 1 0");
    b.cmd("allreduce 5 8 3 1 0 1"); // on the clique's rank 1: 8 uint32, prod
    b.cmd("abort 0");
    let (ta, tb) = (a.tgid, b.tgid);
    a.exit();
    b.exit();
    let f = d.stop();
    let pa = process(&f.report, ta);
    let pb = process(&f.report, tb);

    // The job's communicator: one id in both processes, each its own rank and device.
    let job = comm(pa, "A's job communicator", |c| {
        c["rank"] == 0 && c["nranks"] == 4
    });
    let id = job["id"].as_str().expect("an id").to_owned();
    assert_eq!(id, id_of("job42"));
    assert_eq!(
        (&job["device"], &job["created_by"], &job["ended"]),
        (&json!(1), &json!("ncclCommInitRank"), &Value::Null)
    );
    let d1 = json!({"1": 1});
    let dev1 = |n: u64| json!({ "1": n });
    assert_eq!(
        ops(job),
        vec![
            op(
                "AllReduce",
                3,
                12000,
                0,
                json!({"float32": 3}),
                json!({"sum": 3}),
                dev1(3)
            ),
            op(
                "AllGather",
                2,
                1024,
                2,
                json!({"bfloat16": 2}),
                json!({}),
                dev1(2)
            ),
            op(
                "Broadcast",
                2,
                150,
                0,
                json!({"int8": 2}),
                json!({}),
                dev1(2)
            ),
            op(
                "AlltoAll",
                1,
                128,
                0,
                json!({"int32": 1}),
                json!({}),
                d1.clone()
            ),
            op(
                "Recv",
                1,
                512,
                1,
                json!({"int64": 1}),
                json!({}),
                d1.clone()
            ),
            op(
                "Reduce",
                1,
                80,
                0,
                json!({"float64": 1}),
                json!({"max": 1}),
                d1.clone()
            ),
            op(
                "ReduceScatter",
                1,
                256,
                0,
                json!({"float16": 1}),
                json!({"avg": 1}),
                d1.clone()
            ),
            op(
                "Send",
                1,
                512,
                1,
                json!({"int64": 1}),
                json!({}),
                d1.clone()
            ),
        ]
    );
    let job_b = comm(pb, "B's job communicator", |c| c["id"] == id.as_str());
    assert_eq!(
        (&job_b["rank"], &job_b["nranks"], &job_b["device"]),
        (&json!(3), &json!(4), &json!(0))
    );
    assert_eq!(
        (&job_b["created_by"], &job_b["ended"]),
        (&json!("ncclCommInitRankConfig"), &json!("aborted"))
    );
    assert_eq!(
        ops(job_b),
        vec![op(
            "AllReduce",
            3,
            12000,
            0,
            json!({"float32": 3}),
            json!({"sum": 3}),
            json!({"0": 3})
        )]
    );

    // The split: named by its parent's id and the color, the same in both processes.
    let split_a = comm(pa, "A's split", |c| c["created_by"] == "ncclCommSplit");
    let split_b = comm(pb, "B's split", |c| c["created_by"] == "ncclCommSplit");
    assert_eq!(split_a["id"], split_b["id"]);
    assert_ne!(split_a["id"], json!(id));
    assert_eq!(
        (&split_a["parent_id"], &split_a["color"], &split_a["ended"]),
        (&json!(id), &json!(7), &json!("destroyed"))
    );
    assert_eq!(ops(split_a).len(), 1);

    // Before the attach: slot 0 never asked (rank and size unknown, calls counted), slot 1
    // asked (rank 5 of 8).
    let early = |want_op: &str| {
        comm(pa, want_op, |c| {
            c["created_by"] == "before_attach" && c["ops"][0]["op"] == want_op
        })
    };
    let e0 = early("AllReduce");
    assert_eq!(
        (&e0["rank"], &e0["nranks"], &e0["id"]),
        (&Value::Null, &Value::Null, &Value::Null)
    );
    assert_eq!(
        ops(e0),
        vec![op(
            "AllReduce",
            2,
            2048,
            0,
            json!({"float32": 2}),
            json!({"sum": 2}),
            dev1(2)
        )]
    );
    let e1 = early("Broadcast");
    assert_eq!((&e1["rank"], &e1["nranks"]), (&json!(5), &json!(8)));
    assert_eq!(ops(e1)[0].2, 64);

    // The clique: two communicators, ranks 0 and 1 of 2, on the devices of the list, one id.
    let clique: Vec<&Value> = comms(pb)
        .iter()
        .filter(|c| c["created_by"] == "ncclCommInitAll")
        .collect();
    let mut seen: Vec<(Value, Value, Value)> = clique
        .iter()
        .map(|c| (c["rank"].clone(), c["nranks"].clone(), c["device"].clone()))
        .collect();
    seen.sort_by_key(|t| t.0.as_u64());
    assert_eq!(
        seen,
        vec![
            (json!(0), json!(2), json!(1)),
            (json!(1), json!(2), json!(0))
        ]
    );
    assert_eq!(clique[0]["id"], clique[1]["id"]);
    // B: the job's, the split, the clique's two; not the NOCOLOR split.
    assert_eq!(comms(pb).len(), 4, "{:#}", pb["nccl"]);
    let r1 = comm(pb, "clique rank 1", |c| {
        c["created_by"] == "ncclCommInitAll" && c["rank"] == 1
    });
    assert_eq!(ops(r1)[0].2, 32);
    assert_eq!(ops(r1)[0].5, json!({"prod": 1}));

    // Totals: A 3+2+2+1+1+1+1+1 + 2 + 1 + 1 calls; B 3 + 1.
    assert_eq!(pa["nccl"]["calls"], 16);
    assert_eq!(
        pa["nccl"]["bytes"],
        12000 + 1024 + 150 + 128 + 512 + 80 + 256 + 512 + 2048 + 64 + 4
    );
    assert_eq!(
        (&pb["nccl"]["calls"], &pb["nccl"]["bytes"]),
        (&json!(4), &json!(12032))
    );
    // Each NCCL function under its public name, ncclBcast under ncclBroadcast.
    let api = |p: &Value, name: &str| {
        p["api"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .map(|a| a["calls"].as_u64().unwrap())
    };
    assert_eq!(api(pa, "ncclBroadcast"), Some(3));
    assert_eq!(api(pa, "ncclBcast"), None);
    assert_eq!(api(pa, "pncclAllReduce"), None);
    assert_eq!(api(pa, "ncclAllReduce"), Some(3 + 2 + 1));

    // The collectives view, as CSV: one row per communicator and operation (communicators
    // without a collective, such as B's split, are rows of 0 calls, left out here).
    let (code, out, err) = run_daemon(&[
        "report",
        f.output.to_str().unwrap(),
        "--view",
        "collectives",
        "--format",
        "csv",
        "--pid",
        &tb.to_string(),
        "--select",
        "comm_id,rank,nranks,device,op,calls,bytes,in_group,datatypes,reductions",
        "--order-by",
        "bytes",
        "--min-calls",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    let clique_id = clique[0]["id"].as_str().unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    let head = lines.remove(0);
    assert_eq!(
        head,
        "comm_id,rank,nranks,device,op,calls,bytes,in_group,datatypes,reductions"
    );
    assert_eq!(
        lines,
        vec![
            format!("{id},3,4,0,AllReduce,3,12000,0,float32:3,sum:3"),
            format!("{clique_id},1,2,0,AllReduce,1,32,0,uint32:1,prod:1"),
        ]
    );
}

/// `/metrics` while the job runs: calls and bytes per operation, communicator id and rank,
/// with the process's labels; a communicator from before the attach under `unknown` until the
/// program asks NCCL for its rank.
#[test]
fn metrics_carry_the_operation_communicator_and_rank() {
    let addr = format!("127.0.0.1:{}", free_port());
    let lib = fakecuda().join("lib");
    let nccl = fakecuda().join("lib-nccl");
    let mut w = Workload::spawn("nccl_workload", &[]);
    w.cmd("init 1 before 2 1");
    let mut args = args(lib.to_str().unwrap(), nccl.to_str().unwrap());
    args.extend(
        [
            "--no-nvml",
            "--metrics-addr",
            &addr,
            "--metrics-per-process",
        ]
        .map(String::from),
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let d = Daemon::start(&argv);
    w.cmd("init 0 job7 4 2");
    w.cmd("allreduce 0 1000 7 0 0 3");
    w.cmd("group_start");
    w.cmd("send 0 10 0 3 0 2");
    w.cmd("group_end");
    w.cmd("broadcast 1 8 8 0 0 1");
    let id = id_of("job7");
    let series = |body: &str, name: &str, labels: &str| -> Option<u64> {
        body.lines()
            .find(|l| l.starts_with(name) && l.contains(labels))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let pid = format!("pid=\"{}\"", w.tgid);
    let wait = |want: &dyn Fn(&str) -> bool| -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some((_, body)) = http_get(&addr, "/metrics")
                && want(&body)
            {
                return body;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for the NCCL series in /metrics"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let calls = "gpuprofd_nccl_collective_calls_total{";
    let bytes = "gpuprofd_nccl_collective_bytes_total{";
    let ar = format!(r#"op="AllReduce",communicator="{id}",rank="2""#);
    let early = r#"op="Broadcast",communicator="unknown",rank="unknown""#;
    // The broadcast was the last call made: once it shows, every earlier record was folded in
    // (a scrape between two records of one batch saw the AllReduce without it).
    let body = wait(&|b: &str| {
        b.contains(&pid) && series(b, calls, &ar).is_some() && series(b, calls, early).is_some()
    });
    let line = |name: &str, labels: &str| {
        body.lines()
            .find(|l| l.starts_with(name) && l.contains(labels) && l.contains(&pid))
            .map(str::to_owned)
    };
    assert!(
        line(calls, &ar).is_some_and(|l| l.ends_with(" 3")),
        "{body}"
    );
    assert!(
        line(bytes, &ar).is_some_and(|l| l.ends_with(" 12000")),
        "{body}"
    );
    let send = format!(r#"op="Send",communicator="{id}",rank="2""#);
    assert!(
        line(bytes, &send).is_some_and(|l| l.ends_with(" 20")),
        "{body}"
    );
    assert!(
        line(calls, early).is_some_and(|l| l.ends_with(" 1")),
        "{body}"
    );
    // Asked, the earlier communicator's rank becomes known (its id does not).
    assert_eq!(w.cmd("user_rank 1"), "ok user_rank value=1");
    let known = r#"op="Broadcast",communicator="unknown",rank="1""#;
    let body = wait(&|b: &str| series(b, calls, known).is_some());
    assert!(!body.contains(early), "{body}");
    w.exit();
    d.stop();
}

/// One job across two "nodes": a four-rank job whose ranks 0 and 1 run in one cgroup and ranks 2
/// and 3 in another, each cgroup captured by its own daemon into its own file (two captures,
/// started at different moments). The ranks step together (the test waits for every rank's
/// step before starting the next, as the all-reduce holds DDP's ranks together); rank 2 works
/// 40 ms per step on its host, the others 2 ms. `report A B` names the ranks `node/rank`,
/// matches their communicator and steps, and names rank 2 the slowest in every step.
#[test]
fn captures_of_two_nodes_merge_into_one_job_with_its_straggler() {
    let lib = fakecuda().join("lib");
    let nccl = fakecuda().join("lib-nccl");
    let nodes = [Cgroup::new("node_a"), Cgroup::new("node_b")];
    let start = |name: &str, cg: &Cgroup| {
        let rel = cg.rel();
        Daemon::start_with(
            name,
            &[
                "--cgroup",
                &rel,
                "--no-system-libs",
                "--lib",
                lib.to_str().unwrap(),
                "--lib",
                nccl.to_str().unwrap(),
            ],
            &[],
        )
    };
    let da = start("node-a.gpuprof", &nodes[0]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let db = start("node-b.gpuprof", &nodes[1]);
    let mut ranks: Vec<Workload> = (0..4)
        .map(|r| Workload::spawn_in("nccl_workload", &nodes[r / 2]))
        .collect();
    for (r, w) in ranks.iter_mut().enumerate() {
        w.cmd("stream 1");
        w.cmd(&format!("init 0 straggle 4 {r}"));
    }
    // Seven iterations, each closed by a sync: the first is warm-up, six are steps.
    for _ in 0..7 {
        let scripts: Vec<[String; 4]> = (0..4)
            .map(|r| {
                [
                    "launch 1 4".to_owned(),
                    "allreduce 0 1024 7 0 1 1".to_owned(), // 1024 float32: 4096 bytes
                    format!("sleep_ms {}", if r == 2 { 40 } else { 2 }),
                    "sync 1".to_owned(),
                ]
            })
            .collect();
        for (w, s) in ranks.iter_mut().zip(&scripts) {
            for l in s {
                w.send(l);
            }
        }
        for (w, s) in ranks.iter_mut().zip(&scripts) {
            for l in s {
                w.ok(l);
            }
        }
    }
    let pids: Vec<u32> = ranks.iter().map(|w| w.tgid).collect();
    for w in ranks {
        w.exit();
    }
    let (fa, fb) = (da.stop(), db.stop());
    let (a, b) = (fa.output.to_str().unwrap(), fb.output.to_str().unwrap());

    let out = std::process::Command::new(daemon_bin())
        .args(["report", a, b, "--format", "json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let j = &v["job"];
    let names: Vec<&str> = j["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    // Both captures name this machine: the nodes are named by their files.
    assert_eq!(
        names,
        ["node-a/0", "node-a/1", "node-b/2", "node-b/3"],
        "{j:#}"
    );
    for (r, pid) in j["ranks"].as_array().unwrap().iter().zip(&pids) {
        assert_eq!(r["pid"], *pid);
        assert_eq!(
            (r["nranks"].as_i64(), r["steps"].as_u64()),
            (Some(4), Some(6)),
            "{r}"
        );
        assert_eq!(r["communicator"], id_of("straggle"));
        assert_eq!(
            (r["nccl_calls"].as_u64(), r["nccl_bytes"].as_u64()),
            (Some(7), Some(7 * 4096))
        );
        assert_eq!(r["bytes_by_op"]["AllReduce"], 7 * 4096);
    }
    let comms = j["communicators"].as_array().unwrap();
    assert_eq!(comms.len(), 1, "{j:#}");
    assert_eq!(comms[0]["id"], id_of("straggle"));
    assert_eq!(
        (comms[0]["calls"].as_u64(), comms[0]["bytes"].as_u64()),
        (Some(28), Some(28 * 4096))
    );
    assert_eq!(comms[0]["missing"], serde_json::json!([]));
    // Two captures with clock pairs at both ends; B began about 0.3 s after A.
    let caps = j["captures"].as_array().unwrap();
    assert_eq!(caps.len(), 2);
    for c in caps {
        assert_eq!(c["complete"], true);
        assert!(c["clock_drift_ns"].is_i64(), "{c}");
    }
    let lag = caps[1]["started_at_unix_ns"].as_u64().unwrap()
        - caps[0]["started_at_unix_ns"].as_u64().unwrap();
    assert!(
        (300_000_000..3_000_000_000).contains(&lag),
        "B started {lag} ns after A"
    );
    // Six matched steps, rank 2 the slowest in each; it works 40 ms a step, the others
    // 2 ms (the rest of their step is waiting for rank 2).
    assert_eq!(j["work"], "derived");
    let steps = j["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 6, "{j:#}");
    for s in steps {
        assert_eq!(s["slowest"], "node-b/2", "{s}");
        let work = s["work_ns"][2].as_u64().unwrap();
        assert!((40_000_000..80_000_000).contains(&work), "{s}");
    }
    let st = j["stragglers"].as_array().unwrap();
    assert_eq!(st.len(), 1, "{j:#}");
    assert_eq!(
        (
            st[0]["rank"].as_str(),
            st[0]["slowest_in"].as_u64(),
            st[0]["of"].as_u64()
        ),
        (Some("node-b/2"), Some(6), Some(6))
    );
    // The ranks' first launches of a matched step lie within a few ms (one machine's clock).
    let spread = j["alignment"]["matched_step_spread_ns"].as_u64().unwrap();
    assert!(spread < 20_000_000, "spread {spread}");
    assert_eq!(
        j["notes"],
        serde_json::json!([
            "two captures name the same host: nodes are named by their files instead"
        ])
    );

    // The table says the same.
    let out = std::process::Command::new(daemon_bin())
        .args(["report", a, b])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.starts_with("job: 4 ranks on 2 nodes, from 2 captures\n"),
        "{text}"
    );
    assert!(
        text.contains("node-b/2 was the slowest rank in 6 of 6 matched steps"),
        "{text}"
    );

    // One timeline of both: each rank's process named node/rank, with its real pid.
    let dir = TempDir::new("merged-trace");
    let trace = dir.path().join("job.json");
    let out = std::process::Command::new(daemon_bin())
        .args(["export", a, b, "-o", trace.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let mut named: Vec<String> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_owned())
        .filter(|n| n.contains(" · "))
        // The job after the name depends on how the test runs (here: under `timeout`).
        .map(|n| n.split(" [").next().unwrap().to_owned())
        .collect();
    named.sort();
    let want: Vec<String> = (0..4)
        .map(|r| {
            format!(
                "node-{}/{r} · nccl_workload (pid {}, exited)",
                if r < 2 { "a" } else { "b" },
                pids[r]
            )
        })
        .collect();
    assert_eq!(named, want);

    // Each rank's collectives on its communicator's track: seven all-reduces each.
    let ev = t["traceEvents"].as_array().unwrap();
    for r in 0..4 {
        let name = format!("NCCL {} rank {r}/4", id_of("straggle"));
        let track: Vec<(&Value, &Value)> = ev
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["args"]["name"] == name.as_str())
            .map(|e| (&e["pid"], &e["tid"]))
            .collect();
        assert_eq!(track.len(), 1, "{name}");
        let n = ev
            .iter()
            .filter(|e| (&e["pid"], &e["tid"]) == track[0] && e["name"] == "ncclAllReduce")
            .count();
        assert_eq!(n, 7, "{name}");
    }

    // `--rank 2`: only that rank's process, from whichever capture holds it.
    let one = dir.path().join("rank2.json");
    let out = std::process::Command::new(daemon_bin())
        .args(["export", a, b, "--rank", "2", "-o", one.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_slice(&std::fs::read(&one).unwrap()).unwrap();
    let procs: Vec<&str> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .filter(|n| !n.ends_with("GPUs (NVML)"))
        .collect();
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert!(
        procs[0].starts_with(&format!("node-b/2 · nccl_workload (pid {}", pids[2])),
        "{procs:?}"
    );
    let out = std::process::Command::new(daemon_bin())
        .args(["export", a, b, "--rank", "9", "-o", one.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "no process holds rank 9 of the job's communicator in the captures (they hold: \
             node-a/0, node-a/1, node-b/2, node-b/3)"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // One capture given twice.
    let out = std::process::Command::new(daemon_bin())
        .args(["report", a, a])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("are the same capture (same host, same start)"),
        "{err}"
    );
    // Other views need one capture.
    let out = std::process::Command::new(daemon_bin())
        .args(["report", a, b, "--view", "kernels"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
