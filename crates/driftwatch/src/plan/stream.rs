//! Reading a plan document in pieces: the top-level members one at a time, and the
//! entries of the two arrays driftwatch uses one element at a time, from any reader, in
//! a buffer that holds one element (not the document).
//!
//! A plan of 100,000 resources is about 640 MB of JSON, most of it `planned_values`,
//! `prior_state` and `configuration`, which driftwatch never reads. [`Scanner`] walks the
//! document's structure (strings, escapes, brackets) without parsing it, jumping through
//! strings with `memchr`, and skips those members as it goes. The values driftwatch uses
//! (each entry of `resource_drift` and `resource_changes`, and a few small members) are
//! deserialized by serde_json straight from the buffer, with borrowed strings; when an
//! entry runs past the end of what was read, more is read and it is parsed again from its
//! start. Skipped members are checked for structure (balanced brackets, closed strings),
//! not parsed, 64 bytes at a time ([`super::structural`]); so are the values after
//! `actions` in a no-op change (`before`, `after`, ...), which a no-op does not use. Every
//! value driftwatch uses is parsed by serde_json in full. Memory is the
//! buffer (it grows to the largest single entry) plus what the caller keeps. Errors are
//! positioned in lines and columns of the whole document, counted as the scanner passes
//! newlines.

use std::io::Read;

use super::structural::{self, quote_or_backslash};

/// The first buffer, and at least how much is read at a time.
const CHUNK: usize = 4 << 20;

/// A syntax problem, with where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ScanError {
    pub what: &'static str,
    pub line: usize,
    pub column: usize,
}

/// Why scanning stopped.
#[derive(Debug)]
pub(super) enum Stop {
    Io(std::io::Error),
    Syntax(ScanError),
    /// serde_json refused a value; `at` is where the value starts.
    Value {
        error: serde_json::Error,
        at: Position,
    },
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Stop {
        Stop::Io(e)
    }
}

/// A position in the whole document (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    pub line: usize,
    pub column: usize,
}

pub(super) struct Scanner<R> {
    reader: R,
    buf: Vec<u8>,
    /// `buf[..end]` holds read bytes; `buf[..keep]` may be dropped; `pos` is the cursor.
    end: usize,
    keep: usize,
    pos: usize,
    eof: bool,
    /// While skipping, everything before the cursor may be dropped at the next refill.
    dropping: bool,
    /// Absolute offset of `buf[0]`.
    base: u64,
    /// The line the cursor is on, and the absolute offset where that line starts: kept up
    /// to date at every newline the scanner or serde passes.
    line: usize,
    line_start: u64,
}

impl<R: Read> Scanner<R> {
    pub fn new(reader: R) -> Scanner<R> {
        Scanner::with_capacity(reader, CHUNK)
    }

    /// A scanner whose first buffer holds `capacity` bytes (tests use tiny ones).
    pub fn with_capacity(reader: R, capacity: usize) -> Scanner<R> {
        Scanner {
            reader,
            buf: vec![0; capacity.max(1)],
            end: 0,
            keep: 0,
            pos: 0,
            eof: false,
            dropping: false,
            base: 0,
            line: 1,
            line_start: 0,
        }
    }

    /// Where the cursor is.
    fn here(&self) -> Position {
        let abs = self.base + self.pos as u64;
        Position {
            line: self.line,
            column: usize::try_from(abs - self.line_start).unwrap_or(usize::MAX) + 1,
        }
    }

    /// A newline at buffer offset `at` was passed.
    fn newline_at(&mut self, at: usize) {
        self.line += 1;
        self.line_start = self.base + at as u64 + 1;
    }

    /// A syntax error at the cursor.
    pub fn syntax(&self, what: &'static str) -> Stop {
        let p = self.here();
        Stop::Syntax(ScanError {
            what,
            line: p.line,
            column: p.column,
        })
    }

