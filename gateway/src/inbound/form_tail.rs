//! The rest of a streamed `multipart/form-data` upload, checked as it
//! passes: from inside its first file part's content to the closing
//! delimiter, fed one read at a time and never held. The same bounds as a
//! form read whole ([`super::form`]): at most [`MAX_PARTS`] parts,
//! [`MAX_PART_HEAD`] bytes of headers each, [`MAX_FIELD`] bytes for a field
//! that is not a file. A field the gateway decides this form's call by (the
//! scanner's `deciding` list, e.g. [`super::form::AUDIO_DECIDING`]) is
//! refused here: the call was routed, admitted and priced before the file,
//! so a late one could not change that. Any other field may follow the
//! file.

use super::form::{HEAD_END, MAX_FIELD, MAX_PARTS, MAX_PART_HEAD};
use crate::error::GatewayError;
use memchr::memmem;

/// Where the scanner is in the form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Inside a part's content (a file's when `field` is false).
    Content { field: bool },
    /// After a delimiter: `seen` of the two bytes that end its line
    /// (`\r\n` for another part, `--` for the end).
    AfterDelimiter { seen: usize, dashes: bool },
    /// Inside a part's headers.
    Head,
    /// After the closing delimiter: the epilogue, ignored.
    Done,
}

/// Checks the tail of a form read by read (see the module doc).
#[derive(Debug)]
pub struct TailScanner {
    /// Finds `\r\n--` and the boundary (what ends a part's content);
    /// built once per form, not per read.
    delimiter: memmem::Finder<'static>,
    state: State,
    /// The last bytes of content seen (fewer than the delimiter's length),
    /// for a delimiter split across two reads.
    carry: Vec<u8>,
    /// The current part's headers, while they arrive.
    head: Vec<u8>,
    /// Parts seen, the ones before the tail included.
    parts: usize,
    /// Bytes of the current field's content.
    field_len: usize,
    /// The fields refused after the file.
    deciding: &'static [&'static str],
}

fn bad(message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param: "file",
        message: message.into(),
    }
}

