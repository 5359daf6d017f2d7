//! Spend rows in COPY's binary format (`COPY … FROM STDIN (FORMAT
//! binary)`): the values of [`super::spend_copy`]'s text rows, each in its
//! column type's wire form (big-endian integers and floats, times as
//! microseconds since 2000-01-01, `jsonb` as a version byte and its text),
//! so Postgres stores them without parsing text (about 1.1 µs of its CPU a
//! row). Used only when [`Layout::read`] finds every column of a type this
//! module encodes; otherwise the rows go as text.

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Error};

use super::spend_copy::{as_int4, clean, copy_columns, duration_ms, metadata};
use crate::store::records::python_bool;
use crate::store::{JsonText, SpendLogRow};

/// The binary COPY statement; [`Layout::encode`] writes its rows.
pub const COPY_LOGS_BINARY: &str = concat!(
    r#"COPY "LiteLLM_SpendLogs" ("#,
    copy_columns!(),
    ") FROM STDIN (FORMAT binary)"
);

/// The start of a binary COPY's data: signature, flags, no extension.
const HEADER: &[u8; 19] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// The end of a binary COPY's data: a field count of -1.
const TRAILER: [u8; 2] = (-1i16).to_be_bytes();

/// Microseconds from the Unix epoch to Postgres's (2000-01-01 UTC).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// What the gateway writes in a column.
#[derive(Clone, Copy)]
enum Value {
    Text,
    Int,
    Float,
    Time,
    Json,
    Flag,
}

/// The columns of [`COPY_LOGS_BINARY`], in order, with what each holds.
const COLUMNS: [(&str, Value); 33] = [
    ("request_id", Value::Text),
    ("call_id", Value::Text),
    ("attempt", Value::Int),
    ("call_type", Value::Text),
    ("api_key", Value::Text),
    ("spend", Value::Float),
    ("total_tokens", Value::Int),
    ("prompt_tokens", Value::Int),
    ("completion_tokens", Value::Int),
    ("startTime", Value::Time),
    ("completionStartTime", Value::Time),
    ("endTime", Value::Time),
    ("model", Value::Text),
    ("model_id", Value::Text),
    ("model_group", Value::Text),
    ("custom_llm_provider", Value::Text),
    ("api_base", Value::Text),
    ("region", Value::Text),
    ("user", Value::Text),
    ("team_id", Value::Text),
    ("status", Value::Text),
    ("status_code", Value::Int),
    ("error_class", Value::Text),
    ("error_message", Value::Text),
    ("litellm_call_id", Value::Text),
    ("request_duration_ms", Value::Int),
    ("metadata", Value::Json),
    ("end_user", Value::Text),
    ("response_id", Value::Text),
    ("cache_hit", Value::Flag),
    ("cache_key", Value::Text),
    ("proxy_server_request", Value::Json),
    ("response", Value::Json),
];

/// A column's wire form, from its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wire {
    /// `text` or `varchar` (or `json`): the UTF-8 bytes.
    Text,
    Int4,
    Int8,
    Float8,
    /// `timestamp` or `timestamptz`: microseconds since 2000-01-01 UTC.
    Time,
    /// The version byte 1, then the text.
    Jsonb,
    Bool,
}

/// How a column of type `ty` takes a `value`, if this module encodes it.
fn wire(value: Value, ty: &Type) -> Option<Wire> {
    let text = *ty == Type::TEXT || *ty == Type::VARCHAR;
    match value {
        Value::Text => text.then_some(Wire::Text),
        Value::Int if *ty == Type::INT4 => Some(Wire::Int4),
        Value::Int => (*ty == Type::INT8).then_some(Wire::Int8),
        Value::Float => (*ty == Type::FLOAT8).then_some(Wire::Float8),
        Value::Time => (*ty == Type::TIMESTAMP || *ty == Type::TIMESTAMPTZ).then_some(Wire::Time),
        Value::Json if *ty == Type::JSONB => Some(Wire::Jsonb),
        Value::Json => (text || *ty == Type::JSON).then_some(Wire::Text),
        Value::Flag if *ty == Type::BOOL => Some(Wire::Bool),
        Value::Flag => text.then_some(Wire::Text),
    }
}

