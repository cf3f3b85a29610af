//! `osprey-bench`: Osprey and nginx side by side on one machine. Both servers run pinned to
//! one CPU, wrk to another; scenarios are interleaved over several rounds; the table, a JSON
//! file and a PNG chart report medians, ratios to nginx, p99 latency and CPU per request.

mod chart;
mod idle;
mod report;
mod servers;
mod wrk;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use report::{IdleResult, Report, Samples, ScenarioResult};
use servers::{Kind, Running, Setup};

#[derive(Parser, Debug)]
#[command(name = "osprey-bench")]
struct Cli {
    /// The osprey binary (built in release mode by bench/run).
    #[arg(long)]
    osprey: PathBuf,
    /// Where to write results.json and results.png.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Rounds per scenario (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds per wrk run.
    #[arg(long, default_value_t = 5)]
    seconds: u32,
    /// Idle keep-alive connections for the memory scenario.
    #[arg(long, default_value_t = 10_000)]
    idle: usize,
    /// Only scenarios whose name contains this.
    #[arg(long)]
    only: Option<String>,
    /// A fast check that everything runs: 1 round of 1 s, small loads, no targets enforced.
    #[arg(long)]
    smoke: bool,
    #[arg(long, default_value_t = 0)]
    server_cpu: usize,
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

struct Scenario {
    name: &'static str,
    path: &'static str,
    connections: u32,
    keep_alive: bool,
    target_ratio: Option<f64>,
    target_cpu_ratio: Option<f64>,
}

const fn scenario(
    name: &'static str,
    path: &'static str,
    connections: u32,
    keep_alive: bool,
    target: f64,
) -> Scenario {
    Scenario {
        name,
        path,
        connections,
        keep_alive,
        target_ratio: Some(target),
        target_cpu_ratio: None,
    }
}

/// NXWEB's table, with the targets of issue 9.
const SCENARIOS: &[Scenario] = &[
    Scenario {
        target_cpu_ratio: Some(0.75),
        ..scenario("hello ka c100", "/benchmark-inprocess", 100, true, 1.3)
    },
    Scenario {
        target_cpu_ratio: Some(0.75),
        ..scenario("hello ka c1000", "/benchmark-inprocess", 1000, true, 1.3)
    },
    scenario("hello close c100", "/benchmark-inprocess", 100, false, 1.1),
    scenario(
        "hello close c1000",
        "/benchmark-inprocess",
        1000,
        false,
        1.1,
    ),
    Scenario {
        target_ratio: None,
        ..scenario("inworker ka c100", "/benchmark-inworker", 100, true, 0.0)
    },
    scenario("2.3k ka c400", "/f2k.html", 400, true, 1.3),
    Scenario {
        target_ratio: None,
        ..scenario("2.3k close c400", "/f2k.html", 400, false, 0.0)
    },
    scenario("100k ka c400", "/f100k.bin", 400, true, 1.1),
    Scenario {
        target_ratio: None,
        ..scenario("100k close c400", "/f100k.bin", 400, false, 0.0)
    },
    scenario("2.1m ka c400", "/f2m.bin", 400, true, 1.0),
    Scenario {
        target_ratio: None,
        ..scenario("2.1m close c400", "/f2m.bin", 400, false, 0.0)
    },
];

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
    let www = work.join("www");
    std::fs::create_dir_all(&www).map_err(|e| e.to_string())?;
    write_files(&www)?;
    let setup = Setup {
        osprey: std::fs::canonicalize(&cli.osprey)
            .map_err(|e| format!("{}: {e}", cli.osprey.display()))?,
        work: work.clone(),
        www,
        cpu: cli.server_cpu,
    };
    let osprey = setup.start(Kind::Osprey, free_port())?;
    let nginx = setup.start(Kind::Nginx, free_port())?;
    let scenarios: Vec<&Scenario> = SCENARIOS
        .iter()
        .filter(|s| cli.only.as_deref().is_none_or(|o| s.name.contains(o)))
        .collect();
    let mut results: Vec<ScenarioResult> = scenarios
        .iter()
        .map(|s| ScenarioResult {
            name: s.name.to_owned(),
            osprey: Samples::default(),
            nginx: Samples::default(),
            target_ratio: s.target_ratio,
            target_cpu_ratio: s.target_cpu_ratio,
        })
        .collect();
    let total = cli.rounds * scenarios.len() * 2;
    let mut done = 0;
    for round in 0..cli.rounds {
        for (i, s) in scenarios.iter().enumerate() {
            // Alternate which server goes first, so neither always runs on a warmer machine.
            let order: [&Running; 2] = if (round + i) % 2 == 0 {
                [&osprey, &nginx]
            } else {
                [&nginx, &osprey]
            };
            for server in order {
                done += 1;
                progress(&format!(
                    "[{done}/{total}] round {} {} {}",
                    round + 1,
                    s.name,
                    server.kind.name()
                ));
                let (result, cpu) = measure(server, s, &cli)?;
                let samples = match server.kind {
                    Kind::Osprey => &mut results[i].osprey,
                    Kind::Nginx => &mut results[i].nginx,
                };
                samples.cpu_us_per_request.push(cpu);
                samples.rounds.push(result);
            }
        }
    }
    let idle = if cli.only.is_none() || cli.only.as_deref() == Some("idle") {
        progress(&format!(
            "idle: {} keep-alive connections to osprey",
            cli.idle
        ));
        let o = idle::bytes_per_connection(osprey.pid(), osprey.port, cli.idle)?;
        progress(&format!(
            "idle: {} keep-alive connections to nginx",
            cli.idle
        ));
        let n = idle::bytes_per_connection(nginx.pid(), nginx.port, cli.idle)?;
        Some(IdleResult {
            connections: cli.idle,
            osprey_bytes_per_conn: o,
            nginx_bytes_per_conn: n,
            target_bytes: 1024.0,
        })
    } else {
        None
    };
    eprintln!();
    let report = Report {
        seconds: cli.seconds,
        rounds: cli.rounds,
        scenarios: results,
        idle,
    };
    print!("{}", report.table());
    let json = cli.out.join("results.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", json.display()))?;
    let png = cli.out.join("results.png");
    chart::draw(&report, &png)?;
    println!("wrote {} and {}", json.display(), png.display());
    let _ = std::fs::remove_dir_all(&work);
    let clean = report
        .scenarios
        .iter()
        .all(|s| s.osprey.errors() == 0 && s.nginx.errors() == 0);
    if !clean {
        eprintln!("some runs had errors (non-2xx answers or socket errors)");
    }
    Ok(clean)
}

/// One wrk run against one server: its result and the server's CPU microseconds per request.
fn measure(server: &Running, s: &Scenario, cli: &Cli) -> Result<(wrk::WrkResult, f64), String> {
    let url = format!("http://127.0.0.1:{}{}", server.port, s.path);
    let connections = if cli.smoke {
        s.connections.min(50)
    } else {
        s.connections
    };
    let run = wrk::WrkRun {
        cpu: cli.client_cpu,
        url: &url,
        connections,
        seconds: cli.seconds,
        keep_alive: s.keep_alive,
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(18080)
}

/// The static files of NXWEB's table: 2.3 KiB, 100 KiB and 2.1 MiB.
fn write_files(www: &std::path::Path) -> Result<(), String> {
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
