//! The access log: one line per response in the combined format plus the request time,
//! gathered in a per-thread buffer and written with one `write(2)` when the buffer fills, once
//! a second, and when the thread stops. Off unless `logging.access_log` or `-a` names a file.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use osprey_sdk::HeaderPair;

/// A thread's buffer is written out when it reaches this size.
const FLUSH_AT: usize = 32 * 1024;
/// ... and at least this often.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

static ENABLED: AtomicBool = AtomicBool::new(false);
static SINK: Mutex<Option<Sink>> = Mutex::new(None);
/// `logging.access_log_fields`, added at the end of each line.
static FIELDS: RwLock<Vec<Field>> = RwLock::new(Vec::new());

/// A field added to the combined format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The request's id (nginx's `$request_id`).
    RequestId,
    /// A cookie: the one the response sets, else the one the request sent (nginx's
    /// `$uid_set` / `$uid_got`, e.g. the `userid` filter's visitor id).
    Cookie(String),
}

impl Field {
    pub fn parse(text: &str) -> Result<Field, String> {
        match text.split_once(':') {
            None if text == "request_id" => Ok(Field::RequestId),
            Some(("cookie", name)) if !name.is_empty() => Ok(Field::Cookie(name.to_owned())),
            _ => Err(format!(
                "unknown access log field `{text}` (known: `request_id`, `cookie:NAME`)"
            )),
        }
    }
}

struct Sink {
    path: String,
    file: Arc<File>,
}

thread_local! {
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn open(path: &str) -> Result<Arc<File>, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(Arc::new)
        .map_err(|e| format!("cannot open access log {path}: {e}"))
}

/// Can `path` be opened for logging? (It is created if missing, as start-up would.)
pub fn check(path: &str) -> Result<(), String> {
    open(path).map(drop)
}

/// Log to `access_log` (`None`: off) with `access_log_fields`. Keeps the open file when the
/// path is unchanged.
pub fn configure(logging: &crate::config::LoggingConfig) -> Result<(), String> {
    let fields = logging.access_log_fields.iter().map(|f| Field::parse(f));
    *FIELDS.write().unwrap() = fields.collect::<Result<_, _>>()?;
    let mut sink = SINK.lock().unwrap();
    match logging.access_log.as_deref() {
        None => {
            ENABLED.store(false, Relaxed);
            *sink = None;
        }
        Some(p) if sink.as_ref().is_some_and(|s| s.path == p) => {}
        Some(p) => {
            let file = open(p)?;
            *sink = Some(Sink {
                path: p.to_owned(),
                file,
            });
            ENABLED.store(true, Relaxed);
        }
    }
    Ok(())
}

/// Open the file again by name (after logrotate moved it).
pub fn reopen() -> Result<(), String> {
    let mut sink = SINK.lock().unwrap();
    if let Some(s) = sink.as_mut() {
        s.file = open(&s.path)?;
    }
    Ok(())
}

/// The file's path, if logging.
pub fn path() -> Option<String> {
    SINK.lock().unwrap().as_ref().map(|s| s.path.clone())
}

#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Relaxed)
}

/// What one line records.
pub struct Entry<'a> {
    /// `ip:port` of the client.
    pub remote: &'a str,
    /// `None` when the request could not be parsed.
    pub method: Option<&'a str>,
    pub uri: &'a [u8],
    /// `HTTP/1.0`, `HTTP/1.1` or `HTTP/2.0`, as nginx's `$server_protocol`.
    pub protocol: &'static str,
    pub status: u16,
    /// Body bytes sent (as framed; nginx's `$body_bytes_sent`).
    pub body_bytes: u64,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub duration: Duration,
    /// `-` when the request could not be parsed.
    pub request_id: &'a str,
    /// A cookie by name (see [`Field::Cookie`]).
    pub cookie: &'a dyn Fn(&str) -> Option<&'a [u8]>,
}

/// The `Set-Cookie` headers of a response, copied only when a line will record a cookie
/// (for a response that is handed away before its line is written).
pub fn set_cookies(headers: &[HeaderPair]) -> Vec<HeaderPair> {
    let wanted = enabled()
        && FIELDS
            .read()
            .unwrap()
            .iter()
            .any(|f| matches!(f, Field::Cookie(_)));
    if !wanted {
        return Vec::new();
    }
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("set-cookie"))
        .cloned()
        .collect()
}

