//! The Postgres store (LiteLLM's tables). Being written; see the control plane.