/// The wire form of each column of [`COPY_LOGS_BINARY`], from the types of
/// the table as it exists.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout([Wire; 33]);

impl Layout {
    /// The layout of `"LiteLLM_SpendLogs"` as the server holds it (the one
    /// COPY finds on the search path), or why its rows must go as text.
    pub async fn read(client: &Client) -> Result<Result<Layout, String>, Error> {
        let rows = client
            .query_typed(
                r#"SELECT attname::text, atttypid FROM pg_attribute
                   WHERE attrelid = '"LiteLLM_SpendLogs"'::regclass AND attnum > 0
                       AND NOT attisdropped"#,
                &[],
            )
            .await?;
        let mut types = Vec::with_capacity(rows.len());
        for row in rows {
            types.push((row.try_get::<_, String>(0)?, row.try_get::<_, u32>(1)?));
        }
        Ok(Layout::of(&types))
    }

    /// The layout for columns of these `(name, type oid)`, or why not: a
    /// column missing or of a type not encoded here.
    fn of(types: &[(String, u32)]) -> Result<Layout, String> {
        let mut wires = [Wire::Text; 33];
        for (slot, (name, value)) in wires.iter_mut().zip(COLUMNS) {
            let Some((_, oid)) = types.iter().find(|(n, _)| n == name) else {
                return Err(format!("column {name} is missing"));
            };
            let ty = Type::from_oid(*oid);
            *slot = ty
                .as_ref()
                .and_then(|ty| wire(value, ty))
                .ok_or_else(|| match &ty {
                    Some(ty) => format!("column {name} is of type {ty}"),
                    None => format!("column {name} is of type oid {oid}"),
                })?;
        }
        Ok(Layout(wires))
    }

    /// Appends a COPY's `rows` to `out`: after the header when `first`,
    /// before the trailer when `last`.
    pub fn encode(&self, rows: &[SpendLogRow], first: bool, last: bool, out: &mut Vec<u8>) {
        if first {
            out.extend_from_slice(HEADER);
        }
        let mut json = Vec::with_capacity(256);
        for r in rows {
            let mut f = Fields {
                out: &mut *out,
                wires: self.0.iter(),
            };
            f.out
                .extend_from_slice(&(COLUMNS.len() as i16).to_be_bytes());
            f.text(&r.request_id);
            f.text(&r.call_id);
            f.int(r.attempt);
            f.text(&r.call_type);
            f.text(&r.api_key);
            f.float(r.spend);
            for tokens in [r.total_tokens, r.prompt_tokens, r.completion_tokens] {
                f.int(as_int4(tokens));
            }
            f.time(Some(r.start_time));
            f.time(r.completion_start_time);
            f.time(Some(r.end_time));
            for text in [
                &r.model,
                &r.model_id,
                &r.model_group,
                &r.custom_llm_provider,
                &r.api_base,
            ] {
                f.text(text);
            }
            f.optional(r.region.as_deref());
            f.optional(r.user.as_deref());
            f.optional(r.team_id.as_deref());
            f.text(&r.status);
            f.int(r.status_code);
            f.optional(r.error_class.as_deref());
            f.optional(r.error_message.as_deref());
            f.text(&r.call_id);
            f.int(duration_ms(r.start_time, r.end_time));
            json.clear();
            metadata(&mut json, r);
            f.json(&json);
            f.optional(r.end_user.as_deref());
            f.optional(r.response_id.as_deref());
            f.flag(r.cache_hit);
            f.text(r.cache_key.as_deref().unwrap_or_default());
            for kept in [&r.proxy_server_request, &r.response] {
                f.json(kept.as_ref().map_or("{}", JsonText::as_str).as_bytes());
            }
        }
        if last {
            out.extend_from_slice(&TRAILER);
        }
    }
}

