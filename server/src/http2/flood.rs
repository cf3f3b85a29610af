//! A budget of HTTP/2 control frames (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, RST_STREAM,
//! frames of unknown types, empty DATA frames) a client may send without asking for anything.
//! The session counts each frame it reads; each request (a HEADERS frame) starts the count
//! again, and each DATA frame the server sends earns one frame back (a client reading a large
//! response answers with WINDOW_UPDATEs). Past the budget the connection closes with GOAWAY
//! ENHANCE_YOUR_CALM.

use super::frame::{CONTINUATION, DATA, END_STREAM, GOAWAY, HEADERS};

pub struct Flood {
    /// Frames still allowed; `None`: no limit.
    left: Option<u32>,
    budget: u32,
}

impl Flood {
    /// `budget` 0: no limit.
    pub fn new(budget: u32) -> Flood {
        Flood {
            left: (budget > 0).then_some(budget),
            budget,
        }
    }

    /// A frame the client sent: `false` once the budget is spent.
    pub fn received(&mut self, kind: u8, flags: u8, len: usize) -> bool {
        let Some(left) = self.left else { return true };
        let control = match kind {
            HEADERS => {
                self.left = Some(self.budget);
                return true;
            }
            DATA => len == 0 && flags & END_STREAM == 0,
            // CONTINUATION is bounded by the header list limit; GOAWAY ends the connection.
            CONTINUATION | GOAWAY => false,
            _ => true,
        };
        if control {
            self.left = Some(left.saturating_sub(1));
            return left > 1;
        }
        true
    }

    /// A DATA frame the server sent.
    pub fn sent_data(&mut self) {
        if let Some(left) = self.left {
            self.left = Some(left.saturating_add(1).min(self.budget));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http2::frame::{PING, PRIORITY, SETTINGS, WINDOW_UPDATE};

    #[test]
    fn control_frames_spend_the_budget_and_requests_renew_it() {
        let mut flood = Flood::new(3);
        assert!(flood.received(SETTINGS, 0, 0));
        assert!(flood.received(PING, 0, 8));
        assert!(flood.received(HEADERS, 0x4, 20));
        assert!(flood.received(WINDOW_UPDATE, 0, 4));
        assert!(flood.received(DATA, END_STREAM, 0));
        assert_eq!(flood.left, Some(2));
        assert!(flood.received(DATA, 0, 0));
        assert!(!flood.received(PRIORITY, 0, 5));
    }

    #[test]
    fn data_sent_earns_frames_back_and_zero_means_no_limit() {
        let mut flood = Flood::new(2);
        flood.received(PING, 0, 8);
        flood.sent_data();
        flood.sent_data();
        assert_eq!(flood.left, Some(2));
        let mut unlimited = Flood::new(0);
        for _ in 0..100 {
            assert!(unlimited.received(PING, 0, 8));
        }
    }
}
