//! Spend rows as the text of a `COPY "LiteLLM_SpendLogs" … FROM STDIN`:
//! the values [`super::spend`]'s INSERT computes in SQL (token counts
//! clamped to `INTEGER`, the attempt's duration, the `metadata` object, the
//! call id copied to `litellm_call_id`) computed here instead, so the
//! server only parses and stores them. Text is the fall-back of
//! [`super::spend_binary`]'s binary rows: each value goes through its
//! column's input function, so a column whose type differs (a database
//! LiteLLM or a DBA changed) still takes it.

use chrono::{DateTime, Datelike, NaiveDateTime, Timelike, Utc};
use std::borrow::Cow;
use std::io::Write;

use crate::store::records::python_bool;
use crate::store::{JsonText, SpendLogRow};

/// The columns of a spend row's COPY, in the order [`encode`] and
/// [`super::spend_binary`] write them, as a literal for `concat!`.
macro_rules! copy_columns {
    () => {
        r#"request_id, call_id, attempt,
    call_type, api_key, spend, total_tokens, prompt_tokens, completion_tokens, "startTime",
    "completionStartTime", "endTime", model, model_id, model_group, custom_llm_provider, api_base,
    region, "user", team_id, status, status_code, error_class, error_message, litellm_call_id,
    request_duration_ms, metadata, end_user, response_id, cache_hit, cache_key,
    proxy_server_request, response"#
    };
}
pub(super) use copy_columns;

/// The COPY statement; [`encode`] writes its rows, columns in this order.
pub const COPY_LOGS: &str = concat!(
    r#"COPY "LiteLLM_SpendLogs" ("#,
    copy_columns!(),
    ") FROM STDIN"
);

/// Appends `rows` to `out`, one line each, in [`COPY_LOGS`]'s columns.
pub fn encode(rows: &[SpendLogRow], out: &mut Vec<u8>) {
    let mut json = Vec::with_capacity(256);
    for r in rows {
        field(out, &r.request_id);
        field(out, &r.call_id);
        number(out, r.attempt);
        field(out, &r.call_type);
        field(out, &r.api_key);
        float(out, r.spend);
        for tokens in [r.total_tokens, r.prompt_tokens, r.completion_tokens] {
            number(out, as_int4(tokens));
        }
        time(out, r.start_time);
        match r.completion_start_time {
            Some(t) => time(out, t),
            None => null(out),
        }
        time(out, r.end_time);
        for text in [
            &r.model,
            &r.model_id,
            &r.model_group,
            &r.custom_llm_provider,
            &r.api_base,
        ] {
            field(out, text);
        }
        optional(out, r.region.as_deref());
        optional(out, r.user.as_deref());
        optional(out, r.team_id.as_deref());
        field(out, &r.status);
        number(out, r.status_code);
        optional(out, r.error_class.as_deref());
        optional(out, r.error_message.as_deref());
        field(out, &r.call_id);
        number(out, duration_ms(r.start_time, r.end_time));
        json.clear();
        metadata(&mut json, r);
        escape(out, &json);
        out.push(b'\t');
        optional(out, r.end_user.as_deref());
        optional(out, r.response_id.as_deref());
        field(out, python_bool::text(r.cache_hit));
        field(out, r.cache_key.as_deref().unwrap_or_default());
        for kept in [&r.proxy_server_request, &r.response] {
            field(out, kept.as_ref().map_or("{}", JsonText::as_str));
        }
        // Every field ends in a tab: the last one ends the line instead.
        if let Some(last) = out.last_mut() {
            *last = b'\n';
        }
    }
}

/// When a row settled as the `"endTime"` column stores it: rounded to the
/// millisecond (`TIMESTAMP(3)`), as [`encode`] sends it.
pub fn settled(t: DateTime<Utc>) -> NaiveDateTime {
    to_millis(t)
}

