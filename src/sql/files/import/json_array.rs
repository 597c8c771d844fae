//! A JSON array read as newline-delimited JSON, so that Arrow's JSON
//! reader (which reads one value per line) imports the files that pandas
//! (`orient="records"`), Polars (`write_json`) and widesql's own export
//! write: the outer brackets and the commas between elements are dropped,
//! each element ends with a newline, and a line break inside an element
//! (outside its strings, where JSON allows none) becomes a space. It reads
//! as it goes, holding no more than the reader's buffer.

use std::io::{BufRead, Error, ErrorKind, Read, Result};

/// Where in the array the reader is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Before the opening `[`.
    Before,
    /// Between the brackets.
    Inside,
    /// After the closing `]`.
    After,
}

/// Reads the JSON array in `inner` as one element per line.
#[derive(Debug)]
pub struct ArrayAsLines<R> {
    inner: R,
    state: State,
}

/// What the reader knows of the bytes read so far.
#[derive(Debug)]
struct State {
    place: Place,
    /// Brackets and braces open inside the current element.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Whether the current line has a byte of an element.
    line_open: bool,
}

impl<R: BufRead> ArrayAsLines<R> {
    /// The array in `inner`, which starts (after white space) with `[`.
    pub fn new(inner: R) -> Self {
        ArrayAsLines {
            inner,
            state: State {
                place: Place::Before,
                depth: 0,
                in_string: false,
                escaped: false,
                line_open: false,
            },
        }
    }
}

impl State {
    /// The byte `b` of the input becomes: `Some(byte)` written, `None`
    /// dropped. Never more than one byte, so output keeps pace with input.
    fn translate(&mut self, b: u8) -> Result<Option<u8>> {
        let out = match self.place {
            Place::Before if b.is_ascii_whitespace() => None,
            Place::Before if b == b'[' => {
                self.place = Place::Inside;
                None
            }
            Place::Before => return Err(invalid("it does not start with '['")),
            Place::After if b.is_ascii_whitespace() => None,
            Place::After => return Err(invalid("it has data after the array's closing ']'")),
            Place::Inside if self.in_string => {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                Some(b)
            }
            Place::Inside => match b {
                b'"' => {
                    self.in_string = true;
                    Some(b)
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    Some(b)
                }
                b']' if self.depth == 0 => {
                    self.place = Place::After;
                    self.line_open.then_some(b'\n')
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    Some(b)
                }
                b',' if self.depth == 0 => Some(b'\n'),
                b'\n' | b'\r' if self.depth > 0 => Some(b' '),
                _ if b.is_ascii_whitespace() && self.depth == 0 => None,
                _ => Some(b),
            },
        };
        if let Some(byte) = out {
            self.line_open = byte != b'\n';
        }
        Ok(out)
    }
}

fn invalid(what: &str) -> Error {
    Error::new(ErrorKind::InvalidData, format!("not a JSON array: {what}"))
}

impl<R: BufRead> Read for ArrayAsLines<R> {
    fn read(&mut self, out: &mut [u8]) -> Result<usize> {
        let mut written = 0;
        while written < out.len() {
            let input = self.inner.fill_buf()?;
            if input.is_empty() {
                if self.state.place != Place::After && written == 0 {
                    return Err(invalid("it ends before the array's closing ']'"));
                }
                break;
            }
            let mut used = 0;
            for &b in input {
                if written == out.len() {
                    break;
                }
                used += 1;
                if let Some(byte) = self.state.translate(b)? {
                    out[written] = byte;
                    written += 1;
                }
            }
            self.inner.consume(used);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Result<String> {
        // A reader of 3-byte reads, so that elements cross buffer ends.
        let inner = std::io::BufReader::with_capacity(3, text.as_bytes());
        let mut out = String::new();
        ArrayAsLines::new(inner).read_to_string(&mut out)?;
        Ok(out)
    }

    #[test]
    fn elements_become_lines() -> Result<()> {
        let text = " [\n  {\"a\": 1,\n   \"b\": [1, 2]},\n  {\"s\": \"x, ] } [\\\" y\"}\n]\n ";
        assert_eq!(
            lines(text)?,
            "{\"a\": 1,    \"b\": [1, 2]}\n{\"s\": \"x, ] } [\\\" y\"}\n"
        );
        assert_eq!(lines("[1,2 , 3]")?, "1\n2\n3\n");
        assert_eq!(lines("[]")?, "");
        Ok(())
    }

    #[test]
    fn what_is_not_one_array_is_an_error() {
        for (text, reason) in [
            ("[{\"a\": 1}", "ends before"),
            ("[{\"a\": 1}] {\"a\": 2}", "data after"),
            ("{\"a\": 1}", "does not start"),
            ("", "ends before"),
        ] {
            let error = lines(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains(reason), "{text:?}: {error:?}");
        }
    }
}
