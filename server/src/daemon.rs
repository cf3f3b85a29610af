//! Daemon mode (`-d`), the supervisor that relaunches a server that died, the pid file (`-p`),
//! signals to a running server (`-s`), and the privilege drop after binding (`-u`, `-g`).
//!
//! `osprey -d`: the process forks; the child (the supervisor) starts a new session and forks
//! the server. The first process waits until the server reports that it listens (or why it
//! could not start), writes the supervisor's pid to the pid file and exits. The supervisor
//! forwards SIGTERM, SIGINT, SIGHUP and SIGUSR1 to the server; when the server dies by a signal
//! or exits with a status other than 0, it launches a new one after a delay that doubles (1 s
//! up to 60 s) while launches keep failing quickly. A clean exit (status 0) ends the supervisor.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Gid, Group, Pid, Uid, User};

/// The pid file when `-p` is not given.
pub const DEFAULT_PID_FILE: &str = "osprey.pid";
/// The error log of a daemon when neither `-l` nor `logging.error_log` names one.
pub const DEFAULT_ERROR_LOG: &str = "osprey-error.log";

const FIRST_DELAY: Duration = Duration::from_secs(1);
const MAX_DELAY: Duration = Duration::from_secs(60);
/// A server that ran this long resets the back-off.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// The write end of the readiness pipe, in the first server a daemon launches.
static READY: Mutex<Option<File>> = Mutex::new(None);