/// One row's fields, each written in the wire form of the next column.
struct Fields<'a> {
    out: &'a mut Vec<u8>,
    wires: std::slice::Iter<'a, Wire>,
}

impl Fields<'_> {
    /// The next column's wire form (the row writes one field per column).
    fn next(&mut self) -> Wire {
        self.wires.next().copied().unwrap_or(Wire::Text)
    }

    /// A field's length and bytes.
    fn field(&mut self, bytes: &[u8]) {
        let len = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
        self.out.extend_from_slice(&len.to_be_bytes());
        self.out.extend_from_slice(bytes);
    }

    /// NULL: a length of -1.
    fn null(&mut self) {
        self.next();
        self.out.extend_from_slice(&(-1i32).to_be_bytes());
    }

    /// A text, NUL replaced as in text rows (Postgres refuses it in both).
    fn text(&mut self, s: &str) {
        self.next();
        self.field(clean(s).as_bytes());
    }

    /// A text or NULL.
    fn optional(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.text(s),
            None => self.null(),
        }
    }

    /// An integer as an `int4` or `int8` column takes it.
    fn int(&mut self, n: i32) {
        match self.next() {
            Wire::Int8 => self.field(&i64::from(n).to_be_bytes()),
            _ => self.field(&n.to_be_bytes()),
        }
    }

    /// A `float8`.
    fn float(&mut self, n: f64) {
        self.next();
        self.field(&n.to_be_bytes());
    }

    /// A time (or NULL) rounded to the millisecond, half up, as the text
    /// rows send it (`TIMESTAMP(3)`), in microseconds since 2000-01-01.
    fn time(&mut self, t: Option<DateTime<Utc>>) {
        match t {
            Some(t) => {
                self.next();
                self.field(&pg_micros(t).to_be_bytes());
            }
            None => self.null(),
        }
    }

    /// A JSON text, as `jsonb` (version 1) or as text.
    fn json(&mut self, json: &[u8]) {
        match self.next() {
            Wire::Jsonb => {
                let len = i32::try_from(json.len() + 1).unwrap_or(i32::MAX);
                self.out.extend_from_slice(&len.to_be_bytes());
                self.out.push(1);
                self.out.extend_from_slice(json);
            }
            _ => self.field(json),
        }
    }

    /// LiteLLM's `cache_hit`: a `bool`, or its text (`True`/`False`).
    fn flag(&mut self, b: bool) {
        match self.next() {
            Wire::Bool => self.field(&[u8::from(b)]),
            _ => self.field(python_bool::text(b).as_bytes()),
        }
    }
}

