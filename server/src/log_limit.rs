//! Rate limiting of identical error-log lines: a dead upstream must not fill the disk with the
//! same warning for every request. Past `BURST` identical WARN or ERROR lines in `WINDOW`, the
//! rest of the window's copies are counted, and one line says how many were suppressed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Identical lines written in full per window.
pub const BURST: u32 = 5;
pub const WINDOW: Duration = Duration::from_secs(10);
/// Distinct lines remembered at once; past it the oldest windows are forgotten.
const MAX_KEYS: usize = 1024;

struct Seen {
    since: Instant,
    written: u32,
    suppressed: u64,
}

#[derive(Default)]
pub struct Limiter {
    seen: HashMap<String, Seen>,
    /// Ended windows are looked for at most once a second, not on every line.
    last_sweep: Option<Instant>,
}

impl Limiter {
    /// What to write for one formatted line (`timestamp level message...`) at `now`: the line
    /// itself, or nothing when it is suppressed, after the summaries of windows that ended.
    /// `stamp` gives the current timestamp, for summaries.
    pub fn admit(&mut self, line: &str, now: Instant, stamp: impl Fn() -> String) -> String {
        let mut out = self.summaries(now, stamp);
        let Some((level, key)) = split(line) else {
            out.push_str(line);
            return out;
        };
        if !is_limited(level) {
            out.push_str(line);
            return out;
        }
        if self.seen.len() >= MAX_KEYS && !self.seen.contains_key(key) {
            self.seen.clear();
        }
        let seen = self.seen.entry(key.to_owned()).or_insert(Seen {
            since: now,
            written: 0,
            suppressed: 0,
        });
        if seen.written < BURST {
            seen.written += 1;
            out.push_str(line);
        } else {
            seen.suppressed += 1;
        }
        out
    }

    /// At exit: one line for each window that suppressed something, ended or not.
    pub fn drain(&mut self, stamp: impl Fn() -> String) -> String {
        self.sweep(|_| true, stamp)
    }

    /// One line for each ended window that suppressed something; ended windows are dropped.
    fn summaries(&mut self, now: Instant, stamp: impl Fn() -> String) -> String {
        if self
            .last_sweep
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return String::new();
        }
        self.last_sweep = Some(now);
        self.sweep(|seen| now.duration_since(seen.since) >= WINDOW, stamp)
    }

    /// Drop the windows `ended` says are over, summarising those that suppressed lines.
    fn sweep(&mut self, ended: impl Fn(&Seen) -> bool, stamp: impl Fn() -> String) -> String {
        let mut out = String::new();
        self.seen.retain(|key, seen| {
            if !ended(seen) {
                return true;
            }
            if seen.suppressed > 0 {
                let (level, message) = key.trim_start().split_once(' ').unwrap_or(("", key));
                let n = seen.suppressed;
                let s = if n == 1 { "" } else { "s" };
                out.push_str(&format!(
                    "{} {level:>5} {n} similar message{s} suppressed: {}",
                    stamp(),
                    message.trim_start()
                ));
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            false
        });
        out
    }
}

/// (level, everything after the timestamp) of a formatted line.
fn split(line: &str) -> Option<(&str, &str)> {
    let (_, rest) = line.split_once(' ')?;
    let level = rest.trim_start().split(' ').next()?;
    Some((level, rest))
}

/// WARN and ERROR lines (coloured or not).
fn is_limited(level: &str) -> bool {
    level.contains("WARN") || level.contains("ERROR")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(ts: u32, text: &str) -> String {
        format!("2026-01-01T00:00:{ts:02}.000000Z  WARN {text}\n")
    }

    #[test]
    fn identical_warnings_past_the_burst_are_counted_then_summarised() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        let mut written = String::new();
        for i in 0..100 {
            written += &l.admit(&line(i % 60, "upstream down"), t0, || "T".into());
        }
        assert_eq!(written.matches("upstream down").count(), BURST as usize);
        // Another message is not held back by the first.
        assert_eq!(
            l.admit(&line(1, "other"), t0, || "T".into()),
            line(1, "other")
        );
        // INFO lines are never limited.
        let info = "2026-01-01T00:00:01.000000Z  INFO served\n";
        for _ in 0..10 {
            assert_eq!(l.admit(info, t0, || "T".into()), info);
        }
        // After the window: the count first, then the line again.
        let later = t0 + WINDOW;
        let out = l.admit(&line(20, "upstream down"), later, || "T".into());
        assert_eq!(
            out,
            format!(
                "T  WARN 95 similar messages suppressed: upstream down\n{}",
                line(20, "upstream down")
            )
        );
    }

    #[test]
    fn drain_summarises_open_windows() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        for _ in 0..(BURST + 2) {
            l.admit(&line(0, "again"), t0, || "T".into());
        }
        assert_eq!(
            l.drain(|| "T".into()),
            "T  WARN 2 similar messages suppressed: again\n"
        );
        assert_eq!(l.drain(|| "T".into()), "");
    }

    #[test]
    fn distinct_lines_are_never_suppressed() {
        let mut l = Limiter::default();
        let t0 = Instant::now();
        for i in 0..50 {
            let text = format!("request {i} failed");
            assert_eq!(l.admit(&line(0, &text), t0, || "T".into()), line(0, &text));
        }
    }
}
