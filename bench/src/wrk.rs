//! Running wrk on its own CPU and reading its report.

use std::process::Command;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WrkResult {
    pub requests_per_sec: f64,
    pub requests: u64,
    pub p99_ms: f64,
    pub errors: u64,
    /// wrk's own CPU time over the run's wall time, in percent of one core: near 100, the
    /// load generator (one thread on one core) is what limits req/s, not the server.
    pub client_cpu_percent: f64,
}

pub struct WrkRun<'a> {
    pub cpu: usize,
    pub url: &'a str,
    pub connections: u32,
    pub seconds: u32,
    pub keep_alive: bool,
}

impl WrkRun<'_> {
    pub fn run(&self) -> Result<WrkResult, String> {
        let mut cmd = Command::new("taskset");
        cmd.arg("-c")
            .arg(self.cpu.to_string())
            .arg("wrk")
            .arg("-t1")
            .arg(format!("-c{}", self.connections))
            .arg(format!("-d{}s", self.seconds))
            .arg("--timeout")
            .arg("10s")
            .arg("--latency");
        if !self.keep_alive {
            cmd.arg("-H").arg("Connection: close");
        }
        let cpu_before = children_cpu_seconds();
        let started = std::time::Instant::now();
        let out = cmd
            .arg(self.url)
            .output()
            .map_err(|e| format!("cannot run wrk (apt-get install wrk): {e}"))?;
        let wall = started.elapsed().as_secs_f64();
        let client_cpu = children_cpu_seconds() - cpu_before;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(format!(
                "wrk failed: {}{}",
                text,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut result =
            parse(&text).ok_or_else(|| format!("cannot read wrk's report:\n{text}"))?;
        result.client_cpu_percent = 100.0 * client_cpu / wall.max(1e-9);
        Ok(result)
    }
}

/// User and system CPU seconds of this process's finished children (wrk runs as one, and
/// runs alone).
fn children_cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        secs(u.user_time()) + secs(u.system_time())
    })
}

/// Read requests/s, the request count, p99 latency and errors from wrk's text report.
pub fn parse(text: &str) -> Option<WrkResult> {
    let mut r = WrkResult::default();
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("Requests/sec:") {
            r.requests_per_sec = v.trim().parse().ok()?;
        } else if let Some(v) = line.strip_prefix("99%") {
            r.p99_ms = duration_ms(v.trim())?;
        } else if line.contains("requests in") {
            r.requests = line.split_whitespace().next()?.parse().ok()?;
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            r.errors += v.trim().parse::<u64>().ok()?;
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            // connect 0, read 0, write 0, timeout 0 — reads are normal closes without keep-alive.
            for part in v.split(',') {
                let mut words = part.split_whitespace();
                let (kind, n) = (words.next()?, words.next()?.parse::<u64>().ok()?);
                if kind != "read" {
                    r.errors += n;
                }
            }
        }
    }
    (r.requests > 0).then_some(r)
}

fn duration_ms(v: &str) -> Option<f64> {
    let split = v.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_wrk_report() {
        let text = "Running 5s test @ http://127.0.0.1:1/x\n  1 threads and 100 connections\n  Latency Distribution\n     50%  500.00us\n     99%    2.50ms\n  1000 requests in 5.00s, 1.00MB read\n  Socket errors: connect 0, read 3, write 1, timeout 2\n  Non-2xx or 3xx responses: 4\nRequests/sec:    200.50\n";
        let r = super::parse(text).unwrap();
        assert_eq!(r.requests, 1000);
        assert!((r.requests_per_sec - 200.5).abs() < 1e-9);
        assert!((r.p99_ms - 2.5).abs() < 1e-9);
        assert_eq!(r.errors, 7);
    }
}
