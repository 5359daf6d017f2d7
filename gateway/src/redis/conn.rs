//! One Redis connection, the same on either runtime: where it goes
//! ([`Endpoint`]), how it logs
//! in (`AUTH`, `SELECT`, `CLIENT SETNAME`), reads Redis's clock and loads
//! the scripts, and how a pipeline of commands goes out and its replies
//! come back ([`send`]: `ASKING` where a Cluster asked for it, and the
//! calls that got `NOSCRIPT` resent once after the scripts are loaded).
//!
//! Only the socket and the timer differ between the cores (monoio,
//! [`super::monoio_wire`]) and the control plane (tokio,
//! [`super::tokio_wire`]): each is a [`Wire`].

use super::clock::{parse_time, RedisClock};
use super::endpoint::{Endpoint, RedisTls};
use super::error::RemoteError;
use super::resp::{self, Reply};
use super::slots::key_slot;
use std::future::Future;
use std::time::{Duration, Instant};

/// A socket to Redis on one runtime, and that runtime's timer.
pub trait Wire: Sized {
    /// Connects to `addr` (`host:port`), over TLS when `tls` is given.
    fn connect(
        addr: &str,
        tls: Option<&RedisTls>,
    ) -> impl Future<Output = Result<Self, RemoteError>>;
    /// Connects to the Unix socket at `path`.
    fn connect_unix(path: &str) -> impl Future<Output = Result<Self, RemoteError>>;
    /// Writes all of `out` (and flushes it); gives the buffer back.
    fn send(&mut self, out: Vec<u8>) -> impl Future<Output = (std::io::Result<()>, Vec<u8>)>;
    /// Appends what arrives to `buf`; 0 when the connection closed.
    fn receive(&mut self, buf: &mut Vec<u8>) -> impl Future<Output = std::io::Result<usize>>;
    /// `f`'s output, or `None` when `limit` passes first.
    fn timeout<F: Future>(limit: Duration, f: F) -> impl Future<Output = Option<F::Output>>;
}

/// Commands to send, each to the master of its slot on a Cluster.
pub trait Commands: Sync {
    /// How many.
    fn len(&self) -> usize;
    /// The slot of command `i`.
    fn slot(&self, i: usize) -> u16;
    /// Appends command `i` to `out`, deadlines in Redis time by `clock`.
    fn encode(&self, i: usize, clock: Option<&RedisClock>, out: &mut Vec<u8>);
    /// The body of the script command `i` runs (`EVALSHA`), loaded when
    /// Redis answers it with `NOSCRIPT`.
    fn script(&self, i: usize) -> Option<&'static str>;
}

/// Plain commands (their arguments), each routed by its first argument
/// after the name (its key, or a channel).
pub struct Plain<'a>(pub &'a [Vec<Vec<u8>>]);

impl Commands for Plain<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn slot(&self, i: usize) -> u16 {
        self.0[i].get(1).map_or(0, |key| key_slot(key))
    }

    fn encode(&self, i: usize, _clock: Option<&RedisClock>, out: &mut Vec<u8>) {
        resp::encode(&self.0[i], out);
    }

    fn script(&self, _i: usize) -> Option<&'static str> {
        None
    }
}

/// Largest reply read: the limiter's and cooldowns' replies are a few
/// hundred bytes, so a bigger one (a wrong server, a huge bulk length) is
/// refused instead of buffered without bound.
const MAX_REPLY_BYTES: usize = 16 << 20;

/// One connection with its read buffer and its reading of Redis's clock.
pub struct Conn<W> {
    wire: W,
    buf: Vec<u8>,
    /// Bytes of `buf` already parsed.
    at: usize,
    /// The outgoing buffer, kept between round trips.
    out: Vec<u8>,
    /// The server's clock, read when the connection opened for scripts.
    pub clock: Option<RedisClock>,
}

impl<W: Wire> Conn<W> {
    /// Connects to `addr` (the endpoint's, or a Cluster node) and logs in;
    /// a server whose ACL refuses `CLIENT SETNAME` serves it all the same.
    pub async fn open(endpoint: &Endpoint, addr: &str) -> Result<Conn<W>, RemoteError> {
        let wire = match endpoint.unix {
            true => W::connect_unix(addr).await?,
            false => W::connect(addr, endpoint.tls.as_ref()).await?,
        };
        let mut conn = Conn {
            wire,
            buf: Vec::with_capacity(4096),
            at: 0,
            out: Vec::with_capacity(4096),
            clock: None,
        };
        let mut setup: Vec<Vec<String>> = Vec::new();
        if let Some(password) = &endpoint.password {
            let mut auth = vec!["AUTH".to_string()];
            auth.extend(endpoint.username.clone());
            auth.push(password.clone());
            setup.push(auth);
        }
        if let Some(db) = endpoint.db {
            setup.push(vec!["SELECT".into(), db.to_string()]);
        }
        setup.push(vec![
            "CLIENT".into(),
            "SETNAME".into(),
            endpoint.name.into(),
        ]);
        let named = setup.len() - 1;
        for (i, reply) in conn.exchange(setup.iter()).await?.into_iter().enumerate() {
            if let (Reply::Error(e), false) = (reply, i == named) {
                return Err(RemoteError::Failed(format!("Redis set-up: {e}")));
            }
        }
        Ok(conn)
    }

