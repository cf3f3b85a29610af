//! The benchmark's smoke mode, run by the default test suite: the servers start with
//! equivalent configurations, one scenario of each kind (wrk plain, pipelined and TLS, h2load
//! h2c and TLS, files, the in-worker hello, the proxy) runs briefly without errors against
//! each, and the table, the JSON file and the chart are written. No performance target is
//! checked here (see docs/benchmarks.md).

use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn smoke_run_writes_table_json_and_chart() {
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_osprey-bench"));
    let osprey = bench.with_file_name("osprey");
    assert!(
        osprey.exists(),
        "build the server first: {}",
        osprey.display()
    );
    let out_dir = std::env::temp_dir().join(format!("osprey-bench-smoke-{}", std::process::id()));
    let out = Command::new(&bench)
        .arg("--smoke")
        .arg("--osprey")
        .arg(&osprey)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("osprey-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let rows = [
        "HTTP/1.1 hello ka c100",
        "HTTP/1.1 pipelined x16 c100",
        "HTTP/1.1 inworker ka c100",
        "HTTP/1.1 TLS hello ka c100",
        "h2 h2c hello c10 m10",
        "h2 TLS 2.3k c10 m10",
        "files 2.1m close c400",
        "proxy hello ka c50",
    ];
    for row in rows {
        assert!(
            stdout.contains(&format!("| {row} |")),
            "table lacks {row}:\n{stdout}"
        );
    }
    assert!(stdout.contains("idle keep-alive"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let scenarios = json["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), rows.len());
    let h2o = ["/usr/bin/h2o", "/usr/sbin/h2o", "/usr/local/bin/h2o"]
        .iter()
        .any(|p| Path::new(p).exists());
    for s in scenarios {
        let mut servers = vec!["osprey", "nginx"];
        if h2o && s["name"] != "inworker ka c100" {
            servers.push("h2o");
        }
        for server in servers {
            let round = &s["servers"][server]["rounds"][0];
            let rps = round["requests_per_sec"].as_f64().unwrap_or(0.0);
            assert!(rps > 0.0, "{} {server}: no requests", s["name"]);
            assert_eq!(round["errors"], 0, "{} {server}", s["name"]);
        }
    }
    assert!(json["commit"].as_str().is_some_and(|c| !c.is_empty()));
    let svg = std::fs::read_to_string(out_dir.join("results.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for family in ["HTTP/1.1", "h2", "files", "proxy", "idle memory"] {
        assert!(svg.contains(&format!(">{family}")), "chart lacks {family}");
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}
