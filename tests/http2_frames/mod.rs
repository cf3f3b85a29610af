//! A raw HTTP/2 client for conformance tests: frames built byte by byte (any of them invalid on
//! purpose), header blocks encoded by hand (RFC 7541), and checks that read the server's frames
//! the way h2spec judges them.
#![allow(dead_code)]

use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

/// How long a check waits for the server's next frame.
pub const WAIT: Duration = Duration::from_secs(2);

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 §6).
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

// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

// Error codes (RFC 9113 §7).
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const INTERNAL_ERROR: u32 = 0x2;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const STREAM_CLOSED: u32 = 0x5;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;

// Settings (RFC 9113 §6.5.2).
pub const HEADER_TABLE_SIZE: u16 = 0x1;
pub const ENABLE_PUSH: u16 = 0x2;
pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const MAX_FRAME_SIZE: u16 = 0x5;

/// The result of a conformance check: what went wrong, as h2spec would print it.
pub type Check = Result<(), String>;

/// One frame as received.
#[derive(Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of an RST_STREAM or GOAWAY frame.
    pub fn error_code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        match self.payload.get(at..at + 4) {
            Some(b) => u32::from_be_bytes(b.try_into().unwrap()),
            None => u32::MAX,
        }
    }

    fn ends_stream(&self) -> bool {
        matches!(self.kind, DATA | HEADERS) && self.flags & END_STREAM != 0
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = [
            "DATA",
            "HEADERS",
            "PRIORITY",
            "RST_STREAM",
            "SETTINGS",
            "PUSH_PROMISE",
            "PING",
            "GOAWAY",
            "WINDOW_UPDATE",
            "CONTINUATION",
        ]
        .get(self.kind as usize)
        .copied()
        .unwrap_or("UNKNOWN");
        write!(
            f,
            "{name} frame (length {}, flags {:#04x}, stream {}",
            self.payload.len(),
            self.flags,
            self.stream
        )?;
        if matches!(self.kind, GOAWAY | RST_STREAM) {
            write!(f, ", error code {:#x}", self.error_code())?;
        }
        write!(f, ")")
    }
}

/// The frames in `bytes` (a trailing partial frame is left out).
pub fn parse_frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while bytes.len() >= 9 {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        if bytes.len() < 9 + len {
            break;
        }
        frames.push(Frame {
            kind: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes(bytes[5..9].try_into().unwrap()) & 0x7fff_ffff,
            payload: bytes[9..9 + len].to_vec(),
        });
        bytes = &bytes[9 + len..];
    }
    frames
}

/// A frame's bytes: any type, flags, stream (reserved bit included) and payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A padded payload: the pad length, the content, then that many zeros.
pub fn padded(content: &[u8], pad: u8) -> Vec<u8> {
    let mut out = vec![pad];
    out.extend_from_slice(content);
    out.extend(std::iter::repeat_n(0, pad as usize));
    out
}

/// The five bytes of a priority (stream dependency, exclusive bit, weight - 1).
pub fn priority_fields(depends_on: u32, exclusive: bool, weight: u8) -> Vec<u8> {
    let dep = depends_on | if exclusive { 0x8000_0000 } else { 0 };
    let mut out = dep.to_be_bytes().to_vec();
    out.push(weight);
    out
}

/// What the server did next.
enum Event {
    Frame(Frame),
    Closed,
    Timeout,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Frame(frame) => write!(f, "{frame:?}"),
            Event::Closed => write!(f, "connection closed"),
            Event::Timeout => write!(f, "nothing within {WAIT:?}"),
        }
    }
}

/// A byte stream to the server (TCP, or TLS over it) whose reads time out after [`WAIT`].
pub trait Transport: Read + Write {}
impl<T: Read + Write> Transport for T {}

/// A client connection.
pub struct Conn {
    io: Box<dyn Transport>,
    buf: Vec<u8>,
    closed: bool,
    scheme: &'static str,
    authority: String,
    /// The server's SETTINGS, as received during the handshake.
    pub server_settings: Vec<(u16, u32)>,
}

impl Conn {
    pub fn new(io: Box<dyn Transport>, scheme: &'static str, authority: &str) -> Conn {
        Conn {
            io,
            buf: Vec::new(),
            closed: false,
            scheme,
            authority: authority.to_string(),
            server_settings: Vec::new(),
        }
    }

