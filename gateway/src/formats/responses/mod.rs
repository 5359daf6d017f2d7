//! OpenAI's Responses API as a client format (`/v1/responses`), bridged
//! through chat completions for every provider, as LiteLLM does for
//! providers without a native Responses API: requests become internal
//! chat completions requests, internal answers and streams become Response
//! objects and Responses events. Errors keep OpenAI's shape.

mod request;
mod response;
mod stream;
mod tools;

pub use request::to_chat;
pub use response::from_chat;
pub use stream::ChatToResponses;
pub use tools::CallNames;
