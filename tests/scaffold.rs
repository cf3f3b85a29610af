//! `osprey new-module`: the crate it writes builds, passes its own tests, runs with the
//! configuration written beside it, and cannot be built with `panic = "abort"`. Slow (a
//! cargo build of the SDK): one test, with a target directory shared between runs.

mod common;

use std::path::Path;
use std::process::Command;

use common::{osprey_bin, TempDir};

fn cargo(dir: &Path, args: &[&str]) -> (bool, String) {
    let target = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/scaffold");
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .arg(args[0])
        .arg("--offline")
        .args(&args[1..])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn new_module_builds_tests_and_runs() {
    let tmp = TempDir::new("scaffold");
    let dir = tmp.path().join("my-ads");
    let out = Command::new(osprey_bin())
        .args(["new-module", "my-ads"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // A second time into the same directory is refused, leaving it as it was.
    let again = Command::new(osprey_bin())
        .args(["new-module", "my-ads"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));

    // The workspace's lock file: the same dependency versions, available offline.
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"),
        dir.join("Cargo.lock"),
    )
    .unwrap();
    let (ok, text) = cargo(&dir, &["test"]);
    assert!(ok && text.contains("test result: ok. 3 passed"), "{text}");
    let (ok, text) = cargo(&dir, &["build"]);
    assert!(ok, "{text}");

    // Its configuration loads the library from target/debug, as `cargo build` left it.
    let built = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/scaffold/debug/libmy_ads.so"
    ));
    std::fs::create_dir_all(dir.join("target/debug")).unwrap();
    std::fs::copy(built, dir.join("target/debug/libmy_ads.so")).unwrap();
    let out = Command::new(osprey_bin())
        .args(["-t", "-c", "my-ads.json"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    // Built with panic = "abort", export_module! refuses, saying why.
    let (ok, text) = cargo(&dir, &["rustc", "--lib", "--", "-C", "panic=abort"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("osprey module built with panic = \"abort\"")
            && text.contains("panic = \"unwind\""),
        "{text}"
    );
}
