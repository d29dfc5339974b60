//! The vocabulary every stage after discovery shares: the API table (the id carried in every
//! record's `api` field ↔ the hooked symbol's name and layer) and the libraries the probes are
//! attached to.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A CUDA library gpuprofd attached its probes to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryReport {
    /// The path as the process that mapped it sees it (or as given with `--lib`).
    pub path: String,
    pub soname: String,
    /// `driver`, `runtime`, `nccl` or `inject`.
    pub layer: String,
    /// From the file's name (`libcuda.so.535.261.03`: `535.261.03`; `libcudart.so.12.4.127`:
    /// `12.4.127`); `null` when the name carries no more than the SONAME (pip's
    /// `libcudart.so.12`): the build id then tells builds apart.
    pub version: Option<String>,
    /// The ELF `NT_GNU_BUILD_ID`, in hex (`null` without one).
    pub build_id: Option<String>,
    /// Functions with a probe attached.
    pub probes: u64,
}

impl LibraryReport {
    /// The library as an unprivileged user sees it: its file name without the directory (a
    /// library's path can name another user's home or container).
    pub fn without_directory(&mut self) {
        if let Some(name) = std::path::Path::new(&self.path).file_name() {
            self.path = name.to_string_lossy().into_owned();
        }
    }
}

/// Which library a hooked symbol lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// `libcuda.so.1`.
    Driver,
    /// `libcudart.so.*`.
    Runtime,
    /// `libnccl.so.2`, or a library that exports NCCL's API (NCCL linked into a framework).
    Nccl,
    /// `libgpuprofd_inject.so`, gpuprofd's opt-in injection library: GPU activity measured by
    /// CUPTI, handed over at its three sites (`profiler_common::gpu`).
    Inject,
}

impl Layer {
    /// The report's name of the layer (`driver`, `runtime`, `nccl`, `inject`).
    pub fn label(self) -> &'static str {
        match self {
            Layer::Driver => "driver",
            Layer::Runtime => "runtime",
            Layer::Nccl => "nccl",
            Layer::Inject => "inject",
        }
    }
}

/// One hooked symbol (every library copy that exports it shares the id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiInfo {
    pub name: String,
    pub layer: Layer,
}

/// Ids are dense, assigned in first-seen order, and fit the cookie's 16 bits.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ApiTable {
    apis: Vec<ApiInfo>,
    #[serde(skip)]
    by_name: HashMap<String, u16>,
}

impl ApiTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of `name`, adding it if it is new.
    pub fn intern(&mut self, name: &str, layer: Layer) -> u16 {
        if let Some(&id) = self.by_name.get(name) {
            return id;
        }
        let id = u16::try_from(self.apis.len()).expect("more than 65535 hooked symbols");
        self.apis.push(ApiInfo {
            name: name.to_owned(),
            layer,
        });
        self.by_name.insert(name.to_owned(), id);
        id
    }

    /// A table with these entries, ids in order (as [`Self::list`] gave them).
    pub fn from_list(list: Vec<ApiInfo>) -> Self {
        let mut t = Self::new();
        for a in list.into_iter().take(usize::from(u16::MAX) + 1) {
            // A damaged file may repeat a name: the id must still match the position.
            let id = t.apis.len() as u16;
            t.by_name.entry(a.name.clone()).or_insert(id);
            t.apis.push(a);
        }
        t
    }

    /// The entries, in id order.
    pub fn list(&self) -> &[ApiInfo] {
        &self.apis
    }

    pub fn get(&self, id: u32) -> Option<&ApiInfo> {
        self.apis.get(id as usize)
    }

    /// The symbol name of `id`, or `"<api N>"` for an id this table never issued.
    pub fn name(&self, id: u32) -> String {
        self.get(id)
            .map(|a| a.name.clone())
            .unwrap_or_else(|| format!("<api {id}>"))
    }

    pub fn id(&self, name: &str) -> Option<u16> {
        self.by_name.get(name).copied()
    }

    pub fn len(&self) -> usize {
        self.apis.len()
    }

    pub fn is_empty(&self) -> bool {
        self.apis.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u16, &ApiInfo)> {
        self.apis.iter().enumerate().map(|(i, a)| (i as u16, a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_is_stable() {
        let mut t = ApiTable::new();
        assert_eq!(t.intern("cuLaunchKernel", Layer::Driver), 0);
        assert_eq!(t.intern("cudaLaunchKernel", Layer::Runtime), 1);
        assert_eq!(t.intern("cuLaunchKernel", Layer::Driver), 0);
        assert_eq!(t.name(1), "cudaLaunchKernel");
        assert_eq!(t.name(9), "<api 9>");
        assert_eq!(t.get(1).unwrap().layer, Layer::Runtime);
    }
}
