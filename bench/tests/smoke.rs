//! The benchmark's smoke mode, run by the default test suite: both servers start with
//! equivalent configurations, every scenario runs briefly without errors, and the table, the
//! JSON file and the chart are written. No performance target is checked here (see bench/).

use std::path::PathBuf;
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
    for scenario in [
        "hello ka c100",
        "hello close c1000",
        "inworker ka c100",
        "2.3k ka c400",
        "2.1m close c400",
    ] {
        assert!(
            stdout.contains(scenario),
            "table lacks {scenario}:\n{stdout}"
        );
    }
    assert!(stdout.contains("idle keep-alive"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let scenarios = json["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 11);
    for s in scenarios {
        for server in ["osprey", "nginx"] {
            let rps = s[server]["rounds"][0]["requests_per_sec"].as_f64().unwrap();
            assert!(rps > 0.0, "{} {server}: no requests", s["name"]);
        }
    }
    let png = std::fs::read(out_dir.join("results.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let _ = std::fs::remove_dir_all(&out_dir);
}
