//! HTTP/1.1 wire format shared by the server and the upstream client: request
//! and response heads on `httparse`, chunked transfer coding, and the read
//! buffer both sides fill with monoio's owned-buffer IO.

mod buffer;
mod chunked;
mod request;
mod response;

pub use buffer::ReadBuffer;
pub use chunked::{encode_chunk, ChunkedDecoder, LAST_CHUNK};
pub use request::{parse_request_head, BodyFraming, HeadError, RequestHead};
pub use response::{parse_response_head, ResponseFraming, ResponseHead};
