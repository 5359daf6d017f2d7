//! A reload of the config file's part of the model set: new deployments and
//! router settings become one new router snapshot, swapped atomically.
//! Requests in flight keep the snapshot they loaded. A deployment equal to
//! one already served keeps its `Arc`, hence its live state (stats,
//! cooldown, health); changed and new ones start fresh.

use super::{FileSet, Models};
use crate::deployment::Deployment;
use crate::router::RouterSettings;
use std::collections::HashMap;
use std::sync::Arc;

/// What a reload changed in the config file's deployments.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileReload {
    /// Deployments served as before, with their live state.
    pub kept: usize,
    /// Deployments whose settings changed (fresh live state).
    pub changed: usize,
    /// New deployment ids.
    pub added: usize,
    /// Ids no longer in the file.
    pub removed: usize,
}

impl Models {
    /// Serves `deployments` and `settings` as the config file's part from
    /// now on, with the API-added deployments on top (re-validated under the
    /// new settings; one that no longer validates keeps its old form).
    pub async fn reload_file(
        &self,
        deployments: Vec<Deployment>,
        settings: RouterSettings,
    ) -> FileReload {
        let _sync = self.sync.lock().await;
        let mut counts = FileReload::default();
        let next = {
            let file = self.file();
            let old: HashMap<&str, &Arc<Deployment>> =
                file.deployments.iter().map(|d| (&*d.id, d)).collect();
            let next: Vec<Arc<Deployment>> = deployments
                .into_iter()
                .map(|d| match old.get(&*d.id) {
                    Some(o) if ***o == d => {
                        counts.kept += 1;
                        Arc::clone(o)
                    }
                    Some(_) => {
                        counts.changed += 1;
                        Arc::new(d)
                    }
                    None => {
                        counts.added += 1;
                        Arc::new(d)
                    }
                })
                .collect();
            counts.removed = file.deployments.len() + counts.added - next.len();
            next
        };
        *self.file() = FileSet::new(next, settings);
        let mut stored = self.lock();
        let records: Vec<_> = stored.values().map(|s| s.record.clone()).collect();
        for record in records {
            if let Ok(dep) = self.validate(&record) {
                if let Some(s) = stored.get_mut(&record.model_id) {
                    if *s.deployment != dep {
                        s.deployment = Arc::new(dep);
                    }
                }
            }
        }
        self.publish(&stored);
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn parse(yaml: &str) -> Config {
        Config::parse(Path::new("c.yaml"), yaml, &|_| None).unwrap()
    }

    #[test]
    fn a_reload_keeps_the_live_state_of_unchanged_deployments_only() {
        let first = parse("model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n  - model_name: g\n    litellm_params: {model: mock/b}\n    model_info: {id: b}\n  - model_name: h\n    litellm_params: {model: mock/c}\n    model_info: {id: c}\n");
        let models = Models::new(first.deployments, first.router, false, None);
        let before = models.router();
        assert!(before
            .cool_for("a", std::time::Duration::from_secs(60))
            .is_some());
        assert!(before
            .cool_for("b", std::time::Duration::from_secs(60))
            .is_some());
        let second = parse("model_list:\n  - model_name: g\n    litellm_params: {model: mock/a}\n    model_info: {id: a}\n  - model_name: g\n    litellm_params: {model: mock/b, mock_response: new}\n    model_info: {id: b}\n  - model_name: n\n    litellm_params: {model: mock/n}\n    model_info: {id: n}\nrouter_settings:\n  num_retries: 7\n");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let counts = rt.block_on(models.reload_file(second.deployments, second.router));
        assert_eq!(
            counts,
            FileReload {
                kept: 1,
                changed: 1,
                added: 1,
                removed: 1
            }
        );
        let after = models.router();
        assert!(after.is_cooling("a"), "unchanged: its cooldown is kept");
        assert!(!after.is_cooling("b"), "changed: fresh state");
        assert!(after.registry().has_group("n") && !after.registry().has_group("h"));
        assert_eq!(after.settings().num_retries, 7);
        assert!(models.is_config("n") && !models.is_config("c"));
        assert!(
            before.registry().has_group("h"),
            "the old snapshot is untouched"
        );
    }
}
