use super::*;

/// A field read back: a number (varint or fixed64) or bytes.
type Field = (u32, Result<u64, Vec<u8>>);

/// Reads back the fields of one length-delimited protobuf message — enough to check the
/// encoding by hand.
fn fields(b: &[u8]) -> Vec<Field> {
    let mut out = Vec::new();
    let mut i = 0;
    let varint = |i: &mut usize| {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let byte = b[*i];
            *i += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return v;
            }
            shift += 7;
        }
    };
    while i < b.len() {
        let k = varint(&mut i);
        let (field, wire) = ((k >> 3) as u32, k & 7);
        match wire {
            0 => out.push((field, Ok(varint(&mut i)))),
            1 => {
                let v = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
                i += 8;
                out.push((field, Ok(v)));
            }
            2 => {
                let n = varint(&mut i) as usize;
                out.push((field, Err(b[i..i + n].to_vec())));
                i += n;
            }
            w => panic!("wire type {w}"),
        }
    }
    out
}

fn packets(b: &[u8]) -> Vec<Vec<Field>> {
    fields(b)
        .into_iter()
        .map(|(f, v)| {
            assert_eq!(f, 1);
            fields(&v.unwrap_err())
        })
        .collect()
}

fn get(m: &[Field], field: u32) -> Vec<&Result<u64, Vec<u8>>> {
    m.iter()
        .filter(|(f, _)| *f == field)
        .map(|(_, v)| v)
        .collect()
}

#[test]
fn varints_and_keys_are_protobuf_encoding() {
    let mut m = Vec::new();
    m.uint(1, 150);
    m.int(2, -1);
    m.bytes(60, b"ab");
    for v in [0, 1, 127, 128, 16_383, 16_384, u64::MAX] {
        let mut b = Vec::new();
        b.varint(v);
        assert_eq!(b.len(), varint_len(v), "{v}");
    }
    assert_eq!(
        m,
        [
            0x08, 0x96, 0x01, // field 1 varint 150
            0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // -1
            0xe2, 0x03, 0x02, b'a', b'b' // field 60, length 2
        ]
    );
}

/// A packet's track event, if it has one.
fn event_of(pk: &[Field]) -> Option<Vec<Field>> {
    get(pk, f::TRACK_EVENT)
        .first()
        .map(|e| fields(e.as_ref().unwrap_err()))
}

fn seq_of(pk: &[Field]) -> u64 {
    *get(pk, f::SEQUENCE_ID)[0].as_ref().unwrap()
}

/// Interned entries `(iid, string)` of list `field` in a packet.
fn interned(pk: &[Field], field: u32) -> Vec<(u64, String)> {
    get(pk, f::INTERNED_DATA)
        .iter()
        .flat_map(|i| fields(i.as_ref().unwrap_err()))
        .filter(|(k, _)| *k == field)
        .map(|(_, e)| {
            let e = fields(e.as_ref().unwrap_err());
            let id = *get(&e, f::IID)[0].as_ref().unwrap();
            let s = get(&e, f::IID_NAME)[0].clone().unwrap_err();
            (id, String::from_utf8(s).unwrap())
        })
        .collect()
}

/// Process 7 and its thread 8, named.
fn named() -> [TraceEvent; 2] {
    [
        TraceEvent::ProcessName {
            pid: 7,
            name: "p".into(),
        },
        TraceEvent::ThreadName {
            pid: 7,
            tid: 8,
            name: "t".into(),
        },
    ]
}

fn launch(tid: u64, ts_ns: u64, args: Args) -> TraceEvent {
    TraceEvent::Slice {
        pid: 7,
        tid,
        ts_ns,
        dur: super::super::Dur::Mark,
        cat: "launch",
        name: "k".into(),
        args,
    }
}

