//! A `multipart/form-data` body (RFC 7578), as OpenAI's audio
//! transcription and translation and image edit endpoints take it: the
//! fields the gateway routes and prices by (`model`, `stream`, `user`;
//! an edit's `prompt`, `n`, `size`, `quality`), located in the body without
//! copying it, and the `file` (or `image`) part checked to be there. Bounded: at most
//! [`MAX_PARTS`] parts, [`MAX_PART_HEAD`] bytes of headers each, and
//! [`MAX_FIELD`] bytes for a field that is not a file.

use crate::error::GatewayError;
use memchr::memmem;
use std::ops::Range;
use std::sync::LazyLock;

/// Most parts one form may have.
pub const MAX_PARTS: usize = 64;
/// Most bytes of one part's headers.
pub const MAX_PART_HEAD: usize = 8 << 10;
/// Most bytes of a field that is not a file.
pub const MAX_FIELD: usize = 64 << 10;
/// Longest boundary (RFC 2046: 70).
const MAX_BOUNDARY: usize = 70;
/// Finds the blank line that ends a part's headers; built once, not per part.
pub(super) static HEAD_END: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\r\n\r\n"));

/// The fields of a form the gateway reads, as byte ranges of its body.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Form {
    /// The `model` field's value.
    pub model: Option<Range<usize>>,
    /// The `stream` field's value.
    pub stream: Option<Range<usize>>,
    /// The `user` field's value.
    pub user: Option<Range<usize>>,
    /// Bytes of the `file` part's content, when there is one with a file
    /// name.
    pub file_bytes: Option<usize>,
    /// The `prompt` field's value (image edits).
    pub prompt: Option<Range<usize>>,
    /// The `n` field's value (image edits).
    pub n: Option<Range<usize>>,
    /// The `size` field's value (image edits).
    pub size: Option<Range<usize>>,
    /// The `quality` field's value (image edits).
    pub quality: Option<Range<usize>>,
    /// Bytes of the `image` (or `image[]`) parts' contents with a file
    /// name (image edits).
    pub image_bytes: Option<usize>,
    /// The `purpose` field's value (file uploads).
    pub purpose: Option<Range<usize>>,
    /// The `custom_llm_provider` field's value (file uploads: LiteLLM's
    /// choice of upstream).
    pub custom_llm_provider: Option<Range<usize>>,
    /// The whole parts (delimiter line to the end of the content's CRLF)
    /// of the `model` and `custom_llm_provider` fields: what a file upload
    /// leaves out of the form it forwards (the gateway's, not OpenAI's).
    pub routing_parts: Vec<Range<usize>>,
}

fn bad(message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param: "file",
        message: message.into(),
    }
}

/// The boundary of a `multipart/form-data` content type.
pub fn boundary(content_type: &str) -> Result<&str, GatewayError> {
    let mut params = content_type.split(';');
    let kind = params.next().unwrap_or("").trim();
    if !kind.eq_ignore_ascii_case("multipart/form-data") {
        return Err(bad("the body must be multipart/form-data"));
    }
    let boundary = params
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, v)| v.trim().trim_matches('"'))
        .ok_or_else(|| bad("the multipart content type has no boundary"))?;
    if boundary.is_empty() || boundary.len() > MAX_BOUNDARY {
        return Err(bad("the multipart boundary must be 1 to 70 characters"));
    }
    Ok(boundary)
}

/// The `name` and `filename` of a part's `Content-Disposition: form-data`.
pub(super) fn disposition(head: &str) -> Option<(&str, Option<&str>)> {
    let line = head.split("\r\n").find(|l| {
        l.split_once(':')
            .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case("content-disposition"))
    })?;
    let value = line.split_once(':')?.1;
    let mut params = value.split(';');
    if !params.next()?.trim().eq_ignore_ascii_case("form-data") {
        return None;
    }
    let mut name = None;
    let mut filename = None;
    for p in params {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches('"');
        match k.trim().to_ascii_lowercase().as_str() {
            "name" => name = Some(v),
            "filename" => filename = Some(v),
            _ => {}
        }
    }
    Some((name?, filename))
}

