//! A Vertex AI deployment's project, location and token source.

use crate::google_auth::TokenSource;
use std::sync::Arc;

/// A deployment's Vertex AI settings.
#[derive(Debug, Clone, PartialEq)]
pub struct VertexSettings {
    /// Google Cloud project id.
    pub project: String,
    /// Region, multi-region or `global`.
    pub location: String,
    /// Where access tokens come from; `None` without credentials.
    pub auth: Option<Arc<TokenSource>>,
}
