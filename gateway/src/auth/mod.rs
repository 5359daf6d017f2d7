//! Who is calling and what they may do: the credential from the request
//! headers, checked against the master key or a virtual key. Virtual keys are
//! read from the lock-free cache. An uncached key in the set of keys the
//! store holds costs one read-through via the control plane, never refused
//! for lack of budget; a key outside that set shares a small read-through
//! budget with the others like it and is a 401 past it. So a flood of random
//! keys costs the database a few reads per second and cannot lock real keys
//! out, and an unknown key is a 401, never a 503.

mod budget_throttle;
mod cache;
mod checks;
pub mod console;
pub mod dynamic_limits;
mod end_user_defaults;
mod end_users;
mod known;
pub mod litellm_fields;
pub mod pass_through_grants;
pub mod routes;
mod unapplied;
mod windows;

pub use cache::{
    hash_key, token_hex, KeyCache, KeyCopies, KeyEntry, TeamEntry, TokenHash, UserEntry,
};
pub use console::Console;
pub use end_user_defaults::DefaultBudgets;
pub use end_users::{EndUserCache, EndUserEntry, ModelWindows};
pub use known::RELOAD_EVERY as KNOWN_KEYS_RELOAD;
pub use windows::{BudgetWindows, WindowOwner};

use crate::control::ControlPlane;
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::limits::KeyRows;
use std::sync::Arc;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// How long a read-through may take before the request fails closed.
const READ_THROUGH_TIMEOUT: Duration = Duration::from_secs(2);

/// An authenticated caller.
#[derive(Debug, Clone)]
pub enum Principal {
    /// The holder of `general_settings.master_key`.
    Master,
    /// No master key is configured: the gateway is open (LiteLLM's behaviour).
    Anonymous,
    /// A virtual key.
    Key(Arc<KeyEntry>),
}

impl Principal {
    /// Whether the caller may use the management API.
    pub fn is_admin(&self) -> bool {
        match self {
            Principal::Master | Principal::Anonymous => true,
            Principal::Key(k) => checks::is_admin_key(k),
        }
    }

    /// The user id of a key whose user has LiteLLM's `internal_user` (or
    /// `internal_user_viewer`) role: it may see its own keys and spend.
    pub fn internal_user(&self) -> Option<&str> {
        let Principal::Key(k) = self else {
            return None;
        };
        let user = k.user.as_ref()?;
        matches!(
            user.record.user_role.as_deref(),
            Some("internal_user" | "internal_user_viewer")
        )
        .then_some(user.record.user_id.as_str())
    }

    /// Whether the caller is a key of a user with LiteLLM's
    /// `proxy_admin_viewer` role: it may read everything the management
    /// API shows, and change nothing.
    pub fn admin_viewer(&self) -> bool {
        let Principal::Key(k) = self else {
            return false;
        };
        k.user
            .as_ref()
            .is_some_and(|u| u.record.user_role.as_deref() == Some("proxy_admin_viewer"))
    }

    /// The model group a requested name maps to through the key's aliases,
    /// else its team's `model_aliases`.
    pub fn resolve_alias<'a>(&'a self, model: &'a str) -> &'a str {
        match self {
            Principal::Key(k) => k
                .record
                .aliases
                .get(model)
                .or_else(|| k.team.as_ref()?.record.model_aliases.get(model))
                .and_then(|v| v.as_str())
                .unwrap_or(model),
            _ => model,
        }
    }

