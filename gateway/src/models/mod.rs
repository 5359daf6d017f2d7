//! The served model set: the config file's deployments plus those added
//! through `/model/new` (stored in the database, or in memory without one),
//! as one immutable [`Router`] snapshot swapped atomically. The request path
//! loads the snapshot lock-free ([`Models::router`]); only the control plane
//! changes it, after a management call, a change notification from another
//! replica, a resync after the listener reconnects, or a read-through.
//!
//! A deployment that survives a swap unchanged keeps its live state (stats,
//! cooldown): see [`Router::build`]. A stored row that no longer validates
//! is logged and the deployment it replaced keeps serving.
//!
//! An unknown model name, with a database configured, costs one read-through
//! of that name's rows ([`Models::router_for`]), behind a negative cache and
//! a resync budget ([`miss`]); over budget the name is simply unknown (400).

mod env_policy;
mod info;
mod reload;

pub use env_policy::EnvPolicy;
pub use info::{deployment_json, redacted};
pub use reload::FileReload;

use crate::config::{deployment_from_json, EntryError};
use crate::control::ControlPlane;
use crate::deployment::Deployment;
use crate::read_through::ReadThroughGuard;
use crate::router::{FleetLink, Router, RouterSettings};
use crate::store::{ModelRecord, Store, StoreError};
use arc_swap::ArcSwap;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a read-through of an unknown model may take; past it the name
/// is unknown.
const READ_THROUGH_TIMEOUT: Duration = Duration::from_secs(2);

/// A deployment added through the API, with the row it came from.
#[derive(Debug)]
struct Stored {
    record: ModelRecord,
    deployment: Arc<Deployment>,
}

/// What the config file contributes: its deployments (always served) and
/// the router settings; replaced whole by a reload.
struct FileSet {
    deployments: Vec<Arc<Deployment>>,
    ids: HashSet<Arc<str>>,
    settings: RouterSettings,
}

impl FileSet {
    fn new(deployments: Vec<Arc<Deployment>>, settings: RouterSettings) -> Self {
        FileSet {
            ids: deployments.iter().map(|d| d.id.clone()).collect(),
            deployments,
            settings,
        }
    }
}

/// The served model set; see the module documentation.
pub struct Models {
    current: ArcSwap<Router>,
    /// The config file's part. Read and written off the request path.
    file: Mutex<FileSet>,
    /// Deployments added through the API, by id. Written by the control
    /// plane only; the request path never takes this lock.
    stored: Mutex<BTreeMap<String, Stored>>,
    /// Serializes read-then-install sequences on the control plane, so an
    /// older read never overwrites a newer one.
    sync: tokio::sync::Mutex<()>,
    /// Unknown names and the read-through budget; `None` without a database.
    misses: Option<ReadThroughGuard<String>>,
    /// Which `os.environ/` references a stored row may resolve.
    env: EnvPolicy,
}

impl Models {
    /// The config file's `deployments` under `settings`; `read_through`
    /// (a database is configured) enables the read-through of unknown names;
    /// `fleet` (Redis is configured) shares cooldowns with other replicas.
    pub fn new(
        deployments: Vec<Deployment>,
        settings: RouterSettings,
        read_through: bool,
        fleet: Option<FleetLink>,
    ) -> Self {
        let config: Vec<Arc<Deployment>> = deployments.into_iter().map(Arc::new).collect();
        let mut router = Router::build(config.clone(), settings.clone(), None);
        if let Some(link) = fleet {
            router = router.with_fleet(link);
        }
        Models {
            current: ArcSwap::from_pointee(router),
            file: Mutex::new(FileSet::new(config, settings)),
            stored: Mutex::default(),
            sync: tokio::sync::Mutex::const_new(()),
            misses: read_through.then(ReadThroughGuard::default),
            env: EnvPolicy::default(),
        }
    }

    /// Sets which `os.environ/` references a stored row may resolve (by
    /// default, any but the gateway's own variables).
    pub fn with_env_policy(mut self, env: EnvPolicy) -> Self {
        self.env = env;
        self
    }

    /// The snapshot in force.
    pub fn router(&self) -> Arc<Router> {
        self.current.load_full()
    }

    /// The snapshot to route `model` with: the current one, after one
    /// read-through of the name's stored rows when it is unknown and a
    /// database is configured (unless the name missed moments ago or the
    /// budget is spent). A failed read-through leaves the name unknown.
    pub async fn router_for(self: &Arc<Self>, control: &ControlPlane, model: &str) -> Arc<Router> {
        let router = self.router();
        let Some(misses) = &self.misses else {
            return router;
        };
        if router.registry().resolve(model).is_some() || misses.recently_missed(model) {
            return router;
        }
        if !misses.try_resync() {
            tracing::debug!(
                model,
                "model read-through budget spent; the name is unknown"
            );
            return router;
        }
        let name = model.to_string();
        let models = self.clone();
        let found = control
            .call(READ_THROUGH_TIMEOUT, move |ctx| async move {
                models.load_named(ctx.store(), &name).await
            })
            .await;
        match found {
            Ok(Ok(true)) => self.router(),
            Ok(Ok(false)) => {
                misses.note_miss(model.to_string());
                router
            }
            Ok(Err(e)) => {
                tracing::warn!(model, error = %e, "model read-through failed");
                router
            }
            Err(e) => {
                tracing::warn!(model, error = %e, "model read-through failed");
                router
            }
        }
    }

