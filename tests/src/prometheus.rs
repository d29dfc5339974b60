//! A real Prometheus server for the tests (Debian's prometheus package, unpacked by
//! `scripts/setup.sh --test-tools` under /opt/gpuprofd-test-tools): started on a free loopback
//! port with its own data directory, scraping given targets every second, and asked through its
//! HTTP API (`/api/v1/query`, `/api/v1/label/…/values`). Killed on drop. And a reader of the
//! text exposition format, for what a test reads from `/metrics` itself.

use crate::{TempDir, free_port, http_get};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `scripts/setup.sh --test-tools` unpacks promtool and prometheus.
pub const PROMETHEUS_TOOLS: &str = "/opt/gpuprofd-test-tools/usr/bin";

/// A running Prometheus server.
pub struct Prometheus {
    child: Child,
    /// Its web address (`127.0.0.1:PORT`).
    pub web: String,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` every second under the scrape job `job`.
    pub fn start(job: &str, targets: &[&str]) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let cfg = dir.path().join("prometheus.yml");
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: {job}\n    \
                 static_configs:\n      - targets: [{}]\n",
                list.join(", ")
            ),
        )
        .unwrap();
        let web = format!("127.0.0.1:{}", free_port());
        let child = Command::new(format!("{PROMETHEUS_TOOLS}/prometheus"))
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus missing: run scripts/setup.sh --test-tools");
        Prometheus {
            child,
            web,
            _dir: dir,
        }
    }

    /// `GET path` of the API, its JSON; `None` while the server does not answer yet.
    pub fn api(&self, path: &str) -> Option<Value> {
        let (_, body) = http_get(&self.web, path)?;
        serde_json::from_str(&body).ok()
    }

    /// The query `expr` evaluated at `time` (Unix milliseconds; now when `None`): the API's
    /// `data` (`resultType`, `result`). Panics with Prometheus's error when it refuses the
    /// query (a syntax error in a dashboard's expression, say).
    pub fn query(&self, expr: &str, time_ms: Option<i64>) -> Value {
        let mut path = format!("/api/v1/query?query={}", url_encode(expr));
        if let Some(t) = time_ms {
            path.push_str(&format!("&time={}.{:03}", t / 1000, t % 1000));
        }
        let v = self
            .api(&path)
            .unwrap_or_else(|| panic!("Prometheus at {} did not answer `{expr}`", self.web));
        assert_eq!(v["status"], "success", "`{expr}`: {v}");
        v["data"].clone()
    }

    /// The values of `label` on the series `selector` matches (what Grafana's
    /// `label_values(selector, label)` lists), sorted.
    pub fn label_values(&self, selector: &str, label: &str) -> Vec<String> {
        let v = self
            .api(&format!(
                "/api/v1/label/{label}/values?match[]={}",
                url_encode(selector)
            ))
            .expect("Prometheus answers label values");
        assert_eq!(v["status"], "success", "{v}");
        let mut out: Vec<String> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect();
        out.sort();
        out
    }

    /// Waits (bounded) until the server holds a sample of `selector` scraped after `after_ms`
    /// (Unix milliseconds) whose value satisfies `ok`; returns that sample's timestamp (ms).
    pub fn sample_after(&self, selector: &str, after_ms: i64, ok: impl Fn(f64) -> bool) -> i64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = self.api(&format!(
                "/api/v1/query?query={}",
                url_encode(&format!("{selector}[5m]"))
            )) && let Some(series) = v["data"]["result"].as_array()
            {
                for s in series {
                    for pair in s["values"].as_array().into_iter().flatten() {
                        let t = seconds_to_ms(&pair[0]);
                        let x: f64 = pair[1].as_str().unwrap_or("").parse().unwrap_or(f64::NAN);
                        if t > after_ms && ok(x) {
                            return t;
                        }
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus never scraped `{selector}` after {after_ms} ms with the value awaited"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A timestamp of the API (seconds as a JSON number, millisecond precision) in milliseconds.
pub fn seconds_to_ms(v: &Value) -> i64 {
    (v.as_f64().expect("a timestamp") * 1000.0).round() as i64
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Percent-encoding of a query parameter (RFC 3986: all but the unreserved characters).
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A series' labels.
pub type Labels = BTreeMap<String, String>;

/// One scrape of an exposition (`/metrics` in the Prometheus text format): (name, labels) →
/// value.
#[derive(Clone, Debug)]
pub struct Exposition(BTreeMap<(String, Vec<(String, String)>), f64>);

impl Exposition {
    pub fn parse(body: &str) -> Exposition {
        let mut out = BTreeMap::new();
        for line in body
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (name, labels, rest) = match line.find('{') {
                Some(i) => {
                    let (labels, n) = parse_labels(&line[i + 1..]);
                    (&line[..i], labels, &line[i + 1 + n..])
                }
                None => {
                    let (n, r) = line.split_once(' ').unwrap();
                    (n, Vec::new(), r)
                }
            };
            let v: f64 = rest.trim().parse().unwrap_or_else(|_| panic!("{line}"));
            out.insert((name.to_owned(), labels), v);
        }
        Exposition(out)
    }

    /// The samples of `name` whose labels include `having`.
    pub fn select(&self, name: &str, having: &[(&str, &str)]) -> Vec<(Labels, f64)> {
        self.0
            .iter()
            .filter(|((n, l), _)| {
                n == name
                    && having
                        .iter()
                        .all(|(k, v)| l.iter().any(|(a, b)| a == k && b == v))
            })
            .map(|((_, l), v)| (l.iter().cloned().collect(), *v))
            .collect()
    }

    /// The value of the one sample of `name` with `having` (panics unless there is one).
    pub fn one(&self, name: &str, having: &[(&str, &str)]) -> f64 {
        let s = self.select(name, having);
        assert_eq!(s.len(), 1, "{name} {having:?}: {s:?}");
        s[0].1
    }

    /// The sum of `name` over its series with `having`, by the value of `by`.
    pub fn sum_by(&self, name: &str, having: &[(&str, &str)], by: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (l, v) in self.select(name, having) {
            *out.entry(l.get(by).cloned().unwrap_or_default())
                .or_default() += v;
        }
        out
    }
}

/// `k="v",...}` → the labels and the length up to and including the `}`.
fn parse_labels(s: &str) -> (Vec<(String, String)>, usize) {
    let b: Vec<char> = s.chars().collect();
    let (mut out, mut i) = (Vec::new(), 0);
    while b[i] != '}' {
        let eq = i + b[i..].iter().position(|&c| c == '=').unwrap();
        let key: String = b[i..eq].iter().collect();
        let (mut val, mut j) = (String::new(), eq + 2);
        while b[j] != '"' {
            if b[j] == '\\' {
                j += 1;
                val.push(if b[j] == 'n' { '\n' } else { b[j] });
            } else {
                val.push(b[j]);
            }
            j += 1;
        }
        out.push((key.trim_start_matches(',').to_owned(), val));
        i = j + 1;
        if b[i] == ',' {
            i += 1;
        }
    }
    let bytes: usize = b[..=i].iter().map(|c| c.len_utf8()).sum();
    (out, bytes)
}
