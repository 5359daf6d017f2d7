//! Google OAuth 2.0: a service account key file's RS256-signed JWT
//! assertion, or user credentials' refresh token, is exchanged at its
//! `token_uri` for an access token, which is cached and refreshed in the
//! background (`token`). Used by Vertex AI
//! deployments; knows nothing of requests besides handing out the token.

mod account;
mod token;

pub use account::{
    AuthorizedUser, Credentials, ServiceAccount, CLOUD_PLATFORM_SCOPE, MAX_KEY_FILE,
};
pub use token::{AccessToken, TokenSource};