#[test]
fn each_track_is_a_sequence_with_its_clock_defaults_and_descriptor() {
    let mut out = Vec::new();
    let mut s = PerfettoSink::new(&mut out);
    let [process, thread] = named();
    for e in [process, thread] {
        s.event(e).unwrap();
    }
    s.finish().unwrap();
    let p = packets(&out);
    assert_eq!(p.len(), 4);
    for (i, seq) in [(0, 1), (2, 2)] {
        // The clock: the trace's clock and the incremental one, both 0.
        assert_eq!(seq_of(&p[i]), seq);
        let snap = fields(get(&p[i], f::CLOCK_SNAPSHOT)[0].as_ref().unwrap_err());
        let clocks: Vec<Vec<Field>> = get(&snap, f::CS_CLOCKS)
            .iter()
            .map(|c| fields(c.as_ref().unwrap_err()))
            .collect();
        assert_eq!(clocks.len(), 2);
        assert_eq!(get(&clocks[0], f::CLOCK_ID), [&Ok(CLOCK_TRACE)]);
        assert_eq!(get(&clocks[1], f::CLOCK_ID), [&Ok(CLOCK_INCREMENTAL)]);
        assert_eq!(get(&clocks[1], f::CLOCK_TIMESTAMP), [&Ok(0)]);
        assert_eq!(get(&clocks[1], f::CLOCK_IS_INCREMENTAL), [&Ok(1)]);
        // Then the defaults, clearing the sequence's state, with the track.
        let d = &p[i + 1];
        assert_eq!(seq_of(d), seq);
        assert_eq!(
            get(d, f::SEQUENCE_FLAGS),
            [&Ok(SEQ_INCREMENTAL_STATE_CLEARED)]
        );
        let defaults = fields(get(d, f::PACKET_DEFAULTS)[0].as_ref().unwrap_err());
        assert_eq!(
            get(&defaults, f::PD_TIMESTAMP_CLOCK_ID),
            [&Ok(CLOCK_INCREMENTAL)]
        );
        let ted = fields(
            get(&defaults, f::PD_TRACK_EVENT_DEFAULTS)[0]
                .as_ref()
                .unwrap_err(),
        );
        assert_eq!(get(&ted, f::TED_TRACK_UUID), [&Ok(seq)]);
        let td = fields(get(d, f::TRACK_DESCRIPTOR)[0].as_ref().unwrap_err());
        assert_eq!(get(&td, f::TD_UUID), [&Ok(seq)]);
    }
}

#[test]
fn events_carry_the_time_since_their_tracks_last_and_strings_once_per_sequence() {
    let mut out = Vec::new();
    let mut s = PerfettoSink::new(&mut out);
    let stream = super::super::STREAM_TID_BASE;
    let args = || {
        Args::from([
            ("grid", Arg::Dim3([1, 1, 1])),
            ("shared_bytes", Arg::Uint(0)),
            ("stream", Arg::Hex(0x1)),
        ])
    };
    let [process, thread] = named();
    for e in [
        process,
        thread,
        launch(8, 1500, args()),
        TraceEvent::ThreadName {
            pid: 7,
            tid: stream,
            name: "stream 0x1".into(),
        },
        launch(stream, 1500, Args::default()),
        launch(8, 2100, args()),
        // Earlier than the thread's last event (a late record).
        launch(8, 1000, args()),
        launch(8, 2500, args()),
    ] {
        s.event(e).unwrap();
    }
    s.finish().unwrap();
    let p = packets(&out);
    let events: Vec<(&Vec<Field>, Vec<Field>)> = p
        .iter()
        .filter_map(|pk| event_of(pk).map(|e| (pk, e)))
        .collect();
    // Thread, stream, then three more on the thread; all instants.
    let seqs: Vec<u64> = events.iter().map(|(pk, _)| seq_of(pk)).collect();
    assert_eq!(seqs, [2, 3, 2, 2, 2]);
    for (_, e) in &events {
        assert_eq!(get(e, f::TE_TYPE), [&Ok(INSTANT)]);
        assert!(
            get(e, f::TE_TRACK).is_empty(),
            "the defaults name the track"
        );
    }
    let time = |i: usize| {
        let pk = events[i].0;
        let clock = get(pk, f::TIMESTAMP_CLOCK_ID)
            .first()
            .map(|c| *c.as_ref().unwrap());
        (*get(pk, f::TIMESTAMP)[0].as_ref().unwrap(), clock)
    };
    // 1500 from 0; the stream's own 1500 from 0; +600; 1000 absolute; +400 from 2100.
    assert_eq!(time(0), (1500, None));
    assert_eq!(time(1), (1500, None));
    assert_eq!(time(2), (600, None));
    assert_eq!(time(3), (1000, Some(CLOCK_TRACE)));
    assert_eq!(time(4), (400, None));
    // The first event of each sequence brings its strings; the thread's next ones none.
    let (pk, first) = &events[0];
    assert_eq!(interned(pk, f::ID_CATEGORIES), [(1, "launch".to_owned())]);
    assert_eq!(interned(pk, f::ID_NAMES), [(2, "k".to_owned())]);
    let arg_names: Vec<String> = interned(pk, f::ID_ANNOTATION_NAMES)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(arg_names, ["grid", "shared_bytes", "stream"]);
    let values: Vec<String> = interned(pk, f::ID_STRING_VALUES)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(values, ["[1,1,1]", "0x1"]);
    assert_eq!(interned(events[1].0, f::ID_NAMES), [(2, "k".to_owned())]);
    assert!(get(events[2].0, f::INTERNED_DATA).is_empty());
    for (pk, _) in &events {
        assert_eq!(
            get(pk, f::SEQUENCE_FLAGS),
            [&Ok(SEQ_NEEDS_INCREMENTAL_STATE)]
        );
    }
    // Arguments by id: the grid's JSON text and the stream's hex are interned values.
    let anns: Vec<Vec<Field>> = get(first, f::TE_ANNOTATIONS)
        .iter()
        .map(|a| fields(a.as_ref().unwrap_err()))
        .collect();
    assert_eq!(anns.len(), 3);
    let value_id = |s: &str| {
        interned(pk, f::ID_STRING_VALUES)
            .into_iter()
            .find(|(_, v)| v == s)
            .unwrap()
            .0
    };
    assert_eq!(get(&anns[0], f::DA_STRING_IID), [&Ok(value_id("[1,1,1]"))]);
    assert_eq!(get(&anns[1], f::DA_UINT), [&Ok(0)]);
    assert_eq!(get(&anns[2], f::DA_STRING_IID), [&Ok(value_id("0x1"))]);
    // The stream's event: its name only.
    assert!(get(&events[1].1, f::TE_ANNOTATIONS).is_empty());
}

