//! Walking the structure of skipped JSON 64 bytes at a time (for [`super::stream`]).
//!
//! The bytes of a big plan are mostly members driftwatch never reads; skipping one means
//! matching its brackets and passing its strings whole. [`walk`] does that the way
//! simdjson finds structure: for each 64-byte block, one bit per byte says whether it is a
//! quote, a backslash, a bracket or a newline (SSE2 on x86_64, eight bytes per word
//! elsewhere); the escaped bytes follow from the runs of backslashes, the bytes inside
//! strings from a prefix XOR of the unescaped quotes, and only the brackets outside strings
//! are visited one by one (to match `{` with `}` and `[` with `]`). The result is exactly
//! the byte-by-byte walk's ([`scalar`], which also does the last bytes of a buffer and
//! any block where a backslash stands outside a string, where the two would disagree).

/// What must survive from one block (or one read) to the next.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct State {
    /// The cursor is inside a string.
    pub in_string: bool,
    /// The byte at the cursor is escaped (a backslash inside a string came last).
    pub escaped: bool,
}

/// How a walk over a buffer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The container closed; its end is just before this offset.
    Closed(usize),
    /// A closing bracket at this offset does not match.
    Mismatch(usize),
    /// The buffer ended first.
    More,
}

/// Newlines passed outside strings.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lines {
    pub count: usize,
    pub last: Option<usize>,
}

/// Walk `buf[start..]` inside a container whose closers still expected are `closers`
/// (the last one first). Newlines outside strings are added to `lines`.
pub(super) fn walk(
    buf: &[u8],
    start: usize,
    state: &mut State,
    closers: &mut Vec<u8>,
    lines: &mut Lines,
) -> Outcome {
    let mut i = start;
    let mut prev_in_string = if state.in_string { u64::MAX } else { 0 };
    let mut prev_escaped = u64::from(state.escaped);
    while i + 64 <= buf.len() {
        let mut block = [0u8; 64];
        block.copy_from_slice(&buf[i..i + 64]);
        let m = masks(&block);
        let mut next_escaped = prev_escaped;
        let escaped = find_escaped(m.backslash, &mut next_escaped);
        let inside = prefix_xor(m.quote & !escaped) ^ prev_in_string;
        if m.backslash & !inside != 0 {
            // A backslash outside a string: not JSON, and the byte walk reads it as an
            // ordinary byte, which the escape arithmetic does not. Let it do this block.
            let mut s = State {
                in_string: prev_in_string != 0,
                escaped: prev_escaped != 0,
            };
            let outcome = scalar(buf, i, i + 64, &mut s, closers, lines);
            if outcome != Outcome::More {
                return outcome;
            }
            prev_in_string = if s.in_string { u64::MAX } else { 0 };
            prev_escaped = u64::from(s.escaped);
            i += 64;
            continue;
        }
        let newlines = m.newline & !inside;
        let mut brackets = m.bracket & !inside;
        while brackets != 0 {
            let at = brackets.trailing_zeros() as usize;
            brackets &= brackets - 1;
            let stop = match block[at] {
                b'{' => {
                    closers.push(b'}');
                    None
                }
                b'[' => {
                    closers.push(b']');
                    None
                }
                b => {
                    if closers.pop() != Some(b) {
                        Some(Outcome::Mismatch(i + at))
                    } else if closers.is_empty() {
                        Some(Outcome::Closed(i + at + 1))
                    } else {
                        None
                    }
                }
            };
            if let Some(outcome) = stop {
                count_lines(newlines & ((1u64 << at) - 1), i, lines);
                return outcome;
            }
        }
        count_lines(newlines, i, lines);
        prev_in_string = ((inside as i64) >> 63) as u64;
        prev_escaped = next_escaped;
        i += 64;
    }
    state.in_string = prev_in_string != 0;
    state.escaped = prev_escaped != 0;
    scalar(buf, i, buf.len(), state, closers, lines)
}

