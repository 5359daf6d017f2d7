//! Server-sent events, as much as the relay needs: dropping the usage-only
//! chunk the gateway asked for on the client's behalf, event by event, and
//! reading events one at a time for the stream translators.

/// Removes OpenAI's usage-only stream chunk (`"choices":[]` with `usage`)
/// from a relayed stream whose client did not ask for it.
#[derive(Debug, Default)]
pub struct UsageChunkFilter {
    pending: Vec<u8>,
}

/// Longest event kept while waiting for its end; longer ones pass through.
const MAX_PENDING: usize = 1 << 20;

impl UsageChunkFilter {
    /// Appends to `out` every complete event of `input` except usage-only
    /// chunks; keeps an unfinished event for the next call.
    pub fn filter(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.pending.extend_from_slice(input);
        let mut start = 0;
        while let Some(end) = event_end(&self.pending[start..]) {
            let event = &self.pending[start..start + end];
            if !is_usage_only(event) {
                out.extend_from_slice(event);
            }
            start += end;
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_PENDING {
            out.append(&mut self.pending);
        }
    }

    /// Flushes an unfinished last event.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if !is_usage_only(&self.pending) {
            out.append(&mut self.pending);
        }
        self.pending.clear();
    }
}

/// Length of the first complete event (through its blank line: `\n\n` or
/// `\r\n\r\n`), if any. One pass over the line ends, so filtering a read
/// of many events stays linear in its length.
fn event_end(buf: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', buf).find_map(|i| match buf.get(i + 1)? {
        b'\n' => Some(i + 2),
        b'\r' if i > 0 && buf[i - 1] == b'\r' && buf.get(i + 2) == Some(&b'\n') => Some(i + 3),
        _ => None,
    })
}

/// Finds `"usage"`; built once, not per event.
static USAGE_KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"usage\""));

/// The members that make a chunk usage-only, read without building the
/// rest.
#[derive(serde::Deserialize)]
struct UsageOnlyProbe {
    choices: Option<Vec<serde::de::IgnoredAny>>,
    usage: Option<serde::de::IgnoredAny>,
}

fn is_usage_only(event: &[u8]) -> bool {
    if USAGE_KEY.find(event).is_none() {
        return false;
    }
    let data_lines = || {
        event
            .split(|&b| b == b'\n')
            .filter_map(|line| line.strip_prefix(b"data:"))
    };
    let mut lines = data_lines();
    // One data line without `\r` (the usual event) is read where it lies.
    let joined: Vec<u8>;
    let data = match (lines.next(), lines.next()) {
        (Some(only), None) if memchr::memchr(b'\r', only).is_none() => only,
        _ => {
            joined = data_lines()
                .flat_map(|d| {
                    d.strip_prefix(b" ")
                        .unwrap_or(d)
                        .iter()
                        .copied()
                        .filter(|&b| b != b'\r')
                })
                .collect();
            &joined
        }
    };
    // An object only (serde would read an array positionally).
    if data.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return false;
    }
    serde_json::from_slice::<UsageOnlyProbe>(data)
        .is_ok_and(|chunk| chunk.choices.is_some_and(|c| c.is_empty()) && chunk.usage.is_some())
}

/// Reads a byte stream split anywhere into complete events (`event:` name
/// and `data:` lines joined by `\n`), keeping at most one event in memory.
#[derive(Debug)]
pub struct EventReader {
    /// The current line up to the bytes fed so far.
    line: Vec<u8>,
    /// `event:` of the current event.
    name: Vec<u8>,
    /// `data:` values of the current event, joined by `\n`.
    data: Vec<u8>,
    /// Most bytes one event may hold.
    max: usize,
}

/// What [`EventReader`] calls for each complete event: its `event:` name
/// (empty if none) and its data.
pub type OnEvent<'a, E> = dyn FnMut(&[u8], &[u8]) -> Result<(), E> + 'a;

/// An event larger than the reader's cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a server-sent event is larger than {0} bytes")]
pub struct EventTooLarge(pub usize);

impl EventReader {
    /// A reader refusing events above `max` bytes.
    pub fn new(max: usize) -> EventReader {
        EventReader {
            line: Vec::new(),
            name: Vec::new(),
            data: Vec::new(),
            max,
        }
    }

    /// Takes the next bytes; calls `on_event(name, data)` for each event
    /// they complete (`name` is empty without an `event:` line). An event
    /// with no `data:` line is skipped.
    pub fn feed<E: From<EventTooLarge>>(
        &mut self,
        mut input: &[u8],
        on_event: &mut OnEvent<'_, E>,
    ) -> Result<(), E> {
        while let Some(eol) = memchr::memchr(b'\n', input) {
            let head = &input[..eol];
            input = &input[eol + 1..];
            if self.line.is_empty() {
                self.on_line(head, on_event)?;
            } else {
                self.check(head.len())?;
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                let result = self.on_line(&line, on_event);
                line.clear();
                self.line = line;
                result?;
            }
        }
        self.check(input.len())?;
        self.line.extend_from_slice(input);
        Ok(())
    }

