//! How many images an image answer returned: the entries of the top-level
//! `data` list of OpenAI's answer, counted as its bytes pass, so an answer
//! of many megabytes of base64 is never held to be counted (LiteLLM bills
//! `len(response.data)` images).
//!
//! A byte-at-a-time scanner of JSON's structure (strings, escapes,
//! nesting): it counts the objects opened directly inside the `data` list
//! of the outermost object. It never fails; bytes that are not JSON count
//! for nothing. A second top-level `data` member replaces the first, as a
//! JSON parser keeping the last member does.

/// Counts the images of an answer fed in pieces.
#[derive(Debug, Clone, Default)]
pub struct ImageCount {
    /// Nesting depth of the bytes read (0 outside the outermost value).
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a member's name.
    expect_name: bool,
    /// Whether the string being read is a member name at depth 1.
    name_string: bool,
    /// The first bytes of that name ([`NAME`]'s length plus one).
    name: [u8; 5],
    name_len: usize,
    /// The last depth-1 name read was `data` and its `:` came.
    data_value: bool,
    /// The name just read was `data`, its `:` not yet seen.
    data_name: bool,
    /// Inside the `data` list (its elements are at depth 2).
    in_data: bool,
    count: u64,
}

/// The member whose entries are the images.
const NAME: &[u8; 4] = b"data";

impl ImageCount {
    /// Reads the next bytes of the answer.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    /// Images counted so far.
    pub fn images(&self) -> u64 {
        self.count
    }

    fn byte(&mut self, b: u8) {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
                // An escaped name is never read as `data`.
                self.name_len = self.name.len();
            } else if b == b'"' {
                self.in_string = false;
                if self.name_string {
                    self.name_string = false;
                    self.data_name = self.name_len == NAME.len() && &self.name[..4] == NAME;
                }
            } else if self.name_string && self.name_len < self.name.len() {
                self.name[self.name_len] = b;
                self.name_len += 1;
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_name {
                    self.expect_name = false;
                    self.name_string = true;
                    self.name_len = 0;
                } else {
                    self.data_value = false;
                }
            }
            b':' if self.depth == 1 => {
                self.data_value = std::mem::take(&mut self.data_name);
            }
            b',' if self.depth == 1 => {
                self.expect_name = true;
                self.data_value = false;
            }
            b'{' | b'[' => {
                if self.depth == 0 && b == b'{' {
                    self.expect_name = true;
                } else if self.depth == 1 && b == b'[' && self.data_value {
                    self.in_data = true;
                    self.count = 0;
                } else if self.depth == 2 && self.in_data && b == b'{' {
                    self.count = self.count.saturating_add(1);
                }
                self.data_value = false;
                self.depth = self.depth.saturating_add(1);
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth <= 1 {
                    self.in_data = false;
                }
            }
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => self.data_value = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(text: &str) -> u64 {
        let mut c = ImageCount::default();
        c.feed(text.as_bytes());
        c.images()
    }

    #[test]
    fn counts_the_entries_of_the_top_level_data_list() {
        let answer = r#"{"created":1,"data":[{"b64_json":"A{[\"]"},{"url":"u","revised_prompt":"data"}],"usage":{"data":[{},{}]}}"#;
        assert_eq!(count(answer), 2);
        // Byte by byte, the same.
        let mut c = ImageCount::default();
        for b in answer.as_bytes() {
            c.feed(std::slice::from_ref(b));
        }
        assert_eq!(c.images(), 2);
        assert_eq!(count(r#"{"created":1,"data":[]}"#), 0);
        assert_eq!(count(r#"{ "data" : [ { } , { } , { } ] }"#), 3);
        // Not the top level's, not a name, not a list: nothing.
        assert_eq!(count(r#"{"x":{"data":[{}]}}"#), 0);
        assert_eq!(count(r#"{"x":"data","y":[{}]}"#), 0);
        assert_eq!(count(r#"{"data":"[{}]"}"#), 0);
        assert_eq!(count(r#"{"datas":[{}]}"#), 0);
        assert_eq!(count(r#"{"d\u0061ta":[{}]}"#), 0);
        assert_eq!(count(r#"[{"data":[{}]}]"#), 0);
        assert_eq!(count("not json at all {{{{"), 0);
        // The last `data` member counts.
        assert_eq!(count(r#"{"data":[{},{}],"data":[{}]}"#), 1);
    }
}