/// `-s stop|reload|reopen`: signal the process named by the pid file. `stop` waits for it to
/// exit.
pub fn send(action: &str, pid_file: &Path) -> Result<(), String> {
    let signal = match action {
        "stop" => Signal::SIGTERM,
        "reload" => Signal::SIGHUP,
        "reopen" => Signal::SIGUSR1,
        other => return Err(format!("-s {other}: unknown action (stop, reload, reopen)")),
    };
    let pid = read_pid(pid_file)?;
    kill(pid, signal).map_err(|e| {
        format!(
            "cannot signal process {pid} (from {}): {e}",
            pid_file.display()
        )
    })?;
    if signal == Signal::SIGTERM {
        let deadline = Instant::now() + Duration::from_secs(60);
        while kill(pid, None).is_ok() {
            if Instant::now() > deadline {
                return Err(format!("process {pid} has not stopped after 60 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// The command line and working directory of process `pid` (Linux /proc), if readable.
pub fn command_line(pid: Pid) -> Option<(Vec<std::ffi::OsString>, PathBuf)> {
    use std::os::unix::ffi::OsStrExt;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let dir = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let args = raw
        .strip_suffix(&[0])?
        .split(|&b| b == 0)
        .map(|a| std::ffi::OsStr::from_bytes(a).to_owned())
        .collect();
    Some((args, dir))
}

pub fn read_pid(pid_file: &Path) -> Result<Pid, String> {
    let text = std::fs::read_to_string(pid_file)
        .map_err(|e| format!("cannot read pid file {}: {e}", pid_file.display()))?;
    text.trim()
        .parse::<i32>()
        .ok()
        .filter(|&p| p > 0)
        .map(Pid::from_raw)
        .ok_or_else(|| format!("pid file {} does not hold a process id", pid_file.display()))
}

/// A start refuses to run beside the server its pid file names: it would fail to bind at best,
/// and must never take over or remove the live server's pid file. A pid file that is missing,
/// unreadable or names no live process is stale and will be overwritten.
pub fn refuse_if_running(pid_file: &Path) -> Result<(), String> {
    let Ok(pid) = read_pid(pid_file) else {
        return Ok(());
    };
    match kill(pid, None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => Err(format!(
            "already running as process {pid} (pid file {}); stop it first (-s stop)",
            pid_file.display()
        )),
        Err(_) => Ok(()),
    }
}

/// Remove the pid file, if it still names `pid`: a process removes only the file it wrote.
pub fn remove_pid_file(path: &Path, pid: u32) {
    if read_pid(path).is_ok_and(|p| p.as_raw() as u32 == pid) {
        let _ = std::fs::remove_file(path);
    }
}

/// Write `pid` to `path` (as an absolute path, so it can be removed after `-w`).
pub fn write_pid_file(path: &Path, pid: u32) -> Result<PathBuf, String> {
    std::fs::write(path, format!("{pid}\n"))
        .map_err(|e| format!("cannot write pid file {}: {e}", path.display()))?;
    Ok(std::path::absolute(path).unwrap_or_else(|_| path.to_owned()))
}

/// Become a daemon. Returns only in the server process; the first process and the supervisor
/// exit from here.
pub fn daemonize(pid_file: &Path, owner: Option<&Identity>) -> Result<(), String> {
    let (read_end, write_end) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: no other thread runs yet (called before the runtime and the loggers start).
    match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Parent { child } => {
            drop(write_end);
            let mut report = String::new();
            let _ = File::from(read_end).read_to_string(&mut report);
            if report.starts_with('R') {
                write_pid_file(pid_file, child.as_raw() as u32)?;
                if let Some(who) = owner {
                    let _ = nix::unistd::chown(pid_file, Some(who.uid), Some(who.gid));
                }
                std::process::exit(0);
            }
            let message = report
                .strip_prefix('E')
                .unwrap_or("the server exited during start-up (see the error log)");
            eprintln!("osprey: {message}");
            std::process::exit(1);
        }
        ForkResult::Child => {}
    }
    drop(read_end);
    let _ = nix::unistd::setsid();
    redirect_stdio();
    let pid_file = std::path::absolute(pid_file).unwrap_or_else(|_| pid_file.to_owned());
    supervise(write_end, &pid_file)
}

/// Standard input, output and error to /dev/null.
fn redirect_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

/// The supervisor's loop. Returns in each server it launches.
fn supervise(ready: OwnedFd, pid_file: &Path) -> Result<(), String> {
    let mut signals = SigSet::empty();
    let all = [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGCHLD,
        Signal::SIGALRM,
    ];
    for s in all {
        signals.add(s);
    }
    let mut old_mask = SigSet::empty();
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&signals), Some(&mut old_mask))
        .map_err(|e| format!("sigprocmask: {e}"))?;
    let mut ready = Some(ready);
    let mut delay = FIRST_DELAY;
    let mut stopping = false;
    let mut server: Option<(Pid, Instant)> = None;
    // Until a server has reported that it listens, a failure ends the supervisor: the
    // configuration or the environment is wrong, and the first process says why.
    let mut ever_ready = false;
    let mut launch = true;
    loop {
        if launch && !stopping {
            launch = false;
            // SAFETY: the supervisor is single-threaded.
            match unsafe { fork() } {
                Ok(ForkResult::Child) => {
                    let _ = old_mask.thread_set_mask();
                    if let Some(fd) = ready.take() {
                        *READY.lock().unwrap() = Some(File::from(fd));
                    }
                    return Ok(());
                }
                Ok(ForkResult::Parent { child }) => {
                    // Only the first server reports readiness.
                    ready = None;
                    server = Some((child, Instant::now()));
                }
                Err(e) => {
                    note(&format!(
                        "supervisor: cannot fork a server: {e}; retrying in {}s",
                        delay.as_secs()
                    ));
                    nix::unistd::alarm::set(delay.as_secs() as u32);
                }
            }
        }
        let Ok(signal) = signals.wait() else { continue };
        match signal {
            Signal::SIGCHLD => {
                while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                    let (pid, what) = match status {
                        WaitStatus::Exited(pid, code) => (pid, Exit::Code(code)),
                        WaitStatus::Signaled(pid, sig, _) => (pid, Exit::Signal(sig)),
                        WaitStatus::StillAlive => break,
                        _ => continue,
                    };
                    let Some((server_pid, started)) = server else {
                        continue;
                    };
                    if pid != server_pid {
                        continue;
                    }
                    server = None;
                    match what {
                        _ if stopping => finish(pid_file, 0),
                        Exit::Code(0) => finish(pid_file, 0),
                        _ if !ever_ready => finish(pid_file, 1),
                        other => {
                            if started.elapsed() >= STABLE_AFTER {
                                delay = FIRST_DELAY;
                            }
                            note(&format!(
                                "supervisor: server {pid} {other}; starting a new one in {}s",
                                delay.as_secs()
                            ));
                            nix::unistd::alarm::set(delay.as_secs() as u32);
                            delay = (delay * 2).min(MAX_DELAY);
                        }
                    }
                }
            }
            Signal::SIGALRM => launch = server.is_none(),
            Signal::SIGUSR2 => ever_ready = true,
            Signal::SIGTERM | Signal::SIGINT => {
                stopping = true;
                match server {
                    Some((pid, _)) => {
                        let _ = kill(pid, Signal::SIGTERM);
                    }
                    None => finish(pid_file, 0),
                }
            }
            other => {
                if let Some((pid, _)) = server {
                    let _ = kill(pid, other);
                }
            }
        }
    }
}

enum Exit {
    Code(i32),
    Signal(Signal),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exited with status {c}"),
            Exit::Signal(s) => write!(f, "was killed by {s}"),
        }
    }
}

