//! The chunked body decoder: decoding in one piece and in arbitrary pieces must agree, never
//! read past the end of the body, and never exceed the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use osprey::http::chunked::Decoder;

fn whole(data: &[u8], max: u64) -> Result<(Vec<u8>, usize, bool), u16> {
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    let used = decoder.decode(data, &mut out, max).map_err(|e| e.status)?;
    Ok((out, used, decoder.is_done()))
}

fn pieces(data: &[u8], max: u64, sizes: &[u8]) -> Result<(Vec<u8>, usize, bool), u16> {
    let mut decoder = Decoder::default();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < data.len() && !decoder.is_done() {
        let size = (usize::from(sizes[i % sizes.len()]) % 17 + 1).min(data.len() - pos);
        i += 1;
        let used = decoder
            .decode(&data[pos..pos + size], &mut out, max)
            .map_err(|e| e.status)?;
        assert!(used <= size);
        if used < size {
            assert!(decoder.is_done(), "stopped early without finishing");
        }
        pos += used;
    }
    Ok((out, pos, decoder.is_done()))
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 3 {
        return;
    }
    let max = u64::from(input[0]) * 4;
    let sizes = &input[1..3];
    let data = &input[3..];
    let one = whole(data, max);
    if let Ok((out, used, _)) = &one {
        assert!(*used <= data.len());
        assert!(out.len() as u64 <= max);
    }
    assert_eq!(one, pieces(data, max, sizes));
});
