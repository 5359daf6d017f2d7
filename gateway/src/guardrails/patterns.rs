//! The prebuilt patterns of `litellm_content_filter`, by LiteLLM's names
//! (`patterns.json`, litellm 1.110), rewritten for a linear-time engine:
//! look-around becomes a [`Check`] run on each match.

/// A test a match must pass beside its regex: what LiteLLM writes as
/// look-around, or the Luhn check of card numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// None.
    None,
    /// The digits pass the Luhn checksum.
    Luhn,
    /// No `[A-Za-z0-9_]` right after the match.
    NoWordAfter,
    /// Not preceded by `[A-Za-z0-9]` (unless by an escape such as `\n`,
    /// `\uXXXX` or `%XX`), and no `[A-Za-z0-9_]` right after.
    Isolated,
}

/// One prebuilt pattern.
pub struct Prebuilt {
    /// LiteLLM's name (`pattern_name`).
    pub name: &'static str,
    /// The regex (ASCII classes, matched case-insensitively as LiteLLM does).
    pub regex: &'static str,
    /// The check each match must also pass.
    pub check: Check,
}

const CARD: &str = r"\b(?:4\d{3}[\s\-]?\d{4}[\s\-]?\d{4}[\s\-]?\d{4}|5[1-5]\d{2}[\s\-]?\d{4}[\s\-]?\d{4}[\s\-]?\d{4}|3[47]\d{2}[\s\-]?\d{6}[\s\-]?\d{5}|6(?:011|5\d{2})[\s\-]?\d{4}[\s\-]?\d{4}[\s\-]?\d{4})\b";

/// Every prebuilt pattern this gateway has; a `pattern_name` not listed
/// here stops start-up.
pub const PREBUILT: &[Prebuilt] = &[
    Prebuilt {
        name: "us_ssn",
        regex: r"\b\d{3}-\d{2}-\d{4}\b",
        check: Check::None,
    },
    Prebuilt {
        name: "email",
        regex: r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b",
        check: Check::None,
    },
    Prebuilt {
        name: "us_phone",
        regex: r"\b(?:\+?1[\s.-]?)?\(?[0-9]{3}\)?[\s.-]?[0-9]{3}[\s.-]?[0-9]{4}\b",
        check: Check::None,
    },
    Prebuilt {
        name: "visa",
        regex: r"\b4\d{3}[\s\-]?\d{4}[\s\-]?\d{4}[\s\-]?\d{4}\b",
        check: Check::Luhn,
    },
    Prebuilt {
        name: "mastercard",
        regex: r"\b5[1-5]\d{2}[\s\-]?\d{4}[\s\-]?\d{4}[\s\-]?\d{4}\b",
        check: Check::Luhn,
    },
    Prebuilt {
        name: "amex",
        regex: r"\b3[47]\d{2}[\s\-]?\d{6}[\s\-]?\d{5}\b",
        check: Check::Luhn,
    },
    Prebuilt {
        name: "discover",
        regex: r"\b6(?:011|5\d{2})[\s\-]?\d{4}[\s\-]?\d{4}[\s\-]?\d{4}\b",
        check: Check::Luhn,
    },
    Prebuilt {
        name: "credit_card",
        regex: CARD,
        check: Check::Luhn,
    },
    Prebuilt {
        name: "iban",
        regex: r"\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b",
        check: Check::None,
    },
    Prebuilt {
        name: "ipv4",
        regex: r"\b(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\b",
        check: Check::None,
    },
    Prebuilt {
        name: "aws_access_key",
        regex: r"\bAKIA[0-9A-Z]{16}\b",
        check: Check::None,
    },
    Prebuilt {
        name: "aws_secret_key",
        regex: r"\b[A-Za-z0-9/+=]{40}\b",
        check: Check::None,
    },
    Prebuilt {
        name: "github_token",
        regex: r"\bgh[ps]_[a-zA-Z0-9]{36}\b",
        check: Check::None,
    },
    Prebuilt {
        name: "slack_token",
        regex: r"\bxox[pboa]-[0-9]{10,13}-[0-9]{10,13}-[a-zA-Z0-9]{24,32}\b",
        check: Check::None,
    },
    Prebuilt {
        name: "generic_api_key",
        regex: r#"\b[Aa][Pp][Ii][-_]?[Kk][Ee][Yy][\s:=]+['"]?[A-Za-z0-9_\-]{20,}['"]?\b"#,
        check: Check::None,
    },
    Prebuilt {
        name: "openai_api_key",
        regex: r"sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,200}T3BlbkFJ[A-Za-z0-9_\-]{20,200}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
        check: Check::NoWordAfter,
    },
    Prebuilt {
        name: "anthropic_api_key",
        regex: r"sk-ant-[A-Za-z0-9_\-]{20,}",
        check: Check::Isolated,
    },
    Prebuilt {
        name: "gemini_api_key",
        regex: r"(?-i:AIza)[A-Za-z0-9_\-]{33,36}|(?-i:AQ\.)[A-Za-z0-9_\-]{45,55}",
        check: Check::Isolated,
    },
    // Not one of LiteLLM's: PEM private key blocks (an unterminated block
    // runs to the end of the text).
    Prebuilt {
        name: "private_key",
        regex: r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|[\s\S]*)",
        check: Check::None,
    },
];

