use super::*;
use crate::http::parse::parse;

/// A request's fields, in order.
type Fields<'a> = Vec<(&'a str, &'a str)>;

fn build_with(fields: &[(&str, &str)], limits: &Limits) -> Result<Request, Malformed> {
    let mut scratch = Vec::new();
    let mut b = Builder::new(&mut scratch, 1000, limits);
    for (n, v) in fields {
        b.field(n.as_bytes(), v.as_bytes());
    }
    b.finish()
}

fn build(fields: &[(&str, &str)]) -> Result<Request, Malformed> {
    build_with(fields, &Limits::default())
}

/// The status a request is answered with (200: none, the head is made).
fn status(fields: &[(&str, &str)]) -> u16 {
    build(fields)
        .unwrap()
        .head
        .map_or_else(|e| e.status, |_| 200)
}

const GET: [(&str, &str); 4] = [
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/a?b"),
    (":authority", "example.com"),
];

fn get_with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut f = GET.to_vec();
    f.extend_from_slice(extra);
    f
}

#[test]
fn a_request_becomes_http1_text() {
    let fields = get_with(&[
        ("accept", "*/*"),
        ("host", "EXAMPLE.com"),
        ("content-length", "3"),
    ]);
    let r = build(&fields).unwrap();
    assert_eq!(
        String::from_utf8(r.buf).unwrap(),
        "GET /a?b HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncontent-length: 3\r\n\r\n"
    );
    assert_eq!(r.content_length, Some(3));
    assert!(!r.is_head && r.head.is_ok());
}

/// The head written as the fields come is the one the HTTP/1.1 parser reads from the bytes.
#[test]
fn the_head_is_the_one_the_http1_parser_makes() {
    let requests = [
        get_with(&[("accept", "*/*"), ("content-length", "3"), ("x-a", "v w")]),
        get_with(&[
            ("cookie", "a=1"),
            ("expect", "100-continue"),
            ("cookie", "b=2"),
        ]),
        vec![
            (":method", "HEAD"),
            (":scheme", "https"),
            (":path", "/p/q"),
            ("host", "Upper.Example:8443"),
            ("user-agent", "t\u{e9}st"),
        ],
        vec![
            (":method", "OPTIONS"),
            (":scheme", "http"),
            (":path", "*"),
            (":authority", "[::1]:8080"),
        ],
    ];
    for fields in requests {
        let r = build(&fields).unwrap();
        let head = r.head.unwrap();
        let parsed = parse(&r.buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(format!("{head:?}"), format!("{parsed:?}"), "{fields:?}");
    }
}

#[test]
fn cookie_crumbs_are_joined_into_one_field() {
    let fields = get_with(&[
        ("cookie", "a=1"),
        ("accept", "*/*"),
        ("cookie", "uid=abc"),
        ("cookie", "b=2"),
    ]);
    let r = build(&fields).unwrap();
    assert_eq!(
        String::from_utf8(r.buf).unwrap(),
        "GET /a?b HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncookie: a=1; uid=abc; b=2\r\n\r\n"
    );
}

#[test]
fn malformed_requests_are_refused() {
    let with = |extra: (&'static str, &'static str)| build(&get_with(&[extra])).is_err();
    assert!(with(("Accept", "x")));
    assert!(with(("connection", "close")));
    assert!(with(("te", "gzip")));
    assert!(!with(("te", "trailers")));
    assert!(with((":path", "/again")));
    assert!(with(("x", " lead")));
    assert!(with(("x", "a\0b")));
    assert!(with(("x", "a\rb")));
    assert!(with(("host", "other.example")));
    assert!(with(("content-length", "x")));
    assert!(build(&GET[1..]).is_err());
    assert!(build(&[(":method", "CONNECT"), (":authority", "a:1")]).is_ok());
    assert!(build(&[(":status", "200")]).is_err());
    let mut late = vec![("accept", "x")];
    late.extend(GET);
    assert!(build(&late).is_err());
}

/// What the HTTP/1.1 parser refuses with a status is refused with the same one: each case
/// is checked against the parser's answer to the same request in HTTP/1.1 form.
#[test]
fn fields_http1_refuses_get_its_status() {
    let pseudo = |method: &'static str, path: &'static str| {
        vec![
            (":method", method),
            (":scheme", "http"),
            (":path", path),
            (":authority", "example.com"),
        ]
    };
    let cases: Vec<(Fields, &str, u16)> = vec![
        (
            get_with(&[("x", "a\x01b")]),
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\nX: a\x01b",
            400,
        ),
        (
            get_with(&[("x", "a\x7fb")]),
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\nX: a\x7fb",
            400,
        ),
        (
            pseudo("G(T", "/"),
            "G(T / HTTP/1.1\r\nHost: example.com",
            400,
        ),
        (
            pseudo("GET", "/a b"),
            "GET /a b HTTP/1.1\r\nHost: example.com",
            400,
        ),
        (
            pseudo("GET", "/a\tb"),
            "GET /a\tb HTTP/1.1\r\nHost: example.com",
            400,
        ),
        (
            get_with(&[("expect", "magic")]),
            "GET /a?b HTTP/1.1\r\nHost: example.com\r\nExpect: magic",
            417,
        ),
        (
            vec![
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "a/b"),
            ],
            "GET / HTTP/1.1\r\nHost: a/b",
            400,
        ),
        (
            vec![
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("host", "a:8x"),
            ],
            "GET / HTTP/1.1\r\nHost: a:8x",
            400,
        ),
        (
            vec![
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                ("host", "a"),
                ("host", "a"),
            ],
            "GET / HTTP/1.1\r\nHost: a\r\nHost: a",
            400,
        ),
        (
            vec![(":method", "GET"), (":scheme", "http"), (":path", "/")],
            "GET / HTTP/1.1",
            400,
        ),
        (
            vec![(":method", "CONNECT"), (":authority", "a:443")],
            "CONNECT a:443 HTTP/1.1\r\nHost: a:443",
            405,
        ),
    ];
    // A target not in UTF-8 (a `&str` cannot hold one).
    let (mut scratch, limits) = (Vec::new(), Limits::default());
    let mut b = Builder::new(&mut scratch, 1000, &limits);
    for (n, v) in [
        (":method", &b"GET"[..]),
        (":scheme", b"http"),
        (":path", b"/\xff"),
        ("host", b"a"),
    ] {
        b.field(n.as_bytes(), v);
    }
    assert_eq!(b.finish().unwrap().head.unwrap_err().status, 400);
    let http1 = parse(b"GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n", &Limits::default());
    assert_eq!(http1.unwrap_err().status, 400);
    for (fields, http1, want) in cases {
        let raw = format!("{http1}\r\n\r\n");
        let http1 = parse(raw.as_bytes(), &Limits::default())
            .unwrap_err()
            .status;
        assert_eq!(http1, want, "{raw:?}");
        assert_eq!(status(&fields), want, "{fields:?}");
    }
}

