//! Huffman decoding (RFC 7541 §5.2) with a table of 4-bit steps: each state is an inner node of
//! the code's tree, each step reads a nibble and yields at most one symbol (no code is shorter
//! than 5 bits). The table is built once from the code itself.

use std::sync::OnceLock;

use super::huffman_codes::{ENCODE_CODES, ENCODE_CODE_LENGTHS};
use super::DecodeError;

/// A step: the next state, the symbol produced (if `EMIT`), flags.
#[derive(Clone, Copy, Default)]
struct Step {
    next: u8,
    sym: u8,
    flags: u8,
}

const EMIT: u8 = 1;
/// The step ran into EOS, which a string must not contain.
const FAIL: u8 = 2;
/// After the step, the bits read since the last symbol are padding the string may end with
/// (at most 7 one bits).
const ACCEPT: u8 = 4;

struct Table([[Step; 16]; 256]);

fn table() -> &'static Table {
    static TABLE: OnceLock<Box<Table>> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// A tree node: children (node index, or a leaf as `LEAF | symbol`).
const LEAF: u16 = 0x8000;

fn build() -> Box<Table> {
    // The tree of the 257 codes: 256 inner nodes, the root first.
    let mut nodes: Vec<[u16; 2]> = vec![[0, 0]];
    let mut add = |code: u32, len: u8, sym: u16| {
        let mut node = 0usize;
        for i in (0..len).rev() {
            let bit = ((code >> i) & 1) as usize;
            if i == 0 {
                nodes[node][bit] = LEAF | sym;
            } else {
                if nodes[node][bit] == 0 {
                    nodes.push([0, 0]);
                    nodes[node][bit] = (nodes.len() - 1) as u16;
                }
                node = nodes[node][bit] as usize;
            }
        }
    };
    for sym in 0..256 {
        add(ENCODE_CODES[sym], ENCODE_CODE_LENGTHS[sym], sym as u16);
    }
    add(0x3fff_ffff, 30, 256);
    assert_eq!(nodes.len(), 256);
    // Inner nodes reached from the root by 1 to 7 one bits (the root too): valid padding.
    let mut padding = [false; 256];
    let mut node = 0usize;
    padding[0] = true;
    for _ in 0..7 {
        node = nodes[node][1] as usize;
        padding[node] = true;
    }
    let mut table = Box::new(Table([[Step::default(); 16]; 256]));
    for (state, steps) in table.0.iter_mut().enumerate() {
        for (nibble, step) in steps.iter_mut().enumerate() {
            let mut node = state;
            for i in (0..4).rev() {
                let child = nodes[node][(nibble >> i) & 1];
                if child & LEAF != 0 {
                    let sym = child & !LEAF;
                    if sym == 256 {
                        step.flags |= FAIL;
                    } else {
                        step.flags |= EMIT;
                        step.sym = sym as u8;
                    }
                    node = 0;
                } else {
                    node = child as usize;
                }
            }
            step.next = node as u8;
            if padding[node] {
                step.flags |= ACCEPT;
            }
        }
    }
    table
}

/// Decode `src` onto the end of `dst`.
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), DecodeError> {
    let table = &table().0;
    dst.reserve(src.len() * 8 / 5);
    let mut state = 0usize;
    let mut accept = true;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0xf] {
            let step = table[state][nibble as usize];
            if step.flags & FAIL != 0 {
                return Err(DecodeError::Huffman);
            }
            if step.flags & EMIT != 0 {
                dst.push(step.sym);
            }
            state = step.next as usize;
            accept = step.flags & ACCEPT != 0;
        }
    }
    if !accept {
        return Err(DecodeError::Huffman);
    }
    Ok(())
}

/// Encode `src` onto the end of `dst` (for tests and the encoder's choice, not used on the hot
/// path).
#[cfg(test)]
pub fn encode(src: &[u8], dst: &mut Vec<u8>) {
    let (mut bits, mut n) = (0u64, 0u32);
    for &b in src {
        bits = (bits << ENCODE_CODE_LENGTHS[b as usize]) | ENCODE_CODES[b as usize] as u64;
        n += ENCODE_CODE_LENGTHS[b as usize] as u32;
        while n >= 8 {
            n -= 8;
            dst.push((bits >> n) as u8);
        }
    }
    if n > 0 {
        dst.push(((bits << (8 - n)) | (0xff >> n)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert_eq!(dec, all);
    }

    #[test]
    fn bad_padding_and_eos_fail() {
        // "a" is 00011 (5 bits): padding of three one bits is fine, of zeros is not.
        let mut out = Vec::new();
        assert!(decode(&[0b0001_1111], &mut out).is_ok());
        assert_eq!(out, b"a");
        assert!(decode(&[0b0001_1000], &mut out).is_err());
        // A whole byte of ones after a symbol: padding longer than 7 bits.
        assert!(decode(&[0b0001_1111, 0xff], &mut out).is_err());
        // EOS itself (30 one bits).
        assert!(decode(&[0xff, 0xff, 0xff, 0xff], &mut out).is_err());
    }
}