#[test]
fn flows_bind_to_instants_and_timed_slices_begin_and_end() {
    let mut out = Vec::new();
    let mut s = PerfettoSink::new(&mut out);
    let gpu = super::super::GPU_TID_BASE;
    let flow = |start: bool, tid, ts_ns| {
        let (id, pid, cat, name) = (9, 7, "gpu", "gpu");
        if start {
            TraceEvent::FlowStart {
                id,
                pid,
                tid,
                ts_ns,
                cat,
                name,
            }
        } else {
            TraceEvent::FlowEnd {
                id,
                pid,
                tid,
                ts_ns,
                cat,
                name,
            }
        }
    };
    for e in [
        launch(8, 1500, Args::default()),
        TraceEvent::Slice {
            pid: 7,
            tid: gpu,
            ts_ns: 4000,
            dur: super::super::Dur::Ns(250),
            cat: "gpu kernel",
            name: "k".into(),
            args: Args::default(),
        },
        flow(true, 8, 1500),
        flow(false, gpu, 4000),
        TraceEvent::Counter {
            pid: 7,
            ts_ns: 5000,
            name: "device memory (bytes)".into(),
            values: vec![("live", Some(4096))],
        },
    ] {
        s.event(e).unwrap();
    }
    s.finish().unwrap();
    assert_eq!(s.unbound_flows, 0);
    let p = packets(&out);
    let events: Vec<Vec<Field>> = p.iter().filter_map(|pk| event_of(pk)).collect();
    let kinds: Vec<u64> = events
        .iter()
        .map(|e| *get(e, f::TE_TYPE)[0].as_ref().unwrap())
        .collect();
    assert_eq!(kinds, [INSTANT, SLICE_BEGIN, SLICE_END, COUNTER]);
    assert_eq!(get(&events[0], f::TE_FLOW_IDS), [&Ok(9)]);
    assert_eq!(get(&events[1], f::TE_TERMINATING_FLOW_IDS), [&Ok(9)]);
    assert_eq!(get(&events[3], f::TE_COUNTER_INT), [&Ok(4096)]);
    // The end: 250 ns after the begin on the GPU track's clock.
    let ts: Vec<u64> = p
        .iter()
        .filter(|pk| event_of(pk).is_some())
        .map(|pk| *get(pk, f::TIMESTAMP)[0].as_ref().unwrap())
        .collect();
    assert_eq!(ts, [1500, 4000, 250, 5000]);
}

#[test]
fn past_the_table_limit_new_strings_are_written_in_place() {
    let mut out = Vec::new();
    let mut s = PerfettoSink::new(&mut out);
    s.strings.max_bytes = "launch".len() + 1;
    s.event(launch(
        8,
        10,
        Args::from([("api", Arg::Str("cuLaunchKernel".into()))]),
    ))
    .unwrap();
    s.finish().unwrap();
    let p = packets(&out);
    let (pk, e) = p
        .iter()
        .find_map(|pk| event_of(pk).map(|e| (pk, e)))
        .unwrap();
    // The category fitted ("launch" came first); the name "k" did too; the rest did not.
    assert_eq!(interned(pk, f::ID_CATEGORIES), [(1, "launch".to_owned())]);
    assert_eq!(interned(pk, f::ID_NAMES), [(2, "k".to_owned())]);
    let a = fields(get(&e, f::TE_ANNOTATIONS)[0].as_ref().unwrap_err());
    assert_eq!(get(&a, f::DA_NAME), [&Err(b"api".to_vec())]);
    assert_eq!(get(&a, f::DA_STRING), [&Err(b"cuLaunchKernel".to_vec())]);
}