#[test]
fn the_limits_on_a_head_apply() {
    let limits = Limits {
        max_request_line: 40,
        max_header_bytes: 200,
        max_headers: 3,
        ..Limits::default()
    };
    let status = |fields: &[(&str, &str)]| {
        let r = build_with(fields, &limits).unwrap();
        r.head.map_or_else(|e| e.status, |_| 200)
    };
    assert_eq!(status(&get_with(&[("a", "1"), ("b", "2")])), 200);
    assert_eq!(
        status(&get_with(&[("a", "1"), ("b", "2"), ("c", "3")])),
        431
    );
    let long = "x".repeat(170);
    assert_eq!(status(&get_with(&[("a", &long)])), 431);
    let path = format!("/{}", "p".repeat(40));
    let mut fields = GET.to_vec();
    fields[2].1 = &path;
    assert_eq!(status(&fields), 414);
}

#[test]
fn a_list_over_the_limit_is_a_431() {
    let big = "x".repeat(1000);
    let r = build(&get_with(&[("big", &big)])).unwrap();
    assert_eq!(r.head.map(|_| ()).map_err(|e| e.status), Err(431));
}

/// The decoder passes the static table's fields as checked: their bytes must pass.
#[test]
fn the_static_tables_fields_pass_the_byte_checks() {
    let limits = Limits::default();
    for (name, value) in crate::http2::hpack::STATIC {
        let mut scratch = Vec::new();
        let mut b = Builder::new(&mut scratch, 100_000, &limits);
        assert!(b.bytes_pass(name, value), "{name:?} {value:?}");
        assert!(b.malformed.is_none() && b.error.is_none());
    }
}

