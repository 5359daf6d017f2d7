//! Server-sent events, as much as the relay needs: dropping the usage-only
//! chunk the gateway asked for on the client's behalf, event by event.

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

/// Length of the first complete event (through its blank line), if any.
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = memchr::memmem::find(buf, b"\n\n").map(|i| i + 2);
    let crlf = memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn is_usage_only(event: &[u8]) -> bool {
    if memchr::memmem::find(event, b"\"usage\"").is_none() {
        return false;
    }
    let data: Vec<u8> = event
        .split(|&b| b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .flat_map(|d| {
            d.strip_prefix(b" ")
                .unwrap_or(d)
                .iter()
                .copied()
                .filter(|&b| b != b'\r')
        })
        .collect();
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&data) else {
        return false;
    };
    v.get("choices")
        .and_then(|c| c.as_array())
        .is_some_and(Vec::is_empty)
        && v.get("usage").is_some_and(|u| !u.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
