//! Reason phrases and the core's error pages (written once in the SDK, which modules share).

pub use osprey_sdk::http::status::{error_page, reason};

/// Statuses that never carry a body.
pub fn bodiless(status: u16) -> bool {
    status < 200 || status == 204 || status == 304
}
