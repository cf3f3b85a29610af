//! The results table, the targets and the JSON file.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::load::LoadResult;
use crate::servers::Kind;

/// One scenario's measurements for one server, over all rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Samples {
    pub rounds: Vec<LoadResult>,
    /// Server CPU microseconds per request, per round.
    pub cpu_us_per_request: Vec<f64>,
}

impl Samples {
    pub fn median_rps(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.requests_per_sec).collect())
    }

    pub fn median_p99(&self) -> Option<f64> {
        let v: Vec<f64> = self.rounds.iter().filter_map(|r| r.p99_ms).collect();
        (!v.is_empty()).then(|| median(v))
    }

    pub fn median_cpu(&self) -> f64 {
        median(self.cpu_us_per_request.clone())
    }

    /// The load generator's CPU share (percent of its core), median over rounds.
    pub fn median_client_cpu(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.client_cpu_percent).collect())
    }

    pub fn errors(&self) -> u64 {
        self.rounds.iter().map(|r| r.errors).sum()
    }
}

/// A goal for Osprey against one peer in the same run.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum Target {
    /// req/s at least this times the peer's.
    Rps(Kind, f64),
    /// CPU per request at most this times the peer's.
    Cpu(Kind, f64),
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub family: &'static str,
    pub name: String,
    /// Osprey and each peer that ran this scenario.
    pub servers: BTreeMap<Kind, Samples>,
    pub targets: Vec<Target>,
}

impl ScenarioResult {
    /// Osprey's req/s over `peer`'s, if both ran.
    pub fn ratio(&self, peer: Kind) -> Option<f64> {
        let (o, p) = (self.servers.get(&Kind::Osprey)?, self.servers.get(&peer)?);
        Some(o.median_rps() / p.median_rps().max(1e-9))
    }

    /// Osprey's CPU per request over `peer`'s, if both ran.
    pub fn cpu_ratio(&self, peer: Kind) -> Option<f64> {
        let (o, p) = (self.servers.get(&Kind::Osprey)?, self.servers.get(&peer)?);
        Some(o.median_cpu() / p.median_cpu().max(1e-9))
    }

    /// Every target whose peer ran, as (description, met).
    pub fn checks(&self) -> Vec<(String, bool)> {
        self.targets
            .iter()
            .filter_map(|t| match *t {
                Target::Rps(peer, min) => self
                    .ratio(peer)
                    .map(|r| (format!("req/s >= {min:.2}x {}", peer.name()), r >= min)),
                Target::Cpu(peer, max) => self
                    .cpu_ratio(peer)
                    .map(|r| (format!("CPU/req <= {max:.2}x {}", peer.name()), r <= max)),
            })
            .collect()
    }

