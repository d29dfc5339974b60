//! The Grafana dashboards of deploy/grafana/dashboards, as the tests read them: the files, their
//! panels, and their queries with the template variables replaced as Grafana would.

use serde_json::Value;
use std::path::PathBuf;

/// deploy/grafana/dashboards in the source tree.
pub fn dashboards_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/dashboards")
}

/// The dashboard file `name` (e.g. `gpuprofd-node.json`), parsed.
pub fn load_dashboard(name: &str) -> Value {
    let p = dashboards_dir().join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every panel of a dashboard (those inside collapsed rows too), rows apart.
pub fn panels(d: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        if p["type"] == "row" {
            out.extend(p["panels"].as_array().into_iter().flatten());
        } else {
            out.push(p);
        }
    }
    out
}

/// `expr` with its template variables (`$name`, `${name}`) replaced by `vars`; panics when one
/// is left.
pub fn substitute(expr: &str, vars: &[(&str, &str)]) -> String {
    let mut s = expr.to_owned();
    for (k, v) in vars {
        s = s
            .replace(&format!("${{{k}}}"), v)
            .replace(&format!("${k}"), v);
    }
    assert!(!s.contains('$'), "a variable left in {s}");
    s
}
