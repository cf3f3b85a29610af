//! RFC 7541 Appendix C and malformed blocks.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, DecodeError> {
    let mut fields = Vec::new();
    d.decode(block, |n, v| {
        fields.push((
            String::from_utf8(n.to_vec()).unwrap(),
            String::from_utf8(v.to_vec()).unwrap(),
        ))
    })?;
    Ok(fields)
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// A string literal, Huffman-coded or not.
fn string(out: &mut Vec<u8>, s: &str, huff: bool) {
    if huff {
        let mut coded = Vec::new();
        huffman::encode(s.as_bytes(), &mut coded);
        write_int(out, coded.len(), 7, 0x80);
        out.extend(coded);
    } else {
        write_int(out, s.len(), 7, 0);
        out.extend_from_slice(s.as_bytes());
    }
}

#[test]
fn c2_field_representations() {
    let mut d = Decoder::new(4096);
    // C.2.1 literal with indexing, new name.
    let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    assert_eq!(
        decode(&mut d, &block).unwrap(),
        pairs(&[("custom-key", "custom-header")])
    );
    assert_eq!(d.table_size(), 55);
    // C.2.2 literal without indexing, indexed name.
    let mut d = Decoder::new(4096);
    let block = hex("040c 2f73 616d 706c 652f 7061 7468");
    assert_eq!(
        decode(&mut d, &block).unwrap(),
        pairs(&[(":path", "/sample/path")])
    );
    assert_eq!(d.table_size(), 0);
    // C.2.3 never indexed, new name.
    let block = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
    assert_eq!(
        decode(&mut d, &block).unwrap(),
        pairs(&[("password", "secret")])
    );
    assert_eq!(d.table_size(), 0);
    // C.2.4 indexed.
    assert_eq!(
        decode(&mut d, &hex("82")).unwrap(),
        pairs(&[(":method", "GET")])
    );
}

/// C.3 (plain) and C.4 (Huffman): three requests on one connection.
fn requests(blocks: [Vec<u8>; 3]) {
    let mut d = Decoder::new(4096);
    let first = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ];
    assert_eq!(decode(&mut d, &blocks[0]).unwrap(), pairs(&first));
    assert_eq!(d.table_size(), 57);
    let mut second = first.to_vec();
    second.push(("cache-control", "no-cache"));
    assert_eq!(decode(&mut d, &blocks[1]).unwrap(), pairs(&second));
    assert_eq!(d.table_size(), 110);
    let third = [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/index.html"),
        (":authority", "www.example.com"),
        ("custom-key", "custom-value"),
    ];
    assert_eq!(decode(&mut d, &blocks[2]).unwrap(), pairs(&third));
    assert_eq!(d.table_size(), 164);
}