    /// The preface and an empty SETTINGS; the server's first frame must be its SETTINGS
    /// (RFC 9113 §3.4), which is acknowledged; then the server's ACK of ours is awaited.
    pub fn handshake(&mut self) -> Check {
        self.send(PREFACE);
        self.send_frame(SETTINGS, 0, 0, &[]);
        match self.next() {
            Event::Frame(f) if f.kind == SETTINGS && f.flags & ACK == 0 => {
                self.server_settings = f
                    .payload
                    .chunks_exact(6)
                    .map(|c| {
                        (
                            u16::from_be_bytes([c[0], c[1]]),
                            u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                        )
                    })
                    .collect();
            }
            other => return Err(format!("handshake: expected SETTINGS first, got {other}")),
        }
        self.send_frame(SETTINGS, ACK, 0, &[]);
        self.settings_ack()
            .map_err(|e| format!("handshake: no SETTINGS ACK: {e}"))
    }

    /// A setting the server announced.
    pub fn server_setting(&self, id: u16) -> Option<u32> {
        self.server_settings
            .iter()
            .rev()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| *v)
    }

    /// Write bytes; a server that already closed is noticed by the next check.
    pub fn send(&mut self, bytes: &[u8]) {
        if self
            .io
            .write_all(bytes)
            .and_then(|()| self.io.flush())
            .is_err()
        {
            self.closed = true;
        }
    }

    pub fn send_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        self.send(&frame(kind, flags, stream, payload));
    }

    /// A GET for `/` on `stream` that ends the stream, in one HEADERS frame.
    pub fn get(&mut self, stream: u32) {
        let bytes = self.get_frame(stream);
        self.send(&bytes);
    }

    /// The bytes of [`Conn::get`]'s frame, to send in one write with what follows it (so the
    /// server meets the next frame with the stream still half-closed, not after answering).
    pub fn get_frame(&mut self, stream: u32) -> Vec<u8> {
        let block = self.block(&self.request("GET"));
        frame(HEADERS, END_HEADERS | END_STREAM, stream, &block)
    }

    /// A POST for `/` with a content-length, its HEADERS frame leaving the stream open.
    pub fn post(&mut self, stream: u32, length: usize) {
        let mut fields = self.request("POST");
        fields.push(("content-length".into(), length.to_string()));
        let block = self.block(&fields);
        self.send_frame(HEADERS, END_HEADERS, stream, &block);
    }

    pub fn settings(&mut self, values: &[(u16, u32)]) {
        let mut payload = Vec::new();
        for (id, value) in values {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&value.to_be_bytes());
        }
        self.send_frame(SETTINGS, 0, 0, &payload);
    }

    pub fn rst(&mut self, stream: u32, code: u32) {
        self.send_frame(RST_STREAM, 0, stream, &code.to_be_bytes());
    }

    pub fn window_update(&mut self, stream: u32, increment: u32) {
        self.send_frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes());
    }

    pub fn priority(&mut self, stream: u32, depends_on: u32, exclusive: bool, weight: u8) {
        let fields = priority_fields(depends_on, exclusive, weight);
        self.send_frame(PRIORITY, 0, stream, &fields);
    }

    pub fn goaway(&mut self, last_stream: u32, code: u32) {
        let mut payload = last_stream.to_be_bytes().to_vec();
        payload.extend_from_slice(&code.to_be_bytes());
        self.send_frame(GOAWAY, 0, 0, &payload);
    }

    /// The pseudo-header fields of a request for `/` (RFC 9113 §8.3.1).
    pub fn request(&self, method: &str) -> Vec<(String, String)> {
        vec![
            (":method".into(), method.into()),
            (":scheme".into(), self.scheme.into()),
            (":path".into(), "/".into()),
            (":authority".into(), self.authority.clone()),
        ]
    }

    /// A header block of literal fields without indexing (RFC 7541 §6.2.2), names as given
    /// (so uppercase or unknown pseudo-header names are sent as they are).
    pub fn block(&self, fields: &[(String, String)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, value) in fields {
            out.push(0);
            out.extend(string(name.as_bytes()));
            out.extend(string(value.as_bytes()));
        }
        out
    }

    fn next(&mut self) -> Event {
        loop {
            if let Some(frame) = self.take_frame() {
                return Event::Frame(frame);
            }
            if self.closed {
                return Event::Closed;
            }
            let mut chunk = [0u8; 16384];
            match self.io.read(&mut chunk) {
                Ok(0) => self.closed = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Event::Timeout
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // A reset, or TLS ended without close_notify: the server closed.
                Err(_) => self.closed = true,
            }
        }
    }

    fn take_frame(&mut self) -> Option<Frame> {
        let frame = parse_frames(&self.buf).into_iter().next()?;
        self.buf.drain(..9 + frame.payload.len());
        Some(frame)
    }

    /// Read until `pass` says yes (`Some(true)`) or no (`Some(false)`), the connection closes
    /// (`on_close`) or the wait runs out; `expected` describes the wish for the message.
    fn expect(
        &mut self,
        expected: &str,
        on_close: bool,
        mut pass: impl FnMut(&Frame) -> Option<bool>,
    ) -> Check {
        let mut seen = Vec::new();
        loop {
            let event = self.next();
            match &event {
                Event::Frame(f) => match pass(f) {
                    Some(true) => return Ok(()),
                    Some(false) => {}
                    None => {
                        seen.push(format!("{f:?}"));
                        continue;
                    }
                },
                Event::Closed if on_close => return Ok(()),
                _ => {}
            }
            seen.push(event.to_string());
            return Err(format!(
                "expected {expected}; got {}",
                seen[seen.len().saturating_sub(4)..].join(", ")
            ));
        }
    }

    /// A connection error (RFC 9113 §5.4.1): GOAWAY with one of `codes`, or the connection
    /// closed.
    pub fn connection_error(&mut self, codes: &[u32]) -> Check {
        let wish = format!("GOAWAY {codes:x?} or the connection closed");
        self.expect(&wish, true, |f| {
            (f.kind == GOAWAY).then(|| codes.contains(&f.error_code()))
        })
    }

    /// A stream error (RFC 9113 §5.4.2): RST_STREAM or GOAWAY with one of `codes`, or the
    /// connection closed.
    pub fn stream_error(&mut self, codes: &[u32]) -> Check {
        let wish = format!("RST_STREAM or GOAWAY {codes:x?}, or the connection closed");
        self.expect(&wish, true, |f| {
            matches!(f.kind, GOAWAY | RST_STREAM).then(|| codes.contains(&f.error_code()))
        })
    }

    /// A malformed request refused (RFC 9113 §8.1.1): a stream error PROTOCOL_ERROR, or a 400
    /// response on `stream` (a server MAY answer before it resets the stream).
    pub fn refused_request(&mut self, stream: u32) -> Check {
        let wish = format!("RST_STREAM or GOAWAY PROTOCOL_ERROR, or a 400 on stream {stream}");
        self.expect(&wish, true, |f| match f.kind {
            GOAWAY | RST_STREAM => Some(f.error_code() == PROTOCOL_ERROR),
            HEADERS if f.stream == stream => Some(status_400(&f.payload)),
            _ => None,
        })
    }

    /// The connection closes, with or without a GOAWAY first.
    pub fn closed(&mut self) -> Check {
        self.expect("the connection closed", true, |_| None)
    }

    /// A response's HEADERS frame on `stream`.
    pub fn response(&mut self, stream: u32) -> Check {
        let wish = format!("a HEADERS frame on stream {stream}");
        self.expect(&wish, false, |f| match f.kind {
            HEADERS => Some(f.stream == stream),
            GOAWAY => Some(false),
            RST_STREAM if f.stream == stream => Some(false),
            _ => None,
        })
    }

    /// A response on `stream` with `status`, one of the static table's (RFC 7541 Appendix A),
    /// sent as its indexed field.
    pub fn status(&mut self, stream: u32, status: u16) -> Check {
        let index = [200, 204, 206, 304, 400, 404, 500]
            .iter()
            .position(|&s| s == status)
            .expect("a status of the static table") as u8
            + 8;
        let wish = format!("a HEADERS frame on stream {stream} with :status {status}");
        self.expect(&wish, false, |f| match f.kind {
            HEADERS if f.stream == stream => Some(f.payload.first() == Some(&(0x80 | index))),
            GOAWAY => Some(false),
            RST_STREAM if f.stream == stream => Some(false),
            _ => None,
        })
    }

    /// The end of `stream`: a frame with END_STREAM, or RST_STREAM NO_ERROR.
    pub fn stream_end(&mut self, stream: u32) -> Check {
        let wish = format!("the end of stream {stream}");
        self.expect(&wish, false, |f| match f.kind {
            _ if f.stream == stream && f.ends_stream() => Some(true),
            RST_STREAM if f.stream == stream => Some(f.error_code() == NO_ERROR),
            GOAWAY => Some(false),
            _ => None,
        })
    }

    /// The length of the first DATA frame on `stream`.
    pub fn data_length(&mut self, stream: u32, length: usize) -> Check {
        let wish = format!("a DATA frame of {length} bytes on stream {stream}");
        self.expect(&wish, false, |f| match f.kind {
            DATA if f.stream == stream => Some(f.payload.len() == length),
            GOAWAY => Some(false),
            RST_STREAM if f.stream == stream => Some(false),
            _ => None,
        })
    }

    /// A PING ACK carrying `data`.
    pub fn ping_ack(&mut self, data: [u8; 8]) -> Check {
        let wish = format!("PING ACK {data:?}");
        self.expect(&wish, false, |f| match f.kind {
            PING if f.flags & ACK != 0 => Some(f.payload == data),
            GOAWAY => Some(false),
            _ => None,
        })
    }

    /// A PING ACK carrying `data`, or the connection closed (what a GOAWAY allows).
    pub fn ping_ack_or_closed(&mut self, data: [u8; 8]) -> Check {
        let wish = format!("PING ACK {data:?} or the connection closed");
        self.expect(&wish, true, |f| {
            (f.kind == PING && f.flags & ACK != 0).then(|| f.payload == data)
        })
    }

    pub fn settings_ack(&mut self) -> Check {
        self.expect("SETTINGS ACK", false, |f| match f.kind {
            SETTINGS if f.flags & ACK != 0 => Some(f.payload.is_empty()),
            GOAWAY => Some(false),
            _ => None,
        })
    }

    /// Every frame until the connection closes (`true`) or nothing more comes within [`WAIT`],
    /// acknowledging PINGs as a real client does (a graceful GOAWAY waits for that ACK).
    pub fn frames_until_closed(&mut self) -> (Vec<Frame>, bool) {
        let mut frames = Vec::new();
        loop {
            match self.next() {
                Event::Frame(f) => {
                    if f.kind == PING && f.flags & ACK == 0 {
                        self.send_frame(PING, ACK, 0, &f.payload);
                    }
                    frames.push(f);
                }
                Event::Closed => return (frames, true),
                Event::Timeout => return (frames, false),
            }
        }
    }

    /// A GET for `path` on `stream` that ends the stream.
    pub fn get_path(&mut self, stream: u32, path: &str) {
        let mut fields = self.request("GET");
        fields[2].1 = path.into();
        let block = self.block(&fields);
        self.send_frame(HEADERS, END_HEADERS | END_STREAM, stream, &block);
    }

    /// The connection still works: a PING is answered.
    pub fn alive(&mut self) -> Check {
        let data = *b"h2alive!";
        self.send_frame(PING, 0, 0, &data);
        self.ping_ack(data)
    }
}