/// The non-file fields an audio transcription or translation is routed,
/// admitted, guarded or billed by: a streamed upload needs them before its
/// first file part (see [`until_file`]); any other field may follow it.
pub const AUDIO_DECIDING: &[&str] = &["model", "stream", "user", "prompt"];
/// [`AUDIO_DECIDING`] for an image edit (priced by its `n`, `size` and
/// `quality`).
pub const IMAGE_EDIT_DECIDING: &[&str] =
    &["model", "stream", "user", "prompt", "n", "size", "quality"];
/// [`AUDIO_DECIDING`] for a `/v1/files` upload (its upstream is chosen by
/// `model` or `custom_llm_provider`; `purpose` is required).
pub const FILE_UPLOAD_DECIDING: &[&str] = &["model", "custom_llm_provider", "purpose"];

/// Where the walk over a form stopped.
enum Stop {
    /// After the closing delimiter.
    End,
    /// At the content of the first part with a file name: its offset, and
    /// the parts counted so far (that one included).
    File { content_start: usize, parts: usize },
    /// The bytes end inside a part (only when walking a prefix).
    More,
}

/// A part of a form as [`walk`] meets it.
enum Seen<'a> {
    /// A part with a file name: its field name and content length (0 for
    /// the file a prefix stops at).
    File(&'a str, usize),
    /// A field: its name, its content, and its whole part (delimiter line
    /// to the CRLF that begins the next one).
    Field(&'a str, Range<usize>, Range<usize>),
}

/// Walks the parts of `body` delimited by `boundary`, recording the fields
/// the gateway reads in `form`; with `prefix`, stops at the first file
/// part's content, and bytes that end too early mean "more is coming".
fn walk(body: &[u8], boundary: &str, prefix: bool, form: &mut Form) -> Result<Stop, GatewayError> {
    walk_parts(body, boundary, prefix, &mut |seen| match seen {
        Seen::File(name, len) => {
            mark_file(form, name, len);
            Ok(())
        }
        Seen::Field(name, content, part) => record_field(form, name, content, part),
    })
}

/// [`walk`], handing each part to `visit`.
fn walk_parts(
    body: &[u8],
    boundary: &str,
    prefix: bool,
    visit: &mut dyn FnMut(Seen<'_>) -> Result<(), GatewayError>,
) -> Result<Stop, GatewayError> {
    let delimiter = [b"--", boundary.as_bytes()].concat();
    let next_delimiter = [b"\r\n--", boundary.as_bytes()].concat();
    let finder = memmem::Finder::new(&next_delimiter);
    let more = |err: GatewayError| if prefix { Ok(Stop::More) } else { Err(err) };
    // A preamble before the first delimiter is allowed (and ignored).
    let Some(first) = memmem::find(body, &delimiter) else {
        return more(bad("no multipart part found"));
    };
    let mut at = first + delimiter.len();
    let mut parts = 0;
    loop {
        let rest = &body[at..];
        if rest.len() < 2 {
            return more(bad(
                "malformed multipart body: a delimiter line does not end",
            ));
        }
        if rest.starts_with(b"--") {
            return Ok(Stop::End);
        }
        if !rest.starts_with(b"\r\n") {
            return Err(bad(
                "malformed multipart body: a delimiter line must end in CRLF",
            ));
        }
        parts += 1;
        if parts > MAX_PARTS {
            return Err(bad(format!(
                "at most {MAX_PARTS} multipart parts are accepted"
            )));
        }
        let head_start = at + 2;
        let window = &body[head_start..body.len().min(head_start + MAX_PART_HEAD + 4)];
        let Some(head_len) = HEAD_END.find(window) else {
            if prefix && window.len() < MAX_PART_HEAD + 4 {
                return Ok(Stop::More);
            }
            return Err(bad("malformed multipart body: a part's headers do not end"));
        };
        let head = std::str::from_utf8(&body[head_start..head_start + head_len])
            .map_err(|_| bad("a multipart part's headers must be UTF-8"))?;
        let content_start = head_start + head_len + 4;
        let (name, filename) = disposition(head)
            .ok_or_else(|| bad("a multipart part needs Content-Disposition: form-data; name=…"))?;
        if prefix && filename.is_some() {
            visit(Seen::File(name, 0))?;
            return Ok(Stop::File {
                content_start,
                parts,
            });
        }
        let Some(content_len) = finder.find(&body[content_start..]) else {
            if prefix && filename.is_none() && body.len() - content_start > MAX_FIELD {
                return Err(field_too_long(name));
            }
            return more(bad("malformed multipart body: a part does not end"));
        };
        let content = content_start..content_start + content_len;
        match filename {
            Some(_) => visit(Seen::File(name, content_len))?,
            None => {
                if content_len > MAX_FIELD {
                    return Err(field_too_long(name));
                }
                // From this part's delimiter through the CRLF that begins
                // the next one: the rest stays a valid form.
                let part = at - delimiter.len()..content.end + 2;
                visit(Seen::Field(name, content, part))?;
            }
        }
        at = content_start + content_len + next_delimiter.len();
    }
}

fn field_too_long(field: &str) -> GatewayError {
    GatewayError::InvalidParam {
        param: "file",
        message: format!("the field {field:?} is longer than {MAX_FIELD} bytes"),
    }
}

/// Counts a file part's `content_len` bytes where the gateway reads them.
fn mark_file(form: &mut Form, name: &str, content_len: usize) {
    match name {
        "file" => form.file_bytes = Some(content_len),
        "image" | "image[]" => {
            form.image_bytes = Some(form.image_bytes.unwrap_or(0).saturating_add(content_len))
        }
        _ => {}
    }
}

/// Records the field `field` at `content` (its whole part at `part`).
fn record_field(
    form: &mut Form,
    field: &str,
    content: Range<usize>,
    part: Range<usize>,
) -> Result<(), GatewayError> {
    if matches!(field, "model" | "custom_llm_provider") {
        form.routing_parts.push(part);
    }
    let slot = match field {
        "model" => &mut form.model,
        "stream" => &mut form.stream,
        "user" => &mut form.user,
        "prompt" => &mut form.prompt,
        "n" => &mut form.n,
        "size" => &mut form.size,
        "quality" => &mut form.quality,
        "purpose" => &mut form.purpose,
        "custom_llm_provider" => &mut form.custom_llm_provider,
        _ => return Ok(()),
    };
    if slot.is_some() {
        return Err(bad(format!("the field {field:?} is sent twice")));
    }
    *slot = Some(content);
    Ok(())
}

/// Reads the form in `body` delimited by `boundary`.
pub fn read(body: &[u8], boundary: &str) -> Result<Form, GatewayError> {
    let mut form = Form::default();
    walk(body, boundary, false, &mut form)?;
    Ok(form)
}

/// A part of a form by name: a field's content, or `None` for a file.
pub type Member = (String, Option<Range<usize>>);

/// The name of every part of the form in `body` (with `prefix`, those up to
/// its first file part, that one included, as [`until_file`] reads a
/// streamed upload's first bytes), each with its content when it is a
/// field rather than a file: the members LiteLLM's proxy reads from a form.
pub fn members(body: &[u8], boundary: &str, prefix: bool) -> Result<Vec<Member>, GatewayError> {
    let mut out = Vec::new();
    walk_parts(body, boundary, prefix, &mut |seen| {
        out.push(match seen {
            Seen::File(name, _) => (name.to_string(), None),
            Seen::Field(name, content, _) => (name.to_string(), Some(content)),
        });
        Ok(())
    })?;
    Ok(out)
}

/// What the first bytes of a form say (see [`until_file`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Prefix {
    /// The bytes end before the first file part's content starts.
    More,
    /// The form ends (its closing delimiter) before any file part.
    Ended,
    /// The first file part's content starts at `content_start`: the fields
    /// before it are in `form` (its file counted as present, of unknown
    /// length), `parts` the parts up to and with that one.
    File {
        /// The fields read before the file (boxed: the other variants are
        /// empty).
        form: Box<Form>,
        /// Where the file's content starts.
        content_start: usize,
        /// Parts seen, the file's included.
        parts: usize,
    },
}

/// Reads the first bytes of a form, up to its first file part's content:
/// what a streamed upload routes by before the file arrives. Malformed
/// bytes are an error; bytes ending early ask for more.
pub fn until_file(body: &[u8], boundary: &str) -> Result<Prefix, GatewayError> {
    let mut form = Form::default();
    Ok(match walk(body, boundary, true, &mut form)? {
        Stop::More => Prefix::More,
        Stop::End => Prefix::Ended,
        Stop::File {
            content_start,
            parts,
        } => Prefix::File {
            form: Box::new(form),
            content_start,
            parts,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--\x00data\r\n--XyZ\r\ncontent-disposition: form-data; name=stream\r\n\r\ntrue\r\n--XyZ--\r\n";

    #[test]
    fn reads_the_fields_and_the_file() {
        assert_eq!(
            boundary("multipart/form-data; boundary=\"XyZ\"").unwrap(),
            "XyZ"
        );
        assert!(boundary("application/json").is_err());
        assert!(boundary("multipart/form-data").is_err());
        let form = read(BODY, "XyZ").unwrap();
        assert_eq!(&BODY[form.model.clone().unwrap()], b"whisper");
        assert_eq!(&BODY[form.stream.clone().unwrap()], b"true");
        assert_eq!(form.file_bytes, Some(13));
        assert_eq!(form.user, None);
    }

    #[test]
    fn lists_every_part_by_name() {
        let all = members(BODY, "XyZ", false).unwrap();
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["model", "file", "stream"]);
        assert_eq!(&BODY[all[0].1.clone().unwrap()], b"whisper");
        assert_eq!(all[1].1, None, "a file has no field content");
        let head = members(BODY, "XyZ", true).unwrap();
        let names: Vec<&str> = head.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["model", "file"], "a prefix stops at the file");
    }

    #[test]
    fn malformed_and_oversized_forms_are_refused() {
        for body in [
            &b"no delimiter"[..],
            b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nunterminated",
            b"--XyZ\r\nno blank line after headers",
            b"--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--",
            b"--XyZjunk",
        ] {
            assert!(
                read(body, "XyZ").is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let twice = b"--b\r\nContent-Disposition: form-data; name=model\r\n\r\na\r\n--b\r\nContent-Disposition: form-data; name=model\r\n\r\nb\r\n--b--";
        assert!(read(twice, "b").is_err());
        let mut many = Vec::new();
        for _ in 0..=MAX_PARTS {
            many.extend_from_slice(b"--b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n");
        }
        many.extend_from_slice(b"--b--");
        assert!(read(&many, "b").is_err());
    }

    #[test]
    fn the_prefix_stops_at_the_first_file_and_asks_for_more_before() {
        let at_file = BODY.windows(4).position(|w| w == b"RIFF").unwrap();
        for cut in 0..at_file {
            assert_eq!(
                until_file(&BODY[..cut], "XyZ").unwrap(),
                Prefix::More,
                "{cut}"
            );
        }
        for cut in at_file..=BODY.len() {
            let Prefix::File {
                form,
                content_start,
                parts,
            } = until_file(&BODY[..cut], "XyZ").unwrap()
            else {
                panic!("{cut}: no file");
            };
            assert_eq!((content_start, parts), (at_file, 2));
            assert_eq!(&BODY[form.model.unwrap()], b"whisper");
            assert_eq!(form.file_bytes, Some(0));
        }
        let no_file = b"--b\r\nContent-Disposition: form-data; name=model\r\n\r\nm\r\n--b--";
        assert_eq!(until_file(no_file, "b").unwrap(), Prefix::Ended);
        let bad = b"--b\r\nContent-Type: x\r\n\r\n";
        assert!(until_file(bad, "b").is_err());
        let long = [
            &b"--b\r\nContent-Disposition: form-data; name=t\r\n\r\n"[..],
            &[b'a'; MAX_FIELD + 1],
        ]
        .concat();
        assert!(until_file(&long, "b").is_err());
    }
}
