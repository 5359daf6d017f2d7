//! The spend writer: batches spend-log rows from every core, writes them with
//! their spend totals in one transaction, and spools them to a local file
//! ([`super::spool`]) while the database is down, replaying the spool a
//! batch at a time once the database answers again. Writes are idempotent
//! by `request_id`, so a replay never duplicates a row. At shutdown it
//! drains: every row received is written, or spooled when the database does
//! not take it within [`DRAIN_WRITE`].

mod spool;

pub use spool::SpoolConfig;

use crate::control::{ControlError, ControlPlane};
use crate::spend::SpendLogs;
use crate::store::{SpendChanges, SpendLogRow, StoreError};
use crate::sync::{Caches, SyncCtx};
use spool::Spool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Rows written per transaction at most.
const BATCH: usize = 8192;
/// Longest a row waits for its batch while the traffic is light.
const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// Rows a batch holds within [`FLUSH_EVERY`] of its first from which the
/// traffic is heavy (about 1,300 rows a second): the batch then fills
/// until [`BUSY_FLUSH_EVERY`]. Each transaction costs Postgres a dozen
/// statements and one update of every key, user, team and daily row it
/// charges, so at 1,000 keys and 4,000 requests a second a batch of 50 ms
/// updated nearly one key a row, and one of a second a quarter of one.
const BUSY_ROWS: usize = 64;
/// Longest a row waits for its batch while the traffic is heavy.
const BUSY_FLUSH_EVERY: Duration = Duration::from_secs(1);
/// A live batch's rows are written spread over this share of the time
/// since the previous batch's write began ([`spread_of`]), at most
/// [`MAX_SPREAD`]: Postgres then meets them in short pieces at about the
/// rate they came in, not in one burst that takes the CPU from a core
/// beside it.
const SPREAD_SHARE: (u32, u32) = (3, 4);
/// Longest a live batch's rows are spread over.
const MAX_SPREAD: Duration = Duration::from_millis(750);
/// Capacity the batch keeps between two writes (a busy batch's is let go).
const KEPT_CAPACITY: usize = 1024;
/// Rows a replay reads from the spool and writes per transaction: fewer
/// than a live batch may hold, so one write fits in [`REPLAY_SLICE`].
const REPLAY_BATCH: usize = 1000;
/// How often a non-empty spool is retried.
const REPLAY_EVERY: Duration = Duration::from_secs(1);
/// Longest one replay runs before the writer serves live rows again; a
/// spool with more rows continues [`REPLAY_AGAIN`] later.
const REPLAY_SLICE: Duration = Duration::from_millis(500);
/// Pause between two slices of a long replay.
const REPLAY_AGAIN: Duration = Duration::from_millis(20);
/// Flushes from the cores waiting in the queue (each about 20 ms of one
/// core's rows) from which live rows are parked in the spool rather than
/// written, so a database slower than the traffic costs disk, not memory.
const PARK_WHEN_QUEUED: usize = 512;
/// Longest one write may take; the rows of a slower one are spooled (and
/// replayed idempotently, should the write have committed after all).
const WRITE_DEADLINE: Duration = Duration::from_secs(5);
/// Longest the check before a replay may take.
const PING_DEADLINE: Duration = Duration::from_secs(2);
/// Longest one write may take while draining at shutdown; the rows of a
/// slower one (and every row after it) are spooled for the next process.
const DRAIN_WRITE: Duration = Duration::from_secs(3);
/// Longest the writes of a drain may take together (the process waits
/// [`DRAIN_TIMEOUT`] for the whole drain); the rest is spooled.
const DRAIN_WRITES: Duration = Duration::from_secs(7);

/// How long [`SpendWriter::drain`] waits for the writer at shutdown.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Capacity of the spend queue, in batches (each core sends one batch per
/// flush, not one message per row, so the control thread wakes rarely).
const SPEND_QUEUE: usize = 4096;

/// Handle to the spend writer; cheap to clone, usable from any thread.
#[derive(Clone)]
pub struct SpendWriter {
    spend: mpsc::Sender<WriterMsg>,
}

