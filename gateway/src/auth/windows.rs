//! The counters of keys' and teams' budget windows (LiteLLM's
//! `budget_limits`) and of team members' per-model budgets (LiteLLM's
//! `team_member_model_max_budget`): one per (owner, window length), for the window
//! holding the request's time. A counter of an ended window is replaced by
//! a fresh one when the next window's first request comes, so each window
//! starts from zero, as LiteLLM's counters `spend:key:<token>:window:<d>`
//! do. With Redis the counter is the fleet's (its own hash, its period the
//! window's end, so Redis starts it over when a replica reaches the next
//! window); without Redis it lives in this process, as LiteLLM's in-memory
//! counter does (a restart starts the window over: the spend of a window
//! is not written to the database, in LiteLLM either).

use crate::budget::fleet::Place;
use crate::budget::Budget;
use crate::keyed_hash::KeyedHash;
use crate::store::BudgetWindow;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// Whose window a counter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowOwner {
    /// A key (by its token).
    Key,
    /// A team (by its id).
    Team,
    /// A team member's budget for one model group (by
    /// `<team>:<user>:<group>`; LiteLLM's `team_member_model_max_budget`).
    MemberModel,
}

impl WindowOwner {
    fn tag(self) -> &'static str {
        match self {
            WindowOwner::Key => "keywindow",
            WindowOwner::Team => "teamwindow",
            WindowOwner::MemberModel => "membermodelwindow",
        }
    }
}

/// A window's counter by (owner, id, window length).
type WindowKey = (WindowOwner, String, String);

/// Budget-window counters by [`WindowKey`]: the end of the window each
/// counts (Unix ms) and the counter.
#[derive(Default)]
pub struct BudgetWindows {
    counters: papaya::HashMap<WindowKey, (i64, Arc<Budget>), KeyedHash>,
}

impl BudgetWindows {
    /// The counter of `owner` `id`'s window `w` for the window holding
    /// `now`, its budget kept up to date with `w`; `None` when `w`'s
    /// duration does not parse (it was checked when stored).
    pub fn counter(
        &self,
        owner: WindowOwner,
        id: &str,
        w: &BudgetWindow,
        now: DateTime<Utc>,
    ) -> Option<Arc<Budget>> {
        let end = w.end_ms(now)?;
        let map = self.counters.pin();
        let key = (owner, id.to_string(), w.budget_duration.clone());
        let fresh = || {
            let place = Place::principal(owner.tag(), &format!("{id}:{}", w.budget_duration));
            let budget = Budget::at(Some(place), Some(w.max_budget), None, 0.0);
            budget.set_period(DateTime::<Utc>::from_timestamp_millis(end));
            (end, budget)
        };
        let (_, budget) = map.update_or_insert_with(
            key,
            |(at, old)| {
                if *at == end {
                    old.set_limits(Some(w.max_budget), None);
                    (*at, old.clone())
                } else {
                    fresh()
                }
            },
            fresh,
        );
        Some(budget.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Reservation;

    #[test]
    fn a_window_counts_until_it_ends_and_the_next_starts_from_zero() {
        let windows = BudgetWindows::default();
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .to_utc();
        let w = BudgetWindow {
            budget_duration: "1h".into(),
            max_budget: 1.0,
            reset_at: Some(start + chrono::Duration::hours(1)),
        };
        let now = start + chrono::Duration::minutes(10);
        let b = windows.counter(WindowOwner::Key, "t", &w, now).unwrap();
        Reservation::acquire(&[("key window", b.clone())], 0.5)
            .unwrap()
            .settle(1.0);
        assert!(b.exhausted());
        let later = windows
            .counter(
                WindowOwner::Key,
                "t",
                &w,
                now + chrono::Duration::minutes(40),
            )
            .unwrap();
        assert!(Arc::ptr_eq(&b, &later), "same window, same counter");
        let next = windows
            .counter(
                WindowOwner::Key,
                "t",
                &w,
                now + chrono::Duration::minutes(55),
            )
            .unwrap();
        assert!(!next.exhausted() && next.spent_usd() == 0.0);
        let team = windows.counter(WindowOwner::Team, "t", &w, now).unwrap();
        assert!(!Arc::ptr_eq(&team, &next), "a team's window is its own");
    }
}