    pub fn errors(&self) -> u64 {
        self.servers.values().map(Samples::errors).sum()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct IdleResult {
    pub connections: usize,
    /// Growth of each server's resident memory per idle keep-alive connection.
    pub bytes_per_conn: BTreeMap<Kind, f64>,
    pub target_bytes: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// UTC date of the run and the commit of the tree it ran from.
    pub date: String,
    pub commit: String,
    pub seconds: u32,
    pub rounds: usize,
    pub scenarios: Vec<ScenarioResult>,
    pub idle: Option<IdleResult>,
}

pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

const SERVERS: [Kind; 3] = [Kind::Osprey, Kind::Nginx, Kind::H2o];

impl Report {
    /// The table as Markdown (readable as text too), for the terminal and docs/benchmarks.md.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} rounds x {} s, medians; {}, commit {}\n\n",
            self.rounds, self.seconds, self.date, self.commit
        );
        out.push_str(
            "| scenario | osprey r/s | nginx r/s | h2o r/s | x nginx | x h2o \
             | us/req o / n / h | CPU x nginx | CPU x h2o | p99 ms o / n / h | load % o / n / h | targets |\n",
        );
        out.push_str(&format!("|{}\n", " --- |".repeat(12)));
        for s in &self.scenarios {
            let each = |f: &dyn Fn(&Samples) -> String| {
                SERVERS
                    .iter()
                    .map(|k| s.servers.get(k).map_or("-".into(), f))
                    .collect::<Vec<_>>()
            };
            let rps = each(&|x| group(x.median_rps()));
            let cpu = each(&|x| format!("{:.1}", x.median_cpu())).join(" / ");
            let p99 = each(&|x| x.median_p99().map_or("-".into(), |p| format!("{p:.2}")));
            let load = each(&|x| format!("{:.0}", x.median_client_cpu())).join(" / ");
            let ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}"));
            let checks: Vec<String> = s
                .checks()
                .into_iter()
                .map(|(what, ok)| format!("{} {what}", if ok { "PASS" } else { "FAIL" }))
                .collect();
            out.push_str(&format!(
                "| {} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                s.family,
                s.name,
                rps[0],
                rps[1],
                rps[2],
                ratio(s.ratio(Kind::Nginx)),
                ratio(s.ratio(Kind::H2o)),
                cpu,
                ratio(s.cpu_ratio(Kind::Nginx)),
                ratio(s.cpu_ratio(Kind::H2o)),
                p99.join(" / "),
                load,
                checks.join("; ")
            ));
        }
        if let Some(i) = &self.idle {
            let each: Vec<String> = i
                .bytes_per_conn
                .iter()
                .map(|(k, b)| format!("{} {b:.0} B/conn", k.name()))
                .collect();
            let osprey = i.bytes_per_conn.get(&Kind::Osprey).copied().unwrap_or(0.0);
            out.push_str(&format!(
                "\nidle keep-alive x{}: {}  {} osprey <= {:.0} B/conn\n",
                i.connections,
                each.join(", "),
                if osprey <= i.target_bytes {
                    "PASS"
                } else {
                    "FAIL"
                },
                i.target_bytes
            ));
        }
        out.push_str(
            "\n(load %: the load generator's CPU share of its one core; near 100 it, not the \
             server, limits req/s, and CPU per request is the server-side measure)\n",
        );
        out
    }
}

/// 123456.7 as "123,457".
pub fn group(n: f64) -> String {
    let digits = format!("{:.0}", n.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(rps: f64, cpu: f64) -> Samples {
        Samples {
            rounds: vec![LoadResult {
                requests_per_sec: rps,
                requests: 1,
                ..LoadResult::default()
            }],
            cpu_us_per_request: vec![cpu],
        }
    }

    #[test]
    fn ratios_and_targets_are_against_each_peer_that_ran() {
        let s = ScenarioResult {
            family: "h2",
            name: "hello".into(),
            servers: BTreeMap::from([
                (Kind::Osprey, samples(150.0, 4.0)),
                (Kind::Nginx, samples(50.0, 10.0)),
                (Kind::H2o, samples(125.0, 5.0)),
            ]),
            targets: vec![
                Target::Rps(Kind::H2o, 1.2),
                Target::Rps(Kind::Nginx, 3.5),
                Target::Cpu(Kind::H2o, 1.0),
            ],
        };
        assert_eq!(s.ratio(Kind::Nginx), Some(3.0));
        assert_eq!(s.cpu_ratio(Kind::H2o), Some(0.8));
        let checks = s.checks();
        assert_eq!(
            checks,
            vec![
                ("req/s >= 1.20x h2o".to_string(), true),
                ("req/s >= 3.50x nginx".to_string(), false),
                ("CPU/req <= 1.00x h2o".to_string(), true),
            ]
        );
        let mut without_h2o = s.clone();
        without_h2o.servers.remove(&Kind::H2o);
        assert_eq!(without_h2o.ratio(Kind::H2o), None);
        assert_eq!(without_h2o.checks().len(), 1, "no h2o, no h2o targets");
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group(1234567.4), "1,234,567");
        assert_eq!(group(999.0), "999");
        assert_eq!(group(1000.0), "1,000");
    }
}