/// The value the `Set-Cookie` headers among `headers` give cookie `name`.
pub fn set_cookie_value<'h>(headers: &'h [HeaderPair], name: &str) -> Option<&'h [u8]> {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("set-cookie"))
        .filter_map(|h| h.value.as_str().split(';').next()?.split_once('='))
        .find(|(n, _)| n.trim() == name)
        .map(|(_, v)| v.trim().as_bytes())
}

/// Add a line to this thread's buffer.
pub fn record(e: &Entry<'_>) {
    BUF.with(|cell| {
        let mut b = cell.borrow_mut();
        let ip = match e.remote.rfind(':') {
            Some(i) => e.remote[..i].trim_start_matches('[').trim_end_matches(']'),
            None => e.remote,
        };
        b.extend_from_slice(ip.as_bytes());
        b.extend_from_slice(b" - - [");
        crate::http::date::with_date(|d| push_local_time(&mut b, d));
        b.extend_from_slice(b"] \"");
        match e.method {
            Some(m) => {
                push_escaped(&mut b, m.as_bytes());
                b.push(b' ');
                push_escaped(&mut b, e.uri);
                b.push(b' ');
                b.extend_from_slice(e.protocol.as_bytes());
            }
            None => b.push(b'-'),
        }
        b.extend_from_slice(b"\" ");
        b.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
        b.push(b' ');
        b.extend_from_slice(itoa::Buffer::new().format(e.body_bytes).as_bytes());
        for field in [e.referer, e.user_agent] {
            b.extend_from_slice(b" \"");
            match field {
                Some(v) if !v.is_empty() => push_escaped(&mut b, v),
                _ => b.push(b'-'),
            }
            b.push(b'"');
        }
        let micros = e.duration.as_micros() as u64;
        b.push(b' ');
        b.extend_from_slice(itoa::Buffer::new().format(micros / 1_000_000).as_bytes());
        b.push(b'.');
        let ms = itoa::Buffer::new().format(micros / 1000 % 1000).to_owned();
        b.extend(std::iter::repeat_n(b'0', 3 - ms.len()));
        b.extend_from_slice(ms.as_bytes());
        for field in FIELDS.read().unwrap().iter() {
            let value = match field {
                Field::RequestId => Some(e.request_id.as_bytes()),
                Field::Cookie(name) => (e.cookie)(name),
            };
            b.extend_from_slice(b" \"");
            match value {
                Some(v) if !v.is_empty() => push_escaped(&mut b, v),
                _ => b.push(b'-'),
            }
            b.push(b'"');
        }
        b.push(b'\n');
        if b.len() >= FLUSH_AT {
            write_out(&mut b);
        }
    });
}

/// Write this thread's buffered lines.
pub fn flush_thread() {
    BUF.with(|cell| write_out(&mut cell.borrow_mut()));
}

fn write_out(buf: &mut Vec<u8>) {
    if buf.is_empty() {
        return;
    }
    let file = SINK.lock().unwrap().as_ref().map(|s| s.file.clone());
    if let Some(file) = file {
        // O_APPEND: each buffer lands whole, whichever thread writes it.
        if let Err(e) = (&*file).write_all(buf) {
            tracing::error!("access log write failed: {e}");
        }
    }
    buf.clear();
    if buf.capacity() > 4 * FLUSH_AT {
        buf.shrink_to(FLUSH_AT);
    }
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` → `06/Nov/1994:08:49:37 +0000`.
fn push_local_time(b: &mut Vec<u8>, imf: &[u8]) {
    if imf.len() < 29 {
        b.push(b'-');
        return;
    }
    b.extend_from_slice(&imf[5..7]);
    b.push(b'/');
    b.extend_from_slice(&imf[8..11]);
    b.push(b'/');
    b.extend_from_slice(&imf[12..16]);
    b.push(b':');
    b.extend_from_slice(&imf[17..25]);
    b.extend_from_slice(b" +0000");
}

/// As nginx does: `"`, `\`, and bytes outside printable ASCII become `\xHH`.
fn push_escaped(b: &mut Vec<u8>, text: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in text {
        if c == b'"' || c == b'\\' || !(0x20..0x7f).contains(&c) {
            b.extend_from_slice(&[b'\\', b'x', HEX[(c >> 4) as usize], HEX[(c & 15) as usize]]);
        } else {
            b.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_and_escaping() {
        let mut b = Vec::new();
        push_local_time(&mut b, b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(b, b"06/Nov/1994:08:49:37 +0000");
        let mut b = Vec::new();
        push_escaped(&mut b, b"a\"b\\c\x01\xff d");
        assert_eq!(String::from_utf8(b).unwrap(), r#"a\x22b\x5Cc\x01\xFF d"#);
    }
}
