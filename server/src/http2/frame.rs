//! The frame layer of RFC 9113 §4 and §6: the 9-byte header, frame types, flags, error codes,
//! the per-type length rules, and writing frames into an output buffer.

pub const HEADER_LEN: usize = 9;
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The default and smallest SETTINGS_MAX_FRAME_SIZE, and the default windows.
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
pub const DEFAULT_WINDOW: u32 = 65_535;
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

/// Error codes (§7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    NoError = 0x0,
    Protocol = 0x1,
    Internal = 0x2,
    FlowControl = 0x3,
    StreamClosed = 0x5,
    FrameSize = 0x6,
    Refused = 0x7,
    Compression = 0x9,
    EnhanceYourCalm = 0xb,
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    pub fn parse(b: &[u8; HEADER_LEN]) -> Head {
        Head {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize,
            kind: b[3],
            flags: b[4],
            // The reserved bit is ignored (§4.1).
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    /// The length rules of §6 for a frame of a known type (FRAME_SIZE_ERROR; answered as a
    /// connection error, which §6.3 allows for PRIORITY too), and PROTOCOL_ERROR for a stream
    /// id where none may be, or none where one must.
    pub fn check(&self) -> Result<(), Reason> {
        let fixed = match self.kind {
            PRIORITY => Some(5),
            RST_STREAM | WINDOW_UPDATE => Some(4),
            PING => Some(8),
            _ => None,
        };
        let size_ok = match self.kind {
            SETTINGS if self.flags & ACK != 0 => self.len == 0,
            SETTINGS => self.len.is_multiple_of(6),
            GOAWAY => self.len >= 8,
            _ => fixed.is_none_or(|n| self.len == n),
        };
        let needs_stream = matches!(
            self.kind,
            DATA | HEADERS | PRIORITY | RST_STREAM | CONTINUATION | PUSH_PROMISE
        );
        let no_stream = matches!(self.kind, SETTINGS | PING | GOAWAY);
        if (needs_stream && self.stream == 0) || (no_stream && self.stream != 0) {
            return Err(Reason::Protocol);
        }
        if !size_ok {
            return Err(Reason::FrameSize);
        }
        Ok(())
    }
}

/// Write a frame header.
pub fn put_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]);
}

/// Patch the length of the frame whose header starts at `at`.
pub fn set_len(out: &mut [u8], at: usize, len: usize) {
    let l = (len as u32).to_be_bytes();
    out[at..at + 3].copy_from_slice(&l[1..]);
}

pub fn put_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    put_head(out, settings.len() * 6, SETTINGS, 0, 0);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, n: u32) {
    put_head(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&n.to_be_bytes());
}

pub fn put_rst(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    put_head(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&(reason as u32).to_be_bytes());
}

pub fn put_goaway(out: &mut Vec<u8>, last: u32, reason: Reason) {
    put_head(out, 8, GOAWAY, 0, 0);
    out.extend_from_slice(&last.to_be_bytes());
    out.extend_from_slice(&(reason as u32).to_be_bytes());
}

pub fn put_ping_ack(out: &mut Vec<u8>, payload: &[u8]) {
    put_head(out, 8, PING, ACK, 0);
    out.extend_from_slice(payload);
}

/// The payload of a frame that may be PADDED (§6.1, §6.2), without its padding; a pad length
/// past the payload is a PROTOCOL_ERROR.
pub fn unpad(flags: u8, payload: &[u8]) -> Result<&[u8], Reason> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    let (&pad, rest) = payload.split_first().ok_or(Reason::Protocol)?;
    if pad as usize > rest.len() {
        return Err(Reason::Protocol);
    }
    Ok(&rest[..rest.len() - pad as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips() {
        let mut out = Vec::new();
        put_head(&mut out, 0x12345, HEADERS, END_HEADERS, 0x8000_0003);
        let head = Head::parse(out[..9].try_into().unwrap());
        assert_eq!(
            head,
            Head {
                len: 0x12345,
                kind: HEADERS,
                flags: END_HEADERS,
                stream: 3
            }
        );
    }

    #[test]
    fn lengths_and_stream_ids_are_checked() {
        let h = |kind, flags, len, stream| Head {
            len,
            kind,
            flags,
            stream,
        };
        assert_eq!(h(PING, 0, 8, 0).check(), Ok(()));
        assert_eq!(h(PING, 0, 7, 0).check(), Err(Reason::FrameSize));
        assert_eq!(h(PING, 0, 8, 1).check(), Err(Reason::Protocol));
        assert_eq!(h(SETTINGS, ACK, 6, 0).check(), Err(Reason::FrameSize));
        assert_eq!(h(SETTINGS, 0, 7, 0).check(), Err(Reason::FrameSize));
        assert_eq!(h(WINDOW_UPDATE, 0, 3, 0).check(), Err(Reason::FrameSize));
        assert_eq!(h(RST_STREAM, 0, 4, 0).check(), Err(Reason::Protocol));
        assert_eq!(h(PRIORITY, 0, 4, 1).check(), Err(Reason::FrameSize));
        assert_eq!(h(DATA, 0, 10, 0).check(), Err(Reason::Protocol));
        assert_eq!(h(0xff, 0, 3, 0).check(), Ok(()));
    }

    #[test]
    fn padding_is_removed_and_checked() {
        assert_eq!(unpad(PADDED, &[2, b'a', 0, 0]), Ok(&b"a"[..]));
        assert_eq!(unpad(PADDED, &[4, b'a', 0, 0]), Err(Reason::Protocol));
        assert_eq!(unpad(0, b"ab"), Ok(&b"ab"[..]));
    }
}
