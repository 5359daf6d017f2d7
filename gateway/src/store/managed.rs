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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, Store};

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
}
