//! Key and team fields LiteLLM acts on and this gateway does not: refused
//! when set through the management API, and a key whose stored row (or its
//! team's) has one set is refused on its requests (`unapplied`). Kept in
//! `auth`, below the API that also reads them.

/// A field LiteLLM acts on and this gateway does not, refused (400 naming
/// it) when it asks for something: set through the management API (see
/// `api::admin::body::refuse_when_set`), or found in a row LiteLLM wrote (the
/// key's requests are refused: `auth::unapplied` checks it).
pub struct Refused {
    /// The field.
    pub name: &'static str,
    /// Whether LiteLLM also reads it from the row's `metadata`.
    pub in_metadata: bool,
    /// What LiteLLM does with it, said in the refusal.
    pub why: &'static str,
    /// The values that ask for nothing beyond LiteLLM's default (besides
    /// `null`, `false`, `{}` and `[]`).
    pub harmless: fn(&serde_json::Value) -> bool,
}

impl Refused {
    /// Whether `value`, set on this field, asks for something LiteLLM
    /// would do: not `null`, `false`, `{}`, `[]` nor a
    /// [`harmless`](Self::harmless) value. A JSON string holding an object
    /// or a list (as Prisma may store a `Json` column) is read as what it
    /// holds.
    pub fn asks(&self, value: &serde_json::Value) -> bool {
        use serde_json::Value;
        let held = match value {
            Value::String(text) if text.starts_with(['{', '[']) => {
                serde_json::from_str::<Value>(text).ok()
            }
            _ => None,
        };
        let value = held.as_ref().unwrap_or(value);
        let nothing = match value {
            Value::Null | Value::Bool(false) => true,
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        };
        !nothing && !(self.harmless)(value)
    }
}

fn nothing_more(_: &serde_json::Value) -> bool {
    false
}

/// LiteLLM's baseline team-member permissions (`/key/info`,
/// `/key/health`: `BASELINE_TEAM_MEMBER_PERMISSIONS`), which every member
/// has here too; a list of only these grants nothing more.
fn baseline_permissions(v: &serde_json::Value) -> bool {
    v.as_array().is_some_and(|items| {
        items
            .iter()
            .all(|i| matches!(i.as_str(), Some("/key/info" | "/key/health")))
    })
}

/// Key fields of the management API refused when set (checked in litellm 1.110.2).
pub const KEY_REFUSED: &[Refused] = &[
    Refused {
        name: "enable_prompt_caching",
        in_metadata: true,
        why: "LiteLLM injects Anthropic cache_control breakpoints into the requests of such a key (litellm_pre_call_utils.py), which this gateway does not",
        harmless: nothing_more,
    },
    Refused {
        name: "config",
        in_metadata: false,
        why: "LiteLLM routes the requests of such a key through the model_list it holds (user_api_key_auth.py), which this gateway does not",
        harmless: nothing_more,
    },
    Refused {
        name: "permissions",
        in_metadata: false,
        why: "LiteLLM turns guardrails on and off per key with it (guardrail_helpers.py) and grants spend routes (get_spend_routes), which this gateway does not",
        harmless: nothing_more,
    },
    Refused {
        name: "budget_fallbacks",
        in_metadata: false,
        why: "LiteLLM sends a request whose model is over the key's model_max_budget to the fallback models it names (model_max_budget_limiter.py), which this gateway does not",
        harmless: nothing_more,
    },
    Refused {
        name: "router_settings",
        in_metadata: false,
        why: "LiteLLM applies a key's router settings (fallbacks, model_group_alias, retries) to its requests (get_hierarchical_router_settings), which this gateway does not",
        harmless: nothing_more,
    },
];

/// Team fields of the management API refused when set (checked in litellm 1.110.2).
pub const TEAM_REFUSED: &[Refused] = &[
    Refused {
        name: "router_settings",
        in_metadata: false,
        why: "LiteLLM applies a team's router settings (fallbacks, model_group_alias, retries) to its keys' requests (get_hierarchical_router_settings), which this gateway does not",
        harmless: nothing_more,
    },
    Refused {
        name: "team_member_permissions",
        in_metadata: false,
        why: "LiteLLM lets the team's members call the key management routes it lists on the team's keys (team_member_permission_checks.py), which this gateway does not grant (only /key/info and /key/health, which every member has, may be listed)",
        harmless: baseline_permissions,
    },
];
