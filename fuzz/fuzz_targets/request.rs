//! The request parser and body framing as the connection loop drives them: heads, bodies and
//! pipelined requests one after another, with invariants checked on every parsed head.
#![no_main]

use libfuzzer_sys::fuzz_target;
use osprey::config::Limits;
use osprey::http::chunked::Decoder;
use osprey::http::parse::{parse, BodyFraming};

fuzz_target!(|input: &[u8]| {
    // The first byte picks the default limits or tight ones.
    let Some((&select, data)) = input.split_first() else {
        return;
    };
    let limits = if select & 1 == 0 {
        Limits::default()
    } else {
        Limits {
            max_header_bytes: 256,
            max_request_line: 64,
            max_headers: 4,
            max_body_bytes: 64,
            ..Limits::default()
        }
    };
    let mut pos = 0;
    while pos < data.len() {
        let buf = &data[pos..];
        let head = match parse(buf, &limits) {
            Ok(Some(head)) => head,
            Ok(None) | Err(_) => return,
        };
        assert!(head.len > 0 && head.len <= buf.len());
        assert!(head.len <= limits.max_header_bytes);
        for (name, value) in &head.headers {
            assert!(name.end as usize <= head.len && value.end as usize <= head.len);
            assert!(!name.str(buf).is_empty());
        }
        let _ = (
            head.method(buf),
            head.path(buf),
            head.host(buf),
            head.query.str(buf),
        );
        // The head alone parses to the same head; a shorter prefix never completes.
        let again = parse(&buf[..head.len], &limits)
            .expect("a head's own bytes parse")
            .expect("a head's own bytes are complete");
        assert_eq!(
            (again.len, again.body, again.keep_alive),
            (head.len, head.body, head.keep_alive)
        );
        if let Ok(Some(shorter)) = parse(&buf[..head.len - 1], &limits) {
            panic!(
                "a prefix of {} bytes completed as {} bytes",
                head.len - 1,
                shorter.len
            );
        }
        let mut end = head.len;
        match head.body {
            BodyFraming::None => {}
            BodyFraming::Length(n) => {
                assert!(n > 0);
                if n > limits.max_body_bytes || ((buf.len() - end) as u64) < n {
                    return;
                }
                end += n as usize;
            }
            BodyFraming::Chunked => {
                let mut decoder = Decoder::default();
                let mut body = Vec::new();
                let Ok(used) = decoder.decode(&buf[end..], &mut body, limits.max_body_bytes) else {
                    return;
                };
                assert!(used <= buf.len() - end);
                assert!(body.len() as u64 <= limits.max_body_bytes);
                if !decoder.is_done() {
                    return;
                }
                end += used;
            }
        }
        if !head.keep_alive {
            return;
        }
        pos += end;
    }
});