fn count_lines(newlines: u64, block_start: usize, lines: &mut Lines) {
    if newlines != 0 {
        lines.count += newlines.count_ones() as usize;
        lines.last = Some(block_start + 63 - newlines.leading_zeros() as usize);
    }
}

/// The byte-by-byte walk of `buf[start..end]`: strings passed with [`quote_or_backslash`],
/// everything else looked at once.
pub(super) fn scalar(
    buf: &[u8],
    start: usize,
    end: usize,
    state: &mut State,
    closers: &mut Vec<u8>,
    lines: &mut Lines,
) -> Outcome {
    let mut i = start;
    while i < end {
        if state.escaped {
            state.escaped = false;
            i += 1;
            continue;
        }
        if state.in_string {
            i += quote_or_backslash(&buf[i..end]);
            if i >= end {
                break;
            }
            if buf[i] == b'"' {
                state.in_string = false;
            } else {
                state.escaped = true;
            }
            i += 1;
            continue;
        }
        match buf[i] {
            b'"' => state.in_string = true,
            b'{' => closers.push(b'}'),
            b'[' => closers.push(b']'),
            b @ (b'}' | b']') => {
                if closers.pop() != Some(b) {
                    return Outcome::Mismatch(i);
                }
                if closers.is_empty() {
                    return Outcome::Closed(i + 1);
                }
            }
            b'\n' => {
                lines.count += 1;
                lines.last = Some(i);
            }
            _ => {}
        }
        i += 1;
    }
    Outcome::More
}

/// One key (quotes included) and its value's text.
pub(super) type Member<'a> = (&'a [u8], &'a [u8]);

/// An object found by structure: its members and, for the member named by `descend`
/// (if it is an object too), that object's members.
#[derive(Debug, Default)]
pub(super) struct Object<'a> {
    pub members: Vec<Member<'a>>,
    pub inner: Option<Vec<Member<'a>>>,
}

/// The members of the JSON object that is the whole of `text` (up to whitespace), found
/// by structure alone (strings passed whole, containers by [`walk`], scalars up to a
/// delimiter); nothing is parsed. The member whose key is `descend` is split into members
/// too (in the same pass). `None` when `text` is not shaped like that: the caller then
/// parses it the slow way, which says what is wrong.
#[cfg(test)]
pub(super) fn object<'a>(text: &'a [u8], descend: &[u8]) -> Option<Object<'a>> {
    let (out, end) = object_prefix(text, descend)?;
    (whitespace(text, end) == text.len()).then_some(out)
}

/// The members of the object at the start of `text` (after whitespace), as `object`
/// (the tests' form) finds them, whatever follows it; with the offset after it.
pub(super) fn object_prefix<'a>(text: &'a [u8], descend: &[u8]) -> Option<(Object<'a>, usize)> {
    let start = whitespace(text, 0);
    let mut out = Object::default();
    let end = object_at(text, start, Some(descend), &mut out.members, &mut out.inner)?;
    Some((out, end))
}

/// [`object`] without descending.
#[cfg(test)]
pub(super) fn members(text: &[u8]) -> Option<Vec<Member<'_>>> {
    object(text, b"").map(|o| o.members)
}

/// The object at `i`: its members into `out`, and those of the member named `descend`
/// into `inner`; the offset after it.
fn object_at<'a>(
    text: &'a [u8],
    mut i: usize,
    descend: Option<&[u8]>,
    out: &mut Vec<Member<'a>>,
    inner: &mut Option<Vec<Member<'a>>>,
) -> Option<usize> {
    if text.get(i) != Some(&b'{') {
        return None;
    }
    i = whitespace(text, i + 1);
    if text.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        if text.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(text, i)?;
        let key = &text[i..key_end];
        i = whitespace(text, key_end);
        if text.get(i) != Some(&b':') {
            return None;
        }
        i = whitespace(text, i + 1);
        let quoted = key.get(1..key.len() - 1);
        let value_end = if descend.is_some() && quoted == descend && text.get(i) == Some(&b'{') {
            let mut members = Vec::with_capacity(8);
            let end = object_at(text, i, None, &mut members, &mut None)?;
            *inner = Some(members);
            end
        } else {
            value_end(text, i)?
        };
        out.push((key, &text[i..value_end]));
        i = whitespace(text, value_end);
        match text.get(i) {
            Some(b',') => i = whitespace(text, i + 1),
            Some(b'}') => return Some(i + 1),
            _ => return None,
        }
    }
}