/// `s` with NUL characters, which Postgres refuses in text, replaced.
pub fn clean(s: &str) -> Cow<'_, str> {
    if has_nul(s) {
        Cow::Owned(s.replace('\0', "\u{fffd}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// LiteLLM's `SpendLogsMetadata` names for a row as a JSON object, nulls
/// left out, members in name order (as a `serde_json::Map` writes them).
pub(super) fn metadata(json: &mut Vec<u8>, r: &SpendLogRow) {
    json.extend_from_slice(b"{\"attempt\":");
    json.extend_from_slice(itoa::Buffer::new().format(r.attempt).as_bytes());
    if let Some(class) = &r.error_class {
        json.extend_from_slice(b",\"error_information\":{\"error_class\":");
        json_string(json, class);
        json.extend_from_slice(b",\"error_code\":\"");
        json.extend_from_slice(itoa::Buffer::new().format(r.status_code).as_bytes());
        json.push(b'"');
        if let Some(message) = &r.error_message {
            json.extend_from_slice(b",\"error_message\":");
            json_string(json, message);
        }
        json.extend_from_slice(b",\"llm_provider\":");
        json_string(json, &r.custom_llm_provider);
        json.push(b'}');
    }
    if let Some(guardrails) = &r.guardrail_information {
        json.extend_from_slice(b",\"guardrail_information\":");
        // Strings go through [`json_string`]'s NUL rule so the column
        // takes them.
        json.extend_from_slice(clean_json(guardrails.as_str()).as_bytes());
    }
    json.extend_from_slice(b",\"status\":");
    json_string(json, &r.status);
    json.extend_from_slice(b",\"user_api_key\":");
    json_string(json, &r.api_key);
    if let Some(team) = &r.team_id {
        json.extend_from_slice(b",\"user_api_key_team_id\":");
        json_string(json, team);
    }
    if let Some(user) = &r.user {
        json.extend_from_slice(b",\"user_api_key_user_id\":");
        json_string(json, user);
    }
    json.push(b'}');
}

/// The JSON text `text` with NUL characters in its strings replaced as
/// [`clean`] does (serde_json writes them `\u0000`; a text without one is
/// returned as it is).
pub fn clean_json(text: &str) -> Cow<'_, str> {
    use serde_json::Value;
    fn cleaned(v: Value) -> Value {
        match v {
            Value::String(s) => Value::String(clean(&s).into_owned()),
            Value::Array(a) => Value::Array(a.into_iter().map(cleaned).collect()),
            Value::Object(o) => Value::Object(
                o.into_iter()
                    .map(|(k, v)| (clean(&k).into_owned(), cleaned(v)))
                    .collect(),
            ),
            other => other,
        }
    }
    if !text.contains("\\u0000") {
        return Cow::Borrowed(text);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Cow::Owned(cleaned(v).to_string()),
        Err(_) => Cow::Borrowed(text),
    }
}

/// Whether `s` holds a NUL character. Called for every text field of
/// every spend row (ids, key hash, model names: short): one pass without
/// an early exit, which the compiler turns into a 16-byte block loop,
/// costs less on such texts than `str::contains`'s searcher set-up.
fn has_nul(s: &str) -> bool {
    s.bytes().fold(false, |nul, b| nul | (b == 0))
}

/// Whether serde_json writes `s` as a JSON string unchanged between its
/// quotes: no control character (NUL included), quote or backslash.
fn json_plain(s: &str) -> bool {
    s.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    })
}

/// `s` as a JSON string, NUL replaced as [`clean`] replaces it.
fn json_string(json: &mut Vec<u8>, s: &str) {
    if json_plain(s) {
        // What serde_json writes for it, without its escaping machinery
        // (the row's status, key hash and ids are all such strings).
        json.reserve(s.len() + 2);
        json.push(b'"');
        json.extend_from_slice(s.as_bytes());
        json.push(b'"');
        return;
    }
    // Writing JSON into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *json, &*clean(s));
}

/// A token count as LiteLLM's `INTEGER` columns hold it.
pub(super) fn as_int4(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(if n < 0 { i32::MIN } else { i32::MAX })
}

/// The attempt's length in whole milliseconds (half rounds up), within
/// `0..=i32::MAX`.
pub(super) fn duration_ms(start: DateTime<Utc>, end: DateTime<Utc>) -> i32 {
    let micros = (end - start).num_microseconds().unwrap_or(i64::MAX).max(0);
    i32::try_from(micros.saturating_add(500) / 1000).unwrap_or(i32::MAX)
}

