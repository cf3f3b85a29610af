//! Incremental decoder of chunked request bodies (RFC 9112 7.1). Strict: CRLF line endings,
//! hex sizes of at most 16 digits, bounded extensions and trailers.

use super::body_buf::BodyBuf;
use super::{bad, HttpError};

const MAX_LINE: usize = 4096;

/// What the decoder expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    Trailer,
    TrailerLf,
    EndLf,
    Done,
}

/// Where decoded data goes.
pub trait Sink {
    /// Bytes received so far.
    fn size(&self) -> usize;
    fn put(&mut self, data: &[u8]) -> Result<(), HttpError>;
}

impl Sink for Vec<u8> {
    fn size(&self) -> usize {
        self.len()
    }

    fn put(&mut self, data: &[u8]) -> Result<(), HttpError> {
        self.extend_from_slice(data);
        Ok(())
    }
}

impl Sink for BodyBuf {
    fn size(&self) -> usize {
        self.len()
    }

    fn put(&mut self, data: &[u8]) -> Result<(), HttpError> {
        self.extend(data)
    }
}

#[derive(Debug)]
pub struct Decoder {
    expect: Expect,
    size: u64,
    digits: usize,
    line: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            expect: Expect::Size,
            size: 0,
            digits: 0,
            line: 0,
        }
    }
}

impl Decoder {
    pub fn is_done(&self) -> bool {
        self.expect == Expect::Done
    }

    /// Decode from `input`, appending data to `out`. Returns the bytes consumed; stops at the
    /// end of the body (bytes after it belong to the next request). `max` bounds `out`.
    pub fn decode(
        &mut self,
        input: &[u8],
        out: &mut impl Sink,
        max: u64,
    ) -> Result<usize, HttpError> {
        let mut i = 0;
        while i < input.len() && self.expect != Expect::Done {
            let b = input[i];
            match self.expect {
                Expect::Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        self.digits += 1;
                        if self.digits > 16 {
                            return Err(bad("chunk size too long"));
                        }
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        self.size = (self.size << 4) | d;
                    }
                    b';' | b' ' | b'\t' if self.digits > 0 => {
                        self.expect = Expect::Ext;
                        self.line = 0;
                    }
                    b'\r' if self.digits > 0 => self.expect = Expect::SizeLf,
                    _ => return Err(bad("bad chunk size")),
                },
                Expect::Ext => self.pass_line(
                    b,
                    Expect::SizeLf,
                    "chunk extension too long",
                    "bad chunk extension",
                )?,
                Expect::SizeLf => {
                    line_feed(b, "bad chunk size line ending")?;
                    if out.size() as u64 + self.size > max {
                        return Err(HttpError::new(413, "request body too large"));
                    }
                    self.digits = 0;
                    self.expect = if self.size == 0 {
                        Expect::TrailerStart
                    } else {
                        Expect::Data
                    };
                }
                Expect::Data => {
                    let take = (self.size as usize).min(input.len() - i);
                    out.put(&input[i..i + take])?;
                    self.size -= take as u64;
                    i += take;
                    if self.size == 0 {
                        self.expect = Expect::DataCr;
                    }
                    continue;
                }
                Expect::DataCr => {
                    if b != b'\r' {
                        return Err(bad("chunk data longer than its size"));
                    }
                    self.expect = Expect::DataLf;
                }
                Expect::DataLf => {
                    line_feed(b, "bad chunk line ending")?;
                    self.expect = Expect::Size;
                }
                Expect::TrailerStart => match b {
                    b'\r' => self.expect = Expect::EndLf,
                    b'\n' | 0 => return Err(bad("bad trailer")),
                    _ => {
                        self.line = 1;
                        self.expect = Expect::Trailer;
                    }
                },
                Expect::Trailer => {
                    self.pass_line(b, Expect::TrailerLf, "trailer too long", "bad trailer")?
                }
                Expect::TrailerLf => {
                    line_feed(b, "bad trailer line ending")?;
                    self.expect = Expect::TrailerStart;
                }
                Expect::EndLf => {
                    line_feed(b, "bad end of chunked body")?;
                    self.expect = Expect::Done;
                }
                Expect::Done => unreachable!(),
            }
            i += 1;
        }
        Ok(i)
    }

    /// Byte `b` of a line passed over (a chunk extension, a trailer field) up to its CR, after
    /// which `then` is expected: at most `MAX_LINE` bytes (else `long`), no bare LF or NUL
    /// (else `malformed`).
    #[inline]
    fn pass_line(
        &mut self,
        b: u8,
        then: Expect,
        long: &'static str,
        malformed: &'static str,
    ) -> Result<(), HttpError> {
        self.line += 1;
        if self.line > MAX_LINE {
            return Err(bad(long));
        }
        match b {
            b'\r' => self.expect = then,
            b'\n' | 0 => return Err(bad(malformed)),
            _ => {}
        }
        Ok(())
    }
}

