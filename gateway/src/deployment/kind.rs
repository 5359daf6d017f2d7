//! Which translator serves a deployment.

/// Which translator serves a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI and every server speaking its API.
    OpenAiCompatible,
    /// Azure OpenAI (`azure/<deployment>`).
    Azure,
    /// Azure AI Foundry's OpenAI-compatible inference (`azure_ai/`).
    AzureAi,
    /// Anthropic's Messages API (`anthropic/`).
    Anthropic,
    /// AWS Bedrock's Converse API (`bedrock/`).
    Bedrock,
    /// Google AI Studio's Gemini API (`gemini/`).
    Gemini,
    /// Google Vertex AI (`vertex_ai/`): Gemini's API with OAuth tokens.
    Vertex,
    /// Anthropic's models on Vertex AI (`vertex_ai/claude-…`).
    VertexAnthropic,
    /// Cohere's v2 API (`cohere/`, `cohere_chat/`).
    Cohere,
    /// Jina AI's rerank API (`jina_ai/`).
    Jina,
    /// Voyage AI's rerank API (`voyage/`).
    Voyage,
    /// The in-process mock: no network.
    Mock,
    /// A provider LiteLLM knows and this gateway does not serve: the
    /// deployment starts, reports itself unsupported and refuses requests.
    Unsupported,
}
