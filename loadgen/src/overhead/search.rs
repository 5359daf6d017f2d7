//! The step search for the highest rate a target sustains: double the rate
//! while it holds, then bisect between the last rate that held and the
//! first that did not, to within [`PRECISION`].

/// Relative gap between held and failed rates at which the search stops.
pub const PRECISION: f64 = 0.1;

/// Search state; feed it [`StepSearch::observe`] after probing
/// [`StepSearch::next_rate`].
#[derive(Debug, Clone, PartialEq)]
pub struct StepSearch {
    held: f64,
    failed: Option<f64>,
    next: Option<f64>,
    steps_left: usize,
    ceiling: f64,
}

impl StepSearch {
    /// Starts at `start` requests/s, probing at most `max_steps` rates and
    /// never above `ceiling`.
    pub fn new(start: f64, max_steps: usize, ceiling: f64) -> StepSearch {
        StepSearch {
            held: 0.0,
            failed: None,
            next: (max_steps > 0).then_some(start.min(ceiling)),
            steps_left: max_steps,
            ceiling,
        }
    }

    /// The rate to probe next, or `None` when the search is over.
    pub fn next_rate(&self) -> Option<f64> {
        self.next
    }

    /// Records whether the target held the rate last returned by
    /// [`StepSearch::next_rate`].
    pub fn observe(&mut self, held: bool) {
        let Some(rate) = self.next else { return };
        self.steps_left -= 1;
        if held {
            self.held = rate;
        } else {
            self.failed = Some(rate);
        }
        self.next = match self.failed {
            _ if self.steps_left == 0 => None,
            None if rate >= self.ceiling => None,
            None => Some((rate * 2.0).min(self.ceiling)),
            Some(failed) if (failed - self.held) / failed <= PRECISION => None,
            Some(failed) => {
                let mid = ((self.held + failed) / 2.0).round();
                (mid > self.held && mid < failed).then_some(mid)
            }
        };
    }

    /// The highest rate that held (0 if none did).
    pub fn best(&self) -> f64 {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(capacity: f64, start: f64, steps: usize) -> (f64, Vec<f64>) {
        let mut s = StepSearch::new(start, steps, 1e9);
        let mut probed = Vec::new();
        while let Some(rate) = s.next_rate() {
            probed.push(rate);
            s.observe(rate <= capacity);
        }
        (s.best(), probed)
    }

    #[test]
    fn doubles_then_bisects_to_within_ten_percent() {
        let (best, probed) = search(10_000.0, 1000.0, 20);
        assert_eq!(&probed[..5], &[1000.0, 2000.0, 4000.0, 8000.0, 16000.0]);
        assert!(
            (10_000.0 * (1.0 - PRECISION)..=10_000.0).contains(&best),
            "{best}"
        );
    }

    #[test]
    fn stops_at_the_step_budget_and_the_ceiling() {
        let (_, probed) = search(1e12, 1000.0, 3);
        assert_eq!(probed.len(), 3);
        let mut s = StepSearch::new(1000.0, 10, 3000.0);
        s.observe(true);
        assert_eq!(s.next_rate(), Some(2000.0));
        s.observe(true);
        assert_eq!(s.next_rate(), Some(3000.0));
        s.observe(true);
        assert_eq!((s.next_rate(), s.best()), (None, 3000.0));
    }

    #[test]
    fn nothing_held() {
        let (best, probed) = search(10.0, 1000.0, 4);
        assert_eq!(best, 0.0);
        assert_eq!(probed, [1000.0, 500.0, 250.0, 125.0]);
        let (best, probed) = search(0.0, 4.0, 10);
        assert_eq!(
            (best, probed),
            (0.0, vec![4.0, 2.0, 1.0]),
            "stops at 1 req/s"
        );
    }
}
