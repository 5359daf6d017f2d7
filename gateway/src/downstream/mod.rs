//! The client's side of a connection, below the server and the handlers
//! that answer on it: the socket, plain or TLS (`stream`), TLS termination
//! (`tls`), and response writing (`response`).

mod response;
mod stream;
mod tls;

pub use response::{HeadBuilder, Responder};
pub use stream::ClientStream;
pub use tls::{ClientTls, ClientTlsError};
