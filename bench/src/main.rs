//! `osprey-bench`: Osprey, nginx and (when installed) h2o side by side on one machine. The
//! servers run pinned to one CPU, the load generator (wrk or h2load, one thread) to another;
//! scenarios are interleaved over several rounds; the table, a JSON file and an SVG chart
//! report medians, ratios to each peer, p99 latency and server CPU per request.

mod chart;
mod docs;
mod idle;
mod load;
mod report;
mod scenarios;
mod servers;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Parser;

use load::LoadRun;
use report::{IdleResult, Report, Samples, ScenarioResult};
use scenarios::{Scenario, Transport, SCENARIOS};
use servers::{Kind, Running, Setup};

#[derive(Parser, Debug)]
#[command(name = "osprey-bench")]
struct Cli {
    /// The osprey binary (built in release mode by bench/run).
    #[arg(long)]
    osprey: PathBuf,
    /// Where to write results.json and results.svg.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Rounds per scenario (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds per load run.
    #[arg(long, default_value_t = 3)]
    seconds: u32,
    /// Idle keep-alive connections for the memory scenario.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Only scenarios whose family and name contain this ("idle": only the memory one).
    #[arg(long)]
    only: Option<String>,
    /// Leave h2o out even when it is installed.
    #[arg(long)]
    no_h2o: bool,
    /// Replace the table of this Markdown file's last full run (not in smoke or --only runs).
    #[arg(long)]
    docs: Option<PathBuf>,
    /// A fast check that everything runs: one scenario per kind, 1 round of 1 s, small loads.
    #[arg(long)]
    smoke: bool,
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("osprey-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Returns whether every run was free of errors.
fn run(mut cli: Cli) -> Result<bool, String> {
    if cli.smoke {
        cli.rounds = 1;
        cli.seconds = 1;
        cli.idle = cli.idle.min(500);
    }
    idle::raise_fd_limit(cli.idle as u64 * 2 + 4096);
    std::fs::create_dir_all(&cli.out).map_err(|e| format!("{}: {e}", cli.out.display()))?;
    let work = std::env::temp_dir().join(format!("osprey-bench-{}", std::process::id()));
    let result = run_in(&cli, &work);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn run_in(cli: &Cli, work: &Path) -> Result<bool, String> {
    let www = work.join("www");
    std::fs::create_dir_all(&www).map_err(|e| e.to_string())?;
    write_files(&www)?;
    let (cert, key) = servers::make_certificate(work)?;
    let setup = Setup {
        osprey: std::fs::canonicalize(&cli.osprey)
            .map_err(|e| format!("{}: {e}", cli.osprey.display()))?,
        work: work.to_owned(),
        www,
        cert,
        key,
        upstream_port: servers::free_port(),
        cpu: cli.server_cpu,
    };
    let mut kinds = vec![Kind::Osprey, Kind::Nginx];
    if !cli.no_h2o && servers::h2o_installed() {
        kinds.push(Kind::H2o);
    } else if !cli.no_h2o {
        eprintln!("note: h2o is not installed (apt-get install h2o): no h2o column");
    }
    let mut upstream = setup.start_upstream(cli.client_cpu)?;
    let running: Result<Vec<Running>, String> = kinds.iter().map(|&k| setup.start(k)).collect();
    let outcome = running.and_then(|running| measure_all(cli, &running));
    let _ = upstream.kill();
    let _ = upstream.wait();
    let report = outcome?;
    print!("{}", report.table());
    let json = cli.out.join("results.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", json.display()))?;
    let svg = cli.out.join("results.svg");
    std::fs::write(&svg, chart::svg(&report)).map_err(|e| format!("{}: {e}", svg.display()))?;
    println!("wrote {} and {}", json.display(), svg.display());
    if let Some(path) = cli
        .docs
        .as_ref()
        .filter(|_| !cli.smoke && cli.only.is_none())
    {
        docs::write_table(path, &report)?;
        println!("wrote the table into {}", path.display());
    }
    let clean = report.scenarios.iter().all(|s| s.errors() == 0);
    if !clean {
        eprintln!("some runs had errors (non-2xx answers or socket errors)");
    }
    Ok(clean)
}

fn measure_all(cli: &Cli, running: &[Running]) -> Result<Report, String> {
    let chosen = |s: &Scenario| {
        (!cli.smoke || s.smoke)
            && cli
                .only
                .as_deref()
                .is_none_or(|o| format!("{} {}", s.family, s.name).contains(o))
    };
    let scenarios: Vec<&Scenario> = SCENARIOS.iter().filter(|s| chosen(s)).collect();
    // Osprey and the peers of each scenario that are running.
    let servers_of = |s: &Scenario| -> Vec<&Running> {
        running
            .iter()
            .filter(|r| r.kind == Kind::Osprey || s.peers.contains(&r.kind))
            .collect()
    };
    let mut results: Vec<ScenarioResult> = scenarios
        .iter()
        .map(|s| ScenarioResult {
            family: s.family,
            name: s.name.to_owned(),
            servers: BTreeMap::new(),
            targets: s.targets.to_vec(),
        })
        .collect();
    let total: usize = cli.rounds * scenarios.iter().map(|s| servers_of(s).len()).sum::<usize>();
    let mut done = 0;
    for round in 0..cli.rounds {
        for (i, s) in scenarios.iter().enumerate() {
            // Rotate which server goes first, so none always runs on a warmer machine.
            let mut order = servers_of(s);
            let len = order.len();
            order.rotate_left((round + i) % len);
            for server in order {
                done += 1;
                progress(&format!(
                    "[{done}/{total}] round {} {} {} {}",
                    round + 1,
                    s.family,
                    s.name,
                    server.kind.name()
                ));
                let (result, cpu) = measure(server, s, cli)?;
                let samples: &mut Samples = results[i].servers.entry(server.kind).or_default();
                samples.cpu_us_per_request.push(cpu);
                samples.rounds.push(result);
            }
        }
    }
    let idle = if cli.only.as_deref().is_none_or(|o| "idle".contains(o)) {
        let mut bytes_per_conn = BTreeMap::new();
        for server in running {
            progress(&format!(
                "idle: {} keep-alive connections to {}",
                cli.idle,
                server.kind.name()
            ));
            let b = idle::bytes_per_connection(server.pid(), server.port, cli.idle)?;
            bytes_per_conn.insert(server.kind, b);
        }
        Some(IdleResult {
            connections: cli.idle,
            bytes_per_conn,
            target_bytes: 400.0,
        })
    } else {
        None
    };
    eprintln!();
    Ok(Report {
        date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        commit: commit(),
        seconds: cli.seconds,
        rounds: cli.rounds,
        scenarios: results,
        idle,
    })
}

/// One load run against one server: its result and the server's CPU microseconds per request.
fn measure(server: &Running, s: &Scenario, cli: &Cli) -> Result<(load::LoadResult, f64), String> {
    let (scheme, port) = match s.transport {
        Transport::Plain => ("http", server.port),
        Transport::H2c => ("http", server.h2c_port),
        Transport::Tls => ("https", server.tls_port),
    };
    let url = format!("{scheme}://127.0.0.1:{port}{}", s.path);
    let connections = if cli.smoke {
        s.connections.min(50)
    } else {
        s.connections
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipeline.lua");
    let run = LoadRun {
        tool: s.tool,
        cpu: cli.client_cpu,
        url: &url,
        connections,
        seconds: cli.seconds,
        pipeline_script: &script,
    };
    let before = servers::cpu_us(server.pid());
    let result = run.run()?;
    let used = servers::cpu_us(server.pid()).saturating_sub(before);
    let per_request = used as f64 / result.requests.max(1) as f64;
    Ok((result, per_request))
}

fn progress(line: &str) {
    eprint!("\r\x1b[2K{line}");
    let _ = std::io::stderr().flush();
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".into())
}

/// The commit measured, marked when the tree had changes.
fn commit() -> String {
    let hash = command_output("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = Command::new("git")
        .args(["diff", "--quiet", "HEAD", "--", "server", "sdk", "modules"])
        .status()
        .is_ok_and(|s| !s.success());
    if dirty {
        format!("{hash} + local changes")
    } else {
        hash
    }
}

/// The static files of NXWEB's table: 2.3 KiB, 100 KiB and 2.1 MiB.
fn write_files(www: &Path) -> Result<(), String> {
    let html: String = "<p>Osprey benchmark page, 2.3 KiB of HTML.</p>\n"
        .chars()
        .cycle()
        .take(2355)
        .collect();
    let files: [(&str, Vec<u8>); 3] = [
        ("f2k.html", html.into_bytes()),
        (
            "f100k.bin",
            (0..100 * 1024).map(|i| (i % 251) as u8).collect(),
        ),
        (
            "f2m.bin",
            (0..2150 * 1024).map(|i| (i % 241) as u8).collect(),
        ),
    ];
    for (name, data) in files {
        std::fs::write(www.join(name), data).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}