/// A request's header block decoded into a request, as the session does; and whether each
/// field came as checked.
fn decode_request(
    d: &mut crate::http2::hpack::Decoder,
    block: &[u8],
) -> (Result<Request, Malformed>, Vec<bool>) {
    let (limits, mut scratch, mut checked) = (Limits::default(), Vec::new(), Vec::new());
    let mut b = Builder::new(&mut scratch, 100_000, &limits);
    d.decode_checked(block, |n, v, c| {
        checked.push(c);
        b.field_checked(n, v, c)
    })
    .unwrap();
    (b.finish(), checked)
}

/// GET / on example.com (static entries, and `:authority` without indexing), then `extra`.
fn block_with(extra: &[u8]) -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x84, 0x01, 11];
    block.extend_from_slice(b"example.com");
    block.extend_from_slice(extra);
    block
}

/// A literal with incremental indexing, a new name (RFC 7541 §6.2.1), not Huffman-coded.
fn indexed_literal(name: &str, value: &str) -> Vec<u8> {
    let mut out = vec![0x40, name.len() as u8];
    out.extend_from_slice(name.as_bytes());
    out.push(value.len() as u8);
    out.extend_from_slice(value.as_bytes());
    out
}

/// A field from the dynamic table skips the byte checks only when it passed them as it came:
/// one refused or failed when added is refused or failed again when a later request names it
/// by its index.
#[test]
fn a_field_from_the_table_is_checked_again_unless_it_passed() {
    // Index 62: the entry added last.
    const NEWEST: u8 = 0x80 | 62;
    let mut d = crate::http2::hpack::Decoder::new(4096);
    let (r, _) = decode_request(&mut d, &block_with(&indexed_literal("user-agent", "ua 1")));
    assert!(r.unwrap().head.is_ok());
    let (r, checked) = decode_request(&mut d, &block_with(&[NEWEST]));
    assert!(r.unwrap().head.is_ok());
    assert_eq!(checked, [true, true, true, false, true]);

    for (name, value, refused) in [
        ("x-a", " leading space", true),
        ("X-Upper", "v", true),
        ("x-b", "a\u{1}b", false),
    ] {
        for block in [
            block_with(&indexed_literal(name, value)),
            block_with(&[NEWEST]),
        ] {
            let (r, checked) = decode_request(&mut d, &block);
            assert!(!checked[4], "{name}: {value:?}");
            match r {
                Err(_) => assert!(refused, "{name}: {value:?}"),
                Ok(r) => assert_eq!(r.head.err().map(|e| e.status), Some(400), "{name}"),
            }
        }
    }
}

/// An `:authority` with userinfo is malformed (§8.3.1) wherever the `@` stands — before a
/// port, in one, after an IPv6 literal, with CONNECT, with no regular field after it — and
/// not a 400: it is looked for only once the Host rules refused the authority.
#[test]
fn userinfo_in_the_authority_is_malformed_wherever_it_stands() {
    for authority in [
        "user@example.com",
        "user:pw@example.com",
        "example.com:80@x",
        "[::1]@x",
        "a@[::1]:8080",
        "@",
    ] {
        let why = Err(Malformed("an :authority with userinfo"));
        let mut fields = GET.to_vec();
        fields[3].1 = authority;
        assert_eq!(build(&fields).map(|_| ()), why, "{authority}");
        fields.push(("accept", "*/*"));
        assert_eq!(build(&fields).map(|_| ()), why, "{authority} and a field");
        let connect = [(":method", "CONNECT"), (":authority", authority)];
        assert_eq!(build(&connect).map(|_| ()), why, "CONNECT {authority}");
    }
    assert_eq!(status(&get_with(&[("accept", "*/*")])), 200);
}

/// The authority is read as HTTP/1.1's Host is, the last one that passed remembered on the
/// thread: a request after another with the same, a different or a refused authority gets
/// its own host, lowered when it has capitals, and a bad one is still refused.
#[test]
fn each_request_has_its_own_authority_read() {
    let host = |authority: &str| {
        let mut fields = GET.to_vec();
        fields[3].1 = authority;
        let r = build(&fields).unwrap();
        r.head
            .map(|h| h.host(&r.buf).to_string())
            .map_err(|e| e.status)
    };
    for _ in 0..2 {
        assert_eq!(host("example.com:8080"), Ok("example.com".into()));
        assert_eq!(host("example.com:8080"), Ok("example.com".into()));
        assert_eq!(host("Example.COM"), Ok("example.com".into()));
        assert_eq!(host("example.org"), Ok("example.org".into()));
        assert_eq!(host("exa mple.org"), Err(400));
        assert_eq!(host("example.org:x"), Err(400));
        assert_eq!(host("example.org"), Ok("example.org".into()));
    }
}
