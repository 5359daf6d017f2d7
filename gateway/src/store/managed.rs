//! Files and batches the gateway created for a key (LiteLLM's "managed"
//! objects): the provider's id, who created it and where it lives, so only
//! that key reaches it, from any replica.

use chrono::{DateTime, Utc};

/// What kind of object a managed id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagedKind {
    /// An uploaded file (`LiteLLM_ManagedFileTable`).
    File,
    /// A batch (`LiteLLM_ManagedObjectTable`, purpose `batch`).
    Batch,
}

impl ManagedKind {
    /// The kind's name in error messages (`file`, `batch`).
    pub fn as_str(self) -> &'static str {
        match self {
            ManagedKind::File => "file",
            ManagedKind::Batch => "batch",
        }
    }
}

/// One file or batch created through the gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedObject {
    /// The provider's id, which the client sees.
    pub id: String,
    /// File or batch.
    pub kind: ManagedKind,
    /// The creating key's token (its sha256), or the master key's.
    pub key: String,
    /// The creating key's user (LiteLLM's `created_by`).
    pub created_by: Option<String>,
    /// The creating key's team.
    pub team_id: Option<String>,
    /// Where the object lives: the upstream route, as the gateway wrote it
    /// (`openai`, `azure`, or `model:<group>`).
    pub route: String,
    /// The object as the provider answered its creation.
    pub object: serde_json::Value,
    /// When it was recorded.
    pub created_at: DateTime<Utc>,
    /// A batch's budget hold: the USD its input could cost at most (0 for
    /// a file).
    pub hold: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, Store};

    /// The USD `key`'s open batches hold in `store`.
    async fn held(store: &impl Store, key: &str) -> f64 {
        store
            .batch_holds(key)
            .await
            .unwrap()
            .iter()
            .map(|(_, h)| h)
            .sum()
    }

    fn object(id: &str, kind: ManagedKind, key: &str) -> ManagedObject {
        ManagedObject {
            id: id.to_string(),
            kind,
            key: key.to_string(),
            created_by: None,
            team_id: None,
            route: "openai".to_string(),
            object: serde_json::Value::Null,
            created_at: Utc::now(),
            hold: 0.0,
        }
    }

    #[test]
    fn objects_are_found_listed_per_key_and_a_batch_charged_once() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store = MemoryStore::default();
        runtime.block_on(async {
            let file = object("file-1", ManagedKind::File, "alice");
            store.insert_managed(&file).await.unwrap();
            assert!(store.insert_managed(&file).await.is_err(), "an id once");
            assert_eq!(store.get_managed("file-1").await.unwrap(), Some(file));
            assert_eq!(store.get_managed("file-2").await.unwrap(), None);
            let batch = object("batch_1", ManagedKind::Batch, "alice");
            // A claim before the record landed records it.
            assert!(store.claim_batch_charge(&batch).await.unwrap());
            assert!(!store.claim_batch_charge(&batch).await.unwrap());
            let ids = store.managed_ids("alice", ManagedKind::Batch, 10).await;
            assert_eq!(ids.unwrap(), ["batch_1"]);
            let none = store.managed_ids("bob", ManagedKind::File, 10).await;
            assert!(none.unwrap().is_empty());
            let file = object("file-1", ManagedKind::File, "alice");
            assert!(
                !store.claim_batch_charge(&file).await.unwrap(),
                "a file is never charged"
            );
        });
    }

    #[test]
    fn due_batches_go_to_one_poller_until_final_and_hold_until_then() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store = MemoryStore::default();
        runtime.block_on(async {
            let mut a = object("batch_a", ManagedKind::Batch, "alice");
            a.hold = 1.5;
            let mut b = object("batch_b", ManagedKind::Batch, "alice");
            b.hold = 0.5;
            store.insert_managed(&a).await.unwrap();
            store.insert_managed(&b).await.unwrap();
            store
                .insert_managed(&object("file-x", ManagedKind::File, "alice"))
                .await
                .unwrap();
            let now = Utc::now();
            let later = now + chrono::Duration::seconds(60);
            let long_ago = now - chrono::Duration::days(1);
            assert_eq!(held(&store, "alice").await, 2.0);
            assert_eq!(held(&store, "bob").await, 0.0);
            let first = store.due_batches(now, later, long_ago, 1).await.unwrap();
            assert_eq!(first.len(), 1, "at most the limit");
            let second = store.due_batches(now, later, long_ago, 10).await.unwrap();
            assert_eq!(second.len(), 1, "the other one only");
            assert_ne!(first[0].id, second[0].id);
            assert!(store
                .due_batches(now, later, long_ago, 10)
                .await
                .unwrap()
                .is_empty());
            // Due again after the interval, unless final or charged.
            store.batch_polled("batch_a", "failed", true).await.unwrap();
            assert_eq!(held(&store, "alice").await, 0.5);
            assert!(store.claim_batch_charge(&b).await.unwrap());
            assert_eq!(held(&store, "alice").await, 0.0);
            let after = later + chrono::Duration::seconds(1);
            assert!(store
                .due_batches(after, after, long_ago, 10)
                .await
                .unwrap()
                .is_empty());
            // Too old: no longer polled.
            let c = object("batch_c", ManagedKind::Batch, "alice");
            store.insert_managed(&c).await.unwrap();
            assert!(store
                .due_batches(after, after, after, 10)
                .await
                .unwrap()
                .is_empty());
            assert_eq!(
                store.due_batches(after, after, long_ago, 10).await.unwrap()[0].id,
                "batch_c"
            );
        });
    }
}
