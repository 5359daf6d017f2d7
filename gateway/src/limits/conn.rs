//! One Redis connection, the same on either runtime: where it goes
//! ([`Endpoint`]), how it logs
//! in (`AUTH`, `SELECT`, `CLIENT SETNAME`), reads Redis's clock and loads
//! the scripts, and how a pipeline of commands goes out and its replies
//! come back ([`send`]: `ASKING` where a Cluster asked for it, and the
//! calls that got `NOSCRIPT` resent once after the scripts are loaded).
//!
//! Only the socket and the timer differ between the cores (monoio,
//! [`super::direct`]) and the control plane (tokio, [`super::tokio_wire`]):
//! each is a [`Wire`].

use super::clock::{parse_time, RedisClock};
pub use super::endpoint::{Endpoint, RedisTls};
use super::remote::{Call, RemoteError};
use super::resp::{self, Reply};
use super::script;
use super::slots::key_slot;
use super::split::Part;
use super::window::Window;
use smallvec::SmallVec;
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
    /// The script command `i` runs besides the limiter's two, to load
    /// after `NOSCRIPT`.
    fn extra_script(&self, i: usize) -> Option<&'static str>;
}

/// Something that is sent as one limiter call, on a slot.
pub trait AsCall: Sync {
    /// The call.
    fn call(&self) -> &Call;
    /// Its slot (unused on one server).
    fn slot(&self) -> u16;
}

impl AsCall for Call {
    fn call(&self) -> &Call {
        self
    }

    fn slot(&self) -> u16 {
        0
    }
}

impl AsCall for Part {
    fn call(&self) -> &Call {
        &self.sub
    }

    fn slot(&self) -> u16 {
        self.slot
    }
}

/// Limiter calls (a batch, or a batch's parts by slot), each one
/// `EVALSHA`.
pub struct ScriptCalls<'a, T> {
    /// The calls.
    pub calls: &'a [T],
    /// The window the scripts count in.
    pub window: &'a Window,
    /// Lifetime of a parallel slot.
    pub slot_ttl: Duration,
}

impl<T: AsCall> Commands for ScriptCalls<'_, T> {
    fn len(&self) -> usize {
        self.calls.len()
    }

    fn slot(&self, i: usize) -> u16 {
        self.calls[i].slot()
    }

    fn encode(&self, i: usize, clock: Option<&RedisClock>, out: &mut Vec<u8>) {
        script::encode_evalsha(self.calls[i].call(), self.window, self.slot_ttl, clock, out);
    }

    fn extra_script(&self, i: usize) -> Option<&'static str> {
        self.calls[i].call().extra_script().map(|s| s.body())
    }
}

/// A batch to one server, its limiter operations (admissions and
/// settlements) sent as one `EVALSHA` in their order (group commit), the
/// other scripts one `EVALSHA` each after it.
pub struct GroupedCalls<'a> {
    calls: &'a [Call],
    /// The limiter operations, by index in `calls`.
    ops: Vec<usize>,
    /// The other scripts, by index in `calls`.
    others: Vec<usize>,
    window: &'a Window,
    slot_ttl: Duration,
}

impl<'a> GroupedCalls<'a> {
    /// Groups `calls`.
    pub fn new(calls: &'a [Call], window: &'a Window, slot_ttl: Duration) -> GroupedCalls<'a> {
        let (ops, others) =
            (0..calls.len()).partition(|&i| !matches!(calls[i], Call::Script { .. }));
        GroupedCalls {
            calls,
            ops,
            others,
            window,
            slot_ttl,
        }
    }

    /// Commands before the other scripts: the batch, when there is one.
    fn lead(&self) -> usize {
        usize::from(!self.ops.is_empty())
    }

    /// One reply per call, in the calls' order, from one reply per command.
    pub fn replies(&self, replies: Vec<Reply>) -> Vec<Reply> {
        let mut out = vec![Reply::Array(None); self.calls.len()];
        let mut replies = replies.into_iter();
        if let Some(batch) = (self.lead() == 1).then(|| replies.next()).flatten() {
            for (i, reply) in self
                .ops
                .iter()
                .zip(script::split_batch(batch, self.ops.len()))
            {
                out[*i] = reply;
            }
        }
        for (i, reply) in self.others.iter().zip(replies) {
            out[*i] = reply;
        }
        out
    }
}