#[test]
fn c3_requests_without_huffman() {
    requests([
        hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
        hex("8286 84be 5808 6e6f 2d63 6163 6865"),
        hex("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
    ]);
}

#[test]
fn c4_requests_with_huffman() {
    requests([
        hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
        hex("8286 84be 5886 a8eb 1064 9cbf"),
        hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
    ]);
}

/// C.5 (plain) and C.6 (Huffman): three responses with a 256-byte table, so entries are
/// evicted.
fn responses(huff: bool) {
    let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
    let date2 = "Mon, 21 Oct 2013 20:13:22 GMT";
    let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
    let lit = |out: &mut Vec<u8>, index: usize, value: &str| {
        write_int(out, index, 6, 0x40);
        string(out, value, huff);
    };
    let mut b1 = Vec::new();
    lit(&mut b1, 8, "302");
    lit(&mut b1, 24, "private");
    lit(&mut b1, 33, date1);
    lit(&mut b1, 46, "https://www.example.com");
    let mut b2 = Vec::new();
    lit(&mut b2, 8, "307");
    b2.extend(hex("c1 c0 bf"));
    let mut b3 = hex("88 c1");
    lit(&mut b3, 33, date2);
    b3.push(0xc0);
    lit(&mut b3, 26, "gzip");
    lit(&mut b3, 55, cookie);
    if !huff {
        // The first block as the RFC prints it, to pin the helpers down.
        assert_eq!(&b1[..5], &hex("4803 3330 32")[..]);
    }
    let mut d = Decoder::new(256);
    let r1 = [
        (":status", "302"),
        ("cache-control", "private"),
        ("date", date1),
        ("location", "https://www.example.com"),
    ];
    assert_eq!(decode(&mut d, &b1).unwrap(), pairs(&r1));
    assert_eq!(d.table_size(), 222);
    let mut r2 = r1;
    r2[0].1 = "307";
    assert_eq!(decode(&mut d, &b2).unwrap(), pairs(&r2));
    assert_eq!(d.table_size(), 222);
    let r3 = [
        (":status", "200"),
        ("cache-control", "private"),
        ("date", date2),
        ("location", "https://www.example.com"),
        ("content-encoding", "gzip"),
        ("set-cookie", cookie),
    ];
    assert_eq!(decode(&mut d, &b3).unwrap(), pairs(&r3));
    assert_eq!(d.table_size(), 215);
}

#[test]
fn c5_responses_without_huffman() {
    responses(false);
}

#[test]
fn c6_responses_with_huffman() {
    responses(true);
}

#[test]
fn malformed_blocks_are_errors() {
    let mut d = Decoder::new(4096);
    assert_eq!(decode(&mut d, &hex("80")), Err(DecodeError::Index));
    assert_eq!(decode(&mut d, &hex("ff 00")), Err(DecodeError::Index));
    assert_eq!(decode(&mut d, &hex("7f 00 01 61")), Err(DecodeError::Index));
    // A size update after a field, and one above the limit.
    assert_eq!(decode(&mut d, &hex("82 20")), Err(DecodeError::SizeUpdate));
    assert_eq!(
        decode(&mut d, &hex("3f e2 1f")),
        Err(DecodeError::SizeUpdate)
    );
    // A size update at the start is fine.
    assert!(decode(&mut d, &hex("20 82")).is_ok());
    // Truncated: a string longer than the block, an integer cut short.
    assert_eq!(
        decode(&mut d, &hex("00 05 61")),
        Err(DecodeError::StringLength)
    );
    assert_eq!(decode(&mut d, &hex("ff")), Err(DecodeError::Truncated));
    assert_eq!(
        decode(&mut d, &hex("ff ff ff ff ff ff 01")),
        Err(DecodeError::Integer)
    );
    // Huffman: EOS, and padding of zeros.
    assert_eq!(
        decode(&mut d, &hex("00 81 1f 84 ff ff ff ff")),
        Err(DecodeError::Huffman)
    );
    assert_eq!(
        decode(&mut d, &hex("00 81 18 00")),
        Err(DecodeError::Huffman)
    );
}

#[test]
fn the_encoder_output_decodes() {
    let mut e = Encoder::default();
    let mut out = Vec::new();
    e.status(&mut out, 200);
    e.status(&mut out, 418);
    e.field(&mut out, b"content-type", b"text/plain");
    e.field_lowercasing(&mut out, b"X-Custom", b"v");
    e.field_lowercasing(&mut out, "X-".repeat(40).as_bytes(), b"w");
    e.field(&mut out, b"x-long", &[b'a'; 300]);
    let mut d = Decoder::new(4096);
    let long = "a".repeat(300);
    assert_eq!(
        decode(&mut d, &out).unwrap(),
        pairs(&[
            (":status", "200"),
            (":status", "418"),
            ("content-type", "text/plain"),
            ("x-custom", "v"),
            (&"x-".repeat(40), "w"),
            ("x-long", &long),
        ])
    );
}

#[test]
fn repeated_fields_are_indexed_and_size_updates_are_signalled() {
    let mut e = Encoder::default();
    let mut d = Decoder::new(4096);
    let block = |e: &mut Encoder| {
        let mut out = Vec::new();
        e.begin(&mut out);
        e.status(&mut out, 200);
        e.field(&mut out, b"server", b"osprey");
        e.field(&mut out, b"content-type", b"text/plain");
        e.field(&mut out, b"etag", b"\"1\"");
        out
    };
    let want = pairs(&[
        (":status", "200"),
        ("server", "osprey"),
        ("content-type", "text/plain"),
        ("etag", "\"1\""),
    ]);
    let first = block(&mut e);
    assert_eq!(decode(&mut d, &first).unwrap(), want);
    let second = block(&mut e);
    assert_eq!(decode(&mut d, &second).unwrap(), want);
    // The indexed fields are one byte each the second time.
    assert_eq!(second.len(), first.len() - (1 + 6) - (1 + 10));
    assert_eq!(d.table_size(), e.table_size());
    // The client shrinks its table: the next block starts with the update, and the tables
    // still agree.
    e.set_max(0);
    let third = block(&mut e);
    assert_eq!(third[0], 0x20);
    assert_eq!(decode(&mut d, &third).unwrap(), want);
    assert_eq!(d.table_size(), 0);
    e.set_max(8192);
    let fourth = block(&mut e);
    assert_eq!(&fourth[..3], &[0x3f, 0xe1, 0x1f]);
    assert_eq!(decode(&mut d, &fourth).unwrap(), want);
    assert_eq!(d.table_size(), e.table_size());
}

/// The encoder finds entries by the name's last added one, else by a scan: values that change,
/// evictions from a small table and an entry larger than the table keep both sides agreeing.
#[test]
fn changing_values_and_evictions_keep_the_tables_agreeing() {
    let mut e = Encoder::default();
    let mut d = Decoder::new(4096);
    e.set_max(150);
    let big = "b".repeat(120);
    let values = ["text/html", "text/css", "text/html", &big, "text/css", "x"];
    for round in 0..40 {
        let ct = values[round % values.len()];
        let cc = values[(round / 2) % values.len()];
        let mut out = Vec::new();
        e.begin(&mut out);
        e.field(&mut out, b"content-type", ct.as_bytes());
        e.field(&mut out, b"cache-control", cc.as_bytes());
        e.field(&mut out, b"vary", b"accept-encoding");
        e.field(&mut out, b"content-type", ct.as_bytes());
        let want = pairs(&[
            ("content-type", ct),
            ("cache-control", cc),
            ("vary", "accept-encoding"),
            ("content-type", ct),
        ]);
        assert_eq!(decode(&mut d, &out).unwrap(), want, "round {round}");
        assert_eq!(d.table_size(), e.table_size(), "round {round}");
    }
}

/// A `:path` sent as a Huffman-coded literal without indexing (as nghttp2 sends every path).
fn path_block(path: &str) -> Vec<u8> {
    let mut block = hex("82 86");
    block.push(0x04); // literal without indexing, the name `:path` (static index 4)
    string(&mut block, path, true);
    block
}

#[test]
fn a_repeated_path_is_decoded_from_the_memo_and_never_stale() {
    let mut d = Decoder::new(4096);
    // The same path, then paths that differ from it in their last bits, their length, or in
    // a byte in the middle; then back, and a path between two other literals.
    let paths = [
        "/benchmark-inprocess",
        "/benchmark-inprocess",
        "/benchmark-inprocesr",
        "/benchmark-inprocess/",
        "/benchmark-inprocess",
        "/bench",
        "/benchxark-inprocess",
        "/benchmark-inprocess",
    ];
    for path in paths {
        let fields = decode(&mut d, &path_block(path)).unwrap();
        assert_eq!(
            fields,
            pairs(&[(":method", "GET"), (":scheme", "http"), (":path", path)]),
            "{path}"
        );
    }
    let mut block = path_block("/a");
    block.push(0x04);
    string(&mut block, "/b", true);
    block.push(0x04);
    string(&mut block, "/a", true);
    let fields = decode(&mut d, &block).unwrap();
    assert_eq!(
        fields[2..],
        pairs(&[(":path", "/a"), (":path", "/b"), (":path", "/a")])
    );
    // A path the memo holds, then the same bytes with bad padding: still an error.
    decode(&mut d, &path_block("/x")).unwrap();
    let mut bad = path_block("/x");
    let last = bad.len() - 1;
    bad[last] &= 0xf0;
    assert_eq!(decode(&mut d, &bad), Err(DecodeError::Huffman));
    assert_eq!(
        decode(&mut d, &path_block("/x")).unwrap()[2],
        (":path".to_string(), "/x".to_string())
    );
}

/// Integers written with each prefix size read back the same, across the one-byte,
/// two-byte (written inline) and longer forms, and with the prefix's other bits kept; the
/// forms are the shortest (RFC 7541 §5.1, C.1).
#[test]
fn integers_read_back_in_their_shortest_form() {
    // (Prefixes of 1 to 7 bits: HPACK uses 4 to 7.)
    for n in 1..=7u8 {
        let mask = (1usize << n) - 1;
        let flags = !(mask as u8) & 0xa5;
        let edges = [
            0,
            1,
            mask - 1,
            mask,
            mask + 1,
            mask + 0x7f,
            mask + 0x80,
            mask + 0x3fff,
        ];
        for value in edges
            .into_iter()
            .chain(mask + 0x4000..mask + 0x4002)
            .chain([1 << 20])
        {
            let mut out = vec![0xee];
            write_int(&mut out, value, n, flags);
            let len = match value - value.min(mask) {
                _ if value < mask => 1,
                rest if rest < 0x80 => 2,
                rest if rest < 0x4000 => 3,
                _ => 4,
            };
            assert_eq!(out.len() - 1, len, "{value} with {n} bits: {out:?}");
            assert_eq!(out[1] & !(mask as u8), flags, "{value} with {n} bits");
            let mut pos = 1;
            assert_eq!(
                read_int(&out, &mut pos, n),
                Ok(value),
                "{value} with {n} bits"
            );
            assert_eq!(pos, out.len());
        }
    }
    let mut out = Vec::new();
    write_int(&mut out, 1337, 5, 0);
    assert_eq!(out, [0x1f, 0x9a, 0x0a], "RFC 7541 C.1.2");
}