/// Whether a response's header block (unpadded) starts with `:status: 400`: the static entry
/// 12, or a literal with the name of entry 8 and a plain value "400" (RFC 7541 Appendix A).
fn status_400(block: &[u8]) -> bool {
    matches!(
        block,
        [0x8c, ..] | [0x48 | 0x08 | 0x18, 3, b'4', b'0', b'0', ..]
    )
}

/// An HPACK integer with an `n`-bit prefix whose upper bits are `first` (RFC 7541 §5.1).
pub fn integer(first: u8, n: u32, value: usize) -> Vec<u8> {
    let max = (1usize << n) - 1;
    if value < max {
        return vec![first | value as u8];
    }
    let mut out = vec![first | max as u8];
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
    out
}

/// A string literal, not Huffman-coded (RFC 7541 §5.2).
pub fn string(bytes: &[u8]) -> Vec<u8> {
    let mut out = integer(0, 7, bytes.len());
    out.extend_from_slice(bytes);
    out
}

/// A Huffman-coded string literal (RFC 7541 §5.2, Appendix B), for the characters of the
/// codes table below; padded with the most significant bits of EOS.
pub fn huffman_string(text: &str) -> Vec<u8> {
    let mut bits = String::new();
    for c in text.chars() {
        let code = HUFFMAN
            .iter()
            .find(|(ch, _)| *ch == c)
            .unwrap_or_else(|| panic!("no Huffman code here for {c:?}"))
            .1;
        bits.push_str(code);
    }
    while !bits.len().is_multiple_of(8) {
        bits.push('1');
    }
    let coded: Vec<u8> = bits
        .as_bytes()
        .chunks(8)
        .map(|b| u8::from_str_radix(std::str::from_utf8(b).unwrap(), 2).unwrap())
        .collect();
    let mut out = integer(0x80, 7, coded.len());
    out.extend(coded);
    out
}

/// The Huffman codes of the characters the tests use (RFC 7541 Appendix B).
const HUFFMAN: &[(char, &str)] = &[
    ('0', "00000"),
    ('1', "00001"),
    ('2', "00010"),
    ('a', "00011"),
    ('c', "00100"),
    ('e', "00101"),
    ('i', "00110"),
    ('o', "00111"),
    ('s', "01000"),
    ('t', "01001"),
    ('-', "010110"),
    ('.', "010111"),
    ('/', "011000"),
    ('3', "011001"),
    ('4', "011010"),
    ('5', "011011"),
    ('6', "011100"),
    ('7', "011101"),
    ('8', "011110"),
    ('9', "011111"),
    (':', "1011100"),
    ('h', "100111"),
    ('l', "101000"),
    ('n', "101010"),
    ('p', "101011"),
    ('r', "101100"),
    ('u', "101101"),
];
