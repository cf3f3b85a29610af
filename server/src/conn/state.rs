//! The HTTP/1 connection as a state machine: where it stands is data ([`State`]), and
//! [`Conn::advance`] does all it can without waiting, then says what it waits for ([`Wait`]).
//! The one driver (`Conn::drive`, in `mod.rs`) waits for that and advances again.

use super::pool;
use super::request::Flight;
use super::respond::Started;
use super::streamed::Streamed;
use super::wait::Waiting;
use super::{is_h2_preface, Conn, Io};
use crate::dispatch::{BodyLoc, Exchange, Unfinished};
use crate::http::parse::{parse_from, BodyFraming, Head, Span};
use crate::http::HttpError;
use crate::stats::Activity;

/// Where a connection stands. Every variant that carries a request is boxed: an idle
/// connection's task holds this, and it must stay small.
pub enum State {
    /// Between requests: no part of the next head has been parsed yet.
    Idle,
    /// Part of a head has arrived (the header timeout runs).
    Head,
    /// A head has arrived; its body is read next.
    Body(Box<Head>),
    /// The handler runs (filters, the worker pool, a future), beside the body it streams.
    Dispatching(Box<Dispatching>),
    /// A large, file or streamed response body is being written.
    Writing(Box<Writing>),
    /// An error to answer (a protocol error, or a worker job that failed), then close.
    Failing(Box<Failure>),
    /// After a 101: the connection belongs to this tunnel.
    Tunnel(Box<osprey_sdk::TunnelBox>),
    /// Answered: write what is left, then close.
    Closing(Close),
    /// Over.
    Closed,
    /// It opened with the HTTP/2 preface (h2c by prior knowledge).
    Http2,
    /// Quiet between requests: the socket waits without its task (`net::park`).
    Parked,
}

/// What [`Conn::advance`] waits for.
pub enum Wait {
    /// Bytes from the client (the deadline is armed).
    Read,
    /// Room to write the pending output.
    Write,
    /// The current state's own step, a future (`Conn::step`).
    Step,
    /// Nothing: the connection is over (or is HTTP/2, or parks).
    Done,
}

/// How a connection closes after its last response.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Close {
    /// Stop writing, then read and discard for a moment (unread request bytes must not make
    /// the kernel reset the response away).
    Linger,
    /// The client sent all it will: close without lingering.
    Now,
    /// [`Io::close_now`] was called; the transport writes what it still holds.
    Finish,
}

pub struct Dispatching {
    pub rest: Box<Unfinished>,
    pub flight: Flight,
    pub streamed: Option<Box<Streamed>>,
}

pub struct Writing {
    pub ex: Exchange,
    pub started: Started,
    pub flight: Flight,
}

pub struct Failure {
    pub minor: u8,
    pub is_head: bool,
    pub error: HttpError,
    /// When the request started, for the access log.
    pub started: Option<tokio::time::Instant>,
    /// How the connection closes once the error is answered.
    pub then: Close,
}

impl State {
    /// A protocol error on the request whose head is `minor` (1 when it has none).
    pub fn failing(minor: u8, error: HttpError) -> State {
        State::Failing(Box::new(Failure {
            minor,
            is_head: false,
            error,
            started: crate::dispatch::start_clock(),
            then: Close::Linger,
        }))
    }
}

/// Pending pipelined output is written once it reaches this size.
const FLUSH_AT: usize = 64 * 1024;

impl<I: Io> Conn<I> {
    /// Go as far as possible without waiting: parse and answer the requests that are
    /// buffered, write what the socket takes, close when done. Says what to wait for.
    pub(super) fn advance(&mut self) -> Wait {
        loop {
            match &self.state {
                State::Idle | State::Head => {}
                State::Closing(Close::Now) => return self.close_now(),
                State::Closed | State::Http2 | State::Parked => return Wait::Done,
                _ => return Wait::Step,
            }
            if self.out.len() >= FLUSH_AT {
                match self.flush_now(false) {
                    Ok(true) => {}
                    Ok(false) => return Wait::Write,
                    Err(_) => self.state = State::Closed,
                }
                continue;
            }
            match self.parse_head() {
                Ok(Some(head)) => self.state = self.request(head),
                Ok(None) => return self.wait_for_head(),
                Err(state) => self.state = state,
            }
        }
    }

