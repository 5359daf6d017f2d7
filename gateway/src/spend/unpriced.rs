//! What a model without a price costs a caller with a budget
//! (`gateway_settings.unpriced_models`). LiteLLM serves such a model at cost
//! 0; so does this gateway for a deployment the operator wrote down (the
//! config or `/model/new`: a self-hosted model is the usual case), but not
//! for a name only a wildcard route resolves, where the client picks the
//! model and a free one would bypass every budget.

use crate::deployment::Deployment;

/// `gateway_settings.unpriced_models`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnpricedModels {
    /// Unset: a listed deployment is free, a wildcard's unpriced name is
    /// refused to a caller with a budget.
    #[default]
    Default,
    /// `free`: every unpriced model is served at cost 0.
    Free,
    /// `refuse`: every unpriced model is refused to a caller with a budget.
    Refuse,
}

impl UnpricedModels {
    /// Reads the setting; `None` is the default, anything but `free` and
    /// `refuse` the problem to report.
    pub fn parse(value: Option<&str>) -> Result<UnpricedModels, String> {
        match value {
            None => Ok(UnpricedModels::Default),
            Some("free") => Ok(UnpricedModels::Free),
            Some("refuse") => Ok(UnpricedModels::Refuse),
            Some(other) => Err(format!(
                "gateway_settings.unpriced_models must be `free` or `refuse` (got `{other}`)"
            )),
        }
    }

    /// Whether a request to unpriced `dep` is refused when a budget of its
    /// caller applies.
    pub fn refuses(self, dep: &Deployment) -> bool {
        match self {
            UnpricedModels::Default => dep.is_wildcard(),
            UnpricedModels::Free => false,
            UnpricedModels::Refuse => true,
        }
    }

    /// The warning logged when unpriced `dep` (named `label`) is listed:
    /// what its callers pay, and how to give it a price.
    pub fn warning(self, label: &str, dep: &Deployment) -> String {
        let served = if self == UnpricedModels::Refuse {
            "refused to keys, users and teams with a budget (gateway_settings.unpriced_models: refuse)"
        } else {
            "served at cost 0, so budgets do not limit it"
        };
        format!(
            "{label}: `{}/{}` has no price (neither input_cost_per_token / output_cost_per_token nor LiteLLM's price map): {served}; its requests are counted in gateway_unpriced_requests_total",
            dep.provider_name, dep.upstream_model
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_reads_free_and_refuse_and_names_anything_else() {
        assert_eq!(UnpricedModels::parse(None), Ok(UnpricedModels::Default));
        assert_eq!(
            UnpricedModels::parse(Some("free")),
            Ok(UnpricedModels::Free)
        );
        assert_eq!(
            UnpricedModels::parse(Some("refuse")),
            Ok(UnpricedModels::Refuse)
        );
        let err = UnpricedModels::parse(Some("maybe")).unwrap_err();
        assert!(
            err.contains("unpriced_models") && err.contains("maybe"),
            "{err}"
        );
    }
}
