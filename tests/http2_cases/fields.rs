//! Field rules of RFC 9113 §8.2 and §8.3 that h2spec does not try: each makes a request
//! malformed, refused with a stream error PROTOCOL_ERROR or a 400.

use crate::http2_frames::*;
use crate::Case;

pub fn field_cases() -> Vec<Case> {
    vec![
        (
            "rfc9113/8.2.1/1 a field value with leading whitespace",
            |c| malformed(c, |f| f.push(("x-test".into(), " ok".into()))),
        ),
        (
            "rfc9113/8.2.1/2 a field value with trailing whitespace",
            |c| malformed(c, |f| f.push(("x-test".into(), "ok\t".into()))),
        ),
        ("rfc9113/8.2.1/3 a field value with NUL", |c| {
            malformed(c, |f| f.push(("x-test".into(), "o\0k".into())))
        }),
        ("rfc9113/8.2.1/4 a field value with CR LF", |c| {
            malformed(c, |f| {
                f.push(("x-test".into(), "ok\r\nx-injected: 1".into()))
            })
        }),
        ("rfc9113/8.2.1/5 a field name with a space", |c| {
            malformed(c, |f| f.push(("x test".into(), "ok".into())))
        }),
        ("rfc9113/8.2.1/6 a field name with a colon", |c| {
            malformed(c, |f| f.push(("x:test".into(), "ok".into())))
        }),
        ("rfc9113/8.2.1/7 an empty field name", |c| {
            malformed(c, |f| f.push(("".into(), "ok".into())))
        }),
        ("rfc9113/8.2.2/1 keep-alive", |c| {
            malformed(c, |f| f.push(("keep-alive".into(), "timeout=5".into())))
        }),
        ("rfc9113/8.2.2/2 proxy-connection", |c| {
            malformed(c, |f| f.push(("proxy-connection".into(), "close".into())))
        }),
        ("rfc9113/8.2.2/3 transfer-encoding", |c| {
            malformed(c, |f| {
                f.push(("transfer-encoding".into(), "chunked".into()))
            })
        }),
        ("rfc9113/8.2.2/4 upgrade", |c| {
            malformed(c, |f| f.push(("upgrade".into(), "h2c".into())))
        }),
        (
            "rfc9113/8.3.1/1 a :path that is neither absolute nor *",
            |c| malformed(c, |f| f[2].1 = "index.html".into()),
        ),
        (
            "rfc9113/8.3.1/2 :path * for a method other than OPTIONS",
            |c| malformed(c, |f| f[2].1 = "*".into()),
        ),
        ("rfc9113/8.3.1/3 a host field unlike :authority", |c| {
            malformed(c, |f| f.push(("host".into(), "other.example".into())))
        }),
        ("rfc9113/8.3.1/4 an :authority with userinfo", |c| {
            malformed(c, |f| f[3].1 = format!("user@{}", f[3].1))
        }),
        ("rfc9113/8.5/1 CONNECT with :scheme and :path", |c| {
            malformed(c, |f| f[0].1 = "CONNECT".into())
        }),
    ]
}

/// Fields the same rules allow: each request is answered.
pub fn allowed_field_cases() -> Vec<Case> {
    vec![
        ("rfc9113/8.2.2/5 te: trailers is allowed", |c| {
            allowed(c, |f| f.push(("te".into(), "trailers".into())))
        }),
        ("rfc9113/8.2.3/1 cookie crumbs in several fields", |c| {
            allowed(c, |f| {
                f.push(("cookie".into(), "a=1".into()));
                f.push(("cookie".into(), "b=2".into()));
            })
        }),
        ("rfc9113/8.3.1/5 a host field equal to :authority", |c| {
            allowed(c, |f| f.push(("host".into(), f[3].1.to_uppercase())))
        }),
        (
            "rfc9113/8.3.1/6 OPTIONS with :path * is not malformed",
            |c| {
                // Answered as over HTTP/1.1 (no route serves `*`: a 404), not refused.
                let mut fields = c.request("OPTIONS");
                fields[2].1 = "*".into();
                let block = c.block(&fields);
                c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
                c.status(1, 404)
            },
        ),
        (
            "rfc9113/8.2.1/8 obs-text and inner whitespace in a value",
            |c| allowed(c, |f| f.push(("x-test".into(), "a \t b \u{e9}".into()))),
        ),
    ]
}

/// Fields HTTP/1.1 refuses with a status and RFC 9113 leaves to the server: answered with
/// the status the HTTP/1.1 parser gives the same request (a request is the same request over
/// either protocol).
pub fn http1_status_cases() -> Vec<Case> {
    vec![
        ("osprey/fields/1 a control byte in a value is a 400", |c| {
            answered(c, 400, |f| f.push(("x-test".into(), "a\x01b".into())))
        }),
        ("osprey/fields/2 DEL in a value is a 400", |c| {
            answered(c, 400, |f| f.push(("x-test".into(), "a\x7fb".into())))
        }),
        ("osprey/fields/3 a :path with a space is a 400", |c| {
            answered(c, 400, |f| f[2].1 = "/a b".into())
        }),
        (
            "osprey/fields/4 a :method that is not a token is a 400",
            |c| answered(c, 400, |f| f[0].1 = "G(T".into()),
        ),
        (
            "osprey/fields/5 an :authority that is no host is a 400",
            |c| answered(c, 400, |f| f[3].1 = "a/b".into()),
        ),
        ("osprey/fields/6 no :authority and no host is a 400", |c| {
            answered(c, 400, |f| {
                f.remove(3);
            })
        }),
        (
            "osprey/fields/7 two host fields without :authority are a 400",
            |c| {
                answered(c, 400, |f| {
                    let host = f.remove(3).1;
                    f.push(("host".into(), host.clone()));
                    f.push(("host".into(), host));
                })
            },
        ),
        (
            "osprey/fields/8 a host field without :authority is the host",
            |c| {
                answered(c, 200, |f| {
                    let host = f.remove(3).1;
                    f.push(("host".into(), host));
                })
            },
        ),
    ]
}

/// A GET whose fields `change` makes; answered with `status`.
fn answered(c: &mut Conn, status: u16, change: impl Fn(&mut Vec<(String, String)>)) -> Check {
    let mut fields = c.request("GET");
    change(&mut fields);
    let block = c.block(&fields);
    c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
    c.status(1, status)
}

fn allowed(c: &mut Conn, change: impl Fn(&mut Vec<(String, String)>)) -> Check {
    let mut fields = c.request("GET");
    change(&mut fields);
    let block = c.block(&fields);
    c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
    c.status(1, 200)
}

/// A GET whose fields `change` makes malformed.
fn malformed(c: &mut Conn, change: impl Fn(&mut Vec<(String, String)>)) -> Check {
    let mut fields = c.request("GET");
    change(&mut fields);
    let block = c.block(&fields);
    c.send_frame(HEADERS, END_HEADERS | END_STREAM, 1, &block);
    c.refused_request(1)
}