    /// A complete head from the buffer, `None` when more bytes are needed, else the state
    /// an error or the HTTP/2 preface leads to.
    fn parse_head(&mut self) -> Result<Option<Box<Head>>, State> {
        let from = self.spent as usize;
        if self.buf.len() == from {
            return Ok(None);
        }
        let detect =
            self.stats.served() == 0 && !self.peer.secure && self.shared.config.http2.enabled;
        if detect && is_h2_preface(&self.buf) {
            self.deadline.disarm();
            return Err(State::Http2);
        }
        let mut head = pool::take_head();
        match parse_from(&self.buf, from, &self.shared.config.limits, &mut head) {
            Ok(true) => {
                self.deadline.disarm();
                Ok(Some(head))
            }
            Ok(false) => {
                pool::give_head(head);
                Ok(None)
            }
            Err(e) => {
                pool::give_head(head);
                self.deadline.disarm();
                Err(State::failing(1, e))
            }
        }
    }

    /// A head has arrived: serve its request as far as that goes without waiting.
    fn request(&mut self, head: Box<Head>) -> State {
        // A request is served by the configuration current when its head arrived.
        crate::reload::refresh(&mut self.shared);
        if head.body != BodyFraming::None {
            return State::Body(head);
        }
        let used = head.len;
        self.serve_now(head, BodyLoc::InBuf(Span::default()), used, None)
    }

    /// Before waiting for (more of) a head: write what earlier requests produced, give the
    /// buffers back when nothing is buffered, and arm the deadline.
    fn wait_for_head(&mut self) -> Wait {
        self.drop_spent();
        if !self.out.is_empty() {
            match self.flush_now(false) {
                Ok(true) => {}
                Ok(false) => return Wait::Write,
                Err(_) => {
                    self.state = State::Closed;
                    return Wait::Done;
                }
            }
        }
        let timeouts = &self.shared.timeouts;
        if self.buf.is_empty() {
            self.buf.release();
            self.out.release();
            self.stats.set(Activity::Idle);
            let idle_for = if self.stats.served() == 0 {
                timeouts.header
            } else {
                timeouts.keepalive
            };
            let waiting = match (I::PARKS, self.stats.served()) {
                (false, _) => Waiting::Idle,
                (true, 1) if !self.waited_to_write => Waiting::IdleFirst,
                (true, _) => Waiting::IdleParkable,
            };
            self.deadline.arm(idle_for, waiting);
            self.state = State::Idle;
        } else if let State::Idle = self.state {
            // The header timeout runs from a request's first byte.
            self.stats.set(Activity::Reading);
            self.deadline.arm(timeouts.header, Waiting::Request);
            self.state = State::Head;
        }
        Wait::Read
    }

    /// Drop the bytes of the pipelined requests answered since the connection last waited.
    fn drop_spent(&mut self) {
        if self.spent > 0 {
            let spent = (self.spent as usize).min(self.buf.len());
            self.buf.drain(..spent);
            self.spent = 0;
        }
    }

    /// The client asked to close and everything is answered: write the last bytes and
    /// close, without waiting if the socket takes them.
    fn close_now(&mut self) -> Wait {
        match self.flush_now(true) {
            Ok(true) if self.io.close_now() => {
                self.stats.set(Activity::Idle);
                self.state = State::Closed;
                Wait::Done
            }
            Ok(true) => {
                self.state = State::Closing(Close::Finish);
                Wait::Step
            }
            Ok(false) => Wait::Step,
            Err(_) => {
                self.state = State::Closed;
                Wait::Done
            }
        }
    }
}
