#!/usr/bin/env python3
"""Checks a Perfetto protobuf trace written by `gpuprofd export` against the Chrome JSON trace
of the same capture, with Perfetto's own protobuf schema (the `perfetto` package's
perfetto_trace_pb2, parsed by the `protobuf` runtime): nothing in our encoder is trusted.

  check_pftrace.py TRACE.pftrace TRACE.json

The JSON must follow the Trace Event Format (see `validate`); every packet must parse with no
field the schema does not know; every slice, instant, counter
value and flow of the JSON must be in the protobuf trace on the same process and track, at the
same time, with the same name, category and arguments, and nothing else.

The protobuf is read with the trace processor's rules (checked in its source): each packet
sequence's state (interned strings, valid only after a packet that clears it; TracePacketDefaults'
clock and track), its own clocks (ids 64-127; an incremental one adds each packet's timestamp
to its previous value, starting from the snapshot's), and an instant on a thread's track being a
slice of duration 0 (as a JSON X of dur 0 or a thread-scoped i is). Prints a JSON line of
counts and exits 0, or prints the differences and exits 1.
"""
import collections
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

STEP_TID = (1 << 30) - 1


def ns(us):
    return round(us * 1000)


def norm(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


# The Trace Event Format's fields, per phase, as gpuprofd writes them (name: type).
NUM = (int, float)
PHASES = {
    "M": {"name": str, "pid": int, "args": dict},
    "X": {"name": str, "cat": str, "pid": int, "tid": int, "ts": NUM, "dur": NUM},
    "i": {"name": str, "cat": str, "pid": int, "ts": NUM, "s": str},
    "C": {"name": str, "pid": int, "ts": NUM, "args": dict},
    "s": {"name": str, "cat": str, "id": int, "pid": int, "tid": int, "ts": NUM},
    "f": {"name": str, "cat": str, "id": int, "pid": int, "tid": int, "ts": NUM, "bp": str},
}


def validate(doc):
    """The JSON trace against the Trace Event Format: every event has its phase's fields with
    their types, times are not negative, instants have a scope, counters numeric values, flow
    ends bind to the enclosing slice, thread tracks are named before use."""
    if set(doc) != {"displayTimeUnit", "traceEvents"} or not isinstance(doc["traceEvents"], list):
        sys.exit("not a Trace Event Format object: %s" % sorted(doc))
    named = set()
    for e in doc["traceEvents"]:
        want = PHASES.get(e.get("ph"))
        if want is None:
            sys.exit("unknown phase: %s" % e)
        for k, t in want.items():
            if not isinstance(e.get(k), t) or isinstance(e.get(k), bool):
                sys.exit("%r: field %s missing or not %s" % (e, k, t))
        if e.get("ts", 0) < 0 or e.get("dur", 0) < 0:
            sys.exit("negative time: %s" % e)
        if e["ph"] == "M":
            if e["name"] not in ("process_name", "thread_name") or not isinstance(e["args"].get("name"), str):
                sys.exit("metadata: %s" % e)
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
        if e["ph"] in ("X", "s", "f") and (e["pid"], e["tid"]) not in named:
            sys.exit("an event on a thread track not named before: %s" % e)
        if e["ph"] == "i" and e["s"] not in ("t", "p", "g"):
            sys.exit("instant scope: %s" % e)
        # A series not reported at this moment is null (the trace processor skips it).
        if e["ph"] == "C" and not all(v is None or (isinstance(v, NUM) and not isinstance(v, bool))
                                      for v in e["args"].values()):
            sys.exit("counter values: %s" % e)
        if e["ph"] == "f" and e["bp"] != "e":
            sys.exit("flow end binding: %s" % e)


def from_json(path):
    doc = json.load(open(path))
    validate(doc)
    procs, tracks = {}, {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        if e["ph"] == "M" and e["name"] == "thread_name":
            tracks[(e["pid"], e["tid"])] = e["args"]["name"]
    # What the trace processor makes of each: a slice (an instant on a thread is a slice of
    # duration 0, as is an X of dur 0), a process-scoped instant, a counter value, a flow.
    slices, instants, counters = collections.Counter(), collections.Counter(), collections.Counter()
    at = {}
    flows = collections.defaultdict(dict)
    for e in doc["traceEvents"]:
        ph = e["ph"]
        proc = procs.get(e["pid"], "pid %d" % e["pid"])
        args = tuple(sorted((k, norm(v)) for k, v in e.get("args", {}).items()))
        if ph == "X" or (ph == "i" and e.get("s") != "p"):
            key = (proc, tracks[(e["pid"], e["tid"])], e.get("cat", ""), e["name"],
                   ns(e["ts"]), ns(e.get("dur", 0)), args)
            slices[key] += 1
            at[(e["pid"], e["tid"], ns(e["ts"]))] = key
        elif ph == "i":
            instants[(proc, "<process>", e.get("cat", ""), e["name"], ns(e["ts"]), args)] += 1
        elif ph == "C":
            for k, v in e["args"].items():
                label = e["name"] if len(e["args"]) == 1 else "%s: %s" % (e["name"], k)
                if v is not None:
                    counters[(proc, label, ns(e["ts"]), float(v))] += 1
        elif ph in ("s", "f"):
            flows[e["id"]][ph] = at[(e["pid"], e["tid"], ns(e["ts"]))]
    flow_set = collections.Counter((f["s"], f["f"]) for f in flows.values())
    return slices, instants, counters, flow_set


BOOTTIME = 6
SEQUENCE_CLOCKS = range(64, 128)


class Sequence:
    """One packet sequence's state, as the trace processor keeps it: interned strings (valid
    only after a packet that clears the state), defaults, and its own clocks."""

    def __init__(self):
        self.valid = False
        self.interned = {}
        self.defaults = None
        self.clocks = {}  # clock id -> [is_incremental, last value in ns, offset to BOOTTIME]

    def clear(self):
        self.valid = True
        self.interned = {k: {} for k in ("names", "cats", "arg_names", "values")}
        self.defaults = None

    def time(self, p):
        """The packet's time on the trace clock (BOOTTIME), from its clock and timestamp."""
        clock = p.timestamp_clock_id
        if not clock and self.defaults is not None:
            clock = self.defaults.timestamp_clock_id
        if not clock or clock == BOOTTIME:
            return p.timestamp
        if clock not in self.clocks:
            sys.exit("a packet on clock %d before a snapshot declares it" % clock)
        c = self.clocks[clock]
        if c[0]:
            c[1] += p.timestamp
        else:
            c[1] = p.timestamp
        return c[1] + c[2]


def from_proto(path):
    data = open(path, "rb").read()
    trace = pb.Trace.FromString(data)
    strict = pb.Trace.FromString(data)
    strict.DiscardUnknownFields()
    if len(strict.SerializeToString()) != len(data):
        sys.exit("fields Perfetto's schema does not know: %d of %d bytes"
                 % (len(data) - len(strict.SerializeToString()), len(data)))
    desc, pid_names = {}, {}
    seqs = collections.defaultdict(Sequence)
    slices, instants, counters = collections.Counter(), collections.Counter(), collections.Counter()
    open_slices = collections.defaultdict(list)
    flow_begin, flow_end = {}, {}
    for p in trace.packet:
        if not p.trusted_packet_sequence_id:
            sys.exit("a packet without a sequence")
        seq = seqs[p.trusted_packet_sequence_id]
        if p.sequence_flags & 1:
            seq.clear()
        if p.HasField("trace_packet_defaults"):
            seq.defaults = p.trace_packet_defaults
        if p.HasField("interned_data"):
            if not seq.valid:
                sys.exit("interned data on a sequence whose state was never cleared")
            i = p.interned_data
            for what, entries in (("names", i.event_names), ("cats", i.event_categories),
                                  ("arg_names", i.debug_annotation_names)):
                seq.interned[what].update({e.iid: e.name for e in entries})
            seq.interned["values"].update(
                {e.iid: e.str.decode() for e in i.debug_annotation_string_values})
        if p.HasField("clock_snapshot"):
            clocks = {c.clock_id: c for c in p.clock_snapshot.clocks}
            if BOOTTIME not in clocks:
                sys.exit("a clock snapshot without the trace's clock")
            for cid, c in clocks.items():
                if cid in SEQUENCE_CLOCKS:
                    seq.clocks[cid] = [c.is_incremental, c.timestamp,
                                       clocks[BOOTTIME].timestamp - c.timestamp]
                elif c.is_incremental:
                    sys.exit("an incremental clock that is not the sequence's own")
            continue
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            desc[d.uuid] = d
            if d.HasField("process"):
                pid_names[d.process.pid] = d.process.process_name
            continue
        if not p.HasField("track_event"):
            sys.exit("a packet that is neither a clock, a track descriptor nor a track event")
        if p.sequence_flags & 2 and not seq.valid:
            sys.exit("a track event needing a state its sequence never had")
        if not p.sequence_flags & 2 and not p.sequence_flags & 1:
            sys.exit("a track event that does not declare its use of incremental state")
        ts = seq.time(p)
        te = p.track_event
        uuid = te.track_uuid
        if not te.HasField("track_uuid"):
            if seq.defaults is None or not seq.defaults.track_event_defaults.HasField("track_uuid"):
                sys.exit("a track event with no track")
            uuid = seq.defaults.track_event_defaults.track_uuid
        if uuid not in desc:
            sys.exit("a track event on track %d, not described before it" % uuid)
        d = desc[uuid]

        def proc_of(d):
            if d.HasField("process"):
                return d.process.process_name
            if d.HasField("thread"):
                return pid_names[d.thread.pid]
            if d.parent_uuid:
                return proc_of(desc[d.parent_uuid])
            return d.name

        proc = proc_of(d)
        track = d.thread.thread_name if d.HasField("thread") else d.name
        if te.type == pb.TrackEvent.TYPE_COUNTER:
            if not d.HasField("counter"):
                sys.exit("a counter value on a track that is not a counter track")
            v = te.counter_value if te.HasField("counter_value") else te.double_counter_value
            counters[(proc, d.name, ts, float(v))] += 1
            continue

        def interned(what, iid):
            table = seq.interned[what]
            if iid not in table:
                sys.exit("%s id %d not interned on sequence %d"
                         % (what, iid, p.trusted_packet_sequence_id))
            return table[iid]

        args = []
        for a in te.debug_annotations:
            which = a.WhichOneof("value")
            name = interned("arg_names", a.name_iid) if a.HasField("name_iid") else a.name
            if which == "string_value_iid":
                value = interned("values", a.string_value_iid)
            else:
                value = norm(getattr(a, which))
            args.append((name, value))
        args = tuple(sorted(args))
        name = interned("names", te.name_iid) if te.HasField("name_iid") else te.name
        cat = ",".join([interned("cats", c) for c in te.category_iids] + list(te.categories))
        if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            open_slices[uuid].append((ts, name, cat, args,
                                      list(te.flow_ids), list(te.terminating_flow_ids)))
            continue
        if te.type == pb.TrackEvent.TYPE_SLICE_END:
            start, name, cat, args, fo, fi = open_slices[uuid].pop()
            key = (proc, track, cat, name, start, ts - start, args)
        elif te.type == pb.TrackEvent.TYPE_INSTANT and d.HasField("process"):
            instants[(proc, "<process>", cat, name, ts, args)] += 1
            continue
        elif te.type == pb.TrackEvent.TYPE_INSTANT:
            # On a thread's (or a stream's) track: a slice of duration 0.
            key = (proc, track, cat, name, ts, 0, args)
            fo, fi = list(te.flow_ids), list(te.terminating_flow_ids)
        else:
            sys.exit("track event of type %d" % te.type)
        slices[key] += 1
        for f in fo:
            flow_begin[f] = key
        for f in fi:
            flow_end[f] = key
    if any(open_slices.values()):
        sys.exit("slices begun and never ended")
    if set(flow_begin) != set(flow_end):
        sys.exit("flows with one end only")
    flow_set = collections.Counter((flow_begin[f], flow_end[f]) for f in flow_begin)
    return slices, instants, counters, flow_set


def main():
    want = from_json(sys.argv[2])
    got = from_proto(sys.argv[1])
    bad = False
    for what, w, g in zip(("slices", "instants", "counter values", "flows"), want, got):
        if w != g:
            bad = True
            print("%s differ: only in JSON %s; only in protobuf %s"
                  % (what, list((w - g).items())[:3], list((g - w).items())[:3]))
    if bad:
        sys.exit(1)
    print(json.dumps({"slices": sum(got[0].values()), "instants": sum(got[1].values()),
                      "counter_values": sum(got[2].values()), "flows": sum(got[3].values())}))


if __name__ == "__main__":
    main()