impl SpendWriter {
    /// Starts the writer on the control plane; it refreshes `caches` after
    /// each write, spools to `spool` while the database is down and keeps
    /// the rows `logs` keeps.
    pub fn start(
        control: &ControlPlane,
        caches: Caches,
        spool: SpoolConfig,
        logs: SpendLogs,
    ) -> Result<SpendWriter, ControlError> {
        let (spend, spend_rx) = mpsc::channel::<WriterMsg>(SPEND_QUEUE);
        control.spawn(move |ctx| run(caches.on(ctx), spend_rx, spool, logs))?;
        Ok(SpendWriter { spend })
    }

    /// Hands a batch of spend rows to the writer without waiting. Returns the
    /// rows when the queue is full so the caller keeps them for later.
    pub fn record(&self, rows: Vec<SpendLogRow>) -> Result<(), Vec<SpendLogRow>> {
        self.spend
            .try_send(WriterMsg::Rows(rows))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => {
                    m.into_rows()
                }
            })
    }

    /// Writes (or spools) every row handed over so far, waiting up to
    /// [`DRAIN_TIMEOUT`]; called once at shutdown, from outside any runtime.
    pub fn drain(&self) -> bool {
        let (done, wait) = std::sync::mpsc::channel();
        if self.spend.blocking_send(WriterMsg::Drain(done)).is_err() {
            return false;
        }
        wait.recv_timeout(DRAIN_TIMEOUT).is_ok()
    }
}

/// What the data plane sends the writer.
enum WriterMsg {
    /// Rows of one core's flush.
    Rows(Vec<SpendLogRow>),
    /// Write (or spool) everything received so far, then signal.
    Drain(std::sync::mpsc::Sender<()>),
}

impl WriterMsg {
    /// The rows of a message that could not be sent.
    fn into_rows(self) -> Vec<SpendLogRow> {
        match self {
            WriterMsg::Rows(rows) => rows,
            WriterMsg::Drain(_) => Vec::new(),
        }
    }
}

/// Runs until the channel closes.
async fn run(
    ctx: Arc<SyncCtx>,
    mut msgs: mpsc::Receiver<WriterMsg>,
    config: SpoolConfig,
    logs: SpendLogs,
) {
    let ctx = Writer { ctx, logs };
    let mut spool = Spool::open(config);
    let mut batch: Vec<SpendLogRow> = Vec::with_capacity(KEPT_CAPACITY);
    let mut next_replay = tokio::time::Instant::now();
    let mut parking = false;
    let mut last_write = tokio::time::Instant::now();
    loop {
        tokio::select! {
            msg = msgs.recv() => {
                let Some(msg) = msg else { return };
                let drained = match msg {
                    WriterMsg::Rows(rows) => {
                        batch.extend(rows);
                        fill(&mut batch, &mut msgs, tokio::time::Instant::now()).await
                    }
                    WriterMsg::Drain(done) => Some(done),
                };
                match drained {
                    Some(done) => {
                        drain(&ctx, std::mem::take(&mut batch), &mut spool).await;
                        let _ = done.send(());
                    }
                    None => {
                        let queued = msgs.len();
                        let spread = spread_of(last_write.elapsed());
                        last_write = tokio::time::Instant::now();
                        write_or_park(&ctx, &batch, queued, spread, &mut spool, &mut parking).await;
                        // Emptied in place: the batch keeps its capacity,
                        // but not a burst's.
                        batch.clear();
                        batch.shrink_to(KEPT_CAPACITY);
                    }
                }
            }
            _ = tokio::time::sleep_until(next_replay) => {
                let pause = match replay_spool(&ctx, &mut spool).await {
                    Replay::Unfinished => REPLAY_AGAIN,
                    Replay::Done | Replay::Stopped => REPLAY_EVERY,
                };
                next_replay = tokio::time::Instant::now() + pause;
            }
        }
    }
}

