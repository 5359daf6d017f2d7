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
