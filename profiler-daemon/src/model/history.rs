//! The live dashboard's history: node-wide launch rate and each GPU's utilisation, one point
//! per tick for the last [`POINTS`] ticks (ten minutes at the default second). Bounded whatever
//! the uptime: a ring of points, a few numbers each.

use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

/// Points kept.
pub const POINTS: usize = 600;

struct Point {
    /// Seconds since the service started.
    t: f64,
    launches_per_s: f64,
    gpu_util: BTreeMap<u32, Option<u32>>,
}

pub struct History {
    started: Instant,
    points: VecDeque<Point>,
    last_total: Option<u64>,
}

impl Default for History {
    fn default() -> Self {
        History {
            started: Instant::now(),
            points: VecDeque::new(),
            last_total: None,
        }
    }
}

impl History {
    /// One tick: `launches_total` (a counter) over `interval_s`, and NVML's latest figures.
    pub fn push(
        &mut self,
        launches_total: u64,
        interval_s: f64,
        gpus: &BTreeMap<u32, (Option<u32>, Option<u64>)>,
    ) {
        let rate = match self.last_total {
            Some(prev) if interval_s > 0.0 => {
                launches_total.saturating_sub(prev) as f64 / interval_s
            }
            _ => 0.0,
        };
        self.last_total = Some(launches_total);
        if self.points.len() == POINTS {
            self.points.pop_front();
        }
        self.points.push_back(Point {
            t: self.started.elapsed().as_secs_f64(),
            launches_per_s: rate,
            gpu_util: gpus.iter().map(|(&i, &(u, _))| (i, u)).collect(),
        });
    }

    /// `{"launch_rate": [[t, launches/s], ...], "gpu_util": [{"gpu": i, "points": [[t, %]]}]}`.
    pub fn to_json(&self) -> Value {
        let mut per_gpu: BTreeMap<u32, Vec<Value>> = BTreeMap::new();
        for p in &self.points {
            for (&i, u) in &p.gpu_util {
                if let Some(u) = u {
                    per_gpu.entry(i).or_default().push(json!([p.t, u]));
                }
            }
        }
        json!({
            "launch_rate": self.points.iter().map(|p| json!([p.t, p.launches_per_s]))
                .collect::<Vec<_>>(),
            "gpu_util": per_gpu.into_iter().map(|(gpu, points)| json!({"gpu": gpu, "points": points}))
                .collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_from_a_counter_and_a_bounded_ring() {
        let mut h = History::default();
        let g = BTreeMap::from([(0, (Some(50), Some(1))), (1, (None, None))]);
        h.push(100, 1.0, &g);
        h.push(400, 2.0, &g);
        h.push(400, 1.0, &BTreeMap::new());
        let v = h.to_json();
        let rates: Vec<f64> = v["launch_rate"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_f64().unwrap())
            .collect();
        assert_eq!(rates, [0.0, 150.0, 0.0], "first point: no rate yet");
        // GPU 0 had a figure twice; GPU 1 never (no series).
        assert_eq!(v["gpu_util"].as_array().unwrap().len(), 1);
        assert_eq!(v["gpu_util"][0]["points"].as_array().unwrap().len(), 2);
        for i in 0..POINTS as u64 * 2 {
            h.push(400 + i, 1.0, &g);
        }
        assert_eq!(h.to_json()["launch_rate"].as_array().unwrap().len(), POINTS);
    }
}