/// How long a live batch's write may be spread over when the previous
/// one began `period` ago: [`SPREAD_SHARE`] of it, at most
/// [`MAX_SPREAD`]. Under a steady load the period is the time a batch
/// takes to fill, so each write ends before the next batch is due.
fn spread_of(period: Duration) -> Duration {
    let (part, whole) = SPREAD_SHARE;
    // Divided first: a product of a long period could overflow.
    (period / whole * part).min(MAX_SPREAD)
}

/// When a batch whose first row came at `first` and that holds `rows`
/// rows is written: [`FLUSH_EVERY`] after its first row, or
/// [`BUSY_FLUSH_EVERY`] once it holds [`BUSY_ROWS`] (larger batches at a
/// high rate, each row's share of a transaction's fixed cost smaller).
fn batch_deadline(first: tokio::time::Instant, rows: usize) -> tokio::time::Instant {
    first
        + match rows >= BUSY_ROWS {
            true => BUSY_FLUSH_EVERY,
            false => FLUSH_EVERY,
        }
}

/// Adds the rows that come in to `batch` (whose first row came at
/// `first`) until its deadline ([`batch_deadline`]: a batch that holds
/// [`BUSY_ROWS`] before [`FLUSH_EVERY`] ran out keeps filling), until it
/// holds [`BATCH`] rows or the channel closes; returns a drain request
/// that came in meanwhile (the batch is then drained with it).
async fn fill(
    batch: &mut Vec<SpendLogRow>,
    msgs: &mut mpsc::Receiver<WriterMsg>,
    first: tokio::time::Instant,
) -> Option<std::sync::mpsc::Sender<()>> {
    while batch.len() < BATCH {
        let deadline = batch_deadline(first, batch.len());
        // Rows that came after the deadline are the next batch's, even
        // when already waiting.
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        match tokio::time::timeout_at(deadline, msgs.recv()).await {
            Ok(Some(WriterMsg::Rows(rows))) => batch.extend(rows),
            Ok(Some(WriterMsg::Drain(done))) => return Some(done),
            Ok(None) | Err(_) => break,
        }
    }
    None
}

/// The writer's context: the caches and store, and which rows it keeps.
struct Writer {
    ctx: Arc<SyncCtx>,
    logs: SpendLogs,
}

/// Writes a batch of live rows, each chunk within [`WRITE_DEADLINE`] (a
/// chunk that misses it is spooled). While [`PARK_WHEN_QUEUED`] or more
/// flushes wait behind it, the database is not keeping up: the batch goes
/// to the spool instead (an append, far cheaper than a write), so the
/// queue drains and memory stays bounded; the replay writes it later.
/// `parking` remembers the episode, for one log line at each end. The
/// rows may be spread over `spread` ([`crate::store::Store::record_spend`]).
async fn write_or_park(
    ctx: &Writer,
    rows: &[SpendLogRow],
    queued: usize,
    spread: Duration,
    spool: &mut Spool,
    parking: &mut bool,
) {
    if queued >= PARK_WHEN_QUEUED {
        if !*parking {
            tracing::warn!(
                queued_flushes = queued,
                "the database is not keeping up with spend rows: parking them in the spool until it does"
            );
            *parking = true;
        }
        spool.append(rows);
        return;
    }
    if *parking && queued == 0 {
        tracing::info!("the spend queue has drained: writing rows to the database again");
        *parking = false;
    }
    for chunk in rows.chunks(BATCH) {
        let written = tokio::time::timeout(WRITE_DEADLINE, write(ctx, chunk, spread, spool)).await;
        if !matches!(written, Ok(Ok(()))) {
            spool.append(chunk);
        }
    }
}

