//! The price tables shipped as TSV (written by `scripts/refresh_prices.sh`):
//! reading a price cell, and the name-to-row tables of the media and audio
//! prices.

use std::collections::HashMap;
use std::str::Split;

/// The next cell of a row as a price: `Some(None)` when empty, `None` when
/// missing or not a finite, non-negative number (the row is malformed).
pub(super) fn price(cols: &mut Split<'_, char>) -> Option<Option<f64>> {
    let c = cols.next()?;
    if c.is_empty() {
        return Some(None);
    }
    c.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(Some)
}

/// The rows of `tsv` by name: comment lines skipped, malformed rows left
/// out, the first row of a name kept.
pub(super) fn rows_by_name<T>(
    tsv: &'static str,
    parse_row: fn(&'static str) -> Option<(&'static str, T)>,
) -> HashMap<&'static str, T> {
    let mut map = HashMap::new();
    for (name, row) in tsv
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(parse_row)
    {
        map.entry(name).or_insert(row);
    }
    map
}
