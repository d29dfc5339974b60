//! The Grafana dashboards of deploy/grafana are files Grafana can load: Grafana's published
//! schema types accept them, and their ids, layout, data source and template variables resolve.
//! (No Grafana server runs here: none is packaged in the registries the tests may use, as
//! docs/DASHBOARDS.md says. tests/tests/dashboards.rs runs their queries.)
//!
//! Run through `cargo xtask test`.

use gpuprofd_tests::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;

const NODE: &str = "gpuprofd-node.json";
const JOB: &str = "gpuprofd-job.json";

/// The `$name`, `${name}` and `${name:format}` references in `s`.
fn variables_used(s: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' {
            let braced = b.get(i + 1) == Some(&b'{');
            let start = i + 1 + usize::from(braced);
            let mut j = start;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
                j += 1;
            }
            if j > start {
                out.insert(s[start..j].to_owned());
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Grafana's own variables the dashboards may use.
const BUILT_IN: &[&str] = &["__rate_interval", "__interval", "__range"];

/// What Grafana needs to load the files and resolve their references.
#[test]
fn dashboards_are_well_formed() {
    let mut uids = BTreeSet::new();
    for name in [NODE, JOB] {
        let d = load_dashboard(name);
        assert_eq!(d["schemaVersion"], 39, "{name}");
        assert!(d["id"].is_null(), "{name}: no instance-specific id");
        let uid = d["uid"].as_str().expect("uid");
        assert!((1..=40).contains(&uid.len()), "{name}: uid {uid}");
        assert!(uids.insert(uid.to_owned()), "{name}: uid {uid} twice");
        let vars: Vec<&Value> = d["templating"]["list"].as_array().unwrap().iter().collect();
        let defined: BTreeSet<String> = vars
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            defined.len(),
            vars.len(),
            "{name}: a variable defined twice"
        );
        let ds = vars
            .iter()
            .find(|v| v["type"] == "datasource")
            .expect("a data source variable");
        assert_eq!(
            (&ds["name"], &ds["query"]),
            (&Value::from("datasource"), &Value::from("prometheus")),
            "{name}"
        );
        let ds_ref = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
        // Every reference resolves: variables in queries, variable queries and links.
        let mut texts: Vec<String> = Vec::new();
        for v in &vars {
            if v["type"] == "query" {
                assert_eq!(v["datasource"], ds_ref, "{name}: variable {}", v["name"]);
                texts.push(v["query"]["query"].as_str().unwrap().to_owned());
            }
        }
        for l in d["links"].as_array().unwrap() {
            texts.push(l["url"].as_str().unwrap().to_owned());
        }
        // Ids unique, the grid 24 wide, no two panels on the same cells.
        let mut ids = BTreeSet::new();
        let mut cells: Vec<(i64, i64, i64, i64, String)> = Vec::new();
        for p in d["panels"].as_array().unwrap() {
            let title = p["title"].as_str().unwrap().to_owned();
            assert!(
                ids.insert(p["id"].as_i64().unwrap()),
                "{name}: id of {title}"
            );
            let g = &p["gridPos"];
            let (x, y, w, h) = (
                g["x"].as_i64().unwrap(),
                g["y"].as_i64().unwrap(),
                g["w"].as_i64().unwrap(),
                g["h"].as_i64().unwrap(),
            );
            assert!(x >= 0 && y >= 0 && w > 0 && h > 0 && x + w <= 24, "{title}");
            for (x2, y2, w2, h2, other) in &cells {
                let apart = x + w <= *x2 || x2 + w2 <= x || y + h <= *y2 || y2 + h2 <= y;
                assert!(apart, "{name}: {title} overlaps {other}");
            }
            cells.push((x, y, w, h, title));
        }
        let mut titles = BTreeSet::new();
        for p in panels(&d) {
            let title = p["title"].as_str().unwrap();
            assert!(titles.insert(title), "{name}: two panels titled {title}");
            assert!(
                ["timeseries", "stat", "table"].contains(&p["type"].as_str().unwrap()),
                "{title}"
            );
            assert!(!p["description"].as_str().unwrap().is_empty(), "{title}");
            assert_eq!(p["datasource"], ds_ref, "{name}: {title}");
            let mut refs = BTreeSet::new();
            let targets = p["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{title}: no query");
            for t in targets {
                assert_eq!(t["datasource"], ds_ref, "{name}: {title}");
                assert!(refs.insert(t["refId"].as_str().unwrap()), "{title}: refId");
                let expr = t["expr"].as_str().unwrap();
                if expr.contains("rate(") {
                    assert!(expr.contains("[$__rate_interval]"), "{title}: {expr}");
                }
                texts.push(expr.to_owned());
                texts.push(t["legendFormat"].as_str().unwrap_or("").to_owned());
            }
        }
        for t in &texts {
            for v in variables_used(t) {
                assert!(
                    defined.contains(&v) || BUILT_IN.contains(&v.as_str()),
                    "{name}: ${v} is not defined (in {t})"
                );
            }
        }
    }
    // The provider points at where the docs say to put the files, as a file provider.
    let prov =
        std::fs::read_to_string(dashboards_dir().join("../provisioning/dashboards/gpuprofd.yaml"))
            .unwrap();
    for line in [
        "apiVersion: 1",
        "type: file",
        "path: /var/lib/grafana/dashboards/gpuprofd",
    ] {
        assert!(prov.contains(line), "provisioning lacks `{line}`");
    }
}

/// Grafana's own published types of the dashboard model and of the panels' options (npm's
/// @grafana/schema, run through TypeScript by tests/tools/check_grafana_schema.mjs) accept the
/// files: no field they do not know, no value of the wrong type.
#[test]
fn dashboards_match_grafanas_schema() {
    let tools = "/opt/gpuprofd-test-tools/grafana-schema";
    assert!(
        std::path::Path::new(tools)
            .join("node_modules/@grafana/schema")
            .exists(),
        "{tools} lacks @grafana/schema: run scripts/setup.sh --test-tools"
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/check_grafana_schema.mjs");
    let out = std::process::Command::new("node")
        .arg(script)
        .arg(tools)
        .args([NODE, JOB].map(|f| dashboards_dir().join(f)))
        .output()
        .expect("node (Node.js) runs the schema check: run scripts/setup.sh --test-tools");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Grafana's schema refuses the dashboards:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.trim(), "ok 2");
}
