//! A memory budget shared by every render of the server: a render reserves what it is
//! estimated to cost before its pixels are allocated, waits a moment for other renders to give
//! memory back when the budget is spent, and is refused (503) if none comes.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::command::Command;
use crate::render::{crop_plan, fit_size, RenderError};

pub struct Budget {
    /// Bytes all renders may hold at once; 0: no limit.
    total: u64,
    /// How long a render waits for memory.
    wait: Duration,
    used: Mutex<u64>,
    freed: Condvar,
}

/// Memory reserved by one render, given back when dropped.
pub struct Permit<'a> {
    budget: &'a Budget,
    bytes: u64,
}

impl Budget {
    pub fn new(total: u64, wait: Duration) -> Budget {
        Budget {
            total,
            wait,
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Reserve `bytes`: `TooLarge` if the whole budget would not do, `Busy` if it stays spent
    /// for the configured wait.
    pub fn reserve(&self, bytes: u64) -> Result<Permit<'_>, RenderError> {
        if self.total == 0 {
            return Ok(Permit {
                budget: self,
                bytes: 0,
            });
        }
        if bytes > self.total {
            return Err(RenderError::TooLarge(format!(
                "a render estimated at {} MiB exceeds max_render_memory ({} MiB)",
                bytes >> 20,
                self.total >> 20
            )));
        }
        let deadline = Instant::now() + self.wait;
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        while *used + bytes > self.total {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RenderError::Busy);
            }
            used = self
                .freed
                .wait_timeout(used, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *used += bytes;
        Ok(Permit {
            budget: self,
            bytes,
        })
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut used = self.budget.used.lock().unwrap_or_else(|e| e.into_inner());
        *used -= self.bytes;
        self.budget.freed.notify_all();
    }
}

/// What rendering `cmd` from a `sw`×`sh` source whose decoded pixels take `decoded` bytes is
/// estimated to hold at its peak: the source twice (decoded, and a rotated or cropped copy),
/// the resampler's buffer (16 bytes per pixel of the source window's width × the result's
/// height) and 16 bytes per pixel of the result (resized, converted, composited).
pub fn estimate(sw: u32, sh: u32, decoded: u64, cmd: &Command) -> u64 {
    // The source window's width, the result's height, and the final canvas.
    let (win_w, out_h, (canvas_w, canvas_h)) = match *cmd {
        Command::Fit { w, h } => {
            let out = fit_size(sw, sh, w, h);
            (sw, out.1, out)
        }
        Command::Crop { w, h, gravity } => {
            let ([_, _, ww, _], out) = crop_plan(sw, sh, w, h, gravity.anchor());
            (ww, out.1, out)
        }
        Command::Fill { w, h, .. } => (sw, fit_size(sw, sh, w, h).1, (w, h)),
    };
    let resample = 16 * win_w as u64 * out_h as u64;
    let result = 16 * canvas_w as u64 * canvas_h as u64;
    2 * decoded + resample + result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_wait_for_memory_given_back_or_fail() {
        let budget = Budget::new(100, Duration::from_millis(50));
        let a = budget.reserve(60).unwrap();
        assert!(matches!(budget.reserve(60), Err(RenderError::Busy)));
        assert!(matches!(budget.reserve(101), Err(RenderError::TooLarge(_))));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| budget.reserve(60).map(|_| ()));
            std::thread::sleep(Duration::from_millis(10));
            drop(a);
            assert!(waiter.join().unwrap().is_ok());
        });
        let _b = budget.reserve(100).unwrap();
    }

    #[test]
    fn no_limit_when_zero() {
        let budget = Budget::new(0, Duration::ZERO);
        let _a = budget.reserve(u64::MAX).unwrap();
        let _b = budget.reserve(u64::MAX).unwrap();
    }

    #[test]
    fn estimates_grow_with_the_source_and_the_result() {
        let cmd = Command::Fit { w: 100, h: 100 };
        let small = estimate(400, 200, 400 * 200 * 3, &cmd);
        let large = estimate(8000, 8000, 8000 * 8000 * 3, &cmd);
        assert!(large > 2 * 8000 * 8000 * 3);
        assert!(small < large);
        // Fill pays for its whole canvas.
        let fill = Command::Fill {
            w: 1000,
            h: 1000,
            color: [0; 3],
        };
        assert!(estimate(10, 10, 300, &fill) >= 16 * 1000 * 1000);
    }
}