/// Writes `rows` with a deadline on each batch; spools the batch that
/// missed it and every batch after.
async fn drain(ctx: &Writer, rows: Vec<SpendLogRow>, spool: &mut Spool) {
    let mut database_up = true;
    let mut spooled = 0;
    let until = tokio::time::Instant::now() + DRAIN_WRITES;
    for chunk in rows.chunks(BATCH) {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if database_up && !left.is_zero() {
            let written = write(ctx, chunk, Duration::ZERO, spool);
            match tokio::time::timeout(DRAIN_WRITE.min(left), written).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) | Err(_) => database_up = false,
            }
        }
        if spool.append(chunk) {
            spooled += chunk.len();
        }
    }
    if spooled > 0 {
        tracing::warn!(
            rows = spooled,
            "shutting down with the database unavailable: spend rows left in the spool for the next start"
        );
    }
}

/// Writes `rows`; `Err` when the database is unavailable (the caller
/// spools them). A batch the database refuses for its content is written
/// row by row, and only the rows it refuses alone are lost (logged). The
/// rows may be spread over `spread`.
async fn write(
    ctx: &Writer,
    rows: &[SpendLogRow],
    spread: Duration,
    spool: &mut Spool,
) -> Result<(), StoreError> {
    match write_batch(ctx, rows, spread).await {
        Err(StoreError::Query(e)) if rows.len() > 1 => {
            tracing::warn!(error = %e, rows = rows.len(), "a spend batch was refused; writing its rows one by one");
            for row in rows {
                match write_batch(ctx, std::slice::from_ref(row), Duration::ZERO).await {
                    Err(StoreError::Query(e)) => {
                        spool.count_lost(1);
                        tracing::error!(request_id = %row.request_id, error = %e, lost_since_start = spool.lost(), "spend row LOST: the database refuses it");
                    }
                    other => other?,
                }
            }
            Ok(())
        }
        Err(StoreError::Query(e)) => {
            spool.count_lost(1);
            tracing::error!(error = %e, lost_since_start = spool.lost(), "spend row LOST: the database refuses it");
            Ok(())
        }
        other => other,
    }
}

/// One transaction; marks the rows flushed and publishes what changed.
/// Keys whose cached copy was read again while the write ran (another
/// replica's change) are read once more, as their copy may count the
/// written spend twice.
async fn write_batch(
    writer: &Writer,
    rows: &[SpendLogRow],
    spread: Duration,
) -> Result<(), StoreError> {
    let ctx = &*writer.ctx;
    let copies = ctx.keys.copies_of(rows);
    let mut changes = store_rows(writer, rows, spread).await.inspect_err(|e| {
        if matches!(e, StoreError::Unavailable(_)) {
            tracing::warn!(error = %e, rows = rows.len(), "spend write failed; spooling to disk");
        }
    })?;
    ctx.keys.mark_flushed(rows);
    changes.refresh.extend(ctx.keys.read_again_since(copies));
    ctx.publish_spend(&changes).await;
    Ok(())
}

/// Writes the rows the writer keeps and counts the others (their spend,
/// and every one in the daily tables, so those stay right with the log
/// off). The kept rows go first: should the count fail, the batch is
/// spooled, and its replay skips the rows already written and counts the
/// others once.
async fn store_rows(
    writer: &Writer,
    rows: &[SpendLogRow],
    spread: Duration,
) -> Result<SpendChanges, StoreError> {
    let store = writer.ctx.store();
    if rows.iter().all(|r| writer.logs.keeps(r)) {
        return store.record_spend(rows, spread).await;
    }
    let (kept, counted): (Vec<SpendLogRow>, Vec<SpendLogRow>) = rows
        .iter()
        .filter(|r| writer.logs.matters(r))
        .cloned()
        .partition(|r| writer.logs.keeps(r));
    let mut changes = store.record_spend(&kept, spread).await?;
    let counted = store.count_spend(&counted).await?;
    changes.announce.extend(counted.announce);
    changes.refresh.extend(counted.refresh);
    Ok(changes)
}

/// How a replay slice ended.
enum Replay {
    /// Nothing (more) to replay.
    Done,
    /// The slice ran out with rows left.
    Unfinished,
    /// The database or the spool failed; try again later.
    Stopped,
}

