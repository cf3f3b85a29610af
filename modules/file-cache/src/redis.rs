//! A small Redis client on the host's TCP service (`osprey_sdk::tcp`): each command is a RESP2
//! array of bulk strings, encoded and its reply decoded by the `redis-protocol` crate. Idle
//! connections are kept per network thread (a connection is driven by the reactor of the
//! thread that made it). Every read or write that waits longer than `timeout` fails, and so
//! does a connection that takes longer than `connect_timeout`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::Duration;

use osprey_sdk::tcp::TcpStream;
use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::encode::encode_borrowed;
use redis_protocol::resp2::types::{BorrowedFrame, OwnedFrame};

pub use redis_protocol::resp2::types::OwnedFrame as Reply;

pub struct Redis {
    pub addr: String,
    connect_timeout: Duration,
    timeout: Duration,
    /// Idle connections kept per network thread.
    pool_size: usize,
    idle: Mutex<HashMap<ThreadId, Vec<Conn>>>,
}

/// One connection, with the bytes read past the last reply.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Redis {
    pub fn new(
        addr: String,
        connect_timeout: Duration,
        timeout: Duration,
        pool_size: usize,
    ) -> Redis {
        Redis {
            addr,
            connect_timeout,
            timeout,
            pool_size,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// A new connection whose reads and writes time out after `io_timeout`.
    pub async fn connect(&self, io_timeout: Duration) -> Result<Conn, String> {
        let stream = TcpStream::connect(&self.addr, self.connect_timeout, Some(io_timeout)).await?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
        })
    }

    /// Run one command. A Redis error reply is an `Err`.
    pub async fn command(&self, args: &[&[u8]]) -> Result<Reply, String> {
        let pooled = self
            .idle
            .lock()
            .unwrap()
            .get_mut(&thread())
            .and_then(Vec::pop);
        let reply = match pooled {
            // A pooled connection may have been closed by Redis since (a restart, its
            // `timeout`): one more try on a new one.
            Some(mut conn) => match conn.call(args).await {
                Ok(r) => Ok((r, conn)),
                Err(_) => self.call_new(args).await,
            },
            None => self.call_new(args).await,
        };
        let (reply, conn) = reply?;
        let mut idle = self.idle.lock().unwrap();
        let mine = idle.entry(thread()).or_default();
        if mine.len() < self.pool_size {
            mine.push(conn);
        }
        match reply {
            OwnedFrame::Error(e) => Err(format!("Redis answered: {e}")),
            r => Ok(r),
        }
    }

    async fn call_new(&self, args: &[&[u8]]) -> Result<(Reply, Conn), String> {
        let mut conn = self.connect(self.timeout).await?;
        let reply = conn.call(args).await?;
        Ok((reply, conn))
    }
}

fn thread() -> ThreadId {
    std::thread::current().id()
}

impl Conn {
    /// Send one command and read its reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        self.send(args).await?;
        self.reply().await
    }

    pub async fn send(&mut self, args: &[&[u8]]) -> Result<(), String> {
        self.stream.write_all(&command_bytes(args)).await
    }

    /// The next frame from the server.
    pub async fn reply(&mut self) -> Result<Reply, String> {
        loop {
            match decode(&self.buf) {
                Ok(Some((frame, used))) => {
                    self.buf.drain(..used);
                    return Ok(frame);
                }
                Ok(None) => {}
                Err(e) => return Err(format!("a reply that is not RESP: {e}")),
            }
            let start = self.buf.len();
            self.buf.resize(start + 64 * 1024, 0);
            let n = self.stream.read(&mut self.buf[start..]).await;
            self.buf.truncate(start + *n.as_ref().unwrap_or(&0));
            match n? {
                0 => return Err("Redis closed the connection".into()),
                _ => continue,
            }
        }
    }
}

/// A command as Redis reads it: an array of bulk strings.
pub fn command_bytes(args: &[&[u8]]) -> Vec<u8> {
    let parts: Vec<BorrowedFrame<'_>> = args.iter().map(|a| BorrowedFrame::BulkString(a)).collect();
    let frame = BorrowedFrame::Array(&parts);
    let mut out = vec![0; frame.encode_len(false)];
    let n = encode_borrowed(&mut out, &frame, false).expect("the buffer has the frame's length");
    out.truncate(n);
    out
}

/// A bulk string reply's bytes; `None` for a nil reply.
pub fn bulk(reply: Reply) -> Result<Option<Vec<u8>>, String> {
    match reply {
        OwnedFrame::BulkString(b) | OwnedFrame::SimpleString(b) => Ok(Some(b)),
        OwnedFrame::Null => Ok(None),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            command_bytes(&[b"GET", b"a|b"]),
            b"*2\r\n$3\r\nGET\r\n$3\r\na|b\r\n"
        );
    }
}