    /// Validates a row as a deployment, by the config file's rules.
    /// Its `os.environ/` references must pass the [`EnvPolicy`].
    pub fn validate(&self, record: &ModelRecord) -> Result<Deployment, EntryError> {
        let env = |name: &str| std::env::var(name).ok();
        let entry = record.entry();
        self.env.check(&entry, &env)?;
        let lookup = |name: &str| match self.env.refusal(name, &env) {
            Some(_) => None,
            None => env(name),
        };
        let settings = self.file().settings.clone();
        let (dep, warnings) = deployment_from_json(&entry, &settings, &lookup)?;
        for w in warnings {
            tracing::warn!(model_id = %record.model_id, "{w}");
        }
        if dep.provider == crate::deployment::ProviderKind::Unsupported {
            tracing::error!(model_id = %record.model_id, "{}", crate::config::unsupported_note(&dep));
        }
        Ok(dep)
    }

    /// Whether `id` is a deployment of the config file.
    pub fn is_config(&self, id: &str) -> bool {
        self.file().ids.contains(id)
    }

    /// The stored row of the API-added deployment `id`, as served.
    pub fn stored(&self, id: &str) -> Option<ModelRecord> {
        self.lock().get(id).map(|s| s.record.clone())
    }

    /// Re-reads the row `id` and serves it (or stops serving it when it is
    /// gone).
    pub async fn refresh(&self, store: &dyn Store, id: &str) -> Result<(), StoreError> {
        let _sync = self.sync.lock().await;
        let row = store.get_model(id).await?;
        let mut stored = self.lock();
        let changed = match row {
            Some(record) => self.install(&mut stored, record),
            None => stored.remove(id).is_some(),
        };
        if changed {
            self.publish(&stored);
        }
        Ok(())
    }

    /// Re-reads every stored row and serves exactly those (start-up, and
    /// after the change listener reconnects). Returns how many are served.
    pub async fn reload(&self, store: &dyn Store) -> Result<usize, StoreError> {
        let _sync = self.sync.lock().await;
        let rows = store.list_models().await?;
        let mut stored = self.lock();
        let ids: HashSet<String> = rows.iter().map(|r| r.model_id.clone()).collect();
        let before = stored.len();
        stored.retain(|id, _| ids.contains(id));
        let mut changed = stored.len() != before;
        for record in rows {
            changed |= self.install(&mut stored, record);
        }
        if changed {
            self.publish(&stored);
        }
        Ok(stored.len())
    }

    /// Reads the rows of group `name` and serves them; whether the name now
    /// resolves.
    async fn load_named(&self, store: &dyn Store, name: &str) -> Result<bool, StoreError> {
        let _sync = self.sync.lock().await;
        let rows = store.models_named(name).await?;
        let mut stored = self.lock();
        let mut changed = false;
        for record in rows {
            changed |= self.install(&mut stored, record);
        }
        if changed {
            self.publish(&stored);
        }
        Ok(self.router().registry().resolve(name).is_some())
    }

    /// Puts a row in the stored set; `false` when nothing changed (the same
    /// row, or one that does not validate: the old deployment stays).
    fn install(&self, stored: &mut BTreeMap<String, Stored>, record: ModelRecord) -> bool {
        if stored
            .get(&record.model_id)
            .is_some_and(|s| s.record == record)
        {
            return false;
        }
        if self.is_config(&record.model_id) {
            tracing::warn!(model_id = %record.model_id, "a stored model has the id of a config deployment; the config wins");
            return false;
        }
        match self.validate(&record) {
            Ok(dep) => {
                let deployment = Arc::new(dep);
                stored.insert(record.model_id.clone(), Stored { record, deployment });
                true
            }
            Err(e) => {
                tracing::warn!(model_id = %record.model_id, error = %e, "a stored model is invalid; the deployment it replaced keeps serving");
                false
            }
        }
    }

    /// Builds and swaps in the snapshot of the config plus `stored`.
    fn publish(&self, stored: &BTreeMap<String, Stored>) {
        let (mut deployments, settings) = {
            let file = self.file();
            (file.deployments.clone(), file.settings.clone())
        };
        deployments.extend(
            stored
                .iter()
                .filter(|(id, _)| !self.is_config(id))
                .map(|(_, s)| s.deployment.clone()),
        );
        let previous = self.current.load();
        let router = Router::build(deployments, settings, Some(&previous));
        self.current.store(Arc::new(router));
        if let Some(misses) = &self.misses {
            misses.clear();
        }
    }

    fn file(&self) -> std::sync::MutexGuard<'_, FileSet> {
        self.file.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Stored>> {
        self.stored.lock().unwrap_or_else(|p| p.into_inner())
    }
}
