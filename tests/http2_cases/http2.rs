//! h2spec "http2": RFC 9113 section by section — frame rules, stream states, settings, flow
//! control, and what makes a request malformed.

use crate::http2_frames::*;
use crate::Case;

pub fn http2_cases() -> Vec<Case> {
    let mut all = frames_and_streams();
    all.extend(frame_definitions());
    all.extend(messages());
    all
}

/// §3.5 to §5.5.
fn frames_and_streams() -> Vec<Case> {
    vec![
        // §3.5/1 is the handshake itself; §3.5/2 is `an_invalid_preface_closes_the_connection`.
        ("http2/3.5/1 the client connection preface", |c| c.alive()),
        ("http2/4.1/1 a frame of unknown type is ignored", |c| {
            c.send_frame(0x16, 0, 0, b"unknown!");
            c.alive()
        }),
        ("http2/4.1/2 undefined flags are ignored", |c| {
            let data = *b"flagged!";
            c.send_frame(PING, 0x16, 0, &data);
            c.ping_ack(data)
        }),
        ("http2/4.1/3 the reserved bit is ignored", |c| {
            let data = *b"reserved";
            c.send_frame(PING, 0, 0x8000_0000, &data);
            c.ping_ack(data)
        }),
        ("http2/4.2/1 a DATA frame of 2^14 octets", |c| {
            c.post(1, 16384);
            c.send_frame(DATA, END_STREAM, 1, &[b'x'; 16384]);
            c.response(1)
        }),
        (
            "http2/4.2/2 a DATA frame over SETTINGS_MAX_FRAME_SIZE",
            |c| {
                c.post(1, 16385);
                c.send_frame(DATA, END_STREAM, 1, &[b'x'; 16385]);
                c.stream_error(&[FRAME_SIZE_ERROR])
            },
        ),
        (
            "http2/4.2/3 a HEADERS frame over SETTINGS_MAX_FRAME_SIZE",
            |c| {
                let mut fields = c.request("GET");
                for i in 0..5 {
                    fields.push((format!("x-dummy{i}"), "d".repeat(4000)));
                }
                let block = c.block(&fields);
                c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
                c.connection_error(&[FRAME_SIZE_ERROR])
            },
        ),
        ("http2/4.3/1 an invalid header block fragment", |c| {
            // A literal whose name is 0x7f octets long, of which one arrives.
            c.send_frame(
                HEADERS,
                END_HEADERS | END_STREAM,
                1,
                &[0x00, 0x7f, 0x01, b'a'],
            );
            c.connection_error(&[COMPRESSION_ERROR])
        }),
        (
            "http2/4.3/2 PRIORITY in the middle of a header block",
            |c| {
                let block = c.block(&c.request("GET"));
                c.send_frame(HEADERS, END_STREAM, 1, &block);
                c.priority(1, 0, false, 255);
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
        (
            "http2/4.3/3 HEADERS to another stream in the middle of a header block",
            |c| {
                let block = c.block(&c.request("GET"));
                c.send_frame(HEADERS, END_STREAM, 1, &block);
                c.send_frame(HEADERS, END_HEADERS | END_STREAM, 3, &block);
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
        ("http2/5.1/1 idle: DATA", |c| {
            c.send_frame(DATA, END_STREAM, 1, b"test");
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/5.1/2 idle: RST_STREAM", |c| {
            c.rst(1, CANCEL);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/5.1/3 idle: WINDOW_UPDATE", |c| {
            c.window_update(1, 100);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/5.1/4 idle: CONTINUATION", |c| {
            let block = c.block(&c.request("GET"));
            c.send_frame(CONTINUATION, END_HEADERS, 1, &block);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/5.1/5 half closed (remote): DATA", |c| {
            let mut both = c.get_frame(1);
            both.extend(frame(DATA, END_STREAM, 1, b"test"));
            c.send(&both);
            c.stream_error(&[STREAM_CLOSED])
        }),
        ("http2/5.1/6 half closed (remote): HEADERS", |c| {
            let mut both = c.get_frame(1);
            both.extend(c.get_frame(1));
            c.send(&both);
            c.stream_error(&[STREAM_CLOSED])
        }),
        ("http2/5.1/7 half closed (remote): CONTINUATION", |c| {
            c.get(1);
            let block = c.block(&c.request("GET"));
            c.send_frame(CONTINUATION, END_HEADERS, 1, &block);
            c.stream_error(&[STREAM_CLOSED, PROTOCOL_ERROR])
        }),
        ("http2/5.1/8 closed: DATA after RST_STREAM", |c| {
            c.post(1, 4);
            c.rst(1, CANCEL);
            c.send_frame(DATA, END_STREAM, 1, b"test");
            c.stream_error(&[STREAM_CLOSED])
        }),
        ("http2/5.1/9 closed: HEADERS after RST_STREAM", |c| {
            c.post(1, 4);
            c.rst(1, CANCEL);
            c.get(1);
            c.stream_error(&[STREAM_CLOSED])
        }),
        ("http2/5.1/10 closed: CONTINUATION after RST_STREAM", |c| {
            c.post(1, 4);
            c.rst(1, CANCEL);
            let block = c.block(&[("x-dummy".into(), "d".into())]);
            c.send_frame(CONTINUATION, END_HEADERS, 1, &block);
            c.stream_error(&[STREAM_CLOSED, PROTOCOL_ERROR])
        }),
        ("http2/5.1/11 closed: DATA", |c| {
            c.get(1);
            c.stream_end(1)?;
            c.send_frame(DATA, END_STREAM, 1, b"test");
            c.stream_error(&[STREAM_CLOSED])
        }),
        ("http2/5.1/12 closed: HEADERS", |c| {
            c.get(1);
            c.stream_end(1)?;
            c.get(1);
            c.connection_error(&[STREAM_CLOSED])
        }),
        ("http2/5.1/13 closed: CONTINUATION", |c| {
            c.get(1);
            c.stream_end(1)?;
            let block = c.block(&c.request("GET"));
            c.send_frame(CONTINUATION, END_HEADERS, 1, &block);
            c.connection_error(&[STREAM_CLOSED, PROTOCOL_ERROR])
        }),
        ("http2/5.1.1/1 an even-numbered stream identifier", |c| {
            c.get(2);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        (
            "http2/5.1.1/2 a stream identifier lower than a previous one",
            |c| {
                c.get(5);
                c.get(3);
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
        (
            "http2/5.1.2/1 more streams than SETTINGS_MAX_CONCURRENT_STREAMS",
            |c| {
                let Some(max) = c.server_setting(MAX_CONCURRENT_STREAMS) else {
                    return Err("the server announced no SETTINGS_MAX_CONCURRENT_STREAMS".into());
                };
                let block = c.block(&c.request("POST"));
                for i in 0..=max {
                    c.send_frame(HEADERS, END_HEADERS, 1 + 2 * i, &block);
                }
                c.stream_error(&[PROTOCOL_ERROR, REFUSED_STREAM])
            },
        ),
        ("http2/5.3.1/1 HEADERS depending on its own stream", |c| {
            let mut payload = priority_fields(1, false, 255);
            payload.extend(c.block(&c.request("GET")));
            c.send_frame(
                HEADERS,
                END_HEADERS | END_STREAM | PRIORITY_FLAG,
                1,
                &payload,
            );
            c.stream_error(&[PROTOCOL_ERROR])
        }),
        ("http2/5.3.1/2 PRIORITY depending on its own stream", |c| {
            c.priority(1, 1, false, 255);
            c.stream_error(&[PROTOCOL_ERROR])
        }),
        ("http2/5.4.1/1 an invalid PING closes the connection", |c| {
            c.send_frame(PING, 0, 0, b"123456");
            c.closed()
        }),
        ("http2/5.4.1/2 an invalid PING gets a GOAWAY", |c| {
            c.send_frame(PING, 0, 0, b"123456");
            c.connection_error(&[FRAME_SIZE_ERROR])
        }),
        ("http2/5.5/1 an unknown extension frame is ignored", |c| {
            c.send_frame(0xff, 0, 0, b"unknown!");
            c.alive()
        }),
        (
            "http2/5.5/2 an unknown frame in the middle of a header block",
            |c| {
                let block = c.block(&c.request("GET"));
                c.send_frame(HEADERS, END_STREAM, 1, &block);
                c.send_frame(0xff, 0, 1, b"unknown!");
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
    ]
}

/// §6 and §7.
fn frame_definitions() -> Vec<Case> {
    vec![
        ("http2/6.1/1 DATA on stream 0", |c| {
            c.send_frame(DATA, END_STREAM, 0, b"test");
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.1/2 DATA on a stream not open", |c| {
            let mut both = c.get_frame(1);
            both.extend(frame(DATA, END_STREAM, 1, b"test"));
            c.send(&both);
            c.stream_error(&[STREAM_CLOSED])
        }),
        ("http2/6.1/3 DATA with an invalid pad length", |c| {
            c.post(1, 4);
            // Pad length 6 in a payload of 5 octets.
            c.send_frame(DATA, END_STREAM | PADDED, 1, &[6, b't', b'e', b's', b't']);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        (
            "http2/6.2/1 HEADERS without END_HEADERS, then PRIORITY",
            |c| {
                let block = c.block(&c.request("GET"));
                c.send_frame(HEADERS, END_STREAM, 1, &block);
                c.priority(3, 0, false, 255);
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
        (
            "http2/6.2/2 HEADERS to another stream during a header block",
            |c| {
                let block = c.block(&c.request("GET"));
                c.send_frame(HEADERS, END_STREAM, 1, &block);
                c.send_frame(HEADERS, END_HEADERS | END_STREAM, 3, &block);
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
        ("http2/6.2/3 HEADERS on stream 0", |c| {
            c.get(0);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.2/4 HEADERS with an invalid pad length", |c| {
            let block = c.block(&c.request("GET"));
            let mut payload = vec![(block.len() + 1) as u8];
            payload.extend(&block);
            c.send_frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1, &payload);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.3/1 PRIORITY on stream 0", |c| {
            c.priority(0, 1, false, 255);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.3/2 PRIORITY of a length other than 5", |c| {
            c.post(1, 4);
            c.send_frame(PRIORITY, 0, 1, &[0x80, 0, 0, 1]);
            c.stream_error(&[FRAME_SIZE_ERROR])
        }),
        ("http2/6.4/1 RST_STREAM on stream 0", |c| {
            c.rst(0, CANCEL);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.4/2 RST_STREAM on an idle stream", |c| {
            c.rst(1, CANCEL);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.4/3 RST_STREAM of a length other than 4", |c| {
            c.post(1, 4);
            c.send_frame(RST_STREAM, 0, 1, &[0, 0, 0]);
            c.connection_error(&[FRAME_SIZE_ERROR])
        }),
        ("http2/6.5/1 SETTINGS with ACK and a payload", |c| {
            c.send_frame(SETTINGS, ACK, 0, &[0, 5, 0, 0, 0x40, 0]);
            c.connection_error(&[FRAME_SIZE_ERROR])
        }),
        ("http2/6.5/2 SETTINGS on a stream other than 0", |c| {
            c.send_frame(SETTINGS, 0, 1, &[0, 5, 0, 0, 0x40, 0]);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        (
            "http2/6.5/3 SETTINGS of a length not a multiple of 6",
            |c| {
                c.send_frame(SETTINGS, 0, 0, &[0, 5, 0]);
                c.connection_error(&[FRAME_SIZE_ERROR])
            },
        ),
        (
            "http2/6.5.2/1 SETTINGS_ENABLE_PUSH other than 0 or 1",
            |c| {
                c.settings(&[(ENABLE_PUSH, 2)]);
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
        (
            "http2/6.5.2/2 SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
            |c| {
                c.settings(&[(INITIAL_WINDOW_SIZE, 1 << 31)]);
                c.connection_error(&[FLOW_CONTROL_ERROR])
            },
        ),
        ("http2/6.5.2/3 SETTINGS_MAX_FRAME_SIZE below 2^14", |c| {
            c.settings(&[(MAX_FRAME_SIZE, 16383)]);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.5.2/4 SETTINGS_MAX_FRAME_SIZE above 2^24-1", |c| {
            c.settings(&[(MAX_FRAME_SIZE, 1 << 24)]);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.5.2/5 an unknown setting is ignored", |c| {
            c.settings(&[(0xff, 1)]);
            c.settings_ack()
        }),
        (
            "http2/6.5.3/1 the last of several SETTINGS_INITIAL_WINDOW_SIZE values",
            |c| {
                c.settings(&[(INITIAL_WINDOW_SIZE, 100), (INITIAL_WINDOW_SIZE, 1)]);
                c.settings_ack()?;
                c.get(1);
                c.data_length(1, 1)
            },
        ),
        ("http2/6.5.3/2 SETTINGS without ACK is acknowledged", |c| {
            c.settings(&[(INITIAL_WINDOW_SIZE, 65535)]);
            c.settings_ack()
        }),
        ("http2/6.7/1 PING", |c| c.alive()),
        ("http2/6.7/2 a PING with ACK is not answered", |c| {
            c.send_frame(PING, ACK, 0, b"unwanted");
            c.alive()
        }),
        ("http2/6.7/3 PING on a stream other than 0", |c| {
            c.send_frame(PING, 0, 1, b"pingpong");
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.7/4 PING of a length other than 8", |c| {
            c.send_frame(PING, 0, 0, b"123456");
            c.connection_error(&[FRAME_SIZE_ERROR])
        }),
        ("http2/6.8/1 GOAWAY on a stream other than 0", |c| {
            c.send_frame(GOAWAY, 0, 1, &[0, 0, 0, 0, 0, 0, 0, 0]);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.9/1 WINDOW_UPDATE of 0 on the connection", |c| {
            c.window_update(0, 0);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.9/2 WINDOW_UPDATE of 0 on a stream", |c| {
            c.post(1, 4);
            c.window_update(1, 0);
            c.stream_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.9/3 WINDOW_UPDATE of a length other than 4", |c| {
            c.send_frame(WINDOW_UPDATE, 0, 0, &[0, 0, 1]);
            c.connection_error(&[FRAME_SIZE_ERROR])
        }),
        ("http2/6.9.1/1 an initial window of 1, then HEADERS", |c| {
            c.settings(&[(INITIAL_WINDOW_SIZE, 1)]);
            c.settings_ack()?;
            c.get(1);
            c.data_length(1, 1)
        }),
        ("http2/6.9.1/2 the connection window above 2^31-1", |c| {
            c.window_update(0, 0x7fff_ffff);
            c.window_update(0, 0x7fff_ffff);
            c.connection_error(&[FLOW_CONTROL_ERROR])
        }),
        ("http2/6.9.1/3 a stream window above 2^31-1", |c| {
            c.post(1, 4);
            c.window_update(1, 0x7fff_ffff);
            c.window_update(1, 0x7fff_ffff);
            c.stream_error(&[FLOW_CONTROL_ERROR])
        }),
        (
            "http2/6.9.2/1 SETTINGS_INITIAL_WINDOW_SIZE changed after HEADERS",
            |c| {
                c.settings(&[(INITIAL_WINDOW_SIZE, 0)]);
                c.settings_ack()?;
                c.get(1);
                c.response(1)?;
                c.settings(&[(INITIAL_WINDOW_SIZE, 1)]);
                c.data_length(1, 1)
            },
        ),
        (
            "http2/6.9.2/2 a SETTINGS that makes a window negative",
            |c| {
                c.settings(&[(INITIAL_WINDOW_SIZE, 5)]);
                c.settings_ack()?;
                c.get(1);
                c.data_length(1, 5)?;
                // The window goes to -2; an increment of 3 lets one more octet through.
                c.settings(&[(INITIAL_WINDOW_SIZE, 3)]);
                c.settings_ack()?;
                c.window_update(1, 3);
                c.data_length(1, 1)
            },
        ),
        ("http2/6.9.2/3 SETTINGS_INITIAL_WINDOW_SIZE of 2^31", |c| {
            c.settings(&[(INITIAL_WINDOW_SIZE, 1 << 31)]);
            c.connection_error(&[FLOW_CONTROL_ERROR])
        }),
        (
            "http2/6.10/1 several CONTINUATION frames after HEADERS",
            |c| {
                let block = c.block(&c.request("GET"));
                let half = block.len() / 2;
                c.send_frame(HEADERS, END_STREAM, 1, &block[..half]);
                c.send_frame(CONTINUATION, 0, 1, &block[half..half + 1]);
                c.send_frame(CONTINUATION, END_HEADERS, 1, &block[half + 1..]);
                c.response(1)
            },
        ),
        ("http2/6.10/2 CONTINUATION followed by another frame", |c| {
            let block = c.block(&c.request("POST"));
            let half = block.len() / 2;
            c.send_frame(HEADERS, 0, 1, &block[..half]);
            c.send_frame(CONTINUATION, 0, 1, &block[half..]);
            c.send_frame(DATA, END_STREAM, 1, b"test");
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/6.10/3 CONTINUATION on stream 0", |c| {
            let block = c.block(&c.request("GET"));
            let half = block.len() / 2;
            c.send_frame(HEADERS, END_STREAM, 1, &block[..half]);
            c.send_frame(CONTINUATION, END_HEADERS, 0, &block[half..]);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        (
            "http2/6.10/4 CONTINUATION after HEADERS with END_HEADERS",
            |c| {
                c.get(1);
                let block = c.block(&[("x-dummy".into(), "d".into())]);
                c.send_frame(CONTINUATION, END_HEADERS, 1, &block);
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
        (
            "http2/6.10/5 CONTINUATION after CONTINUATION with END_HEADERS",
            |c| {
                let block = c.block(&c.request("GET"));
                let half = block.len() / 2;
                c.send_frame(HEADERS, END_STREAM, 1, &block[..half]);
                c.send_frame(CONTINUATION, END_HEADERS, 1, &block[half..]);
                let more = c.block(&[("x-dummy".into(), "d".into())]);
                c.send_frame(CONTINUATION, END_HEADERS, 1, &more);
                c.connection_error(&[PROTOCOL_ERROR])
            },
        ),
        ("http2/6.10/6 CONTINUATION after DATA", |c| {
            c.post(1, 4);
            c.send_frame(DATA, 0, 1, b"test");
            let block = c.block(&[("x-dummy".into(), "d".into())]);
            c.send_frame(CONTINUATION, END_HEADERS, 1, &block);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
        ("http2/7/1 GOAWAY with an unknown error code", |c| {
            c.goaway(0, 0xff);
            let data = *b"unknown!";
            c.send_frame(PING, 0, 0, &data);
            c.ping_ack_or_closed(data)
        }),
        ("http2/7/2 RST_STREAM with an unknown error code", |c| {
            c.post(1, 4);
            c.rst(1, 0xff);
            c.alive()
        }),
    ]
}

/// §8: requests the server must refuse as malformed (a stream error PROTOCOL_ERROR).
fn messages() -> Vec<Case> {
    vec![
        ("http2/8.1/1 a second HEADERS without END_STREAM", |c| {
            c.post(1, 4);
            c.send_frame(DATA, 0, 1, b"test");
            let trailers = c.block(&[("x-trailer".into(), "t".into())]);
            c.send_frame(HEADERS, END_HEADERS, 1, &trailers);
            c.stream_error(&[PROTOCOL_ERROR])
        }),
        ("http2/8.1.2/1 an uppercase field name", |c| {
            malformed(c, "GET", |f| f.push(("X-TEST".into(), "ok".into())))
        }),
        ("http2/8.1.2.1/1 an unknown pseudo-header", |c| {
            malformed(c, "GET", |f| f.push((":test".into(), "ok".into())))
        }),
        (
            "http2/8.1.2.1/2 a response pseudo-header in a request",
            |c| malformed(c, "GET", |f| f.push((":status".into(), "200".into()))),
        ),
        ("http2/8.1.2.1/3 a pseudo-header in trailers", |c| {
            c.post(1, 4);
            c.send_frame(DATA, 0, 1, b"test");
            let trailers = c.block(&[(":method".into(), "POST".into())]);
            c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &trailers);
            c.stream_error(&[PROTOCOL_ERROR])
        }),
        (
            "http2/8.1.2.1/4 a pseudo-header after a regular field",
            |c| {
                malformed(c, "GET", |f| {
                    let authority = f.pop().unwrap();
                    f.push(("x-test".into(), "ok".into()));
                    f.push(authority);
                })
            },
        ),
        ("http2/8.1.2.2/1 a connection-specific field", |c| {
            malformed(c, "GET", |f| {
                f.push(("connection".into(), "keep-alive".into()))
            })
        }),
        ("http2/8.1.2.2/2 TE other than \"trailers\"", |c| {
            malformed(c, "GET", |f| {
                f.push(("te".into(), "trailers, deflate".into()))
            })
        }),
        ("http2/8.1.2.3/1 an empty :path", |c| {
            malformed(c, "GET", |f| f[2].1.clear())
        }),
        ("http2/8.1.2.3/2 no :method", |c| {
            malformed(c, "GET", |f| drop(f.remove(0)))
        }),
        ("http2/8.1.2.3/3 no :scheme", |c| {
            malformed(c, "GET", |f| drop(f.remove(1)))
        }),
        ("http2/8.1.2.3/4 no :path", |c| {
            malformed(c, "GET", |f| drop(f.remove(2)))
        }),
        ("http2/8.1.2.3/5 :method twice", |c| {
            malformed(c, "GET", |f| f.insert(1, (":method".into(), "GET".into())))
        }),
        ("http2/8.1.2.3/6 :scheme twice", |c| {
            malformed(c, "GET", |f| f.insert(2, f[1].clone()))
        }),
        ("http2/8.1.2.3/7 :path twice", |c| {
            malformed(c, "GET", |f| f.insert(3, f[2].clone()))
        }),
        (
            "http2/8.1.2.6/1 content-length unlike the DATA length",
            |c| {
                c.post(1, 4);
                c.send_frame(DATA, END_STREAM, 1, b"test!");
                c.stream_error(&[PROTOCOL_ERROR])
            },
        ),
        (
            "http2/8.1.2.6/2 content-length unlike the sum of DATA lengths",
            |c| {
                c.post(1, 8);
                c.send_frame(DATA, 0, 1, b"test");
                c.send_frame(DATA, END_STREAM, 1, b"test!");
                c.stream_error(&[PROTOCOL_ERROR])
            },
        ),
        ("http2/8.2/1 a PUSH_PROMISE from the client", |c| {
            let mut payload = 2u32.to_be_bytes().to_vec();
            payload.extend(c.block(&c.request("GET")));
            c.send_frame(PUSH_PROMISE, END_HEADERS, 1, &payload);
            c.connection_error(&[PROTOCOL_ERROR])
        }),
    ]
}

/// A request whose fields `change` makes malformed (RFC 9113 §8.1.1): a stream error of type
/// PROTOCOL_ERROR.
fn malformed(c: &mut Conn, method: &str, change: impl Fn(&mut Vec<(String, String)>)) -> Check {
    let mut fields = c.request(method);
    change(&mut fields);
    let block = c.block(&fields);
    c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
    c.stream_error(&[PROTOCOL_ERROR])
}
