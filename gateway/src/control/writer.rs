//! The spend writer: batches spend-log rows from every core, writes them with
//! their spend totals in one transaction, and spools them to a local file
//! while the database is down, replaying the spool when it returns. Writes
//! are idempotent by `request_id`, so a replay never duplicates a row.

use super::ControlCtx;
use crate::store::{SpendLogRow, StoreError};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Rows written per transaction at most.
const BATCH: usize = 1000;
/// Longest a row waits for its batch.
const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// How often a non-empty spool is retried.
const REPLAY_EVERY: Duration = Duration::from_secs(1);

/// Where rows wait while the database is down.
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// Directory of spool files (one per process).
    pub dir: PathBuf,
    /// Largest spool file; rows beyond it are logged as lost.
    pub max_bytes: u64,
}

impl SpoolConfig {
    fn own_file(&self) -> PathBuf {
        self.dir.join(format!("spend-{}.jsonl", std::process::id()))
    }
}

/// What the data plane sends the writer.
pub enum WriterMsg {
    /// Rows of one core's flush.
    Rows(Vec<SpendLogRow>),
    /// Write everything received so far, then signal.
    Drain(std::sync::mpsc::Sender<()>),
}

impl WriterMsg {
    /// The rows of a message that could not be sent.
    pub fn into_rows(self) -> Vec<SpendLogRow> {
        match self {
            WriterMsg::Rows(rows) => rows,
            WriterMsg::Drain(_) => Vec::new(),
        }
    }
}

/// Runs until the channel closes.
pub async fn run(ctx: Arc<ControlCtx>, mut msgs: mpsc::Receiver<WriterMsg>, spool: SpoolConfig) {
    adopt_orphan_spools(&spool);
    let mut batch: Vec<SpendLogRow> = Vec::with_capacity(BATCH);
    let mut replay = tokio::time::interval(REPLAY_EVERY);
    loop {
        tokio::select! {
            msg = msgs.recv() => {
                let Some(msg) = msg else { return };
                let mut drained = None;
                match msg {
                    WriterMsg::Rows(rows) => batch.extend(rows),
                    WriterMsg::Drain(done) => drained = Some(done),
                }
                // Let a burst fill the batch before writing it.
                let deadline = tokio::time::Instant::now() + FLUSH_EVERY;
                while drained.is_none() && batch.len() < BATCH {
                    match tokio::time::timeout_at(deadline, msgs.recv()).await {
                        Ok(Some(WriterMsg::Rows(rows))) => batch.extend(rows),
                        Ok(Some(WriterMsg::Drain(done))) => drained = Some(done),
                        Ok(None) | Err(_) => break,
                    }
                }
                while !batch.is_empty() {
                    let rest = batch.split_off(batch.len().min(BATCH));
                    let rows = std::mem::replace(&mut batch, rest);
                    write_or_spool(&ctx, rows, &spool).await;
                }
                if let Some(done) = drained {
                    let _ = done.send(());
                }
            }
            _ = replay.tick() => replay_spool(&ctx, &spool).await,
        }
    }
}

async fn write_or_spool(ctx: &ControlCtx, rows: Vec<SpendLogRow>, spool: &SpoolConfig) {
    match ctx.store.record_spend(&rows).await {
        Ok(changes) => {
            for row in &rows {
                ctx.keys.mark_flushed(row);
            }
            ctx.publish(&changes).await;
        }
        Err(e) => {
            tracing::warn!(error = %e, rows = rows.len(), "spend write failed; spooling to disk");
            append_to_spool(spool, &rows);
        }
    }
}

fn append_to_spool(spool: &SpoolConfig, rows: &[SpendLogRow]) {
    let path = spool.own_file();
    let result = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(&spool.dir)?;
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        if size > spool.max_bytes {
            return Err(std::io::Error::other(format!(
                "spool {} is full ({size} bytes)",
                path.display()
            )));
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for row in rows {
            serde_json::to_writer(&mut buf, row).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        file.write_all(&buf)?;
        file.sync_data()
    })();
    if let Err(e) = result {
        tracing::error!(error = %e, rows = rows.len(), "spend rows LOST: cannot spool them");
    }
}

/// Replays this process's spool file; removes it once every row is written.
async fn replay_spool(ctx: &ControlCtx, spool: &SpoolConfig) {
    let path = spool.own_file();
    let Ok(text) = std::fs::read_to_string(&path) else {
        return;
    };
    let rows: Vec<SpendLogRow> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for chunk in rows.chunks(BATCH) {
        match ctx.store.record_spend(chunk).await {
            Ok(changes) => {
                for row in chunk {
                    ctx.keys.mark_flushed(row);
                }
                ctx.publish(&changes).await;
            }
            Err(StoreError::Unavailable(_)) => return,
            Err(e) => {
                tracing::warn!(error = %e, "spool replay failed; will retry");
                return;
            }
        }
    }
    tracing::info!(
        rows = rows.len(),
        "spooled spend rows written to the database"
    );
    let _ = std::fs::remove_file(&path);
}

/// Takes over spool files of processes that no longer run, so their rows are
/// replayed by this one.
fn adopt_orphan_spools(spool: &SpoolConfig) {
    let Ok(entries) = std::fs::read_dir(&spool.dir) else {
        return;
    };
    let own = spool.own_file();
    for entry in entries.flatten() {
        let path = entry.path();
        let pid = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.strip_prefix("spend-"))
            .and_then(|p| p.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if path == own || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(text) = std::fs::read(&path) {
            let appended = std::fs::create_dir_all(&spool.dir)
                .and_then(|_| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&own)
                })
                .and_then(|mut f| f.write_all(&text));
            if appended.is_ok() {
                let _ = std::fs::remove_file(&path);
                tracing::info!(from = %path.display(), "adopted the spend spool of a stopped process");
            }
        }
    }
}
