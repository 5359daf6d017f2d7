//! Conversions between the records' types and the column types Prisma gave
//! LiteLLM's tables: timestamps are `TIMESTAMP(3)` without time zone holding
//! UTC (so they round to the millisecond), JSON objects are `JSONB`.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::{Map, Value};

/// A UTC time as a `TIMESTAMP` parameter.
pub fn naive(t: Option<DateTime<Utc>>) -> Option<NaiveDateTime> {
    t.map(|t| t.naive_utc())
}

/// A `TIMESTAMP` column (UTC) as a UTC time.
pub fn utc(t: Option<NaiveDateTime>) -> Option<DateTime<Utc>> {
    t.map(|t| t.and_utc())
}

/// A JSON object as a `JSONB` parameter.
pub fn json(map: &Map<String, Value>) -> Value {
    Value::Object(map.clone())
}

/// A `JSONB` column as an object; NULL or a non-object reads as empty.
pub fn as_map(value: Option<Value>) -> Map<String, Value> {
    match value {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    }
}
