//! The load generators, wrk (HTTP/1.1, plain or TLS, optionally pipelined) and h2load
//! (HTTP/2), each run as one thread on its own CPU, and the reading of their reports.

use std::process::Command;

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LoadResult {
    pub requests_per_sec: f64,
    pub requests: u64,
    /// wrk's 99th percentile; h2load reports no percentiles.
    pub p99_ms: Option<f64>,
    pub errors: u64,
    /// The load generator's CPU time over the run's wall time, in percent of one core: near
    /// 100, it (one thread on one core) is what limits req/s, not the server.
    pub client_cpu_percent: f64,
}

/// How a scenario loads the server.
#[derive(Debug, Clone, Copy)]
pub enum Tool {
    /// wrk; `pipeline` > 1 sends that many requests per write (bench/pipeline.lua).
    Wrk { keep_alive: bool, pipeline: u32 },
    /// h2load with this many concurrent streams per connection.
    H2load { streams: u32 },
}

pub struct LoadRun<'a> {
    pub tool: Tool,
    pub cpu: usize,
    pub url: &'a str,
    pub connections: u32,
    pub seconds: u32,
    /// Where bench/pipeline.lua is.
    pub pipeline_script: &'a std::path::Path,
}

impl LoadRun<'_> {
    pub fn run(&self) -> Result<LoadResult, String> {
        let mut cmd = Command::new("taskset");
        cmd.arg("-c").arg(self.cpu.to_string());
        match self.tool {
            Tool::Wrk {
                keep_alive,
                pipeline,
            } => {
                cmd.arg("wrk")
                    .arg("-t1")
                    .arg(format!("-c{}", self.connections))
                    .arg(format!("-d{}s", self.seconds))
                    .args(["--timeout", "10s", "--latency"]);
                if !keep_alive {
                    cmd.args(["-H", "Connection: close"]);
                }
                if pipeline > 1 {
                    cmd.arg("-s").arg(self.pipeline_script);
                }
                cmd.arg(self.url);
                if pipeline > 1 {
                    cmd.arg("--").arg(pipeline.to_string());
                }
            }
            Tool::H2load { streams } => {
                cmd.arg("h2load")
                    .arg("-t1")
                    .arg(format!("-c{}", self.connections))
                    .arg(format!("-m{streams}"))
                    // No warm-up period: the server's CPU time is read over the whole run.
                    .arg(format!("-D{}", self.seconds))
                    .arg(self.url);
            }
        }
        let cpu_before = children_cpu_seconds();
        let started = std::time::Instant::now();
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_args().nth(2)))?;
        let wall = started.elapsed().as_secs_f64();
        let client_cpu = children_cpu_seconds() - cpu_before;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(format!(
                "{} failed: {}{}",
                self.url,
                text,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let parsed = match self.tool {
            Tool::Wrk { .. } => parse_wrk(&text),
            Tool::H2load { .. } => parse_h2load(&text),
        };
        let mut result = parsed.ok_or_else(|| format!("cannot read the report:\n{text}"))?;
        result.client_cpu_percent = 100.0 * client_cpu / wall.max(1e-9);
        Ok(result)
    }
}

/// User and system CPU seconds of this process's finished children (the load generator runs
/// as one, and runs alone).
fn children_cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        secs(u.user_time()) + secs(u.system_time())
    })
}

/// Read requests/s, the request count, p99 latency and errors from wrk's text report.
pub fn parse_wrk(text: &str) -> Option<LoadResult> {
    let mut r = LoadResult::default();
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("Requests/sec:") {
            r.requests_per_sec = v.trim().parse().ok()?;
        } else if let Some(v) = line.strip_prefix("99%") {
            r.p99_ms = Some(duration_ms(v.trim())?);
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

/// Read h2load's report: "finished in 3.00s, 141234.40 req/s, …", "requests: N total, …
/// N succeeded, N failed, N errored, N timeout" and "status codes: N 2xx, …".
pub fn parse_h2load(text: &str) -> Option<LoadResult> {
    let mut r = LoadResult::default();
    let mut not_2xx = 0;
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("finished in ") {
            let rps = v.split(", ").nth(1)?.strip_suffix(" req/s")?;
            r.requests_per_sec = rps.parse().ok()?;
        } else if let Some(v) = line.strip_prefix("requests: ") {
            for part in v.split(", ") {
                let (n, what) = part.split_once(' ')?;
                let n: u64 = n.parse().ok()?;
                match what {
                    "succeeded" => r.requests = n,
                    "failed" | "errored" | "timeout" => r.errors += n,
                    _ => {}
                }
            }
        } else if let Some(v) = line.strip_prefix("status codes: ") {
            for part in v.split(", ") {
                let (n, class) = part.split_once(' ')?;
                if class != "2xx" {
                    not_2xx += n.parse::<u64>().ok()?;
                }
            }
        }
    }
    // A non-2xx answer is "succeeded" for h2load; count it as an error here, as for wrk.
    r.errors += not_2xx;
    r.requests = r.requests.saturating_sub(not_2xx);
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
        let r = super::parse_wrk(text).unwrap();
        assert_eq!(r.requests, 1000);
        assert!((r.requests_per_sec - 200.5).abs() < 1e-9);
        assert_eq!(r.p99_ms, Some(2.5));
        assert_eq!(r.errors, 7);
    }

    #[test]
    fn reads_an_h2load_report() {
        let text = "starting benchmark...\nApplication protocol: h2\n\nfinished in 3.00s, 141234.40 req/s, 5.12MB/s\nrequests: 423703 total, 423803 started, 423703 done, 423700 succeeded, 3 failed, 0 errored, 1 timeout\nstatus codes: 423698 2xx, 0 3xx, 2 4xx, 0 5xx\ntraffic: 15.46MB (16212345) total\n";
        let r = super::parse_h2load(text).unwrap();
        assert!((r.requests_per_sec - 141234.4).abs() < 1e-9);
        assert_eq!(r.requests, 423698);
        assert_eq!(r.errors, 3 + 1 + 2);
        assert_eq!(r.p99_ms, None);
    }
}
