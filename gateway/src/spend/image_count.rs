//! How many images an image answer returned: the entries of the top-level
//! `data` list of OpenAI's answer, counted as its bytes pass, so an answer
//! of many megabytes of base64 is never held to be counted (LiteLLM bills
//! `len(response.data)` images).
//!
//! A byte-at-a-time scanner of JSON's structure (strings, escapes,
//! nesting): it counts the objects opened directly inside the `data` list
//! of the outermost object. It never fails; bytes that are not JSON count
//! for nothing. A second top-level `data` member replaces the first, as a
//! JSON parser keeping the last member does. Member names are decoded as
//! a JSON parser decodes them (`"d\u0061ta"` is `data`), so an answer
//! cannot hide its images from the bill behind an escape.

/// Counts the images of an answer fed in pieces.
#[derive(Debug, Clone, Default)]
pub struct ImageCount {
    /// Nesting depth of the bytes read (0 outside the outermost value).
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// Hex digits of a `\uXXXX` escape still to read (0 outside one).
    hex_left: u8,
    /// The code unit those digits make so far.
    code: u16,
    /// At depth 1, the next string is a member's name.
    expect_name: bool,
    /// Whether the string being read is a member name at depth 1.
    name_string: bool,
    /// The first decoded bytes of that name ([`NAME`]'s length plus
    /// one); a character outside ASCII is [`NOT_ASCII`].
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
/// What a name keeps for a decoded character outside ASCII (never in
/// [`NAME`]).
const NOT_ASCII: u8 = 0xFF;

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
            self.string_byte(b);
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

    /// A byte inside a string: escapes decoded for a member name, so its
    /// first bytes are the name a JSON parser reads.
    fn string_byte(&mut self, b: u8) {
        if self.hex_left > 0 {
            // A digit that is not hex makes the answer invalid JSON (no
            // client reads it); it is taken as 0.
            let digit = (b as char).to_digit(16).unwrap_or(0) as u16;
            self.code = (self.code << 4) | digit;
            self.hex_left -= 1;
            if self.hex_left == 0 {
                let c = u8::try_from(self.code).ok().filter(u8::is_ascii);
                self.name_byte(c.unwrap_or(NOT_ASCII));
            }
        } else if self.escaped {
            self.escaped = false;
            let decoded = match b {
                b'u' => {
                    self.hex_left = 4;
                    self.code = 0;
                    return;
                }
                b'b' => 0x08,
                b'f' => 0x0C,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                other => other,
            };
            self.name_byte(decoded);
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if self.name_string {
                self.name_string = false;
                self.data_name = self.name_len == NAME.len() && &self.name[..4] == NAME;
            }
        } else {
            self.name_byte(b);
        }
    }

    /// The next decoded byte of a string: kept when it is a depth-1 name's
    /// and the name is still short enough to be [`NAME`].
    fn name_byte(&mut self, b: u8) {
        if self.name_string && self.name_len < self.name.len() {
            self.name[self.name_len] = b;
            self.name_len += 1;
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
        // Escaped names are read as a JSON parser reads them.
        assert_eq!(count(r#"{"d\u0061ta":[{},{}]}"#), 2);
        assert_eq!(count(r#"{"\u0064\u0041ta":[{}]}"#), 0);
        assert_eq!(count(r#"{"\u0064\u0061\u0074\u0061":[{},{},{}]}"#), 3);
        assert_eq!(count(r#"{"data\n":[{}]}"#), 0);
        assert_eq!(count(r#"{"d\u00e1ta":[{}]}"#), 0);
        assert_eq!(count(r#"{"\"data":[{}]}"#), 0);
        assert_eq!(count(r#"{"x\\":1,"data":[{}]}"#), 1);
        assert_eq!(count(r#"{"data":[{}],"d\u0061ta":[{},{}]}"#), 2);
        assert_eq!(count(r#"[{"data":[{}]}]"#), 0);
        assert_eq!(count("not json at all {{{{"), 0);
        // The last `data` member counts.
        assert_eq!(count(r#"{"data":[{},{}],"data":[{}]}"#), 1);
    }
}