/// The prebuilt pattern named `name`.
pub fn prebuilt(name: &str) -> Option<&'static Prebuilt> {
    PREBUILT.iter().find(|p| p.name == name)
}

/// Whether the match `start..end` of `text` passes `check`.
pub fn passes(check: Check, text: &[u8], start: usize, end: usize) -> bool {
    match check {
        Check::None => true,
        Check::Luhn => luhn(&text[start..end]),
        Check::NoWordAfter => !text.get(end).is_some_and(|&b| is_word(b)),
        Check::Isolated => {
            !text.get(end).is_some_and(|&b| is_word(b)) && isolated_before(&text[..start])
        }
    }
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// LiteLLM's `(?<![A-Za-z0-9])|(?<=\\[nrt])|(?<=\\u[0-9A-F]{4})|(?<=%[0-9A-F]{2})`.
fn isolated_before(before: &[u8]) -> bool {
    let Some(&last) = before.last() else {
        return true;
    };
    if !last.is_ascii_alphanumeric() {
        return true;
    }
    let hex = |s: &[u8]| s.iter().all(u8::is_ascii_hexdigit);
    let n = before.len();
    let escaped = n >= 2 && before[n - 2] == b'\\' && matches!(last, b'n' | b'r' | b't');
    let unicode = n >= 6 && before[n - 6..n - 4] == *b"\\u" && hex(&before[n - 4..]);
    let percent = n >= 3 && before[n - 3] == b'%' && hex(&before[n - 2..]);
    escaped || unicode || percent
}

/// The Luhn checksum of the digits of `s` (separators skipped).
pub fn luhn(s: &[u8]) -> bool {
    let mut sum = 0u32;
    let mut count = 0u32;
    for &b in s.iter().rev().filter(|b| b.is_ascii_digit()) {
        let mut d = u32::from(b - b'0');
        if !count.is_multiple_of(2) {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
        count += 1;
    }
    count >= 12 && sum.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luhn_accepts_test_cards_and_rejects_others() {
        assert!(luhn(b"4111 1111 1111 1111"));
        assert!(luhn(b"5500-0000-0000-0004"));
        assert!(luhn(b"378282246310005"));
        assert!(!luhn(b"4111 1111 1111 1112"));
        assert!(!luhn(b"1234"));
    }

    #[test]
    fn escapes_before_a_key_still_count_as_a_boundary() {
        assert!(isolated_before(b""));
        assert!(isolated_before(b"key: "));
        assert!(isolated_before(b"line\\n"));
        assert!(isolated_before(b"\\u00A0"));
        assert!(isolated_before(b"%20"));
        assert!(!isolated_before(b"abc"));
    }
}
