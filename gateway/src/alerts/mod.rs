//! Budget alerts as LiteLLM sends them: the `general_settings.alerting`
//! channels and their URLs (`target`), what an alert says (`payload`), and
//! the hand-over to the control plane, which delivers it off the request
//! path (`deliver`).

mod deliver;
mod payload;
mod target;

pub use payload::{BudgetAlert, Event};
pub use target::{resolve, AlertTarget, AlertUrl, Channel};

use crate::control::ControlPlane;
use std::sync::Arc;

/// The request path's way to raise an alert: a log line always, a POST to
/// every configured target when there is one.
pub struct Alerts {
    /// Where alerts go; a reload replaces them.
    targets: arc_swap::ArcSwap<Vec<AlertTarget>>,
    tls: Arc<rustls::ClientConfig>,
    control: ControlPlane,
}

impl Alerts {
    /// Alerts to `targets`, delivered by `control`; `tls` is used for https.
    pub fn new(
        targets: Vec<AlertTarget>,
        tls: Arc<rustls::ClientConfig>,
        control: ControlPlane,
    ) -> Self {
        Alerts {
            targets: arc_swap::ArcSwap::from_pointee(targets),
            tls,
            control,
        }
    }

    /// Sends later alerts to `targets` (a reloaded config's).
    pub fn set_targets(&self, targets: Vec<AlertTarget>) {
        self.targets.store(Arc::new(targets));
    }

    /// Logs `alert` (target `gateway::alerts`) and hands it to the control
    /// plane without waiting; when its queue is full the alert is dropped
    /// with a warning, and the log line remains.
    pub fn raise(&self, alert: BudgetAlert) {
        tracing::warn!(
            target: "gateway::alerts",
            scope = alert.scope,
            spend = alert.spend,
            key_alias = alert.key_alias.as_deref().unwrap_or(""),
            key_name = alert.key_name.as_deref().unwrap_or(""),
            "{}",
            alert.event.log_text()
        );
        let targets = self.targets.load_full();
        if targets.is_empty() {
            return;
        }
        let tls = self.tls.clone();
        let queued = self
            .control
            .spawn(move |_| deliver::deliver(targets, tls, alert));
        if let Err(e) = queued {
            tracing::warn!(target: "gateway::alerts", error = %e, "alert not sent");
        }
    }
}