    /// Read more; false at the end of the input. Bytes before `keep` are dropped first.
    fn fill(&mut self) -> Result<bool, Stop> {
        if self.eof {
            return Ok(false);
        }
        if self.dropping {
            self.keep = self.pos;
        }
        if self.keep > 0 {
            self.buf.copy_within(self.keep..self.end, 0);
            self.base += self.keep as u64;
            self.end -= self.keep;
            self.pos -= self.keep;
            self.keep = 0;
        }
        let free = self.buf.len() - self.end;
        if free == 0 || free < CHUNK.min(self.buf.len()) / 2 {
            // Little room left, or one entry larger than the buffer: grow it.
            let grown = self.buf.len() * 2;
            self.buf.resize(grown, 0);
        }
        let n = loop {
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Stop::Io(e)),
            }
        };
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.end += n;
        Ok(true)
    }

    /// The byte at the cursor, reading more when needed; `None` at the end of input.
    fn peek_raw(&mut self) -> Result<Option<u8>, Stop> {
        while self.pos >= self.end {
            if !self.fill()? {
                return Ok(None);
            }
        }
        Ok(Some(self.buf[self.pos]))
    }

    /// Skip whitespace; the next byte, or `None` at the end of input.
    pub fn peek(&mut self) -> Result<Option<u8>, Stop> {
        loop {
            match self.peek_raw()? {
                Some(b'\n') => {
                    self.newline_at(self.pos);
                    self.pos += 1;
                }
                Some(b' ' | b'\t' | b'\r') => self.pos += 1,
                other => return Ok(other),
            }
        }
    }

    /// Consume `byte` (after whitespace) or fail with `what`.
    pub fn expect(&mut self, byte: u8, what: &'static str) -> Result<(), Stop> {
        match self.peek()? {
            Some(b) if b == byte => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(self.syntax(what)),
            None => Err(self.syntax("truncated JSON")),
        }
    }

    /// Open a container: consume `open`; false when `close` follows at once (it is empty,
    /// and consumed too).
    pub fn open(&mut self, open: u8, close: u8, what: &'static str) -> Result<bool, Stop> {
        self.expect(open, what)?;
        if self.peek()? == Some(close) {
            self.pos += 1;
            return Ok(false);
        }
        Ok(true)
    }

    /// After an item of a container: true when a `,` says another follows, false when
    /// `close` ends it (both consumed).
    pub fn more(&mut self, close: u8) -> Result<bool, Stop> {
        match self.peek()? {
            Some(b',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(b) if b == close => {
                self.pos += 1;
                Ok(false)
            }
            Some(_) => Err(self.syntax("invalid JSON")),
            None => Err(self.syntax("truncated JSON")),
        }
    }

    /// Scan one value starting at the cursor (whitespace skipped).
    fn scan_value(&mut self) -> Result<(), Stop> {
        let Some(first) = self.peek()? else {
            return Err(self.syntax("truncated JSON"));
        };
        match first {
            b'"' => self.scan_string(),
            b'{' | b'[' => self.scan_container(),
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => self.scan_scalar(),
            _ => Err(self.syntax("invalid JSON")),
        }
    }

    /// From an opening quote to after the closing one.
    fn scan_string(&mut self) -> Result<(), Stop> {
        self.pos += 1;
        loop {
            if self.pos >= self.end && !self.fill()? {
                return Err(self.syntax("truncated JSON"));
            }
            self.pos += quote_or_backslash(&self.buf[self.pos..self.end]);
            if self.pos >= self.end {
                continue;
            }
            if self.buf[self.pos] == b'"' {
                self.pos += 1;
                return Ok(());
            }
            // A backslash: skip it and the byte it escapes.
            self.pos += 1;
            if self.peek_raw()?.is_none() {
                return Err(self.syntax("truncated JSON"));
            }
            self.pos += 1;
        }
    }

    /// A number or `true`/`false`/`null`: up to the next delimiter.
    fn scan_scalar(&mut self) -> Result<(), Stop> {
        loop {
            match self.peek_raw()? {
                None => return Ok(()),
                Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') => return Ok(()),
                Some(b'"' | b'{' | b'[' | b':') => return Err(self.syntax("invalid JSON")),
                Some(_) => self.pos += 1,
            }
        }
    }

    /// An object or array, brackets matched, strings skipped whole, by
    /// [`structural::walk`] (64 bytes at a time); the state that must survive a refill is
    /// whether the cursor is inside a string (or just after a backslash in one), and the
    /// closers still expected.
    fn scan_container(&mut self) -> Result<(), Stop> {
        let mut closers: Vec<u8> = Vec::with_capacity(16);
        let mut state = structural::State::default();
        loop {
            if self.pos >= self.end && !self.fill()? {
                if state.escaped {
                    // Where the byte walk stopped: on the backslash that ended the input.
                    self.pos -= 1;
                }
                return Err(self.syntax("truncated JSON"));
            }
            let mut lines = structural::Lines::default();
            let outcome = structural::walk(
                &self.buf[..self.end],
                self.pos,
                &mut state,
                &mut closers,
                &mut lines,
            );
            if let Some(at) = lines.last {
                self.line += lines.count;
                self.line_start = self.base + at as u64 + 1;
            }
            match outcome {
                structural::Outcome::Closed(end) => {
                    self.pos = end;
                    return Ok(());
                }
                structural::Outcome::Mismatch(at) => {
                    self.pos = at;
                    return Err(self.syntax("invalid JSON"));
                }
                structural::Outcome::More => self.pos = self.end,
            }
        }
    }

    /// Skip one value, dropping its bytes as they are passed.
    pub fn skip_value(&mut self) -> Result<(), Stop> {
        self.dropping = true;
        let scanned = self.scan_value();
        self.dropping = false;
        scanned?;
        self.keep = self.pos;
        Ok(())
    }

    /// Deserialize the value at the cursor with serde, straight from the buffer. `parse`
    /// gets the bytes from the value's start to the end of what was read and returns the
    /// result and how many bytes it used; when it runs out of input, more is read and it
    /// is called again from the start.
    pub fn parse<T>(
        &mut self,
        mut parse: impl FnMut(&[u8]) -> Result<(T, usize), serde_json::Error>,
    ) -> Result<T, Stop> {
        if self.peek()?.is_none() {
            return Err(self.syntax("truncated JSON"));
        }
        self.keep = self.pos;
        let at = self.here();
        loop {
            match parse(&self.buf[self.pos..self.end]) {
                // A value that ends exactly where the buffer does may go on (a number):
                // read more and parse it again.
                Ok((_, used)) if self.pos + used == self.end && !self.eof => {
                    self.fill()?;
                }
                Ok((value, used)) => {
                    self.consumed(used);
                    return Ok(value);
                }
                Err(error) if error.is_eof() && !self.eof => {
                    self.fill()?;
                }
                Err(error) => return Err(Stop::Value { error, at }),
            }
        }
    }

    /// [`Scanner::parse`] with a quicker way first: `quick` gets the bytes from the value's
    /// start to the end of what is buffered and returns the value and how many bytes it
    /// used, or `None` (it declines: not its kind of value, something it would have to
    /// parse, or the value runs past what is buffered); then `parse` reads the value as
    /// [`Scanner::parse`] does, so every error is the one `parse` finds.
    pub fn parse_quick<T>(
        &mut self,
        quick: impl FnOnce(&[u8]) -> Option<(T, usize)>,
        parse: impl FnMut(&[u8]) -> Result<(T, usize), serde_json::Error>,
    ) -> Result<T, Stop> {
        if self.peek()?.is_none() {
            return Err(self.syntax("truncated JSON"));
        }
        match quick(&self.buf[self.pos..self.end]) {
            Some((value, used)) if self.pos + used <= self.end => {
                self.consumed(used);
                Ok(value)
            }
            _ => self.parse(parse),
        }
    }

    /// `used` bytes from the cursor were taken by a value: note their newlines, pass them.
    fn consumed(&mut self, used: usize) {
        let taken = &self.buf[self.pos..self.pos + used];
        if let Some(last) = memchr::memrchr(b'\n', taken) {
            self.line += memchr::memchr_iter(b'\n', taken).count();
            self.line_start = self.base + (self.pos + last) as u64 + 1;
        }
        self.pos += used;
        self.keep = self.pos;
    }

    /// After the document: only whitespace may follow.
    pub fn finish(&mut self) -> Result<(), Stop> {
        match self.peek()? {
            None => Ok(()),
            Some(_) => Err(self.syntax("trailing characters after the document")),
        }
    }
}

