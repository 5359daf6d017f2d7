//! A small seeded mutator for the stable, coverage-blind pass: stacked byte
//! flips, interesting bytes and numbers, dictionary tokens, deletions,
//! duplications, truncations and splices with other corpus entries.

use fastrand::Rng;

/// Largest input the mutator produces.
pub const MAX_INPUT: usize = 64 * 1024;

/// Bytes that change how the gateway's parsers branch.
const INTERESTING_BYTES: &[u8] = b"\r\n\0:;,\"\\{}[]$*+-=0179afxFX \t\x7f\x80\xff";

/// Numbers at the edges of the integer types the parsers use.
const INTERESTING_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1e309",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "18446744071562067968",
    "ffffffffffffffff",
    "10000000000000000",
    "0.5",
    "-0",
];

/// Mutates `input` in place with 1 to 8 stacked operations, using `dict`
/// tokens and `corpus` entries for insertions and splices.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, dict: &[Vec<u8>], corpus: &[Vec<u8>]) {
    for _ in 0..rng.usize(1..=8) {
        mutate_once(rng, input, dict, corpus);
    }
    input.truncate(MAX_INPUT);
}

fn mutate_once(rng: &mut Rng, input: &mut Vec<u8>, dict: &[Vec<u8>], corpus: &[Vec<u8>]) {
    let len = input.len();
    let at = |rng: &mut Rng| rng.usize(0..=len);
    match rng.u8(0..12) {
        0 if len > 0 => {
            let i = rng.usize(0..len);
            input[i] ^= 1 << rng.u8(0..8);
        }
        1 if len > 0 => {
            let i = rng.usize(0..len);
            input[i] = INTERESTING_BYTES[rng.usize(0..INTERESTING_BYTES.len())];
        }
        2 => {
            let i = at(rng);
            input.insert(i, INTERESTING_BYTES[rng.usize(0..INTERESTING_BYTES.len())]);
        }
        3 | 4 if !dict.is_empty() => {
            let token = &dict[rng.usize(0..dict.len())];
            let i = at(rng);
            input.splice(i..i, token.iter().copied());
        }
        5 => {
            let number = INTERESTING_NUMBERS[rng.usize(0..INTERESTING_NUMBERS.len())];
            let i = at(rng);
            // Replace a run of digits when one starts here, else insert.
            let digits = input[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            input.splice(i..i + digits, number.bytes());
        }
        6 if len > 0 => {
            let i = rng.usize(0..len);
            let n = rng.usize(1..=(len - i).min(64));
            input.drain(i..i + n);
        }
        7 if len > 0 => {
            let i = rng.usize(0..len);
            let n = rng.usize(1..=(len - i).min(256));
            let copy = input[i..i + n].to_vec();
            let to = at(rng);
            for _ in 0..rng.usize(1..=4) {
                input.splice(to..to, copy.iter().copied());
            }
        }
        8 => input.truncate(at(rng)),
        9 if !corpus.is_empty() => {
            let other = &corpus[rng.usize(0..corpus.len())];
            let from = rng.usize(0..=other.len());
            let cut = at(rng);
            input.truncate(cut);
            input.extend_from_slice(&other[from..]);
        }
        10 => {
            let i = at(rng);
            let n = rng.usize(1..=16);
            input.splice(i..i, (0..n).map(|_| rng.u8(..)));
        }
        _ if len > 1 => {
            let i = rng.usize(0..len - 1);
            input.swap(i, i + 1);
        }
        _ => input.push(rng.u8(..)),
    }
}

/// Parses an AFL++ dictionary (`name="token"` or `"token"` per line, `\xNN`,
/// `\"` and `\\` escapes; `#` comments).
pub fn parse_dict(text: &str) -> Vec<Vec<u8>> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let quoted = &line[line.find('"')? + 1..line.rfind('"')?];
            let mut out = Vec::new();
            let mut bytes = quoted.bytes();
            while let Some(b) = bytes.next() {
                if b != b'\\' {
                    out.push(b);
                    continue;
                }
                match bytes.next()? {
                    b'x' => {
                        let hex = [bytes.next()?, bytes.next()?];
                        out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
                    }
                    other => out.push(other),
                }
            }
            Some(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_afl_dictionaries() {
        let dict = parse_dict("# c\nkw=\"a\\x0d\\x0a\"\n\"q\\\"\\\\\"\n\n");
        assert_eq!(dict, vec![b"a\r\n".to_vec(), b"q\"\\".to_vec()]);
    }

    #[test]
    fn mutations_are_seeded_and_bounded() {
        let run = || {
            let mut rng = Rng::with_seed(7);
            let mut input = b"GET / HTTP/1.1\r\n\r\n".to_vec();
            for _ in 0..1000 {
                mutate(
                    &mut rng,
                    &mut input,
                    &[b"chunked".to_vec()],
                    &[b"x".to_vec()],
                );
                assert!(input.len() <= MAX_INPUT);
            }
            input
        };
        assert_eq!(run(), run());
    }
}