    /// [`open`](Self::open), then reads Redis's clock (for deadlines
    /// written in Redis time) and loads `scripts`.
    pub async fn open_for_scripts(
        endpoint: &Endpoint,
        addr: &str,
        scripts: &[&str],
    ) -> Result<Conn<W>, RemoteError> {
        let mut conn = Self::open(endpoint, addr).await?;
        conn.clock = conn.read_clock().await?;
        conn.load(scripts).await?;
        Ok(conn)
    }

    /// Reads Redis's clock (`TIME`); without it (a server whose ACL refuses
    /// TIME) admissions go without a deadline.
    async fn read_clock(&mut self) -> Result<Option<RedisClock>, RemoteError> {
        let sent = Instant::now();
        let reply = self.exchange([["TIME"]].iter()).await?;
        let answered = Instant::now();
        let parts: Vec<String> = match reply.first() {
            Some(Reply::Array(Some(items))) => items
                .iter()
                .filter_map(|i| match i {
                    Reply::Bulk(Some(b)) => String::from_utf8(b.clone()).ok(),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(parse_time(&parts)
            .map(|(secs, micros)| RedisClock::from_time(secs, micros, sent, answered)))
    }

    /// `SCRIPT LOAD` of each of `bodies`.
    pub async fn load(&mut self, bodies: &[&str]) -> Result<(), RemoteError> {
        let load: Vec<[&str; 3]> = bodies.iter().map(|b| ["SCRIPT", "LOAD", b]).collect();
        for reply in self.exchange(load.iter()).await? {
            if let Reply::Error(e) = reply {
                return Err(RemoteError::Failed(format!("SCRIPT LOAD: {e}")));
            }
        }
        Ok(())
    }

    /// Writes every command, then reads as many replies.
    pub async fn exchange<'a, C, S>(
        &mut self,
        commands: impl Iterator<Item = &'a C>,
    ) -> Result<Vec<Reply>, RemoteError>
    where
        C: AsRef<[S]> + 'a + ?Sized,
        S: AsRef<[u8]>,
    {
        let mut out = self.take_out();
        let mut expected = 0;
        for command in commands {
            resp::encode(command.as_ref(), &mut out);
            expected += 1;
        }
        self.exchange_encoded(out, expected).await
    }

    /// The outgoing buffer, empty, to encode commands into.
    pub fn take_out(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        out
    }

    /// Writes `out` (`expected` encoded commands), then reads as many
    /// replies.
    pub async fn exchange_encoded(
        &mut self,
        out: Vec<u8>,
        expected: usize,
    ) -> Result<Vec<Reply>, RemoteError> {
        if expected == 0 {
            self.out = out;
            return Ok(Vec::new());
        }
        let (sent, out) = self.wire.send(out).await;
        self.out = out;
        sent.map_err(|e| RemoteError::Unreachable(format!("write: {e}")))?;
        let mut replies = Vec::with_capacity(expected);
        while replies.len() < expected {
            replies.push(self.receive().await?);
        }
        self.buf.drain(..self.at);
        self.at = 0;
        Ok(replies)
    }

    /// The next reply (or pushed message) on the connection.
    pub async fn receive(&mut self) -> Result<Reply, RemoteError> {
        loop {
            if let Some((reply, used)) =
                resp::parse(&self.buf[self.at..]).map_err(RemoteError::Failed)?
            {
                self.at += used;
                if self.at == self.buf.len() {
                    self.buf.clear();
                    self.at = 0;
                }
                return Ok(reply);
            }
            // What was parsed goes before more is read, so a connection
            // that only receives (a subscription) keeps a bounded buffer.
            self.buf.drain(..self.at);
            self.at = 0;
            if self.buf.len() > MAX_REPLY_BYTES {
                return Err(RemoteError::Failed(format!(
                    "a reply larger than {MAX_REPLY_BYTES} bytes"
                )));
            }
            let n = self
                .wire
                .receive(&mut self.buf)
                .await
                .map_err(|e| RemoteError::Unreachable(format!("read: {e}")))?;
            if n == 0 {
                return Err(RemoteError::Unreachable("connection closed".into()));
            }
        }
    }
}

/// Which commands of a pipeline go out: all, in order, or these (each
/// an index, and whether `ASKING` goes first).
#[derive(Debug, Clone, Copy)]
pub enum Picks<'a> {
    /// Every command, without `ASKING`.
    All,
    /// These.
    These(&'a [(usize, bool)]),
}

impl Picks<'_> {
    /// How many, of `commands`.
    fn len(self, commands: &impl Commands) -> usize {
        match self {
            Picks::All => commands.len(),
            Picks::These(p) => p.len(),
        }
    }

    /// The `i`-th.
    fn get(self, i: usize) -> (usize, bool) {
        match self {
            Picks::All => (i, false),
            Picks::These(p) => p[i],
        }
    }
}

/// Sends the commands `picks` names as one pipeline; one reply per pick, `ASKING`'s
/// dropped. The picks that got `NOSCRIPT` are sent again once, after their
/// scripts are loaded.
pub async fn send<W: Wire, C: Commands>(
    conn: &mut Conn<W>,
    commands: &C,
    picks: Picks<'_>,
) -> Result<Vec<Reply>, RemoteError> {
    let mut replies = pipeline(conn, commands, picks).await?;
    let missing: Vec<usize> = (0..replies.len())
        .filter(|&i| matches!(&replies[i], Reply::Error(e) if e.starts_with("NOSCRIPT")))
        .collect();
    if !missing.is_empty() {
        let mut scripts: Vec<&str> = missing
            .iter()
            .filter_map(|&i| commands.script(picks.get(i).0))
            .collect();
        scripts.sort_unstable();
        scripts.dedup();
        conn.load(&scripts).await?;
        let again: Vec<(usize, bool)> = missing.iter().map(|&i| picks.get(i)).collect();
        for (i, reply) in missing
            .into_iter()
            .zip(pipeline(conn, commands, Picks::These(&again)).await?)
        {
            replies[i] = reply;
        }
    }
    Ok(replies)
}

/// One exchange of `picks`, with the connection's clock for the deadlines.
async fn pipeline<W: Wire, C: Commands>(
    conn: &mut Conn<W>,
    commands: &C,
    picks: Picks<'_>,
) -> Result<Vec<Reply>, RemoteError> {
    let clock = conn.clock;
    let mut encoded = conn.take_out();
    let mut expected = 0;
    let n = picks.len(commands);
    for (i, asking) in (0..n).map(|i| picks.get(i)) {
        if asking {
            resp::encode(&["ASKING"], &mut encoded);
            expected += 1;
        }
        commands.encode(i, clock.as_ref(), &mut encoded);
        expected += 1;
    }
    let replies = conn.exchange_encoded(encoded, expected).await?;
    if !matches!(picks, Picks::These(p) if p.iter().any(|(_, asking)| *asking)) {
        return Ok(replies);
    }
    let mut out = Vec::with_capacity(n);
    let mut replies = replies.into_iter();
    for (_, asking) in (0..n).map(|i| picks.get(i)) {
        if asking {
            replies.next();
        }
        out.extend(replies.next());
    }
    Ok(out)
}

/// Sends `calls` to one server as one pipeline and reads one reply per
/// call, opening the connection first when there is none (reading the
/// clock and loading `scripts`).
pub async fn round_trip<W: Wire>(
    conn: &mut Option<Conn<W>>,
    endpoint: &Endpoint,
    scripts: &[&str],
    calls: &impl Commands,
) -> Result<Vec<Reply>, RemoteError> {
    let c = match conn {
        Some(c) => c,
        None => conn.insert(Conn::open_for_scripts(endpoint, &endpoint.addr, scripts).await?),
    };
    send(c, calls, Picks::All).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that announces a huge bulk string and keeps sending it.
    struct Flood {
        announced: bool,
    }

    impl Wire for Flood {
        async fn connect(_: &str, _: Option<&RedisTls>) -> Result<Self, RemoteError> {
            Err(RemoteError::Unreachable("test wire".into()))
        }
        async fn connect_unix(_: &str) -> Result<Self, RemoteError> {
            Err(RemoteError::Unreachable("test wire".into()))
        }
        async fn send(&mut self, out: Vec<u8>) -> (std::io::Result<()>, Vec<u8>) {
            (Ok(()), out)
        }
        async fn receive(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
            let before = buf.len();
            if !self.announced {
                self.announced = true;
                buf.extend_from_slice(b"$999999999\r\n");
            }
            buf.resize(buf.len() + (1 << 20), b'x');
            Ok(buf.len() - before)
        }
        async fn timeout<F: Future>(_: Duration, f: F) -> Option<F::Output> {
            Some(f.await)
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_reply_past_the_cap_is_refused_not_buffered() {
        let mut conn = Conn {
            wire: Flood { announced: false },
            buf: Vec::new(),
            at: 0,
            out: Vec::new(),
            clock: None,
        };
        let err = conn.receive().await.unwrap_err();
        assert!(
            matches!(&err, RemoteError::Failed(m) if m.contains("larger than")),
            "{err:?}"
        );
        assert!(conn.buf.len() <= MAX_REPLY_BYTES + (2 << 20));
    }
}