/// Deserialize one `T` from the start of `bytes`, and say how many bytes it took (for
/// [`Scanner::parse`]).
pub(super) fn one<'de, T: serde::Deserialize<'de>>(
    bytes: &'de [u8],
) -> Result<(T, usize), serde_json::Error> {
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<T>();
    match values.next() {
        Some(Ok(value)) => Ok((value, values.byte_offset())),
        Some(Err(e)) => Err(e),
        // Only whitespace: the value has not been read yet (an end-of-input error).
        None => match serde_json::from_slice::<serde::de::IgnoredAny>(b"") {
            Err(e) => Err(e),
            Ok(_) => Err(serde::de::Error::custom("no value")),
        },
    }
}

/// [`one`] for values that own their data (usable for any buffer lifetime).
pub(super) fn owned<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<(T, usize), serde_json::Error> {
    one(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out `n` bytes at a time, to put every boundary everywhere.
    struct Trickle<'a> {
        data: &'a [u8],
        n: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.n.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// The top-level members of `doc` as (key, value) pairs, scanned in pieces.
    fn members(
        doc: &str,
        n: usize,
        capacity: usize,
    ) -> Result<Vec<(String, serde_json::Value)>, Stop> {
        let mut s = Scanner::with_capacity(
            Trickle {
                data: doc.as_bytes(),
                n,
            },
            capacity,
        );
        let mut out = Vec::new();
        let mut more = s.open(b'{', b'}', "object")?;
        while more {
            let key: String = s.parse(owned)?;
            s.expect(b':', "colon")?;
            if key.starts_with("skip") {
                s.skip_value()?;
                out.push((key, serde_json::Value::Null));
            } else {
                let value: serde_json::Value = s.parse(owned)?;
                out.push((key, value));
            }
            more = s.more(b'}')?;
        }
        s.finish()?;
        Ok(out)
    }

    const DOC: &str = r#"{ "a": {"x": [1, 2, {"y": "q\"}]"}]},
        "skip_big": {"s": "a \\ b \" c ] } [ {", "n": [true, false, null, -1.5e3]},
        "b": "plain", "c": 12, "d": [], "skip_e": "tail"}
"#;

    #[test]
    fn every_boundary_gives_the_same_values() {
        let whole = members(DOC, DOC.len(), 1 << 12).unwrap();
        assert_eq!(whole[0].1, serde_json::json!({"x": [1, 2, {"y": "q\"}]"}]}));
        assert_eq!(whole[2], ("b".to_owned(), serde_json::json!("plain")));
        assert_eq!(whole[3], ("c".to_owned(), serde_json::json!(12)));
        assert_eq!(whole.len(), 6);
        for n in [1, 2, 3, 7, 64] {
            for capacity in [1, 2, 5, 16, 1 << 12] {
                assert_eq!(
                    members(DOC, n, capacity).unwrap(),
                    whole,
                    "n={n} capacity={capacity}"
                );
            }
        }
    }

    fn position_of(stop: Stop) -> (usize, usize) {
        match stop {
            Stop::Syntax(e) => (e.line, e.column),
            Stop::Value { error, at } => {
                if error.line() <= 1 {
                    (at.line, at.column + error.column() - 1)
                } else {
                    (at.line + error.line() - 1, error.column())
                }
            }
            Stop::Io(e) => panic!("{e}"),
        }
    }

    #[test]
    fn broken_input_is_an_error_with_its_position() {
        for (doc, line, column) in [
            ("{\"a\": [1, 2}", 1, 12),
            ("{\n  \"skip\": {\"x\": ]}", 2, 17),
            ("{\n\n \"skip\": \"open", 3, 15),
            ("{\"a\": 1} x", 1, 10),
            ("{\n \"skip\": [\n1,\n2],\n \"b\": [1,\n tru]}", 6, 5),
        ] {
            for capacity in [1, 3, 1 << 12] {
                for n in [1, 2, 64] {
                    let stop = members(doc, n, capacity).unwrap_err();
                    assert_eq!(
                        position_of(stop),
                        (line, column),
                        "{doc:?} capacity {capacity} n {n}"
                    );
                }
            }
        }
    }
}
