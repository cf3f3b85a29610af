//! The results table, the targets and the JSON file.

use serde::Serialize;

use crate::wrk::WrkResult;

/// One scenario's measurements for one server, over all rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Samples {
    pub rounds: Vec<WrkResult>,
    /// Server CPU microseconds per request, per round.
    pub cpu_us_per_request: Vec<f64>,
}

impl Samples {
    pub fn median_rps(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.requests_per_sec).collect())
    }

    pub fn median_p99(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.p99_ms).collect())
    }

    pub fn median_cpu(&self) -> f64 {
        median(self.cpu_us_per_request.clone())
    }

    /// wrk's CPU share (percent of its core), median over rounds.
    pub fn median_client_cpu(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.client_cpu_percent).collect())
    }

    pub fn errors(&self) -> u64 {
        self.rounds.iter().map(|r| r.errors).sum()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub name: String,
    pub osprey: Samples,
    pub nginx: Samples,
    /// Minimum osprey/nginx req/s ratio this scenario must reach.
    pub target_ratio: Option<f64>,
    /// Maximum osprey/nginx CPU-per-request ratio.
    pub target_cpu_ratio: Option<f64>,
}

impl ScenarioResult {
    pub fn ratio(&self) -> f64 {
        self.osprey.median_rps() / self.nginx.median_rps().max(1e-9)
    }

    pub fn cpu_ratio(&self) -> f64 {
        self.osprey.median_cpu() / self.nginx.median_cpu().max(1e-9)
    }

    /// Every target this scenario has, as (description, met).
    pub fn checks(&self) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        if let Some(t) = self.target_ratio {
            out.push((format!("req/s >= {t:.2}x nginx"), self.ratio() >= t));
        }
        if let Some(t) = self.target_cpu_ratio {
            out.push((format!("CPU/req <= {t:.2}x nginx"), self.cpu_ratio() <= t));
        }
        out.push((
            "p99 <= nginx".into(),
            self.osprey.median_p99() <= self.nginx.median_p99(),
        ));
        out
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct IdleResult {
    pub connections: usize,
    pub osprey_bytes_per_conn: f64,
    pub nginx_bytes_per_conn: f64,
    pub target_bytes: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
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

impl Report {
    /// The table as text.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<22} {:>11} {:>11} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6} {:>6}  targets\n",
            "scenario",
            "osprey r/s",
            "nginx r/s",
            "ratio",
            "o p99 ms",
            "n p99 ms",
            "o us/req",
            "n us/req",
            "cpu",
            "o wrk%",
            "n wrk%"
        );
        for s in &self.scenarios {
            let checks: Vec<String> = s
                .checks()
                .into_iter()
                .map(|(what, ok)| format!("{} {what}", if ok { "PASS" } else { "FAIL" }))
                .collect();
            out.push_str(&format!(
                "{:<22} {:>11.0} {:>11.0} {:>7.2} {:>9.2} {:>9.2} {:>9.1} {:>9.1} {:>7.2} {:>6.0} {:>6.0}  {}\n",
                s.name,
                s.osprey.median_rps(),
                s.nginx.median_rps(),
                s.ratio(),
                s.osprey.median_p99(),
                s.nginx.median_p99(),
                s.osprey.median_cpu(),
                s.nginx.median_cpu(),
                s.cpu_ratio(),
                s.osprey.median_client_cpu(),
                s.nginx.median_client_cpu(),
                checks.join("; ")
            ));
        }
        out.push_str(
            "(wrk%: the load generator's CPU share of its one core; near 100 it, not the \
             server, limits req/s)\n",
        );
        if let Some(i) = &self.idle {
            out.push_str(&format!(
                "idle keep-alive x{}: osprey {:.0} B/conn, nginx {:.0} B/conn  {} <= {:.0} B/conn\n",
                i.connections,
                i.osprey_bytes_per_conn,
                i.nginx_bytes_per_conn,
                if i.osprey_bytes_per_conn <= i.target_bytes { "PASS" } else { "FAIL" },
                i.target_bytes
            ));
        }
        out
    }
}