/// Replays the spool a batch at a time once the database answers, for at
/// most [`REPLAY_SLICE`]; each file goes once all its rows are written.
async fn replay_spool(ctx: &Writer, spool: &mut Spool) -> Replay {
    spool.adopt_new_orphans();
    if spool.is_empty() {
        return Replay::Done;
    }
    match tokio::time::timeout(PING_DEADLINE, ctx.ctx.store().ping()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "database still unavailable; the spool waits");
            return Replay::Stopped;
        }
        Err(_) => return Replay::Stopped,
    }
    let until = tokio::time::Instant::now() + REPLAY_SLICE;
    let mut written = 0usize;
    let mut outcome = Replay::Done;
    'files: for path in spool.files() {
        loop {
            if tokio::time::Instant::now() >= until {
                outcome = Replay::Unfinished;
                break 'files;
            }
            let batch = match spool.read_batch(&path, REPLAY_BATCH) {
                Ok(batch) => batch,
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "cannot read the spool; will retry");
                    outcome = Replay::Stopped;
                    break 'files;
                }
            };
            if !batch.rows.is_empty() {
                let written_now = tokio::time::timeout(
                    WRITE_DEADLINE,
                    write(ctx, &batch.rows, Duration::ZERO, spool),
                )
                .await;
                if !matches!(written_now, Ok(Ok(()))) {
                    outcome = Replay::Stopped;
                    break 'files;
                }
            }
            written += batch.rows.len();
            spool.replayed_to(&path, batch.end);
            if batch.eof {
                break;
            }
        }
        let replayed_all =
            std::fs::metadata(&path).is_ok_and(|m| m.len() == spool.replayed_up_to(&path));
        if replayed_all {
            spool.finished(&path);
        }
    }
    if written > 0 {
        tracing::info!(rows = written, "spooled spend rows written to the database");
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::KeyCache;
    use crate::control::ControlCtx;
    use crate::models::Models;
    use crate::router::RouterSettings;
    use crate::store::{MemoryStore, SpendFilter, Store};
    use std::io::Write;

    #[test]
    fn a_live_batch_is_spread_over_most_of_the_time_since_the_last_write() {
        let ms = Duration::from_millis;
        // 8,192 rows at 12,000 a second: a batch every 683 ms.
        assert_eq!(spread_of(ms(683)), ms(683) * 3 / 4);
        assert_eq!(spread_of(ms(40)), ms(30));
        assert_eq!(spread_of(Duration::ZERO), Duration::ZERO);
        // After a quiet spell, no longer than the bound.
        assert_eq!(spread_of(Duration::from_secs(3600)), MAX_SPREAD);
    }

    fn row(id: &str) -> SpendLogRow {
        SpendLogRow {
            request_id: id.into(),
            call_id: id.into(),
            attempt: 1,
            call_type: "acompletion".into(),
            api_key: "k".into(),
            spend: 0.0,
            total_tokens: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            start_time: chrono::Utc::now(),
            completion_start_time: None,
            end_time: chrono::Utc::now(),
            model: "m".into(),
            model_id: "d".into(),
            model_group: "g".into(),
            custom_llm_provider: "openai".into(),
            api_base: "".into(),
            region: None,
            user: None,
            team_id: None,
            status: "success".into(),
            status_code: 200,
            error_class: None,
            error_message: None,
            end_user: None,
            response_id: None,
            proxy_budget: false,
            cache_hit: false,
            cache_key: None,
            request_tags: None,
            guardrail_information: None,
            proxy_server_request: None,
            response: None,
        }
    }

    fn ctx_over(store: Arc<MemoryStore>) -> Writer {
        writer_over(store, SpendLogs::default())
    }

    fn writer_over(store: Arc<MemoryStore>, logs: SpendLogs) -> Writer {
        let caches = Caches {
            keys: Arc::new(KeyCache::default()),
            models: Arc::new(Models::new(
                Vec::new(),
                RouterSettings::default(),
                false,
                None,
            )),
        };
        Writer {
            ctx: caches.on(ControlCtx::for_tests(store)),
            logs,
        }
    }

    /// A batch of a few rows is written once [`FLUSH_EVERY`] has run out,
    /// and a row that came after goes to the next batch; one that reached
    /// [`BUSY_ROWS`] by then (a high rate) keeps filling, until
    /// [`BUSY_FLUSH_EVERY`] or the channel closes, and takes that row.
    #[test]
    fn a_busy_batch_keeps_filling_after_a_quiet_ones_deadline() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for (held, takes_late_row) in [(1, false), (BUSY_ROWS - 1, false), (BUSY_ROWS, true)] {
            runtime.block_on(async {
                let (tx, mut rx) = mpsc::channel(4);
                let mut batch: Vec<SpendLogRow> =
                    (0..held).map(|i| row(&format!("held{i}"))).collect();
                // The batch's first row came FLUSH_EVERY ago: a quiet batch
                // is due, a busy one has most of a second to go.
                let first = tokio::time::Instant::now() - FLUSH_EVERY;
                tx.send(WriterMsg::Rows(vec![row("late")])).await.ok();
                drop(tx);
                assert!(fill(&mut batch, &mut rx, first).await.is_none());
                let has_late = batch.iter().any(|r| &*r.request_id == "late");
                assert_eq!(has_late, takes_late_row, "{held} rows held");
                assert_eq!(batch.len(), held + usize::from(takes_late_row));
                let left = rx.try_recv().ok().map(WriterMsg::into_rows);
                assert_eq!(
                    left.is_some(),
                    !takes_late_row,
                    "the late row is the next batch's"
                );
            });
        }
    }

    /// A drain asked for while a batch fills ends the filling at once, with
    /// the batch kept for the drain (busy or not).
    #[test]
    fn a_drain_ends_the_filling() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (tx, mut rx) = mpsc::channel(4);
            let mut batch: Vec<SpendLogRow> =
                (0..BUSY_ROWS).map(|i| row(&format!("r{i}"))).collect();
            let (done, _wait) = std::sync::mpsc::channel();
            tx.send(WriterMsg::Drain(done)).await.ok();
            tx.send(WriterMsg::Rows(vec![row("after")])).await.ok();
            let drained = fill(&mut batch, &mut rx, tokio::time::Instant::now()).await;
            assert!(drained.is_some());
            assert_eq!(batch.len(), BUSY_ROWS, "rows sent after the drain wait");
        });
    }

    /// With a long queue behind it, a batch is parked in the spool rather
    /// than written (memory stays bounded while the database lags), and the
    /// replay writes it once; with a short queue it is written at once.
    #[test]
    fn a_lagging_database_parks_rows_in_the_spool_until_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(MemoryStore::default());
        let ctx = ctx_over(store.clone());
        let mut spool = Spool::open(SpoolConfig {
            dir: dir.path().to_path_buf(),
            max_bytes: 1 << 30,
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let logged = |runtime: &tokio::runtime::Runtime| {
            runtime
                .block_on(store.spend_logs(&SpendFilter::default()))
                .unwrap()
                .len()
        };
        let parked: Vec<SpendLogRow> = (0..30).map(|i| row(&format!("p{i}"))).collect();
        let mut parking = false;
        runtime.block_on(write_or_park(
            &ctx,
            &parked,
            PARK_WHEN_QUEUED,
            Duration::ZERO,
            &mut spool,
            &mut parking,
        ));
        assert!(parking);
        assert_eq!(logged(&runtime), 0, "parked, not written");
        assert!(!spool.is_empty(), "the rows are in the spool");
        let live: Vec<SpendLogRow> = (0..5).map(|i| row(&format!("l{i}"))).collect();
        runtime.block_on(write_or_park(
            &ctx,
            &live,
            0,
            Duration::ZERO,
            &mut spool,
            &mut parking,
        ));
        assert!(!parking, "the episode ends with the queue");
        assert_eq!(logged(&runtime), 5, "written at once");
        assert!(matches!(
            runtime.block_on(replay_spool(&ctx, &mut spool)),
            Replay::Done
        ));
        assert_eq!(logged(&runtime), 35, "every parked row written once");
        assert_eq!(spool.lost(), 0);
    }

    /// A spend write does not read the keys it charged back from the store
    /// (the cache already moved their spend to durable): a change made
    /// behind the cache's back stays unseen, and the budget holds the
    /// written spend once. A row of an earlier budget period, which the
    /// store logs but does not count, makes the key read again.
    #[test]
    fn a_spend_write_reads_back_only_keys_with_rows_of_an_earlier_period() {
        let store = Arc::new(MemoryStore::default());
        let ctx = ctx_over(store.clone());
        let hash = crate::auth::hash_key("sk-spender");
        let token = crate::auth::token_hex(&hash);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut spool = Spool::open(SpoolConfig {
            dir: tempfile::tempdir().unwrap().path().to_path_buf(),
            max_bytes: 1 << 30,
        });
        runtime.block_on(async {
            let key = crate::store::KeyRecord {
                token: token.clone(),
                max_budget: Some(10.0),
                budget_duration: Some("30d".into()),
                ..Default::default()
            };
            store.insert_key(&key).await.unwrap();
            ctx.ctx.keys.load(&*store, &token).await.unwrap().unwrap();
            let mut blocked = key.clone();
            blocked.blocked = true;
            store.update_key(&blocked).await.unwrap();

            let mut charged = row("charged");
            charged.api_key = token.as_str().into();
            charged.spend = 1.5;
            write(
                &ctx,
                std::slice::from_ref(&charged),
                Duration::ZERO,
                &mut spool,
            )
            .await
            .unwrap();
            let cached = ctx.ctx.keys.get(&hash).unwrap();
            assert!(!cached.record.blocked, "the key was not read back");
            assert_eq!(cached.budget.spent_usd(), 1.5);

            // The period ends: a row settled before it is logged, not
            // counted, and the key is read again.
            let mut due = blocked.clone();
            due.budget_reset_at = Some(chrono::Utc::now() - chrono::Duration::seconds(1));
            store.update_key(&due).await.unwrap();
            let settled_before = chrono::Utc::now() - chrono::Duration::seconds(1);
            store
                .reset_due_budgets(chrono::Utc::now(), None)
                .await
                .unwrap();
            let mut late = row("late");
            late.api_key = token.as_str().into();
            late.spend = 2.0;
            late.end_time = settled_before;
            write(
                &ctx,
                std::slice::from_ref(&late),
                Duration::ZERO,
                &mut spool,
            )
            .await
            .unwrap();
            let cached = ctx.ctx.keys.get(&hash).unwrap();
            assert!(cached.record.blocked, "the key was read again");
            assert_eq!(cached.budget.spent_usd(), 0.0);
        });
    }

    /// A spool left by a crash (its last line torn) is replayed a batch at
    /// a time into the store, and removed once every row is written.
    #[test]
    fn a_torn_spool_is_replayed_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir
            .path()
            .join(format!("spend-{}.jsonl", std::process::id()));
        let mut file = std::fs::File::create(&live).unwrap();
        for i in 0..(REPLAY_BATCH + 5) {
            serde_json::to_writer(&mut file, &row(&format!("r{i}"))).unwrap();
            file.write_all(b"\n").unwrap();
        }
        file.write_all(b"{\"request_id\":\"torn").unwrap();
        drop(file);
        let store = Arc::new(MemoryStore::default());
        let ctx = ctx_over(store.clone());
        let mut spool = Spool::open(SpoolConfig {
            dir: dir.path().to_path_buf(),
            max_bytes: 1 << 30,
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome = runtime.block_on(replay_spool(&ctx, &mut spool));
        assert!(matches!(outcome, Replay::Done));
        let rows = runtime
            .block_on(store.spend_logs(&SpendFilter::default()))
            .unwrap();
        assert_eq!(rows.len(), REPLAY_BATCH + 5, "every whole row, once");
        assert!(!live.exists(), "the replayed spool is removed");
        assert_eq!(spool.lost(), 0);
    }

    /// With `disable_spend_logs` no row is written and the key's spend
    /// still rises, in the store and as durable in the cache; with
    /// `disable_error_logs` only the failed attempts' rows are left out.
    #[test]
    fn rows_not_kept_still_count_their_spend() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let charged = |token: &str, id: &str, status: &'static str, spend: f64| {
            let mut r = row(id);
            r.api_key = token.into();
            r.status = status.into();
            r.spend = spend;
            r
        };
        for (logs, logged) in [
            (SpendLogs::default(), vec!["ok", "failed", "cut"]),
            (
                SpendLogs {
                    disable_error_logs: true,
                    ..Default::default()
                },
                vec!["ok"],
            ),
            (
                SpendLogs {
                    disable_spend_logs: true,
                    ..Default::default()
                },
                vec![],
            ),
        ] {
            let store = Arc::new(MemoryStore::default());
            let writer = writer_over(store.clone(), logs);
            let hash = crate::auth::hash_key("sk-counted");
            let token = crate::auth::token_hex(&hash);
            let mut spool = Spool::open(SpoolConfig {
                dir: tempfile::tempdir().unwrap().path().to_path_buf(),
                max_bytes: 1 << 30,
            });
            runtime.block_on(async {
                let key = crate::store::KeyRecord {
                    token: token.clone(),
                    max_budget: Some(10.0),
                    ..Default::default()
                };
                store.insert_key(&key).await.unwrap();
                writer
                    .ctx
                    .keys
                    .load(&*store, &token)
                    .await
                    .unwrap()
                    .unwrap();
                let rows = [
                    charged(&token, "ok", "success", 1.0),
                    charged(&token, "failed", "failure", 0.0),
                    charged(&token, "cut", "failure", 0.5),
                ];
                write(&writer, &rows, Duration::ZERO, &mut spool)
                    .await
                    .unwrap();
                let ids: Vec<String> = store
                    .spend_logs(&SpendFilter::default())
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.request_id.to_string())
                    .collect();
                assert_eq!(ids, logged, "{logs:?}");
                let stored = store.get_key(&token).await.unwrap().unwrap();
                assert_eq!(stored.spend, 1.5, "{logs:?}");
                let cached = writer.ctx.keys.get(&hash).unwrap();
                assert_eq!(cached.budget.spent_usd(), 1.5, "{logs:?}");
            });
        }
    }

    /// LiteLLM's daily tables count every request whether or not its row
    /// is kept (a zero-spend success too); a failed attempt without spend
    /// whose log `disable_error_logs` turns off counts nowhere.
    #[test]
    fn rows_not_kept_still_count_in_the_daily_tables() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let requests = |logs: SpendLogs| {
            let store = Arc::new(MemoryStore::default());
            let writer = writer_over(store.clone(), logs);
            let mut spool = Spool::open(SpoolConfig {
                dir: tempfile::tempdir().unwrap().path().to_path_buf(),
                max_bytes: 1 << 30,
            });
            let mut failed = row("failed");
            failed.status = "failure".into();
            let rows = [row("free"), failed];
            runtime.block_on(async {
                write(&writer, &rows, Duration::ZERO, &mut spool)
                    .await
                    .unwrap();
                let day = rows[0].start_time.format("%Y-%m-%d").to_string();
                let page = store
                    .daily_activity(&crate::store::DailyQuery {
                        scope: crate::store::DailyScope::User,
                        start: day.clone(),
                        end: day,
                        entities: None,
                        exclude: Vec::new(),
                        api_keys: None,
                        model: None,
                        offset: 0,
                        limit: 10,
                    })
                    .await
                    .unwrap();
                page.rows.iter().map(|r| r.counts.api_requests).sum::<i64>()
            })
        };
        assert_eq!(requests(SpendLogs::default()), 2);
        let off = SpendLogs {
            disable_spend_logs: true,
            ..Default::default()
        };
        assert_eq!(requests(off), 2);
        let errors_off = SpendLogs {
            disable_error_logs: true,
            ..Default::default()
        };
        assert_eq!(requests(errors_off), 1);
    }
}