/// `t` rounded to the millisecond, half up, as `TIMESTAMP(3)` rounds.
fn to_millis(t: DateTime<Utc>) -> NaiveDateTime {
    let micros = t.timestamp_micros();
    let millis = micros.div_euclid(1000) + i64::from(micros.rem_euclid(1000) >= 500);
    DateTime::from_timestamp_millis(millis)
        .unwrap_or(t)
        .naive_utc()
}

/// A text field and its tab.
fn field(out: &mut Vec<u8>, s: &str) {
    escape(out, s.as_bytes());
    out.push(b'\t');
}

/// A text field or NULL, and its tab.
fn optional(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => field(out, s),
        None => null(out),
    }
}

/// NULL and its tab.
fn null(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\\N\t");
}

/// An integer and its tab.
fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.push(b'\t');
}

/// A float (its `Display` form parses back exactly) and its tab.
fn float(out: &mut Vec<u8>, n: f64) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{n}\t");
}

/// A time as `TIMESTAMP(3)` holds it (UTC, to the millisecond), and its tab:
/// `YYYY-MM-DD HH:MM:SS.mmm`, written digit by digit (chrono's formatter
/// cost a third of a row's encoding), or by chrono for a year outside
/// `1..=9999` or a leap second.
fn time(out: &mut Vec<u8>, t: DateTime<Utc>) {
    let t = to_millis(t);
    let (year, nanos) = (t.year(), t.nanosecond());
    if !(1..=9999).contains(&year) || nanos >= 1_000_000_000 {
        let _ = write!(out, "{}\t", t.format("%Y-%m-%d %H:%M:%S%.3f"));
        return;
    }
    let mut text = *b"0000-00-00 00:00:00.000\t";
    digits(&mut text[0..4], year.unsigned_abs());
    digits(&mut text[5..7], t.month());
    digits(&mut text[8..10], t.day());
    digits(&mut text[11..13], t.hour());
    digits(&mut text[14..16], t.minute());
    digits(&mut text[17..19], t.second());
    digits(&mut text[20..23], nanos / 1_000_000);
    out.extend_from_slice(&text);
}