    /// The end of the stream: an event left without its blank line still
    /// counts.
    pub fn finish<E: From<EventTooLarge>>(
        &mut self,
        on_event: &mut OnEvent<'_, E>,
    ) -> Result<(), E> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.on_line(&line, on_event)?;
        }
        self.on_line(b"", on_event)
    }

    fn check(&self, more: usize) -> Result<(), EventTooLarge> {
        if self.line.len() + self.data.len() + more > self.max {
            return Err(EventTooLarge(self.max));
        }
        Ok(())
    }

    fn on_line<E: From<EventTooLarge>>(
        &mut self,
        line: &[u8],
        on_event: &mut OnEvent<'_, E>,
    ) -> Result<(), E> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            let result = if self.data.is_empty() {
                Ok(())
            } else {
                on_event(&self.name, &self.data)
            };
            self.name.clear();
            self.data.clear();
            return result;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(0) => return Ok(()), // a comment
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        match field {
            b"data" => {
                self.check(value.len() + 1)?;
                if !self.data.is_empty() {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
            }
            b"event" => {
                self.name.clear();
                self.name
                    .extend_from_slice(&value[..value.len().min(self.max)]);
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Result<Vec<(String, String)>, EventTooLarge> {
        let mut reader = EventReader::new(64);
        let mut seen = Vec::new();
        let mut on = |name: &[u8], data: &[u8]| -> Result<(), EventTooLarge> {
            seen.push((
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(data).into_owned(),
            ));
            Ok(())
        };
        for c in chunks {
            reader.feed(c, &mut on)?;
        }
        reader.finish(&mut on)?;
        Ok(seen)
    }

    #[test]
    fn reads_named_events_in_any_split() {
        let stream = b"event: message_start\r\ndata: {\"a\":1}\r\n\r\n: ping\n\nevent: x\ndata: 1\ndata: 2\n\nevent: empty\n\ndata: last";
        let want = vec![
            ("message_start".to_string(), "{\"a\":1}".to_string()),
            ("x".to_string(), "1\n2".to_string()),
            (String::new(), "last".to_string()),
        ];
        for split in 0..stream.len() {
            assert_eq!(
                events(&[&stream[..split], &stream[split..]]).unwrap(),
                want,
                "split at {split}"
            );
        }
        let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytewise).unwrap(), want);
    }

    #[test]
    fn refuses_an_event_over_the_cap() {
        let big = format!("data: {}\n\n", "a".repeat(100));
        assert_eq!(events(&[big.as_bytes()]), Err(EventTooLarge(64)));
        let lines = "data: aaaaaaaaaaaaaaaaaaaa\n".repeat(5);
        assert_eq!(events(&[lines.as_bytes()]), Err(EventTooLarge(64)));
        let split: Vec<&[u8]> = big.as_bytes().chunks(7).collect();
        assert_eq!(events(&split), Err(EventTooLarge(64)));
    }

    #[test]
    fn a_usage_only_chunk_has_empty_choices_and_a_usage() {
        for (event, usage_only) in [
            (
                &b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n"[..],
                true,
            ),
            (
                b"data: {\"id\":\"x\",\r\ndata: \"choices\":[ ],\"usage\":{}}\r\n\r\n",
                true,
            ),
            (b"data: {\"choices\":[],\"usage\":null}\n\n", false),
            (b"data: {\"choices\":[{}],\"usage\":{}}\n\n", false),
            (b"data: {\"usage\":{}}\n\n", false),
            (b"data: {\"choices\":{},\"usage\":{}}\n\n", false),
            (b"data: [[],{\"usage\":1}]\n\n", false),
            (b"data: {\"choices\":[],\"usage\":{}\n\n", false),
        ] {
            assert_eq!(
                is_usage_only(event),
                usage_only,
                "{}",
                String::from_utf8_lossy(event)
            );
        }
    }

    #[test]
    fn drops_only_the_usage_chunk_in_any_split() {
        let stream = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut f = UsageChunkFilter::default();
            let mut out = Vec::new();
            f.filter(&stream[..split], &mut out);
            f.filter(&stream[split..], &mut out);
            f.finish(&mut out);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
                "split at {split}"
            );
        }
    }

    /// The blank-line search as first written (two substring searches over
    /// the rest of the buffer per event), to check the one-pass version.
    fn event_end_by_search(buf: &[u8]) -> Option<usize> {
        let find = |pat: &[u8]| buf.windows(pat.len()).position(|w| w == pat);
        match (
            find(b"\n\n").map(|i| i + 2),
            find(b"\r\n\r\n").map(|i| i + 4),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    proptest::proptest! {
        #[test]
        fn event_end_finds_the_first_blank_line(
            buf in proptest::collection::vec(proptest::sample::select(b"\r\nd:".to_vec()), 0..40)
        ) {
            proptest::prop_assert_eq!(event_end(&buf), event_end_by_search(&buf));
        }
    }
}
