//! Scenarios the gateway cannot run yet. Each names the feature it needs;
//! asking for one prints that and exits with status 2 instead of reporting
//! a number that would mean nothing.

use std::fmt;

/// A gateway feature some scenario needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// Virtual keys issued through `/key/generate`.
    VirtualKeys,
    /// Spend and attempt logs written to Postgres.
    SpendLogging,
}

/// Features the gateway does not have yet. Remove an entry when its
/// feature lands, then implement the scenario that needed it.
const MISSING: &[Feature] = &[Feature::SpendLogging];

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Feature::VirtualKeys => "virtual keys (issue: virtual keys and key management)",
            Feature::SpendLogging => "spend logging to Postgres (issue: spend tracking)",
        })
    }
}

/// Fails with "`what` needs `feature`, which the gateway does not have
/// yet" when the gateway lacks it.
pub fn require(what: &str, feature: Feature) -> Result<(), String> {
    if MISSING.contains(&feature) {
        Err(format!(
            "{what} needs {feature}, which the gateway does not have yet"
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn present_features_pass() {
        assert_eq!(require("virtual-key", Feature::VirtualKeys), Ok(()));
    }

    #[test]
    fn names_the_missing_feature() {
        assert_eq!(
            require("overhead", Feature::SpendLogging).unwrap_err(),
            "overhead needs spend logging to Postgres (issue: spend tracking), which the gateway does not have yet"
        );
    }
}