fn finish(pid_file: &Path, code: i32) -> ! {
    // Written by the first process once the server listened; never another daemon's.
    remove_pid_file(pid_file, std::process::id());
    std::process::exit(code)
}

/// A line in the error log from the supervisor (which has no logger of its own).
fn note(message: &str) {
    let path = SUPERVISOR_LOG.lock().unwrap().clone();
    let Some(path) = path else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = f.write_all(crate::log::format_line("WARN", message).as_bytes());
    }
}

static SUPERVISOR_LOG: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Where the supervisor writes its own lines (the error log).
pub fn set_supervisor_log(path: &Path) {
    *SUPERVISOR_LOG.lock().unwrap() =
        Some(std::path::absolute(path).unwrap_or_else(|_| path.to_owned()));
}

/// In the first server of a daemon: tell the waiting first process that the server listens.
pub fn report_ready() {
    if let Some(mut f) = READY.lock().unwrap().take() {
        let _ = f.write_all(b"R");
        // And the supervisor: from now on a dead server is relaunched.
        let _ = kill(nix::unistd::getppid(), Signal::SIGUSR2);
    }
}

/// In the first server of a daemon: tell the waiting first process why start-up failed.
pub fn report_failure(message: &str) {
    if let Some(mut f) = READY.lock().unwrap().take() {
        let _ = write!(f, "E{message}");
    }
}

/// Who to become after binding.
pub struct Identity {
    pub uid: Uid,
    pub gid: Gid,
    pub name: String,
}

/// Resolve `-u` and `-g` (names or numbers); `-g` defaults to the user's primary group.
pub fn resolve_identity(
    user: Option<&str>,
    group: Option<&str>,
) -> Result<Option<Identity>, String> {
    if user.is_none() && group.is_none() {
        return Ok(None);
    }
    let user = match user {
        Some(u) => Some(lookup_user(u)?),
        None => None,
    };
    let gid = match group {
        Some(g) => lookup_group(g)?,
        None => user.as_ref().map(|u| u.gid).expect("a user or a group"),
    };
    Ok(Some(Identity {
        uid: user.as_ref().map_or_else(Uid::current, |u| u.uid),
        gid,
        name: user.map_or_else(|| Uid::current().to_string(), |u| u.name),
    }))
}

fn lookup_user(text: &str) -> Result<User, String> {
    let found = match text.parse::<u32>() {
        Ok(n) => User::from_uid(Uid::from_raw(n)),
        Err(_) => User::from_name(text),
    };
    found
        .map_err(|e| format!("-u {text}: {e}"))?
        .ok_or_else(|| format!("-u {text}: no such user"))
}

fn lookup_group(text: &str) -> Result<Gid, String> {
    if let Ok(n) = text.parse::<u32>() {
        return Ok(Gid::from_raw(n));
    }
    Group::from_name(text)
        .map_err(|e| format!("-g {text}: {e}"))?
        .map(|g| g.gid)
        .ok_or_else(|| format!("-g {text}: no such group"))
}

/// Hand `files` (logs, pid file) to `who`, then switch the process to it for good.
pub fn drop_privileges(who: &Identity, files: &[&Path]) -> Result<(), String> {
    for f in files {
        if f.exists() {
            nix::unistd::chown(*f, Some(who.uid), Some(who.gid))
                .map_err(|e| format!("cannot give {} to {}: {e}", f.display(), who.name))?;
        }
    }
    if Uid::effective() == who.uid && Gid::effective() == who.gid {
        return Ok(());
    }
    nix::unistd::setgroups(&[who.gid])
        .map_err(|e| format!("cannot drop supplementary groups: {e} (-u/-g need root)"))?;
    nix::unistd::setgid(who.gid).map_err(|e| format!("cannot switch to group {}: {e}", who.gid))?;
    nix::unistd::setuid(who.uid).map_err(|e| format!("cannot switch to user {}: {e}", who.name))?;
    if who.uid.as_raw() != 0 && nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err("privileges could be regained after the drop; refusing to run".into());
    }
    Ok(())
}
