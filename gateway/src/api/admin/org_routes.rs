//! The routes of `/budget/*` and `/organization/*`, with LiteLLM's methods
//! (its `PATCH` and `DELETE` ones also answer `POST`, as the rest of this
//! API takes its changes).

use super::query::Query;
use super::{budgets, org_members, orgs};
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::state::Worker;
use serde_json::Value;

/// One budget or organization endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgRoute {
    /// `POST /budget/new`.
    BudgetNew,
    /// `POST /budget/update`.
    BudgetUpdate,
    /// `POST /budget/info`.
    BudgetInfo,
    /// `GET /budget/settings?budget_id=`.
    BudgetSettings,
    /// `GET /budget/list`.
    BudgetList,
    /// `POST /budget/delete`.
    BudgetDelete,
    /// `POST /organization/new`.
    OrgNew,
    /// `PATCH /organization/update`.
    OrgUpdate,
    /// `GET /organization/info?organization_id=`.
    OrgInfo,
    /// LiteLLM's deprecated `POST /organization/info`.
    OrgInfoMany,
    /// `GET /organization/list`.
    OrgList,
    /// `DELETE /organization/delete`.
    OrgDelete,
    /// `POST /organization/member_add`.
    MemberAdd,
    /// `PATCH /organization/member_update`.
    MemberUpdate,
    /// `DELETE /organization/member_delete`.
    MemberDelete,
}

/// The route of a method and path, if any.
pub fn parse(method: &str, path: &str) -> Option<OrgRoute> {
    use OrgRoute::*;
    let get = method == "GET" || method == "HEAD";
    let post = method == "POST";
    let route = match path {
        "/budget/new" if post => BudgetNew,
        "/budget/update" if post => BudgetUpdate,
        "/budget/info" if post => BudgetInfo,
        "/budget/settings" if get => BudgetSettings,
        "/budget/list" if get => BudgetList,
        "/budget/delete" if post => BudgetDelete,
        "/organization/new" if post => OrgNew,
        "/organization/update" if post || method == "PATCH" => OrgUpdate,
        "/organization/info" if get => OrgInfo,
        "/organization/info" if post => OrgInfoMany,
        "/organization/list" if get => OrgList,
        "/organization/delete" if post || method == "DELETE" => OrgDelete,
        "/organization/member_add" if post => MemberAdd,
        "/organization/member_update" if post || method == "PATCH" => MemberUpdate,
        "/organization/member_delete" if post || method == "DELETE" => MemberDelete,
        _ => return None,
    };
    Some(route)
}

/// Answers one budget or organization request.
pub async fn answer(
    worker: &Worker,
    caller: &Principal,
    route: OrgRoute,
    q: Query,
    body: &[u8],
) -> Result<Value, GatewayError> {
    use OrgRoute::*;
    if !matches!(route, BudgetSettings | BudgetList | OrgInfo | OrgList) {
        q.finish()?;
        return match route {
            BudgetNew => budgets::new(worker, caller, body).await,
            BudgetUpdate => budgets::update(worker, caller, body).await,
            BudgetInfo => budgets::info(worker, body).await,
            BudgetDelete => budgets::delete(worker, body).await,
            OrgNew => orgs::new(worker, caller, body).await,
            OrgUpdate => orgs::update(worker, caller, body).await,
            OrgInfoMany => orgs::info_many(worker, body).await,
            OrgDelete => orgs::delete(worker, body).await,
            MemberAdd => org_members::add(worker, body).await,
            MemberUpdate => org_members::update(worker, caller, body).await,
            _ => org_members::delete(worker, body).await,
        };
    }
    match route {
        BudgetSettings => budgets::settings(worker, q).await,
        BudgetList => budgets::list(worker, q).await,
        OrgInfo => orgs::info(worker, q).await,
        _ => orgs::list(worker, q).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_litellm_methods() {
        assert_eq!(
            parse("PATCH", "/organization/update"),
            Some(OrgRoute::OrgUpdate)
        );
        assert_eq!(
            parse("POST", "/organization/update"),
            Some(OrgRoute::OrgUpdate)
        );
        assert_eq!(
            parse("DELETE", "/organization/member_delete"),
            Some(OrgRoute::MemberDelete)
        );
        assert_eq!(parse("GET", "/organization/info"), Some(OrgRoute::OrgInfo));
        assert_eq!(
            parse("POST", "/organization/info"),
            Some(OrgRoute::OrgInfoMany)
        );
        assert_eq!(parse("GET", "/budget/new"), None);
        assert_eq!(parse("DELETE", "/budget/delete"), None);
        assert_eq!(parse("POST", "/budget/nope"), None);
    }
}