impl Commands for GroupedCalls<'_> {
    fn len(&self) -> usize {
        self.lead() + self.others.len()
    }

    fn slot(&self, _i: usize) -> u16 {
        0
    }

    fn encode(&self, i: usize, clock: Option<&RedisClock>, out: &mut Vec<u8>) {
        if i < self.lead() {
            let ops: SmallVec<[&Call; 16]> = self.ops.iter().map(|&j| &self.calls[j]).collect();
            script::encode_batch(&ops, self.window, self.slot_ttl, clock, out);
        } else {
            let call = &self.calls[self.others[i - self.lead()]];
            script::encode_evalsha(call, self.window, self.slot_ttl, clock, out);
        }
    }

    fn extra_script(&self, i: usize) -> Option<&'static str> {
        let j = *self.others.get(i.checked_sub(self.lead())?)?;
        self.calls[j].extra_script().map(|s| s.body())
    }
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

    fn extra_script(&self, _i: usize) -> Option<&'static str> {
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

    /// [`open`](Self::open), then reads Redis's clock and loads the
    /// limiter's scripts.
    pub async fn open_for_scripts(endpoint: &Endpoint, addr: &str) -> Result<Conn<W>, RemoteError> {
        let mut conn = Self::open(endpoint, addr).await?;
        conn.clock = conn.read_clock().await?;
        conn.load_scripts().await?;
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

    /// Loads the limiter's script.
    pub async fn load_scripts(&mut self) -> Result<(), RemoteError> {
        self.load(&[script::LIMITER_LUA]).await
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
/// dropped. The picks that got `NOSCRIPT` are sent again once, after the
/// scripts are loaded (other modules' scripts too).
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
        conn.load_scripts().await?;
        let mut extra: Vec<&str> = missing
            .iter()
            .filter_map(|&i| commands.extra_script(picks.get(i).0))
            .collect();
        extra.sort_unstable();
        extra.dedup();
        conn.load(&extra).await?;
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

/// Sends `batch` to one server as one pipeline and reads one reply per
/// call, opening the connection first when there is none.
pub async fn round_trip<W: Wire>(
    conn: &mut Option<Conn<W>>,
    endpoint: &Endpoint,
    calls: &impl Commands,
) -> Result<Vec<Reply>, RemoteError> {
    let c = match conn {
        Some(c) => c,
        None => conn.insert(Conn::open_for_scripts(endpoint, &endpoint.addr).await?),
    };
    send(c, calls, Picks::All).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::remote::{LuaScript, ScriptCall, ScriptDone};
    use crate::limits::tokio_wire::tests::{endpoint, fake_redis, text};
    use crate::limits::tokio_wire::TokioWire;
    use std::sync::{Arc, Mutex};

    static MISSING: LuaScript = LuaScript::new("return {7}");
    static CACHED: LuaScript = LuaScript::new("return {1}");

    fn call(script: &'static LuaScript) -> Call {
        Call::Script {
            call: ScriptCall {
                script,
                keys: vec!["{k}:a".into()],
                args: Vec::new(),
            },
            deadline: None,
            done: ScriptDone(Box::new(|_| None)),
            undo: None,
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn noscript_loads_the_scripts_and_resends_only_those_calls() {
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = sent.clone();
        let addr = fake_redis(Arc::new(move |args| {
            let mut sent = log.lock().unwrap();
            let loaded = sent.iter().any(|c| c == "SCRIPT LOAD return {7}");
            let command = text(args);
            sent.push(command.clone());
            match args[0].as_slice() {
                b"TIME" => b"*2\r\n$10\r\n1700000000\r\n$1\r\n5\r\n".to_vec(),
                b"EVALSHA" if command.contains(MISSING.sha()) && !loaded => {
                    b"-NOSCRIPT No matching script.\r\n".to_vec()
                }
                b"EVALSHA" if command.contains(MISSING.sha()) => b"*1\r\n:7\r\n".to_vec(),
                b"EVALSHA" => b"*1\r\n:1\r\n".to_vec(),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        let batch = [call(&CACHED), call(&MISSING)];
        let window = Window::new(60);
        let calls = ScriptCalls {
            calls: &batch,
            window: &window,
            slot_ttl: Duration::from_secs(1),
        };
        let mut conn = None;
        let replies = round_trip::<TokioWire>(&mut conn, &endpoint(&addr), &calls)
            .await
            .unwrap();
        let one = |n| Reply::Array(Some(vec![Reply::Int(n)]));
        assert_eq!(replies, [one(1), one(7)]);
        assert!(conn.as_ref().unwrap().clock.is_some(), "TIME was read");
        let sent = sent.lock().unwrap();
        let evals = |sha: &str| {
            sent.iter()
                .filter(|c| c.starts_with("EVALSHA") && c.contains(sha))
                .count()
        };
        assert_eq!(evals(CACHED.sha()), 1, "not resent: {sent:?}");
        assert_eq!(evals(MISSING.sha()), 2, "resent once: {sent:?}");
        let loads: Vec<&String> = sent
            .iter()
            .filter(|c| c.starts_with("SCRIPT LOAD"))
            .collect();
        assert_eq!(
            loads.len(),
            3,
            "the limiter's at open, again, and the missing one"
        );
        assert_eq!(loads[2], "SCRIPT LOAD return {7}");
    }

    fn admission(rid: &str) -> Call {
        let d = crate::limits::Descriptor::new(
            crate::limits::Scope::ApiKey,
            "k",
            crate::limits::Kind::Requests,
            10,
        );
        Call::Admit {
            entries: vec![crate::limits::remote::Entry::charge(&d, 10, 1)],
            request_id: rid.into(),
            deadline: Instant::now() + Duration::from_secs(5),
            reply: tokio::sync::oneshot::channel().0,
        }
    }

    /// Group commit: a flush's admissions and settlements go out as one
    /// `EVALSHA` of the limiter's script (other scripts one each), and the
    /// batch's replies come back to their calls in the calls' order.
    #[tokio::test(flavor = "current_thread")]
    async fn a_flushs_limiter_calls_share_one_evalsha_and_get_their_own_replies() {
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = sent.clone();
        let addr = fake_redis(Arc::new(move |args| {
            let command = text(args);
            log.lock().unwrap().push(command.clone());
            match args[0].as_slice() {
                b"TIME" => b"*2\r\n$10\r\n1700000000\r\n$1\r\n5\r\n".to_vec(),
                b"EVALSHA" if command.contains(script::sha()) => {
                    b"*2\r\n*3\r\n:1\r\n:7\r\n:0\r\n*4\r\n:0\r\n:1\r\n:10\r\n:60\r\n".to_vec()
                }
                b"EVALSHA" => b"*1\r\n:9\r\n".to_vec(),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        let batch = [admission("r1"), call(&CACHED), admission("r2")];
        let window = Window::new(60);
        let calls = GroupedCalls::new(&batch, &window, Duration::from_secs(1));
        let mut conn = None;
        let replies = round_trip::<TokioWire>(&mut conn, &endpoint(&addr), &calls)
            .await
            .unwrap();
        let ints = |v: &[i64]| Reply::Array(Some(v.iter().map(|n| Reply::Int(*n)).collect()));
        assert_eq!(
            calls.replies(replies),
            [ints(&[1, 7, 0]), ints(&[9]), ints(&[0, 1, 10, 60])],
            "each call its own reply, in order"
        );
        let sent = sent.lock().unwrap();
        let evals: Vec<&String> = sent.iter().filter(|c| c.starts_with("EVALSHA")).collect();
        assert_eq!(evals.len(), 2, "one batch and the other script: {evals:?}");
        assert!(
            evals[0].contains(script::sha()) && evals[0].contains(" aa "),
            "both admissions in the first: {}",
            evals[0]
        );
    }

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