impl TailScanner {
    /// A scanner starting inside a file part's content, of a form
    /// delimited by `boundary` whose first `parts` parts were seen, that
    /// refuses the `deciding` fields.
    pub fn new(boundary: &str, parts: usize, deciding: &'static [&'static str]) -> TailScanner {
        let delimiter = [b"\r\n--", boundary.as_bytes()].concat();
        let delimiter = memmem::Finder::new(&delimiter).into_owned();
        TailScanner {
            carry: Vec::with_capacity(delimiter.needle().len()),
            delimiter,
            state: State::Content { field: false },
            head: Vec::new(),
            parts,
            field_len: 0,
            deciding,
        }
    }

    /// Checks the next bytes of the form.
    pub fn feed(&mut self, mut input: &[u8]) -> Result<(), GatewayError> {
        while !input.is_empty() {
            let used = match self.state {
                State::Content { field } => self.content(input, field)?,
                State::AfterDelimiter { seen, dashes } => {
                    let byte = input[0];
                    let want_dash = if seen == 0 { byte == b'-' } else { dashes };
                    let expected = if want_dash {
                        b'-'
                    } else {
                        [b'\r', b'\n'][seen]
                    };
                    if byte != expected {
                        return Err(bad(
                            "malformed multipart body: a delimiter line must end in CRLF",
                        ));
                    }
                    self.state = match (seen, want_dash) {
                        (0, _) => State::AfterDelimiter {
                            seen: 1,
                            dashes: want_dash,
                        },
                        (_, true) => State::Done,
                        (_, false) => {
                            self.parts += 1;
                            if self.parts > MAX_PARTS {
                                return Err(bad(format!(
                                    "at most {MAX_PARTS} multipart parts are accepted"
                                )));
                            }
                            self.head.clear();
                            State::Head
                        }
                    };
                    1
                }
                State::Head => self.head(input)?,
                State::Done => input.len(),
            };
            input = &input[used..];
        }
        Ok(())
    }

    /// Whether the form ended (its closing delimiter was seen): checked
    /// once the body is over.
    pub fn finish(&self) -> Result<(), GatewayError> {
        match self.state {
            State::Done => Ok(()),
            _ => Err(bad("malformed multipart body: a part does not end")),
        }
    }

    /// Content bytes: up to and through the next delimiter, or all of
    /// `input`. Returns the bytes used.
    fn content(&mut self, input: &[u8], field: bool) -> Result<usize, GatewayError> {
        let d = self.delimiter.needle().len();
        // A delimiter begun in the carried bytes and ending in these.
        if !self.carry.is_empty() {
            let take = input.len().min(d - 1);
            let mut window = Vec::with_capacity(self.carry.len() + take);
            window.extend_from_slice(&self.carry);
            window.extend_from_slice(&input[..take]);
            if let Some(at) = self.delimiter.find(&window) {
                if at < self.carry.len() {
                    let used = at + d - self.carry.len();
                    self.count_field(field, at)?;
                    self.carry.clear();
                    self.state = State::AfterDelimiter {
                        seen: 0,
                        dashes: false,
                    };
                    return Ok(used);
                }
            }
        }
        let carried = self.carry.len();
        match self.delimiter.find(input) {
            Some(at) => {
                self.count_field(field, carried + at)?;
                self.carry.clear();
                self.state = State::AfterDelimiter {
                    seen: 0,
                    dashes: false,
                };
                Ok(at + d)
            }
            None => {
                // Keep the last bytes that could begin a delimiter.
                let keep = d - 1;
                if input.len() >= keep {
                    self.count_field(field, carried + input.len() - keep)?;
                    self.carry.clear();
                    self.carry.extend_from_slice(&input[input.len() - keep..]);
                } else {
                    self.carry.extend_from_slice(input);
                    let over = self.carry.len().saturating_sub(keep);
                    self.count_field(field, over)?;
                    self.carry.drain(..over);
                }
                Ok(input.len())
            }
        }
    }

    /// Adds `n` bytes to a field's length, refusing one over [`MAX_FIELD`].
    fn count_field(&mut self, field: bool, n: usize) -> Result<(), GatewayError> {
        if field {
            self.field_len = self.field_len.saturating_add(n);
            if self.field_len > MAX_FIELD {
                return Err(bad(format!("a field is longer than {MAX_FIELD} bytes")));
            }
        }
        Ok(())
    }

    /// Header bytes: up to and through their blank line, or all of
    /// `input`. Returns the bytes used.
    fn head(&mut self, input: &[u8]) -> Result<usize, GatewayError> {
        let before = self.head.len();
        let room = (MAX_PART_HEAD + 4).saturating_sub(before);
        self.head.extend_from_slice(&input[..input.len().min(room)]);
        // The blank line may straddle two reads: look from 3 bytes back.
        let from = before.saturating_sub(3);
        let Some(end) = HEAD_END.find(&self.head[from..]).map(|i| from + i) else {
            if self.head.len() >= MAX_PART_HEAD + 4 {
                return Err(bad("malformed multipart body: a part's headers do not end"));
            }
            return Ok(input.len());
        };
        let used = end + 4 - before;
        let head = std::str::from_utf8(&self.head[..end])
            .map_err(|_| bad("a multipart part's headers must be UTF-8"))?;
        let (name, filename) = super::form::disposition(head)
            .ok_or_else(|| bad("a multipart part needs Content-Disposition: form-data; name=…"))?;
        let field = filename.is_none();
        if let Some(param) = self.deciding.iter().find(|f| **f == name).filter(|_| field) {
            return Err(GatewayError::InvalidParam {
                param,
                message: format!(
                    "the field {name:?} comes after the file: a streamed upload's fields {} must come before its first file part",
                    self.deciding.join(", ")
                ),
            });
        }
        self.head = Vec::new();
        self.field_len = 0;
        self.state = State::Content { field };
        Ok(used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::form::AUDIO_DECIDING;

    const TAIL: &[u8] = b"RIFF\r\n--\x00data\r\n--XyZ\r\nContent-Disposition: form-data; name=\"language\"\r\n\r\nen\r\n--XyZ\r\ncontent-disposition: form-data; name=\"file2\"; filename=\"b\"\r\n\r\n\r\n--X\r\n--XyZ--\r\nepilogue";

    fn scan(tail: &[u8], step: usize) -> Result<(), GatewayError> {
        let mut s = TailScanner::new("XyZ", 2, AUDIO_DECIDING);
        for piece in tail.chunks(step) {
            s.feed(piece)?;
        }
        s.finish()
    }

    #[test]
    fn a_well_formed_tail_passes_however_it_is_split() {
        for step in 1..=TAIL.len() {
            scan(TAIL, step).unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
    }

    #[test]
    fn malformed_truncated_or_deciding_tails_are_refused_however_split() {
        let late_model =
            b"RIFF\r\n--XyZ\r\nContent-Disposition: form-data; name=model\r\n\r\nw\r\n--XyZ--";
        let long_field = [
            &b"x\r\n--XyZ\r\nContent-Disposition: form-data; name=t\r\n\r\n"[..],
            &vec![b'a'; MAX_FIELD + 1],
            b"\r\n--XyZ--",
        ]
        .concat();
        let long_head = [&b"x\r\n--XyZ\r\n"[..], &vec![b'h'; MAX_PART_HEAD + 8]].concat();
        let mut many = b"x".to_vec();
        for _ in 0..MAX_PARTS {
            many.extend_from_slice(b"\r\n--XyZ\r\nContent-Disposition: form-data; name=t\r\n\r\n1");
        }
        many.extend_from_slice(b"\r\n--XyZ--");
        for (what, tail) in [
            ("truncated", &TAIL[..TAIL.len() - 20]),
            ("no end", &b"RIFF data"[..]),
            ("bad delimiter line", b"x\r\n--XyZjunk"),
            (
                "no disposition",
                b"x\r\n--XyZ\r\nContent-Type: a\r\n\r\n1\r\n--XyZ--",
            ),
            ("late model", late_model),
            ("long field", &long_field),
            ("long head", &long_head),
            ("too many parts", &many),
        ] {
            for step in [1, 3, 7, 64, 1 << 20] {
                assert!(scan(tail, step).is_err(), "{what} split by {step}");
            }
        }
        let err = scan(late_model, 5).unwrap_err();
        assert!(err.to_string().contains("comes after the file"), "{err}");
    }

    #[test]
    fn only_the_forms_own_deciding_fields_are_refused_after_its_file() {
        use crate::inbound::form::{FILE_UPLOAD_DECIDING, IMAGE_EDIT_DECIDING};
        let tail = |name: &str| {
            format!("RIFF\r\n--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\nv\r\n--XyZ--\r\n")
        };
        let scan_as = |deciding, name: &str| {
            let mut s = TailScanner::new("XyZ", 2, deciding);
            s.feed(tail(name).as_bytes())?;
            s.finish()
        };
        // A transcription's size and purpose, a file's prompt: not theirs.
        for name in ["size", "n", "purpose", "language", "temperature"] {
            scan_as(AUDIO_DECIDING, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        scan_as(FILE_UPLOAD_DECIDING, "prompt").unwrap();
        scan_as(FILE_UPLOAD_DECIDING, "expires_after[seconds]").unwrap();
        for (deciding, name) in [
            (AUDIO_DECIDING, "prompt"),
            (IMAGE_EDIT_DECIDING, "size"),
            (FILE_UPLOAD_DECIDING, "purpose"),
            (FILE_UPLOAD_DECIDING, "custom_llm_provider"),
        ] {
            let err = scan_as(deciding, name).unwrap_err();
            assert!(
                err.to_string().contains("comes after the file"),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn a_delimiter_prefix_inside_the_file_is_content() {
        // `\r\n--XyZ` only in part, then the real one split over reads.
        let tail = b"ab\r\n--Xy\r\n-\r\n--XyZ--";
        for step in 1..=tail.len() {
            scan(tail, step).unwrap();
        }
        let open = b"ab\r\n--XyQ";
        assert!(scan(open, 2).is_err());
    }
}