    /// The rows whose rate limits apply to this caller: a virtual key's,
    /// its team's and its user's; `None` for the master key and an open
    /// gateway.
    pub fn key_rows(&self) -> Option<KeyRows<'_>> {
        let Principal::Key(k) = self else { return None };
        Some(KeyRows {
            key: &k.record,
            team: k.team.as_ref().map(|t| &t.record),
            user: k.user.as_ref().map(|u| &u.record),
            org: k
                .team
                .as_ref()
                .and_then(|t| t.org_limits.as_ref())
                .map(|(id, limits)| (id.as_str(), limits)),
            names: Some(&k.counter_names),
        })
    }

    /// A key held to a share of its limits now (over its budget, opted in
    /// to LiteLLM's `throttle_on_budget_exceeded`): a copy of its row with
    /// its rpm and tpm limits scaled down, for [`Principal::key_rows_as`].
    pub fn throttled_key(&self) -> Option<crate::store::KeyRecord> {
        let Principal::Key(k) = self else { return None };
        let share = k.throttled()?;
        Some(budget_throttle::throttled(&k.record, share))
    }

    /// The key's row as the rate limiter holds this request for `model`
    /// to it: scaled down when throttled past its budget
    /// ([`Principal::throttled_key`]), without its dynamic limits while no
    /// deployment of the group fails (`failures`: the most failures this
    /// minute of one, asked only for a key with a dynamic limit;
    /// [`dynamic_limits`]); `None` when the row applies as it is.
    pub fn key_for_limits(
        &self,
        failures: impl FnOnce() -> u64,
    ) -> Option<crate::store::KeyRecord> {
        let Principal::Key(k) = self else { return None };
        let throttled = self.throttled_key();
        let row = throttled.as_ref().unwrap_or(&k.record);
        if !dynamic_limits::has_dynamic(row) {
            return throttled;
        }
        let failing = failures() > dynamic_limits::failure_threshold();
        dynamic_limits::relaxed(row, failing).or(throttled)
    }

    /// [`Principal::key_rows`] with `throttled` (from
    /// [`Principal::throttled_key`]) in place of the key's row, when given.
    pub fn key_rows_as<'a>(
        &'a self,
        throttled: Option<&'a crate::store::KeyRecord>,
    ) -> Option<KeyRows<'a>> {
        let mut rows = self.key_rows()?;
        if let Some(key) = throttled {
            rows.key = key;
        }
        Some(rows)
    }

    /// The limits of a request for `model` carrying `tags` that the
    /// limiter does not build from the key's rows: the key's per-tag
    /// request limits (LiteLLM's `tag_per_key`: one counter `{key}:{tag}`
    /// per tag its `metadata.tag_rpm_limit` names; tags it does not name
    /// fall to the key's own limits) and its team's organization's
    /// per-model limits (LiteLLM's `model_per_organization`: one counter
    /// `{org}:{model}` from the organization's `metadata.model_rpm_limit`
    /// and `model_tpm_limit`).
    pub fn extra_limits(&self, model: &str, tags: &[String]) -> Vec<crate::limits::Descriptor> {
        use crate::limits::{Descriptor, Kind, Scope};
        let Principal::Key(k) = self else {
            return Vec::new();
        };
        let mut out: Vec<Descriptor> = Vec::new();
        // A team member's limits (the budget row its membership links to,
        // else the team's member defaults), on a counter per (team, user):
        // LiteLLM's `team_member` descriptor.
        let member = k.team.as_ref().zip(k.record.user_id.as_deref());
        if let Some((team, user)) = member {
            if let Some(row) = k.member_limits_row() {
                let value = format!("{}:{user}", team.record.team_id);
                for (limit, kind) in [
                    (row.rpm_limit, Kind::Requests),
                    (row.tpm_limit, Kind::Tokens),
                ] {
                    if let Some(limit) = limit.and_then(|l| u64::try_from(l).ok()) {
                        out.push(Descriptor::new(Scope::TeamMember, &value, kind, limit));
                    }
                }
            }
        }
        let org = k.team.as_ref().and_then(|t| t.org_model_limits.as_ref());
        if let Some((org, limits)) = org {
            let value = format!("{org}:{model}");
            for (field, kind) in [
                ("model_rpm_limit", Kind::Requests),
                ("model_tpm_limit", Kind::Tokens),
            ] {
                let limit = limits
                    .get(field)
                    .and_then(|m| m.get(model))
                    .and_then(serde_json::Value::as_u64);
                if let Some(limit) = limit {
                    out.push(Descriptor::new(
                        Scope::ModelPerOrganization,
                        &value,
                        kind,
                        limit,
                    ));
                }
            }
        }
        let Some(limits) = k
            .record
            .metadata
            .get("tag_rpm_limit")
            .and_then(serde_json::Value::as_object)
        else {
            return out;
        };
        for (i, tag) in tags.iter().enumerate() {
            if tags[..i].contains(tag) {
                continue;
            }
            let Some(rpm) = limits.get(tag).and_then(serde_json::Value::as_u64) else {
                continue;
            };
            let value = format!("{}:{tag}", k.record.token);
            out.push(Descriptor::new(
                Scope::TagPerKey,
                &value,
                Kind::Requests,
                rpm,
            ));
        }
        out
    }

    /// Regions the key (else its team) may be served from; `None`: any.
    pub fn allowed_regions(&self) -> Option<Vec<String>> {
        let Principal::Key(k) = self else { return None };
        let region = k.record.allowed_model_region.as_deref().or_else(|| {
            k.team
                .as_ref()
                .and_then(|t| t.record.allowed_model_region.as_deref())
        })?;
        let regions: Vec<String> = region
            .split(',')
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        (!regions.is_empty()).then_some(regions)
    }

    /// The model names the key, its team and its user list, without
    /// wildcards and LiteLLM's special values (`*`, `all-proxy-models`).
    pub fn listed_models(&self) -> Vec<&str> {
        let Principal::Key(k) = self else {
            return Vec::new();
        };
        let team = k.team.iter().flat_map(|t| &t.record.models);
        let user = k.user.iter().flat_map(|u| &u.record.models);
        k.record
            .models
            .iter()
            .chain(team)
            .chain(user)
            .map(String::as_str)
            .filter(|m| !m.ends_with('*') && !checks::is_special_model_value(m))
            .collect()
    }

    /// The key's aliases as (requested name, group).
    pub fn aliases(&self) -> Vec<(&str, &str)> {
        let Principal::Key(k) = self else {
            return Vec::new();
        };
        k.record
            .aliases
            .iter()
            .filter_map(|(name, group)| Some((name.as_str(), group.as_str()?)))
            .collect()
    }

    /// Refuses a model the key, its team or its user may not use;
    /// `access_groups` are the model access groups that grant `model`
    /// (the registry's `access_groups_of`).
    pub fn check_model(&self, model: &str, access_groups: &[&str]) -> Result<(), GatewayError> {
        match self {
            Principal::Key(k) => checks::model_allowed(k, model, access_groups),
            _ => Ok(()),
        }
    }

    /// Whether the key, its team and its user each list the model access
    /// group `name` (or every model), so it is theirs to list
    /// (`/v1/models?include_model_access_groups=true`).
    pub fn names_access_group(&self, name: &str) -> bool {
        let Principal::Key(k) = self else { return true };
        checks::list_names_group(&k.record.models, name)
            && k.team
                .as_ref()
                .is_none_or(|t| checks::list_names_group(&t.record.models, name))
            && k.user
                .as_ref()
                .is_none_or(|u| checks::list_names_group(&u.record.models, name))
    }
}