/// `n` in decimal, zero-padded to `into`'s length (higher digits dropped).
fn digits(into: &mut [u8], mut n: u32) {
    for d in into.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// `s` in COPY's text format: backslash, tab, newline and carriage return
/// escaped, NUL replaced.
fn escape(out: &mut Vec<u8>, s: &[u8]) {
    // Most fields need nothing, which one pass that vectorizes tells.
    if !s
        .iter()
        .fold(false, |any, &b| any | (b < 0x20) | (b == b'\\'))
    {
        out.extend_from_slice(s);
        return;
    }
    let mut rest = s;
    while let Some(i) = rest
        .iter()
        .position(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r' | 0))
    {
        out.extend_from_slice(&rest[..i]);
        match rest[i] {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.extend_from_slice("\u{fffd}".as_bytes()),
        }
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts mixing plain ASCII with every character the fast paths of
    /// [`clean`] and [`json_string`] must hand to the old ones.
    fn texts() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            4 => "[a-z0-9:-]{1,12}",
            1 => Just("\0".to_string()),
            1 => Just("\"".to_string()),
            1 => Just("\\".to_string()),
            1 => Just("\u{7f}é😀\u{2028}".to_string()),
            1 => (0u8..0x20).prop_map(|b| char::from(b).to_string()),
            1 => any::<char>().prop_map(String::from),
        ];
        proptest::collection::vec(piece, 0..8).prop_map(|pieces| pieces.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        #[test]
        fn clean_and_json_string_write_what_they_wrote_before(s in texts()) {
            let before = if s.contains('\0') {
                Cow::Owned(s.replace('\0', "\u{fffd}"))
            } else {
                Cow::Borrowed(s.as_str())
            };
            proptest::prop_assert_eq!(&clean(&s), &before);
            proptest::prop_assert_eq!(
                matches!(clean(&s), Cow::Borrowed(_)),
                matches!(before, Cow::Borrowed(_))
            );
            let mut got = b"[".to_vec();
            json_string(&mut got, &s);
            let mut old = b"[".to_vec();
            serde_json::to_writer(&mut old, &*before).unwrap();
            proptest::prop_assert_eq!(got, old);
        }
    }
    use chrono::TimeZone;

    fn row() -> SpendLogRow {
        let start = Utc.with_ymd_and_hms(2026, 12, 2, 10, 0, 0).unwrap()
            + chrono::Duration::microseconds(123_456);
        SpendLogRow {
            request_id: "call-1:2".into(),
            call_id: "call-1".into(),
            attempt: 2,
            call_type: "acompletion".into(),
            api_key: "hash".into(),
            spend: 0.000125,
            total_tokens: i64::MAX,
            prompt_tokens: -5,
            completion_tokens: 20,
            start_time: start,
            completion_start_time: None,
            end_time: start + chrono::Duration::microseconds(800_500),
            model: "gpt-4o".into(),
            model_id: "dep\t1".into(),
            model_group: "gpt-4o".into(),
            custom_llm_provider: "openai".into(),
            api_base: "http://x".into(),
            region: None,
            user: Some("a\\b".into()),
            team_id: None,
            status: "failure".into(),
            status_code: 429,
            error_class: Some("rate_limit".into()),
            error_message: Some("slow\ndown\r\0now".into()),
            end_user: None,
            response_id: Some("chatcmpl-1".into()),
            proxy_budget: false,
            cache_hit: true,
            cache_key: Some("ns:ab".into()),
            request_tags: None,
            guardrail_information: None,
            proxy_server_request: None,
            response: None,
        }
    }

    fn columns(line: &str) -> Vec<&str> {
        line.strip_suffix('\n').unwrap().split('\t').collect()
    }

    #[test]
    fn a_row_is_one_line_of_escaped_fields_in_the_statements_order() {
        let mut out = Vec::new();
        encode(&[row(), row()], &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert_eq!(lines.len(), 2);
        let c = columns(lines[0]);
        assert_eq!(c.len(), 33, "one field per column of COPY_LOGS");
        assert_eq!(c[0], "call-1:2");
        assert_eq!(c[2], "2");
        assert_eq!(c[5], "0.000125");
        assert_eq!(&c[6..9], ["2147483647", "-5", "20"]);
        assert_eq!(
            c[9], "2026-12-02 10:00:00.123",
            "rounded to the millisecond"
        );
        assert_eq!(c[10], "\\N");
        assert_eq!(c[11], "2026-12-02 10:00:00.924", ".923956 rounds up");
        assert_eq!(c[13], "dep\\t1");
        assert_eq!(c[17], "\\N");
        assert_eq!(c[18], "a\\\\b");
        assert_eq!(c[21], "429");
        assert_eq!(c[23], "slow\\ndown\\r\u{fffd}now");
        assert_eq!(c[24], "call-1", "litellm_call_id is the call id");
        assert_eq!(c[25], "801", "800.5 ms rounds half up");
        assert_eq!(c[27], "\\N");
        assert_eq!(c[28], "chatcmpl-1", "the answer's id");
        assert_eq!(
            &c[31..],
            ["{}", "{}"],
            "no prompt kept: LiteLLM's empty object"
        );
        assert_eq!((c[29], c[30]), ("True", "ns:ab"), "LiteLLM's cache columns");
    }

    #[test]
    fn metadata_holds_litellms_names_without_nulls() {
        let mut out = Vec::new();
        encode(&[row()], &mut out);
        let text = String::from_utf8(out).unwrap();
        let json = columns(&text)[26].replace("\\\\", "\\");
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "user_api_key": "hash",
                "user_api_key_user_id": "a\\b",
                "status": "failure",
                "attempt": 2,
                "error_information": {
                    "error_class": "rate_limit",
                    "error_message": "slow\ndown\r\u{fffd}now",
                    "error_code": "429",
                    "llm_provider": "openai",
                },
            })
        );
    }

    /// The `metadata` object as a `serde_json::Map` builds and writes it:
    /// what [`metadata`] must write byte for byte.
    fn metadata_by_serde(r: &SpendLogRow) -> Vec<u8> {
        use serde_json::{Map, Value};
        let mut m = Map::new();
        m.insert("user_api_key".into(), clean(&r.api_key).into());
        if let Some(user) = &r.user {
            m.insert("user_api_key_user_id".into(), clean(user).into());
        }
        if let Some(team) = &r.team_id {
            m.insert("user_api_key_team_id".into(), clean(team).into());
        }
        m.insert("status".into(), clean(&r.status).into());
        m.insert("attempt".into(), r.attempt.into());
        if let Some(class) = &r.error_class {
            let mut error = Map::new();
            error.insert("error_class".into(), clean(class).into());
            if let Some(message) = &r.error_message {
                error.insert("error_message".into(), clean(message).into());
            }
            error.insert("error_code".into(), r.status_code.to_string().into());
            error.insert("llm_provider".into(), clean(&r.custom_llm_provider).into());
            m.insert("error_information".into(), Value::Object(error));
        }
        if let Some(g) = &r.guardrail_information {
            m.insert(
                "guardrail_information".into(),
                serde_json::from_str(clean_json(g.as_str()).as_ref()).unwrap(),
            );
        }
        serde_json::to_vec(&Value::Object(m)).unwrap()
    }

    #[test]
    fn metadata_is_written_as_serde_json_writes_the_object() {
        let full = SpendLogRow {
            team_id: Some("team \"q\" \u{1}".into()),
            ..row()
        };
        let bare = SpendLogRow {
            user: None,
            team_id: None,
            error_class: None,
            error_message: None,
            status: "success".into(),
            status_code: 200,
            attempt: -7,
            ..row()
        };
        let no_message = SpendLogRow {
            error_message: None,
            status_code: -1,
            api_key: "\0é€😀".into(),
            ..row()
        };
        let guarded = SpendLogRow {
            guardrail_information: Some(std::sync::Arc::new(JsonText(
                serde_json::json!([
                    {"guardrail_name": "pii\u{0}", "guardrail_mode": "pre_call", "duration": 0.000012,
                     "guardrail_status": "success", "start_time": 1.7e9}
                ])
                .to_string()
                .into(),
            ))),
            ..row()
        };
        for r in [row(), full, bare, no_message, guarded] {
            let mut json = Vec::new();
            metadata(&mut json, &r);
            assert_eq!(
                String::from_utf8(json).unwrap(),
                String::from_utf8(metadata_by_serde(&r)).unwrap()
            );
        }
    }

    #[test]
    fn times_are_written_as_chronos_format_writes_them() {
        let samples = [
            Utc.with_ymd_and_hms(2026, 12, 2, 23, 59, 59).unwrap()
                + chrono::Duration::microseconds(999_600),
            Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(999, 2, 28, 7, 8, 9).unwrap()
                + chrono::Duration::microseconds(7_000),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(12345, 6, 7, 8, 9, 10).unwrap(),
            Utc.with_ymd_and_hms(-44, 3, 15, 12, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(2024, 2, 29, 12, 30, 0).unwrap()
                + chrono::Duration::microseconds(499),
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let random = (0..2000).map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let micros = (seed % 8_000_000_000_000_000) as i64 - 1_000_000_000_000_000;
            DateTime::from_timestamp_micros(micros).unwrap()
        });
        for t in samples.into_iter().chain(random) {
            let mut ours = Vec::new();
            time(&mut ours, t);
            let chronos = format!("{}\t", to_millis(t).format("%Y-%m-%d %H:%M:%S%.3f"));
            assert_eq!(String::from_utf8(ours).unwrap(), chronos, "{t:?}");
        }
    }

    #[test]
    fn fields_needing_no_escape_are_copied_as_they_are() {
        let mut out = Vec::new();
        escape(&mut out, b"plain \x01 text \x1f");
        assert_eq!(out, b"plain \x01 text \x1f");
        out.clear();
        escape(&mut out, b"a\tb\\c\x01\0");
        assert_eq!(out, "a\\tb\\\\c\x01\u{fffd}".as_bytes());
    }

    #[test]
    fn durations_and_times_stay_in_range() {
        let t = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(duration_ms(t, t - chrono::Duration::seconds(1)), 0);
        assert_eq!(
            duration_ms(t, t + chrono::Duration::days(365 * 100)),
            i32::MAX
        );
        assert_eq!(as_int4(i64::MIN), i32::MIN);
        let late = t + chrono::Duration::microseconds(999_500);
        assert_eq!(
            settled(late),
            (t + chrono::Duration::seconds(1)).naive_utc()
        );
    }
}
