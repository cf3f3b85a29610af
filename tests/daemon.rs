//! Operating the server: SIGTERM drains in-flight requests, daemon mode with pid file and
//! supervisor, `-s stop|reload`, privilege drop with `-u`/`-g`.

mod common;
mod ops_util;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, osprey_bin, signal, Server, TempDir};
use ops_util::{alive, children, get_on, kill, proc_status, wait_file, wait_for};

const CONFIG: &str = r#"{
  "load": [{"so": "testkit"}],
  "timeouts": {"shutdown": 1},
  "routing": [
    {"prefix": "/slow", "handler": "sleep-worker"},
    {"prefix": "/v", "handler": "text", "text": "first"},
  ]
}"#;

#[test]
fn sigterm_finishes_in_flight_requests_then_exits_zero() {
    let mut srv = Server::start(CONFIG);
    let mut s = srv.connect();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Let the request reach the worker pool, then ask the server to stop.
    std::thread::sleep(Duration::from_millis(50));
    signal(&srv.child, "TERM");
    let r = ops_util::read_one(&mut s).expect("the in-flight request is answered");
    assert_eq!(r.status, 200);
    assert!(r.text().starts_with("slept"), "{}", r.text());
    assert_eq!(
        r.header("connection"),
        Some("close"),
        "no keep-alive while stopping"
    );
    assert!(srv.stop().success(), "{}", srv.log_text());
}