/// The LF that must follow a CR (else `malformed`: no bare CR).
#[inline]
fn line_feed(b: u8, malformed: &'static str) -> Result<(), HttpError> {
    if b == b'\n' {
        Ok(())
    } else {
        Err(bad(malformed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Result<(Vec<u8>, usize), HttpError> {
        let mut d = Decoder::default();
        let mut out = Vec::new();
        let n = d.decode(input, &mut out, 1 << 20)?;
        assert!(d.is_done(), "not done");
        Ok((out, n))
    }

    #[test]
    fn decodes_chunks_extensions_and_trailers() {
        let raw = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (body, n) = decode_all(raw).unwrap();
        assert_eq!(body, b"hello world");
        assert_eq!(&raw[n..], b"NEXT");
    }

    #[test]
    fn decodes_byte_by_byte() {
        let raw = b"a\r\n0123456789\r\n0\r\n\r\n";
        let mut d = Decoder::default();
        let mut out = Vec::new();
        for b in raw.iter() {
            assert_eq!(d.decode(std::slice::from_ref(b), &mut out, 100).unwrap(), 1);
        }
        assert!(d.is_done());
        assert_eq!(out, b"0123456789");
    }

    #[test]
    fn rejects_malformed_input() {
        for raw in [
            &b"x\r\n"[..],
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n",
            b"fffffffffffffffff\r\n",
            b"-1\r\n",
            b"\r\n",
            b"5\r\nhello\r\n0\r\n\n",
            b"0\r\n\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
            b"0\r\nX: 1\r\n\n",
        ] {
            let mut out = Vec::new();
            assert!(
                Decoder::default().decode(raw, &mut out, 1 << 20).is_err(),
                "{raw:?}"
            );
        }
    }

    /// Each malformed line says which: extensions and trailers are bounded and end in CRLF,
    /// and every CR must have its LF.
    #[test]
    fn each_malformed_line_is_named() {
        let long = "x".repeat(MAX_LINE);
        let cases = [
            (format!("5;{long}\r\n"), "chunk extension too long"),
            ("5;a\nb\r\n".to_owned(), "bad chunk extension"),
            ("5;a\0\r\n".to_owned(), "bad chunk extension"),
            ("5;a\rb".to_owned(), "bad chunk size line ending"),
            ("5\r\nhello\rX".to_owned(), "bad chunk line ending"),
            (format!("0\r\nX: {long}\r\n"), "trailer too long"),
            ("0\r\nX: 1\n".to_owned(), "bad trailer"),
            ("0\r\nX: 1\rY".to_owned(), "bad trailer line ending"),
            ("0\r\n\rX".to_owned(), "bad end of chunked body"),
        ];
        for (raw, reason) in cases {
            let mut out = Vec::new();
            let e = Decoder::default()
                .decode(raw.as_bytes(), &mut out, 1 << 20)
                .unwrap_err();
            assert_eq!((e.status, e.reason), (400, reason), "{raw:.40?}");
        }
    }

    #[test]
    fn enforces_the_body_limit() {
        let mut out = Vec::new();
        let e = Decoder::default()
            .decode(b"10\r\n", &mut out, 8)
            .unwrap_err();
        assert_eq!(e.status, 413);
    }
}
