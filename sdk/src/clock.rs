//! Coarse clocks: the kernel's last tick, read without the time-stamp counter and its
//! conversion. A few milliseconds behind at most — plenty for a cache's time to live or a
//! date that shows whole seconds, and several times cheaper per call than `Instant::now`
//! or `SystemTime::now` on a path every request takes.

/// Nanoseconds on the coarse monotonic clock (for measuring ages, e.g. a `cache_ttl`).
#[inline]
pub fn monotonic_ns() -> u64 {
    let t = read(libc::CLOCK_MONOTONIC_COARSE);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Seconds since the Unix epoch on the coarse real-time clock (for dates).
#[inline]
pub fn unix_secs() -> u64 {
    u64::try_from(read(libc::CLOCK_REALTIME_COARSE).tv_sec).unwrap_or(0)
}

#[inline]
fn read(clock: libc::clockid_t) -> libc::timespec {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill; both clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn the_coarse_clocks_follow_the_precise_ones() {
        let precise = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(super::unix_secs().abs_diff(precise) <= 1);
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = super::monotonic_ns();
        assert!((20_000_000..1_000_000_000).contains(&(b - a)), "{a} -> {b}");
    }
}