/// The last credential one client connection presented, with its hash: a
/// client sends the same key on every request of a keep-alive connection,
/// and this spares it a SHA-256 per request. It lives as long as the
/// connection, whose read buffer holds the same bytes anyway.
#[derive(Default)]
pub struct CredentialMemo(Option<(Box<[u8]>, TokenHash)>);

impl CredentialMemo {
    /// `hash_key(key)`, reused when `key` is the memoized credential. The
    /// comparison is constant-time: another client sharing the connection
    /// (behind a proxy) learns nothing of the previous key's bytes.
    pub fn hash(&mut self, key: &str) -> TokenHash {
        if let Some((last, hash)) = &self.0 {
            if bool::from(last.as_ref().ct_eq(key.as_bytes())) {
                return *hash;
            }
        }
        let hash = hash_key(key);
        self.0 = Some((key.as_bytes().into(), hash));
        hash
    }
}

/// Checks credentials; holds only hashes.
pub struct Authenticator {
    master_key_hash: Option<TokenHash>,
    master_token: Option<Arc<str>>,
    keys: Arc<KeyCache>,
    control: ControlPlane,
    console: Console,
}

impl Authenticator {
    /// An authenticator for `master_key` (`None` leaves the gateway open to
    /// requests without a key), the virtual keys in `keys` and the admin
    /// console's logins.
    pub fn new(
        master_key: Option<&str>,
        keys: Arc<KeyCache>,
        control: ControlPlane,
        console: Console,
    ) -> Self {
        Authenticator {
            master_key_hash: master_key.map(hash_key),
            master_token: master_key.map(|k| token_hex(&hash_key(k)).into()),
            keys,
            control,
            console,
        }
    }

    /// Whether a master key is set (else every caller is an admin).
    pub fn has_master_key(&self) -> bool {
        self.master_key_hash.is_some()
    }

    /// The admin console's logins and sessions.
    pub fn console(&self) -> &Console {
        &self.console
    }

    /// The master key's hashed token, as spend logs record it.
    pub fn master_token(&self) -> Option<&str> {
        self.master_token.as_deref()
    }