/// `t` rounded to the millisecond, half up, in microseconds since
/// Postgres's epoch.
fn pg_micros(t: DateTime<Utc>) -> i64 {
    let micros = t.timestamp_micros();
    let millis = micros.div_euclid(1000) + i64::from(micros.rem_euclid(1000) >= 500);
    millis.saturating_mul(1000).saturating_sub(PG_EPOCH_MICROS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// The types of the gateway's migrations, by column.
    fn native() -> Vec<(String, u32)> {
        COLUMNS
            .iter()
            .map(|&(name, value)| {
                let ty = match value {
                    Value::Text | Value::Flag => Type::TEXT,
                    Value::Int => Type::INT4,
                    Value::Float => Type::FLOAT8,
                    Value::Time => Type::TIMESTAMP,
                    Value::Json => Type::JSONB,
                };
                (name.to_string(), ty.oid())
            })
            .collect()
    }

    /// `native()` with `name`'s type replaced by `ty`.
    fn with(name: &str, ty: &Type) -> Vec<(String, u32)> {
        let mut types = native();
        types.iter_mut().find(|(n, _)| n == name).unwrap().1 = ty.oid();
        types
    }

    fn row() -> SpendLogRow {
        // 2000-01-01 00:00:01.0005 UTC: 1,001 ms after Postgres's epoch.
        let start = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 1).unwrap()
            + chrono::Duration::microseconds(500);
        SpendLogRow {
            request_id: "call-1:2".into(),
            call_id: "call-1".into(),
            attempt: 2,
            call_type: "acompletion".into(),
            api_key: "h\0é".into(),
            spend: -1.5,
            total_tokens: i64::MAX,
            prompt_tokens: -5,
            completion_tokens: 20,
            start_time: start,
            completion_start_time: None,
            end_time: Utc.with_ymd_and_hms(1999, 12, 31, 23, 59, 59).unwrap()
                + chrono::Duration::microseconds(999_200),
            model: "gpt-4o".into(),
            model_id: "dep\t1".into(),
            model_group: "gpt-4o".into(),
            custom_llm_provider: "openai".into(),
            api_base: String::new().into(),
            region: None,
            user: Some("a\\b".into()),
            team_id: None,
            status: "success".into(),
            status_code: 429,
            error_class: None,
            error_message: None,
            end_user: None,
            response_id: Some("chatcmpl-1".into()),
            proxy_budget: false,
            cache_hit: true,
            cache_key: None,
            request_tags: None,
            guardrail_information: None,
            proxy_server_request: None,
            response: Some(JsonText("[1]".into())),
        }
    }

    /// The fields of the one row in `data` (header and trailer checked).
    fn fields(data: &[u8]) -> Vec<Option<Vec<u8>>> {
        assert_eq!(&data[..19], HEADER);
        assert_eq!(&data[data.len() - 2..], [0xff, 0xff], "the trailer");
        let mut rest = &data[19..data.len() - 2];
        let count = i16::from_be_bytes([rest[0], rest[1]]);
        rest = &rest[2..];
        let mut fields = Vec::new();
        for _ in 0..count {
            let len = i32::from_be_bytes(rest[..4].try_into().unwrap());
            rest = &rest[4..];
            if len < 0 {
                fields.push(None);
                continue;
            }
            let (field, tail) = rest.split_at(len as usize);
            fields.push(Some(field.to_vec()));
            rest = tail;
        }
        assert!(rest.is_empty(), "one row, nothing after it");
        fields
    }

    fn encoded(types: &[(String, u32)], r: &SpendLogRow) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Layout::of(types)
            .unwrap()
            .encode(std::slice::from_ref(r), true, true, &mut out);
        fields(&out)
    }

    fn bytes(b: &[u8]) -> Option<Vec<u8>> {
        Some(b.to_vec())
    }

    #[test]
    fn a_row_is_each_columns_wire_form_in_the_statements_order() {
        let f = encoded(&native(), &row());
        assert_eq!(f.len(), 33, "one field per column of COPY_LOGS_BINARY");
        assert_eq!(f[0], bytes(b"call-1:2"));
        assert_eq!(f[2], bytes(&[0, 0, 0, 2]));
        assert_eq!(f[4], bytes("h\u{fffd}é".as_bytes()), "NUL replaced");
        assert_eq!(f[5], bytes(&[0xbf, 0xf8, 0, 0, 0, 0, 0, 0]), "-1.5");
        assert_eq!(f[6], bytes(&[0x7f, 0xff, 0xff, 0xff]), "clamped to INTEGER");
        assert_eq!(f[7], bytes(&[0xff, 0xff, 0xff, 0xfb]));
        assert_eq!(
            f[9],
            bytes(&[0, 0, 0, 0, 0, 0x0f, 0x46, 0x28]),
            "1,001,000 µs: .0005 s rounds up to the millisecond"
        );
        assert_eq!(f[10], None);
        assert_eq!(
            f[11],
            bytes(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc, 0x18]),
            "-1,000 µs: before the epoch, .9992 rounds down"
        );
        assert_eq!(f[13], bytes(b"dep\t1"), "no escapes in binary");
        assert_eq!(f[16], bytes(b""), "empty, not NULL");
        assert_eq!(f[17], None);
        assert_eq!(f[18], bytes(b"a\\b"));
        assert_eq!(f[21], bytes(&[0, 0, 0x01, 0xad]), "429");
        assert_eq!(f[24], bytes(b"call-1"), "litellm_call_id is the call id");
        assert_eq!(f[25], bytes(&[0, 0, 0, 0]), "a negative duration is 0");
        let metadata = concat!(
            "\x01",
            "{\"attempt\":2,\"status\":\"success\",\"user_api_key\":\"h\u{fffd}é\",",
            r#""user_api_key_user_id":"a\\b"}"#
        );
        assert_eq!(f[26], bytes(metadata.as_bytes()), "jsonb: version 1, text");
        assert_eq!(f[28], bytes(b"chatcmpl-1"));
        assert_eq!(f[29], bytes(b"True"), "LiteLLM's cache_hit text");
        assert_eq!(f[30], bytes(b""));
        assert_eq!(f[31], bytes(b"\x01{}"), "no prompt kept: the empty object");
        assert_eq!(f[32], bytes(b"\x01[1]"));
    }

    #[test]
    fn other_column_types_take_their_own_wire_form() {
        let f = encoded(&with("total_tokens", &Type::INT8), &row());
        assert_eq!(f[6], bytes(&[0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff]), "int8");
        let f = encoded(&with("cache_hit", &Type::BOOL), &row());
        assert_eq!(f[29], bytes(&[1]), "bool");
        let f = encoded(&with("response", &Type::JSON), &row());
        assert_eq!(f[32], bytes(b"[1]"), "json: no version byte");
        let f = encoded(&with("metadata", &Type::TEXT), &row());
        assert_ne!(f[26].as_ref().unwrap()[0], 1, "text: no version byte");
        let f = encoded(&with("startTime", &Type::TIMESTAMPTZ), &row());
        assert_eq!(f[9], bytes(&[0, 0, 0, 0, 0, 0x0f, 0x46, 0x28]), "UTC");
        let f = encoded(&with("model", &Type::VARCHAR), &row());
        assert_eq!(f[12], bytes(b"gpt-4o"));
    }

    #[test]
    fn a_column_of_a_type_not_encoded_here_keeps_the_rows_in_text() {
        assert!(Layout::of(&native()).is_ok());
        let numeric = Layout::of(&with("spend", &Type::NUMERIC)).unwrap_err();
        assert_eq!(numeric, "column spend is of type numeric");
        let short = Layout::of(&with("attempt", &Type::INT2)).unwrap_err();
        assert!(short.contains("attempt"), "{short}");
        let mut domain = native();
        domain[3].1 = 987_654;
        assert_eq!(
            Layout::of(&domain).unwrap_err(),
            "column call_type is of type oid 987654"
        );
        let missing: Vec<_> = native()
            .into_iter()
            .filter(|(n, _)| n != "region")
            .collect();
        assert_eq!(
            Layout::of(&missing).unwrap_err(),
            "column region is missing"
        );
    }

    #[test]
    fn rows_of_a_copy_in_pieces_have_one_header_and_one_trailer() {
        let layout = Layout::of(&native()).unwrap();
        let (mut first, mut middle, mut last) = (Vec::new(), Vec::new(), Vec::new());
        layout.encode(&[row()], true, false, &mut first);
        layout.encode(&[row(), row()], false, false, &mut middle);
        layout.encode(&[row()], false, true, &mut last);
        assert!(first.starts_with(HEADER) && !middle.starts_with(b"PGCOPY"));
        assert_eq!(middle.len(), 2 * (first.len() - HEADER.len()));
        assert_eq!(last.len(), first.len() - HEADER.len() + 2);
        assert!(last.ends_with(&[0xff, 0xff]));
    }

    #[test]
    fn the_statements_name_the_columns_in_order() {
        for statement in [COPY_LOGS_BINARY, super::super::spend_copy::COPY_LOGS] {
            let (_, list) = statement.split_once('(').unwrap();
            let (list, _) = list.split_once(')').unwrap();
            let names: Vec<String> = list.split(',').map(|c| c.trim().replace('"', "")).collect();
            let expected: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
            assert_eq!(names, expected);
        }
    }
}