#[test]
fn shutdown_timeout_bounds_the_drain() {
    let mut srv = Server::start(CONFIG);
    // A client that never finishes its request head keeps its connection busy.
    let mut s = srv.connect();
    s.write_all(b"GET /v HTTP/1.1\r\nHost: x\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let status = srv.stop();
    assert!(status.success(), "{status}");
    assert!(
        srv.log_text().contains("still open at shutdown timeout"),
        "{}",
        srv.log_text()
    );
}

/// A daemon started in its own directory; stopped (or killed) on drop.
struct Daemon {
    dir: TempDir,
    port: u16,
}

impl Daemon {
    fn start(config: &str, extra: &[&str]) -> Daemon {
        let dir = TempDir::new("daemon");
        dir.write("osprey.json", config);
        let port = free_port();
        let out = daemon_command(&dir, port, extra).output().unwrap();
        assert!(
            out.status.success(),
            "osprey -d failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Daemon { dir, port }
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.path().join("osprey.pid")
    }

    fn supervisor(&self) -> u32 {
        std::fs::read_to_string(self.pid_file())
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn server(&self) -> u32 {
        let sup = self.supervisor();
        let mut found = Vec::new();
        wait_for("the server process", Duration::from_secs(10), || {
            found = children(sup);
            found.len() == 1
        });
        found[0]
    }

    fn get(&self, path: &str) -> std::io::Result<common::Response> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        get_on(&mut s, path)
    }

    fn ctl(&self, action: &str) -> std::process::Output {
        Command::new(osprey_bin())
            .arg("-w")
            .arg(self.dir.path())
            .arg("-s")
            .arg(action)
            .output()
            .unwrap()
    }

    fn error_log(&self) -> PathBuf {
        self.dir.path().join("osprey-error.log")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.pid_file()) {
            if let Ok(sup) = text.trim().parse::<u32>() {
                let kids = children(sup);
                kill(sup, "KILL");
                for k in kids {
                    kill(k, "KILL");
                }
            }
        }
    }
}

fn daemon_command(dir: &TempDir, port: u16, extra: &[&str]) -> Command {
    let mut cmd = Command::new(osprey_bin());
    cmd.arg("-d")
        .arg("-w")
        .arg(dir.path())
        .args(["-c", "osprey.json", "-H"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--workers", "1", "-L", "debug"])
        .args(extra);
    cmd
}

#[test]
fn daemon_pid_file_reload_and_stop() {
    let d = Daemon::start(CONFIG, &[]);
    let sup = d.supervisor();
    assert!(alive(sup));
    assert_eq!(d.get("/v").unwrap().text(), "first");
    let server = d.server();
    assert_ne!(server, sup);
    assert_eq!(proc_status(sup, "PPid"), "1", "the supervisor is detached");
    // -s reload: a new configuration, the same processes.
    d.dir
        .write("osprey.json", CONFIG.replace("\"first\"", "\"second\""));
    let out = d.ctl("reload");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_file(&d.error_log(), "configuration reloaded", 1);
    assert_eq!(d.get("/v").unwrap().text(), "second");
    assert_eq!(d.server(), server);
    // -s stop: waits until the supervisor is gone; the pid file goes with it.
    let out = d.ctl("stop");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!alive(sup) && !alive(server));
    assert!(!d.pid_file().exists());
    assert!(d.get("/v").is_err(), "nothing listens any more");
}

#[test]
fn supervisor_relaunches_a_server_that_died() {
    let d = Daemon::start(CONFIG, &[]);
    let first = d.server();
    assert_eq!(d.get("/v").unwrap().status, 200);
    kill(first, "KILL");
    let mut second = 0;
    wait_for("a new server", Duration::from_secs(15), || {
        second = children(d.supervisor()).first().copied().unwrap_or(0);
        second != 0 && second != first
    });
    wait_for("the new server to listen", Duration::from_secs(15), || {
        d.get("/v").is_ok_and(|r| r.status == 200)
    });
    let log = wait_file(&d.error_log(), "was killed by SIGKILL", 1);
    assert!(
        log.contains(&format!(
            "server {first} was killed by SIGKILL; starting a new one in 1s"
        )),
        "{log}"
    );
    // The supervisor's lines look like the server's: the same timestamp, then the level.
    let shape = |line: &str| {
        let (stamp, rest) = line.split_once(' ').unwrap_or_default();
        let stamp_ok = stamp.len() == 27 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T';
        (
            stamp_ok,
            rest.trim_start().split(' ').next().unwrap_or("").to_owned(),
        )
    };
    let supervisor = log.lines().find(|l| l.contains("was killed by")).unwrap();
    let server = log.lines().find(|l| l.contains("listening on")).unwrap();
    assert_eq!(shape(supervisor), (true, "WARN".to_owned()), "{supervisor}");
    assert!(shape(server).0, "{server}");
    // A clean exit of the server (SIGTERM to it) is not a crash: the supervisor ends too.
    let sup = d.supervisor();
    kill(second, "TERM");
    wait_for("the supervisor to end", Duration::from_secs(15), || {
        !alive(sup)
    });
    assert!(!d.pid_file().exists());
}

#[test]
fn daemon_reports_a_failed_start() {
    let dir = TempDir::new("daemon-fail");
    dir.write("osprey.json", CONFIG);
    // The port is taken by a socket without SO_REUSEPORT.
    let taken = common::listener();
    let port = taken.local_addr().unwrap().port();
    let out = daemon_command(&dir, port, &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(!dir.path().join("osprey.pid").exists());
    // A bad configuration is reported before forking.
    dir.write("osprey.json", "{\"routing\": 5}");
    let out = daemon_command(&dir, free_port(), &[]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("osprey.json:1"));
}

#[test]
fn a_second_start_leaves_the_running_daemon_alone() {
    let d = Daemon::start(CONFIG, &[]);
    let sup = d.supervisor();
    // The same port (the second server could not bind) and another port (it could): both
    // refused before binding, and the pid file still names the running daemon.
    let other = free_port();
    for port in [d.port, other] {
        let out = daemon_command(&d.dir, port, &[]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("already running as process {sup}")),
            "{err}"
        );
        assert_eq!(d.supervisor(), sup, "the pid file was touched");
    }
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", other)).is_err(),
        "the refused start listened"
    );
    // The foreground server with -p refuses the same way.
    let out = Command::new(osprey_bin())
        .arg("-w")
        .arg(d.dir.path())
        .args(["-c", "osprey.json", "-p", "osprey.pid", "-H"])
        .arg(format!("127.0.0.1:{other}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(d.supervisor(), sup);
    // `-s stop` still finds it.
    let out = d.ctl("stop");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!alive(sup));
    assert!(!d.pid_file().exists());
}

#[test]
fn a_stale_pid_file_is_replaced() {
    let dir = TempDir::new("stalepid");
    dir.write("osprey.json", CONFIG);
    // The pid of a process that has exited.
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    dir.write("osprey.pid", format!("{}\n", gone.id()));
    let port = free_port();
    let out = daemon_command(&dir, port, &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = Daemon { dir, port };
    assert_ne!(d.supervisor(), gone.id());
    assert_eq!(d.get("/v").unwrap().status, 200);
}

#[test]
fn reload_checks_the_configuration_before_signalling() {
    let d = Daemon::start(CONFIG, &[]);
    // `-s reload` without `-c`: the running daemon's own command line names the file.
    let bad = [
        (
            CONFIG.replace("\"text\", \"text\"", "\"text\", \"txet\""),
            "osprey.json:6: key `routing[1]`: unknown key `txet`",
        ),
        (
            CONFIG.replace("\"handler\": \"text\"", "\"handler\": \"nope\""),
            "osprey.json:6: key `routing[1]`: no loaded module provides handler `nope`",
        ),
        // Refused by a reload, and so by `-t` too.
        (
            CONFIG.replace(
                "\"routing\"",
                "\"logging\": {\"access_log\": \"no/such/dir/a.log\"},\n  \"routing\"",
            ),
            "cannot open access log no/such/dir/a.log",
        ),
    ];
    for (text, error) in &bad {
        d.dir.write("osprey.json", text);
        let out = d.ctl("reload");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(error), "{err}");
        assert!(err.contains("reload not signalled"), "{err}");
        let (ok, check) = common::check_file(&d.dir.path().join("osprey.json"), &[]);
        assert!(!ok && check.contains(error), "{check}");
    }
    let log = std::fs::read_to_string(d.error_log()).unwrap();
    assert!(
        !log.contains("SIGHUP"),
        "a bad configuration was signalled:\n{log}"
    );
    assert_eq!(d.get("/v").unwrap().text(), "first");
    // A good one is signalled.
    d.dir
        .write("osprey.json", CONFIG.replace("\"first\"", "\"second\""));
    assert!(d.ctl("reload").status.success());
    wait_file(&d.error_log(), "configuration reloaded", 1);
    assert_eq!(d.get("/v").unwrap().text(), "second");
    // From another directory, with the pid file named relative to it.
    let parent = d.dir.path().parent().unwrap();
    let name = d.dir.path().file_name().unwrap().to_str().unwrap();
    d.dir
        .write("osprey.json", CONFIG.replace("\"first\"", "\"third\""));
    let out = Command::new(osprey_bin())
        .current_dir(parent)
        .args(["-s", "reload", "-p", &format!("{name}/osprey.pid")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_file(&d.error_log(), "configuration reloaded", 2);
    assert_eq!(d.get("/v").unwrap().text(), "third");
}

#[test]
fn signal_without_a_server_is_an_error() {
    let dir = TempDir::new("nopid");
    let out = Command::new(osprey_bin())
        .arg("-w")
        .arg(dir.path())
        .args(["-s", "reload"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read pid file osprey.pid"));
    let out = Command::new(osprey_bin())
        .arg("-w")
        .arg(dir.path())
        .args(["-s", "restart"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown action"));
}

#[test]
fn pid_file_in_foreground() {
    let dir = TempDir::new("fgpid");
    let pid_file = dir.path().join("fg.pid");
    let mut srv = Server::start_with(CONFIG, &["-p", pid_file.to_str().unwrap()]);
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(pid, srv.child.id());
    assert!(srv.stop().success());
    assert!(!pid_file.exists(), "removed at exit");
}

fn is_root() -> bool {
    proc_status(std::process::id(), "Uid").split(' ').nth(1) == Some("0")
}

fn owner(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().uid()
}

#[test]
fn privileges_are_dropped_after_binding() {
    if !is_root() {
        eprintln!("skipped: needs root to switch users");
        return;
    }
    let dir = TempDir::new("drop");
    let (error, access, pid) = (
        dir.path().join("e.log"),
        dir.path().join("a.log"),
        dir.path().join("s.pid"),
    );
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let srv = Server::start_with(
        CONFIG,
        &[
            "-u",
            "nobody",
            "-g",
            "nogroup",
            "-l",
            error.to_str().unwrap(),
            "-a",
            access.to_str().unwrap(),
            "-p",
            pid.to_str().unwrap(),
        ],
    );
    let id = srv.child.id();
    assert_eq!(proc_status(id, "Uid"), "65534 65534 65534 65534");
    assert_eq!(proc_status(id, "Gid"), "65534 65534 65534 65534");
    assert_eq!(proc_status(id, "Groups"), "65534");
    assert_eq!(srv.get("/v").text(), "first");
    for f in [&error, &access, &pid] {
        assert_eq!(owner(f), 65534, "{} belongs to nobody", f.display());
    }
    assert!(std::fs::read_to_string(&error)
        .unwrap()
        .contains("running as user nobody"));
    // A daemon's server drops too; its supervisor stays root to relaunch on privileged ports.
    let d = Daemon::start(CONFIG, &["-u", "nobody"]);
    assert_eq!(d.get("/v").unwrap().status, 200);
    assert_eq!(proc_status(d.server(), "Uid"), "65534 65534 65534 65534");
    assert_eq!(
        proc_status(d.supervisor(), "Uid").split(' ').next(),
        Some("0")
    );
    assert_eq!(owner(&d.pid_file()), 65534);
    assert_eq!(owner(&d.error_log()), 65534);
}

#[test]
fn unknown_user_is_refused() {
    let out = Command::new(osprey_bin())
        .args(["-u", "no-such-user-here", "-H", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-u no-such-user-here: no such user"));
}