    /// The master key's hash, shared (traces keep it without a copy).
    pub fn master_token_shared(&self) -> Option<&Arc<str>> {
        self.master_token.as_ref()
    }

    /// The key cache this authenticator reads.
    pub fn keys(&self) -> &Arc<KeyCache> {
        &self.keys
    }

    /// Authenticates the request's credential and checks that the key is
    /// usable (not blocked, not expired).
    /// `memo` is the connection's: its last credential is not hashed again.
    pub async fn authenticate(
        &self,
        head: &RequestHead,
        memo: &mut CredentialMemo,
    ) -> Result<Principal, GatewayError> {
        self.authenticate_key(credential(head), memo).await
    }

    /// [`Self::authenticate`] for a credential read elsewhere than the
    /// usual headers (Google AI Studio's `?key=` and `x-goog-api-key` on
    /// the Gemini pass-through route).
    pub async fn authenticate_key(
        &self,
        key: Option<&str>,
        memo: &mut CredentialMemo,
    ) -> Result<Principal, GatewayError> {
        let Some(expected) = &self.master_key_hash else {
            return Ok(Principal::Anonymous);
        };
        let key = key.ok_or(GatewayError::MissingKey)?;
        let hash = memo.hash(key);
        if bool::from(hash.ct_eq(expected)) {
            return Ok(Principal::Master);
        }
        let entry = match self.keys.get(&hash) {
            Some(entry) => entry,
            None => self.read_through(&hash, key).await?,
        };
        checks::key_usable(&entry, chrono::Utc::now())?;
        Ok(Principal::Key(entry))
    }

    /// Whether `principal`, authenticated a while ago (a realtime session),
    /// may still spend: its key's current copy is neither blocked (nor its
    /// team), expired nor deleted. The master key always may.
    pub fn still_usable(&self, principal: &Principal) -> Result<(), GatewayError> {
        let Principal::Key(key) = principal else {
            return Ok(());
        };
        let current = self
            .keys
            .by_token(&key.record.token)
            .ok_or_else(|| GatewayError::InvalidKey(abbreviate(&key.record.token)))?;
        checks::key_usable(&current, chrono::Utc::now())
    }

    /// The virtual key whose sha256 is `hash`, checked usable (the console's
    /// key sessions hold only the hash). The master key is not one.
    pub async fn key_by_hash(&self, hash: &TokenHash) -> Result<Principal, GatewayError> {
        if self
            .master_key_hash
            .as_ref()
            .is_some_and(|m| bool::from(m.ct_eq(hash)))
        {
            return Err(GatewayError::InvalidKey("***".into()));
        }
        let entry = match self.keys.get(hash) {
            Some(entry) => entry,
            None => self.read_through(hash, "").await?,
        };
        checks::key_usable(&entry, chrono::Utc::now())?;
        Ok(Principal::Key(entry))
    }