fn whitespace(text: &[u8], mut i: usize) -> usize {
    while matches!(text.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// After the string whose opening quote is at `start`.
fn string_end(text: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        if i > text.len() {
            return None;
        }
        i += quote_or_backslash(&text[i..]);
        match text.get(i)? {
            b'"' => return Some(i + 1),
            _ => i += 2,
        }
    }
}

/// After the value that starts at `start`.
fn value_end(text: &[u8], start: usize) -> Option<usize> {
    match *text.get(start)? {
        b'"' => string_end(text, start),
        open @ (b'{' | b'[') => {
            let mut closers = vec![if open == b'{' { b'}' } else { b']' }];
            let mut state = State::default();
            let mut lines = Lines::default();
            match walk(text, start + 1, &mut state, &mut closers, &mut lines) {
                Outcome::Closed(end) => Some(end),
                Outcome::Mismatch(_) | Outcome::More => None,
            }
        }
        _ => {
            let mut i = start;
            while i < text.len()
                && !matches!(text[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                i += 1;
            }
            (i > start).then_some(i)
        }
    }
}

/// One bit per byte of a block.
struct Masks {
    quote: u64,
    backslash: u64,
    /// `{`, `}`, `[` and `]`.
    bracket: u64,
    newline: u64,
}

#[cfg(target_arch = "x86_64")]
fn masks(block: &[u8; 64]) -> Masks {
    use safe_arch::{
        bitor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, m128i, move_mask_i8_m128i,
        set_splat_i8_m128i,
    };
    let splat = |b: u8| set_splat_i8_m128i(i8::from_ne_bytes([b]));
    let (quote, backslash, case, open, close, newline) = (
        splat(b'"'),
        splat(b'\\'),
        splat(0x20),
        splat(b'{'),
        splat(b'}'),
        splat(b'\n'),
    );
    let bits = |x: m128i| u64::from(move_mask_i8_m128i(x).cast_unsigned() & 0xffff);
    let mut m = Masks {
        quote: 0,
        backslash: 0,
        bracket: 0,
        newline: 0,
    };
    for (k, lane) in block.chunks_exact(16).enumerate() {
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(lane);
        let v = load_unaligned_m128i(&bytes);
        let shift = 16 * k;
        m.quote |= bits(cmp_eq_mask_i8_m128i(v, quote)) << shift;
        m.backslash |= bits(cmp_eq_mask_i8_m128i(v, backslash)) << shift;
        // `[` and `]` are `{` and `}` without the 0x20 bit.
        let folded = bitor_m128i(v, case);
        m.bracket |= bits(bitor_m128i(
            cmp_eq_mask_i8_m128i(folded, open),
            cmp_eq_mask_i8_m128i(folded, close),
        )) << shift;
        m.newline |= bits(cmp_eq_mask_i8_m128i(v, newline)) << shift;
    }
    m
}

#[cfg(not(target_arch = "x86_64"))]
fn masks(block: &[u8; 64]) -> Masks {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // The high bit of each byte that is zero (exactly: no borrow between bytes).
    let zero = |x: u64| !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7);
    // Those eight high bits, packed into the low byte.
    let pack = |h: u64| ((h >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56;
    let splat = |b: u8| ONES * u64::from(b);
    let mut m = Masks {
        quote: 0,
        backslash: 0,
        bracket: 0,
        newline: 0,
    };
    for (k, lane) in block.chunks_exact(8).enumerate() {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(lane);
        let x = u64::from_le_bytes(bytes);
        let folded = x | splat(0x20);
        let shift = 8 * k;
        m.quote |= pack(zero(x ^ splat(b'"'))) << shift;
        m.backslash |= pack(zero(x ^ splat(b'\\'))) << shift;
        m.bracket |= pack(zero(folded ^ splat(b'{')) | zero(folded ^ splat(b'}'))) << shift;
        m.newline |= pack(zero(x ^ splat(b'\n'))) << shift;
    }
    m
}

/// The bytes escaped by a backslash (the byte after an odd-length run of them), given
/// whether the block's first byte is escaped; sets that for the next block.
fn find_escaped(backslash: u64, prev_escaped: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let backslash = backslash & !*prev_escaped;
    let follows_escape = (backslash << 1) | *prev_escaped;
    let odd_starts = backslash & !EVEN & !follows_escape;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslash);
    *prev_escaped = u64::from(overflow);
    (EVEN ^ (even_starts << 1)) & follows_escape
}

/// Bit `i` is the XOR of bits `0..=i`: with the quotes as input, the bytes from an opening
/// quote up to (not including) its closing one.
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The bytes of `word` equal to `byte`, as their high bits (exact for the lowest one).
fn bytes_equal(word: u64, byte: u8) -> u64 {
    let x = word ^ (ONES * u64::from(byte));
    x.wrapping_sub(ONES) & !x & HIGHS
}

#[inline]
/// Offset of the first `"` or `\\` in `hay`, or its length: eight bytes at a time (the
/// bytes of a plan are mostly string contents), `memchr` once a string is long.
pub(super) fn quote_or_backslash(hay: &[u8]) -> usize {
    let mut i = 0;
    while i + 8 <= hay.len() && i < 64 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&hay[i..i + 8]);
        let word = u64::from_le_bytes(word);
        let hits = bytes_equal(word, b'"') | bytes_equal(word, b'\\');
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    if i + 8 <= hay.len() {
        return i + memchr::memchr2(b'"', b'\\', &hay[i..]).unwrap_or(hay.len() - i);
    }
    while i < hay.len() && hay[i] != b'"' && hay[i] != b'\\' {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walk `text` (starting just inside its first bracket) with both walkers, in reads
    /// of `n` bytes, and give both results.
    fn both(text: &[u8], n: usize) -> [(Outcome, usize, Option<usize>, State); 2] {
        let run = |simd: bool| {
            let mut state = State::default();
            let mut closers = vec![if text[0] == b'{' { b'}' } else { b']' }];
            let mut lines = Lines::default();
            let mut end = 1;
            loop {
                let upto = (end + n).min(text.len());
                let outcome = if simd {
                    walk(&text[..upto], end, &mut state, &mut closers, &mut lines)
                } else {
                    scalar(text, end, upto, &mut state, &mut closers, &mut lines)
                };
                if outcome != Outcome::More {
                    // The state after the end does not matter (nothing walks on from it).
                    return (outcome, lines.count, lines.last, State::default());
                }
                if upto == text.len() {
                    return (outcome, lines.count, lines.last, state);
                }
                end = upto;
            }
        };
        [run(true), run(false)]
    }

    #[test]
    fn blocks_agree_with_the_byte_walk() {
        let pieces: &[&str] = &[
            r#"{"a": "x\"y", "b": [1, {"c": "]}"}]}"#,
            "\"\\\\\\\\\"",
            "\"\\\\\\\"]\"",
            "\n",
            "[\"\\u00e9 \\\\\", \n {}]",
            "\"long string with brackets { [ ] } and no escapes at all, really long\"",
            " \\ ",
            "\"é ü\"",
            "]",
            "}",
            "\"\\",
        ];
        // Deterministic mixtures of the pieces, at every alignment against the blocks.
        let mut seed = 7u64;
        for _ in 0..3000 {
            let mut text = b"{\"k\": [".to_vec();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut s = seed;
            for _ in 0..(s % 40) {
                s = s.rotate_left(5).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                text.extend_from_slice(pieces[(s >> 32) as usize % pieces.len()].as_bytes());
                text.push(b',');
            }
            text.extend_from_slice(b"]}\n]");
            for n in [1, 5, 63, 64, 65, 200, 4096] {
                let [simd, bytes] = both(&text, n);
                assert_eq!(simd, bytes, "{} n={n}", String::from_utf8_lossy(&text));
            }
        }
    }

    #[test]
    fn closes_mismatches_and_counts_lines() {
        let doc = format!("{{\"a\":\n[{}\n\"\\\"}}\"]}}]", "x".repeat(100));
        let [simd, bytes] = both(doc.as_bytes(), 4096);
        assert_eq!(simd, bytes);
        let closed_at = doc.len() - 1;
        assert_eq!(simd.0, Outcome::Closed(closed_at));
        assert_eq!(
            (simd.1, simd.2),
            (2, Some(doc.find("x\n").unwrap_or(0) + 1))
        );
        let bad = format!("[{}\"\\\\\" }}", " ".repeat(70));
        let [simd, bytes] = both(bad.as_bytes(), 4096);
        assert_eq!(simd, bytes);
        assert_eq!(simd.0, Outcome::Mismatch(bad.len() - 1));
    }

    #[test]
    fn escapes_follow_odd_runs() {
        let mut carry = 0;
        // \" escaped; \\" not; \\\" escaped.
        let text = b"\\\"..\\\\\"..\\\\\\\"";
        let mut bs = 0u64;
        for (i, b) in text.iter().enumerate() {
            if *b == b'\\' {
                bs |= 1 << i;
            }
        }
        let escaped = find_escaped(bs, &mut carry);
        assert_eq!(escaped, (1 << 1) | (1 << 5) | (1 << 10) | (1 << 12));
        assert_eq!(carry, 0);
        let mut carry = 0;
        assert_eq!(find_escaped(1 << 63, &mut carry), 0);
        assert_eq!(carry, 1);
        assert_eq!(find_escaped(1, &mut carry), 1);
        assert_eq!(prefix_xor(0b1001_0010), (u64::MAX << 7) | 0b1110);
    }

    #[test]
    fn members_are_found_by_structure() {
        let text = br#" {"a": "x\"}", "b\u0041" :[1, {"c": "]"}] , "n":-1.5e3,"t":true,"o":{}} "#;
        let got = members(text).unwrap_or_default();
        let got: Vec<(&str, &str)> = got
            .iter()
            .map(|(k, v)| {
                (
                    std::str::from_utf8(k).unwrap_or("?"),
                    std::str::from_utf8(v).unwrap_or("?"),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("\"a\"", r#""x\"}""#),
                ("\"b\\u0041\"", r#"[1, {"c": "]"}]"#),
                ("\"n\"", "-1.5e3"),
                ("\"t\"", "true"),
                ("\"o\"", "{}"),
            ]
        );
        assert_eq!(members(b"{}").map(|m| m.len()), Some(0));
        for bad in [
            &b"[1]"[..],
            b"{\"a\" 1}",
            b"{\"a\": 1,}",
            b"{\"a\": 1} x",
            b"{\"a\": [1}",
            b"{\"a\": \"open}",
            b"{\"a\": \"x\\",
            b"{a: 1}",
            b"{\"a\":}",
            b"{\"a\": 1",
        ] {
            assert_eq!(members(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn quote_or_backslash_finds_the_first() {
        for n in 0..80 {
            for tail in ["\"", "\\\\x", ""] {
                let hay = format!("{}{tail}y\"", "a".repeat(n));
                let want = if tail.is_empty() { n + 1 } else { n };
                assert_eq!(quote_or_backslash(hay.as_bytes()), want, "{hay}");
            }
            assert_eq!(quote_or_backslash("é".repeat(n).as_bytes()), 2 * n);
        }
    }
}
