//! Which API a driver launch stands for: the hook through which the reader relabels a runtime
//! launch seen one layer down.
//!
//! With one trap per launch a runtime's launch entry (`cudaLaunchKernel`) is left unprobed:
//! the driver call it makes (`cuLaunchKernel`) is the only probe the launch passes. The
//! record then says `cuLaunchKernel`, and only the code that called the driver tells a runtime
//! launch from a program's own driver call. Which code belongs to which library is the enrich
//! stage's knowledge (process mappings, the libraries attached); the reader asks it through
//! this trait before a record leaves for the model, so that the model, the taps and the
//! capture file all see the relabelled record, and a replay reads what the live run reported.

use profiler_common::{Header, LaunchBody, flags, kind};

/// Answers, for a driver launch, the API it is reported under.
pub trait LaunchOrigin: Send {
    /// The runtime API a driver launch of `api`, called from `caller` in process `tgid`,
    /// stands for; `None`: it stays as it is (the program's own driver call, or no runtime's
    /// launch entry was left unprobed).
    fn runtime_api(&mut self, tgid: u32, api: u32, caller: u64) -> Option<u32>;
    /// Process `tgid` ended: what was learned of it must not outlive it (its id is reused).
    fn forget(&mut self, tgid: u32);
    /// Process `tgid` mapped `[addr, addr+len)` executable (a [`kind::MAP`] record): the
    /// moment to learn, while it surely runs, whether that is a runtime's code.
    fn mapped(&mut self, _tgid: u32, _addr: u64, _len: u64) {}
}

/// Leaves every launch as it is (two traps per launch: the runtime's entries are probed).
pub struct Unchanged;

impl LaunchOrigin for Unchanged {
    fn runtime_api(&mut self, _: u32, _: u32, _: u64) -> Option<u32> {
        None
    }
    fn forget(&mut self, _: u32) {}
}

const API: std::ops::Range<usize> = 4..8;
const BODY: usize = size_of::<Header>();
const CALLER: usize = BODY + std::mem::offset_of!(LaunchBody, caller);
const FLAGS: usize = BODY + std::mem::offset_of!(LaunchBody, flags);

fn word(rec: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(rec.get(at..at + 4)?.try_into().ok()?))
}

/// Hands a [`kind::MAP`] record's mapping to `origin`; any other record is left alone.
pub fn note_mapping(rec: &[u8], origin: &mut dyn LaunchOrigin) {
    if word(rec, 0) != Some(kind::MAP) || rec.len() < BODY + 16 {
        return;
    }
    let Some(tgid) = word(rec, 8) else {
        return;
    };
    let u = |at: usize| u64::from_le_bytes(rec[at..at + 8].try_into().unwrap_or_default());
    origin.mapped(tgid, u(BODY), u(BODY + 8));
}

/// Relabels `rec` in place when it is a driver launch that `origin` says a runtime made: its
/// API becomes the runtime's and its flags gain [`flags::DRIVER_HANDLE`] (its `func` is the
/// driver's handle, not a host stub). A record of any other kind is left alone.
pub fn relabel(rec: &mut [u8], origin: &mut dyn LaunchOrigin) {
    if word(rec, 0) != Some(kind::LAUNCH) || rec.len() < FLAGS + 4 {
        return;
    }
    let (Some(api), Some(tgid)) = (word(rec, API.start), word(rec, 8)) else {
        return;
    };
    let caller = u64::from_le_bytes(rec[CALLER..CALLER + 8].try_into().unwrap_or_default());
    if let Some(rt) = origin.runtime_api(tgid, api, caller) {
        rec[API].copy_from_slice(&rt.to_le_bytes());
        let f = word(rec, FLAGS).unwrap_or(0) | flags::DRIVER_HANDLE;
        rec[FLAGS..FLAGS + 4].copy_from_slice(&f.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler_common::{Record, decode::encode};

    /// Driver API 3 called from 0x5000 in process 7 is runtime API 9.
    struct Fixed(Vec<u32>);
    impl LaunchOrigin for Fixed {
        fn runtime_api(&mut self, tgid: u32, api: u32, caller: u64) -> Option<u32> {
            (tgid == 7 && api == 3 && caller == 0x5000).then_some(9)
        }
        fn forget(&mut self, tgid: u32) {
            self.0.push(tgid);
        }
    }

    fn launch(kind: u32, api: u32, caller: u64) -> Vec<u8> {
        encode(&Record {
            header: Header {
                kind,
                api,
                tgid: 7,
                tid: 8,
                ts_ns: 1,
            },
            body: LaunchBody {
                func: 0xfeed,
                caller,
                flags: flags::COOPERATIVE,
                ..Default::default()
            },
        })
        .to_vec()
    }

    fn decoded(rec: &[u8]) -> (u32, u64, u32) {
        match profiler_common::decode::decode(rec) {
            Ok(profiler_common::decode::Event::Launch(h, l)) => (h.api, l.func, l.flags),
            other => panic!("not a launch: {other:?}"),
        }
    }

    #[test]
    fn a_runtime_callers_driver_launch_takes_the_runtime_api_and_keeps_its_handle() {
        let mut rec = launch(kind::LAUNCH, 3, 0x5000);
        relabel(&mut rec, &mut Fixed(vec![]));
        assert_eq!(
            decoded(&rec),
            (9, 0xfeed, flags::COOPERATIVE | flags::DRIVER_HANDLE)
        );
    }

    #[test]
    fn other_callers_and_other_kinds_are_left_alone() {
        let mut own = launch(kind::LAUNCH, 3, 0x6000);
        relabel(&mut own, &mut Fixed(vec![]));
        assert_eq!(decoded(&own), (3, 0xfeed, flags::COOPERATIVE));
        let mut copy = launch(kind::COPY, 3, 0x5000);
        let before = copy.clone();
        relabel(&mut copy, &mut Fixed(vec![]));
        assert_eq!(copy, before);
        let mut short = launch(kind::LAUNCH, 3, 0x5000);
        short.truncate(40);
        let before = short.clone();
        relabel(&mut short, &mut Fixed(vec![]));
        assert_eq!(short, before);
    }
}