    /// Reads an uncached key from the store. A key in the known set always
    /// gets its read-through; a database failure then is a 503 (the key may
    /// well be valid). A key outside it is almost surely random, but may be
    /// one created moments ago on another replica (its announcement is on
    /// the way) or written by a LiteLLM proxy sharing the database (known
    /// from the next reload): it gets a read-through from a small shared
    /// budget, and is a 401 when the budget is spent or the database cannot
    /// answer. Either way it never costs a known key anything.
    async fn read_through(
        &self,
        hash: &TokenHash,
        key: &str,
    ) -> Result<Arc<KeyEntry>, GatewayError> {
        let invalid = || GatewayError::InvalidKey(abbreviate(key));
        if self.keys.recently_missed(hash) {
            return Err(invalid());
        }
        let known = self.keys.is_known(hash);
        if !known && !self.keys.try_resync() {
            return Err(invalid());
        }
        let token = token_hex(hash);
        let keys = self.keys.clone();
        let loaded = self
            .control
            .call(READ_THROUGH_TIMEOUT, move |ctx| async move {
                keys.load(ctx.store(), &token).await
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        match loaded {
            Ok(Some(entry)) => Ok(entry),
            Ok(None) => {
                self.keys.note_miss(hash);
                Err(invalid())
            }
            Err(e) if known => Err(GatewayError::AuthUnavailable(e)),
            Err(_) => Err(invalid()),
        }
    }

    /// The end user a request names (its `user`), when its row restricts
    /// it or a default budget holds it ([`DefaultBudgets`]: the key's
    /// `end_user_budget_id`, given as `key_default`, else the proxy-wide
    /// one); refused when blocked, as LiteLLM refuses it (400). An id
    /// without a restricting row in the store and no default budget costs
    /// no read; one with a row not yet cached, or first seen under a
    /// default budget, costs one read-through, and a database that cannot
    /// answer then is a 503 (fail closed: the end user may be blocked or
    /// over its budget).
    pub async fn end_user(
        &self,
        id: Option<&str>,
        key_default: Option<&str>,
    ) -> Result<Option<Arc<EndUserEntry>>, GatewayError> {
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            return Ok(None);
        };
        let cache = self.keys.end_users();
        let entry = match cache.get(id) {
            Some(entry) => Some(entry),
            None if !cache.worth_reading(id) => None,
            None => {
                let owned = id.to_string();
                self.on_control(move |keys, ctx| async move {
                    keys.end_users().load(ctx.store(), &owned).await
                })
                .await?
            }
        };
        if entry.as_ref().is_some_and(|e| e.record.blocked) {
            return Err(GatewayError::EndUserBlocked(id.to_string()));
        }
        if entry.as_ref().is_some_and(|e| e.has_own_budget()) {
            return Ok(entry);
        }
        let Some(row) = self.default_row(key_default).await? else {
            return Ok(entry);
        };
        let defaults = cache.defaults();
        if let Some(rider) = defaults.rider(id, &row) {
            return Ok(Some(rider));
        }
        let (record, counter) = match entry {
            Some(e) => (e.record.clone(), Some(e.budget.clone())),
            None => {
                let owned = id.to_string();
                let record = self
                    .on_control(move |_, ctx| async move { ctx.store().get_end_user(&owned).await })
                    .await?;
                let record = record.unwrap_or_else(|| crate::store::EndUserRecord {
                    user_id: id.to_string(),
                    ..Default::default()
                });
                (record, None)
            }
        };
        Ok(Some(defaults.ride(record, &row, counter)))
    }

    /// The default budget row for end users of a key with `key_default`:
    /// the first of it and the proxy-wide one that exists (read through
    /// once when not cached).
    async fn default_row(
        &self,
        key_default: Option<&str>,
    ) -> Result<Option<Arc<crate::store::EndUserBudget>>, GatewayError> {
        let defaults = self.keys.end_users().defaults();
        for budget_id in defaults.candidates(key_default) {
            let row = match defaults.cached(budget_id) {
                Some(row) => row,
                None => {
                    let owned = budget_id.to_string();
                    self.on_control(move |keys, ctx| async move {
                        keys.end_users().defaults().load(ctx.store(), &owned).await
                    })
                    .await?
                }
            };
            if row.is_some() {
                return Ok(row);
            }
        }
        Ok(None)
    }

    /// Runs a store read on the control plane, within the read-through
    /// deadline; a failure is a 503 (fail closed).
    async fn on_control<T, F, Fut>(&self, read: F) -> Result<T, GatewayError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<KeyCache>, Arc<crate::control::ControlCtx>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, crate::store::StoreError>> + Send + 'static,
    {
        let keys = self.keys.clone();
        self.control
            .call(READ_THROUGH_TIMEOUT, move |ctx| read(keys, ctx))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(GatewayError::AuthUnavailable)
    }
}

/// The key from `Authorization: Bearer`, `api-key` or `x-api-key`, as LiteLLM
/// accepts them.
pub fn credential(head: &RequestHead) -> Option<&str> {
    if let Some(v) = head.header("authorization") {
        let v = v.trim();
        let key = v
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case("bearer "))
            .map_or(v, |_| v[7..].trim());
        if !key.is_empty() {
            return Some(key);
        }
    }
    ["api-key", "x-api-key"]
        .iter()
        .filter_map(|h| head.header(h))
        .map(str::trim)
        .find(|k| !k.is_empty())
}

/// Enough of a key to recognise it, never enough to use it.
pub fn abbreviate(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 8 {
        return "***".to_string();
    }
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("sk-...{tail}")
}

#[cfg(test)]
mod tests {
    use super::{hash_key, CredentialMemo};

    #[test]
    fn the_memo_always_answers_the_keys_own_hash() {
        let mut memo = CredentialMemo::default();
        for key in [
            "sk-1234", "sk-1234", "sk-1235", "sk-1234", "sk-12345", "", "sk-1234",
        ] {
            assert_eq!(memo.hash(key), hash_key(key), "{key}");
        }
    }
}
