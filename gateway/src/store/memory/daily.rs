//! The daily aggregates in memory: LiteLLM's daily tables as maps, at most
//! [`MAX_DAILY_ROWS`] rows (the oldest days go first).

use crate::store::{DailyBatch, DailyKey, DailyPage, DailyQuery, DailyRow, DailyScope};
use std::collections::BTreeMap;

/// Daily rows kept in memory over every scope; past it the oldest day's
/// rows are dropped, so a long-running gateway without a database keeps
/// its recent days.
const MAX_DAILY_ROWS: usize = 100_000;

/// Rows per scope and unique key.
#[derive(Default)]
pub(super) struct DailyTables {
    scopes: BTreeMap<DailyScope, BTreeMap<DailyKey, DailyRow>>,
    rows: usize,
}

impl DailyTables {
    /// Adds a batch's deltas (LiteLLM's upsert: a new row, or its counters
    /// increased; the first model group stays).
    pub(super) fn add(&mut self, batch: DailyBatch) {
        for (scope, deltas) in batch.scopes {
            let table = self.scopes.entry(scope).or_default();
            for (key, delta) in deltas {
                match table.get_mut(&key) {
                    Some(row) => row.counts.add(&delta.counts),
                    None => {
                        self.rows += 1;
                        table.insert(
                            key.clone(),
                            DailyRow {
                                key,
                                model_group: delta.model_group,
                                counts: delta.counts,
                            },
                        );
                    }
                }
            }
        }
        while self.rows > MAX_DAILY_ROWS {
            self.drop_oldest_day();
        }
    }

    /// Drops every row of the oldest day.
    fn drop_oldest_day(&mut self) {
        let oldest = self
            .scopes
            .values()
            .flat_map(|t| t.keys())
            .map(|k| k.date.clone())
            .min();
        let Some(oldest) = oldest else {
            self.rows = 0;
            return;
        };
        for table in self.scopes.values_mut() {
            let before = table.len();
            table.retain(|k, _| k.date != oldest);
            self.rows -= before - table.len();
        }
    }

    /// Spend of the user rows of `since` (`YYYY-MM-DD`) and later: every
    /// request's, once.
    pub(super) fn spend_since(&self, since: &str) -> f64 {
        self.scopes
            .get(&DailyScope::User)
            .into_iter()
            .flat_map(|t| t.values())
            .filter(|r| r.key.date.as_str() >= since)
            .map(|r| r.counts.spend)
            .sum()
    }

    /// One page of the rows `query` asks for, newest day first (then by
    /// key), and how many match.
    pub(super) fn page(&self, query: &DailyQuery) -> DailyPage {
        let Some(table) = self.scopes.get(&query.scope) else {
            return DailyPage::default();
        };
        let mut matching: Vec<&DailyRow> =
            table.values().filter(|r| query.matches(&r.key)).collect();
        matching.sort_by(|a, b| b.key.date.cmp(&a.key.date).then(a.key.cmp(&b.key)));
        let total = i64::try_from(matching.len()).unwrap_or(i64::MAX);
        let skip = usize::try_from(query.offset).unwrap_or(usize::MAX);
        let take = usize::try_from(query.limit).unwrap_or(0);
        DailyPage {
            total,
            rows: matching
                .into_iter()
                .skip(skip)
                .take(take)
                .cloned()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SpendLogRow;
    use chrono::TimeZone;

    fn on(day: u32, user: &str) -> SpendLogRow {
        let start = chrono::Utc
            .with_ymd_and_hms(2026, 1, day, 12, 0, 0)
            .unwrap();
        SpendLogRow {
            request_id: format!("{user}-{day}").into(),
            user: Some(user.into()),
            spend: 1.0,
            start_time: start,
            end_time: start,
            status: "success".into(),
            ..Default::default()
        }
    }

    fn query(start: &str, end: &str) -> DailyQuery {
        DailyQuery {
            scope: DailyScope::User,
            start: start.into(),
            end: end.into(),
            entities: None,
            exclude: Vec::new(),
            api_keys: None,
            model: None,
            offset: 0,
            limit: 100,
        }
    }

    /// Batches add to the rows they share; a page is newest day first and
    /// counts every match.
    #[test]
    fn batches_add_up_and_pages_are_newest_first() {
        let mut t = DailyTables::default();
        t.add(DailyBatch::of(&[on(1, "a"), on(2, "a")], |_| None));
        t.add(DailyBatch::of(&[on(2, "a"), on(2, "b")], |_| None));
        let page = t.page(&query("2026-01-01", "2026-01-31"));
        assert_eq!(page.total, 3);
        let seen: Vec<(&str, &str, f64)> = page
            .rows
            .iter()
            .map(|r| (&*r.key.date, &*r.key.entity, r.counts.spend))
            .collect();
        assert_eq!(
            seen,
            [
                ("2026-01-02", "a", 2.0),
                ("2026-01-02", "b", 1.0),
                ("2026-01-01", "a", 1.0)
            ]
        );
        let one = t.page(&DailyQuery {
            offset: 1,
            limit: 1,
            ..query("2026-01-01", "2026-01-02")
        });
        assert_eq!((one.total, one.rows.len()), (3, 1));
        assert_eq!(one.rows[0].key.entity, "b");
        assert_eq!(t.page(&query("2026-01-03", "2026-01-04")).total, 0);
    }

    /// Past the cap the oldest day goes.
    #[test]
    fn the_oldest_day_goes_past_the_cap() {
        let mut t = DailyTables::default();
        t.add(DailyBatch::of(&[on(1, "old")], |_| None));
        let many: Vec<SpendLogRow> = (0..MAX_DAILY_ROWS)
            .map(|i| on(2, &format!("u{i}")))
            .collect();
        t.add(DailyBatch::of(&many, |_| None));
        assert_eq!(t.rows, MAX_DAILY_ROWS);
        assert_eq!(t.page(&query("2026-01-01", "2026-01-01")).total, 0);
        assert_eq!(
            t.page(&query("2026-01-02", "2026-01-02")).total,
            MAX_DAILY_ROWS as i64
        );
    }
}
