//! The spend spool: rows the database could not take wait here, one JSON
//! object per line, until the writer replays them.
//!
//! Files are `spend-<pid>.jsonl` (the live file of process `pid`) and
//! `spend-<pid>-<tag>.jsonl` (files it adopted from processes that no longer
//! run). Every file in the directory counts against one bound,
//! [`SpoolConfig::max_bytes`]: rows that would pass it are lost, counted and
//! logged. A file whose last line was torn by a crash (no newline at the
//! end, perhaps a cut multi-byte character) is truncated to its last whole
//! line when this process opens it, with a log line saying how many bytes
//! went; lines that cannot be read back are skipped, counted and logged.
//! Files are read a batch at a time, never whole.

use crate::store::SpendLogRow;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Longest line read back; longer ones are skipped as unreadable.
const MAX_LINE: u64 = 4 << 20;

/// Where rows wait while the database is down.
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// Directory of spool files.
    pub dir: PathBuf,
    /// Largest size of all spool files together; rows beyond it are lost
    /// (and logged as such).
    pub max_bytes: u64,
}

/// The spool of this process: its live file and the files it adopted.
#[derive(Debug)]
pub struct Spool {
    config: SpoolConfig,
    pid: u32,
    /// Bytes in every spool file of the directory, as last counted.
    bytes: u64,
    /// How far each of our files has been replayed.
    replayed: HashMap<PathBuf, u64>,
    /// Rows lost since start (spool full or unwritable, unreadable lines).
    lost: u64,
}

/// One batch read back from a spool file.
#[derive(Debug, Default)]
pub struct Batch {
    /// The rows, in file order.
    pub rows: Vec<SpendLogRow>,
    /// Lines skipped because they could not be read back.
    pub dropped: u64,
    /// Offset just past the batch.
    pub end: u64,
    /// Whether the batch reached the end of the file.
    pub eof: bool,
}

impl Spool {
    /// Opens the spool of this process in `config.dir`: adopts the files of
    /// processes that no longer run and repairs torn last lines.
    pub fn open(config: SpoolConfig) -> Spool {
        Spool::open_as(config, std::process::id(), pid_alive)
    }

    fn open_as(config: SpoolConfig, pid: u32, alive: fn(u32) -> bool) -> Spool {
        let mut spool = Spool {
            config,
            pid,
            bytes: 0,
            replayed: HashMap::new(),
            lost: 0,
        };
        spool.adopt(alive);
        for path in spool.files() {
            repair_torn_tail(&path);
        }
        spool.bytes = spool.count_bytes();
        spool
    }

    /// The live file of this process.
    pub fn live_file(&self) -> PathBuf {
        self.config.dir.join(format!("spend-{}.jsonl", self.pid))
    }

    /// Rows lost since start.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Whether no spool file of this process holds rows.
    pub fn is_empty(&self) -> bool {
        self.files().is_empty()
    }

    /// This process's files, adopted ones first (oldest rows first).
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = spool_files(&self.config.dir)
            .filter(|(_, owner)| *owner == self.pid)
            .map(|(path, _)| path)
            .collect();
        let live = self.live_file();
        files.sort_by_key(|p| (*p == live, p.clone()));
        files
    }

    /// Takes over the files of processes that no longer run (renamed to
    /// this process's name, so one process adopts each).
    fn adopt(&mut self, alive: fn(u32) -> bool) {
        let orphans: Vec<PathBuf> = spool_files(&self.config.dir)
            .filter(|(_, owner)| *owner != self.pid && !alive(*owner))
            .map(|(path, _)| path)
            .collect();
        for (n, from) in orphans.into_iter().enumerate() {
            let tag = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let to = self
                .config
                .dir
                .join(format!("spend-{}-{tag}{n}.jsonl", self.pid));
            match std::fs::rename(&from, &to) {
                Ok(()) => {
                    tracing::info!(from = %from.display(), "adopted the spend spool of a stopped process")
                }
                Err(e) => {
                    tracing::warn!(from = %from.display(), error = %e, "could not adopt a spend spool")
                }
            }
        }
    }

    /// Adopts files of processes that stopped since the last look.
    pub fn adopt_new_orphans(&mut self) {
        let before = self.files().len();
        self.adopt(pid_alive);
        if self.files().len() != before {
            for path in self.files() {
                if !self.replayed.contains_key(&path) {
                    repair_torn_tail(&path);
                }
            }
            self.bytes = self.count_bytes();
        }
    }

    fn count_bytes(&self) -> u64 {
        spool_files(&self.config.dir)
            .filter_map(|(p, _)| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    }

    /// Appends `rows` to the live file, all or none; logs and counts them as
    /// lost when they do not fit the bound or cannot be written.
    pub fn append(&mut self, rows: &[SpendLogRow]) -> bool {
        let mut buf = Vec::with_capacity(rows.len() * 512);
        for row in rows {
            if serde_json::to_writer(&mut buf, row).is_err() {
                continue;
            }
            buf.push(b'\n');
        }
        let result = if self.bytes.saturating_add(buf.len() as u64) > self.config.max_bytes {
            Err(std::io::Error::other(format!(
                "the spool in {} is full ({} of {} bytes)",
                self.config.dir.display(),
                self.bytes,
                self.config.max_bytes
            )))
        } else {
            append_whole(&self.config.dir, &self.live_file(), &buf)
        };
        match result {
            Ok(()) => {
                self.bytes += buf.len() as u64;
                true
            }
            Err(e) => {
                self.lost += rows.len() as u64;
                tracing::error!(error = %e, rows = rows.len(), lost_since_start = self.lost, "spend rows LOST: cannot spool them");
                false
            }
        }
    }

    /// Reads up to `max` rows of `path` from where its replay stopped.
    pub fn read_batch(&mut self, path: &Path, max: usize) -> std::io::Result<Batch> {
        let start = self.replayed.get(path).copied().unwrap_or(0);
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(start))?;
        let mut reader = BufReader::with_capacity(64 * 1024, file);
        let mut batch = Batch {
            end: start,
            ..Batch::default()
        };
        let mut line = Vec::new();
        while batch.rows.len() < max {
            line.clear();
            let n = (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line)?;
            if n == 0 {
                batch.eof = true;
                break;
            }
            if line.last() != Some(&b'\n') {
                if n as u64 == MAX_LINE {
                    // Too long to be a row: skip the rest of it.
                    let rest = reader.skip_until(b'\n')?;
                    batch.end += (n + rest) as u64;
                    batch.dropped += 1;
                    continue;
                }
                // A line being written, or torn: left for later.
                batch.eof = true;
                break;
            }
            batch.end += n as u64;
            match serde_json::from_slice::<SpendLogRow>(&line) {
                Ok(row) => batch.rows.push(row),
                Err(_) => batch.dropped += 1,
            }
        }
        if batch.dropped > 0 {
            self.lost += batch.dropped;
            tracing::error!(
                file = %path.display(),
                lines = batch.dropped,
                lost_since_start = self.lost,
                "spend rows LOST: unreadable lines in the spool were skipped"
            );
        }
        Ok(batch)
    }

    /// How far `path` has been replayed.
    pub fn replayed_up_to(&self, path: &Path) -> u64 {
        self.replayed.get(path).copied().unwrap_or(0)
    }

    /// Records that `path` was replayed up to `end`.
    pub fn replayed_to(&mut self, path: &Path, end: u64) {
        self.replayed.insert(path.to_path_buf(), end);
    }

    /// Removes a file whose every row was written.
    pub fn finished(&mut self, path: &Path) {
        self.replayed.remove(path);
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!(file = %path.display(), error = %e, "could not remove a replayed spool file; its rows will be written again (idempotently)");
        }
        self.bytes = self.count_bytes();
    }

    /// Counts rows lost outside the spool's own reads and writes.
    pub fn count_lost(&mut self, rows: u64) {
        self.lost += rows;
    }
}

/// Appends `buf` to `path` whole: a failed write is cut back off, so the
/// file never ends in a partial line.
fn append_whole(dir: &Path, path: &Path, buf: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    let before = file.metadata()?.len();
    let written = file.write_all(buf).and_then(|()| file.sync_data());
    if written.is_err() {
        let _ = file.set_len(before);
    }
    written
}

/// Cuts a file back to its last whole line; logs what went.
fn repair_torn_tail(path: &Path) {
    let result = (|| -> std::io::Result<Option<u64>> {
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(None);
        }
        // Look back a chunk at a time for the last newline.
        let mut end = len;
        let mut chunk = vec![0u8; 64 * 1024];
        let keep = loop {
            let from = end.saturating_sub(chunk.len() as u64);
            let n = (end - from) as usize;
            file.seek(SeekFrom::Start(from))?;
            file.read_exact(&mut chunk[..n])?;
            if let Some(i) = chunk[..n].iter().rposition(|&b| b == b'\n') {
                break from + i as u64 + 1;
            }
            if from == 0 {
                break 0;
            }
            end = from;
        };
        if keep == len {
            return Ok(None);
        }
        file.set_len(keep)?;
        file.sync_data()?;
        Ok(Some(len - keep))
    })();
    match result {
        Ok(Some(cut)) => tracing::warn!(
            file = %path.display(),
            bytes = cut,
            "spend spool ended in a torn line (a crash while writing); cut it off"
        ),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "could not check a spool file's last line")
        }
    }
}

/// Spool files of `dir` with the pid that owns each.
fn spool_files(dir: &Path) -> impl Iterator<Item = (PathBuf, u32)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            let owner = owner_of(&path)?;
            Some((path, owner))
        })
}

/// The pid in `spend-<pid>.jsonl` or `spend-<pid>-<tag>.jsonl`.
fn owner_of(path: &Path) -> Option<u32> {
    if path.extension()? != "jsonl" {
        return None;
    }
    let stem = path.file_stem()?.to_str()?.strip_prefix("spend-")?;
    stem.split('-').next()?.parse().ok()
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn row(id: &str) -> SpendLogRow {
        SpendLogRow {
            request_id: id.into(),
            call_id: id.into(),
            attempt: 1,
            call_type: "acompletion".into(),
            api_key: "k".into(),
            spend: 0.5,
            total_tokens: 3,
            prompt_tokens: 1,
            completion_tokens: 2,
            start_time: Utc::now(),
            completion_start_time: None,
            end_time: Utc::now(),
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
            error_message: Some("ünïcödé".into()),
            end_user: None,
            response_id: None,
            proxy_budget: false,
            cache_hit: true,
            cache_key: Some("k1".into()),
            request_tags: None,
            guardrail_information: None,
            proxy_server_request: None,
            response: None,
        }
    }

    fn config(dir: &Path, max_bytes: u64) -> SpoolConfig {
        SpoolConfig {
            dir: dir.to_path_buf(),
            max_bytes,
        }
    }

    fn never(_: u32) -> bool {
        false
    }

    fn always(_: u32) -> bool {
        true
    }

    fn read_all(spool: &mut Spool) -> Vec<String> {
        let mut ids = Vec::new();
        for path in spool.files() {
            loop {
                let batch = spool.read_batch(&path, 2).unwrap();
                ids.extend(batch.rows.into_iter().map(|r| r.request_id.to_string()));
                spool.replayed_to(&path, batch.end);
                if batch.eof {
                    break;
                }
            }
        }
        ids
    }

    #[test]
    fn rows_come_back_in_batches_and_the_file_goes_when_finished() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open_as(config(dir.path(), 1 << 20), 10, always);
        assert!(spool.is_empty());
        assert!(spool.append(&[row("a"), row("b"), row("c")]));
        let live = spool.live_file();
        let first = spool.read_batch(&live, 2).unwrap();
        assert_eq!(first.rows.len(), 2);
        assert!(!first.eof);
        spool.replayed_to(&live, first.end);
        let rest = spool.read_batch(&live, 2).unwrap();
        assert_eq!(&*rest.rows[0].request_id, "c");
        assert!(rest.eof);
        spool.finished(&live);
        assert!(spool.is_empty());
    }

    #[test]
    fn a_torn_last_line_is_cut_off_and_the_rest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open_as(config(dir.path(), 1 << 20), 10, always);
        spool.append(&[row("a"), row("b")]);
        // A crash in the middle of the next line, inside a multi-byte char.
        let mut torn = serde_json::to_vec(&row("c")).unwrap();
        let cut = torn.iter().position(|&b| b >= 0x80).unwrap() + 1;
        torn.truncate(cut);
        let live = spool.live_file();
        OpenOptions::new()
            .append(true)
            .open(&live)
            .unwrap()
            .write_all(&torn)
            .unwrap();
        // The next process with this pid (a container's pid 1) opens it.
        let mut spool = Spool::open_as(config(dir.path(), 1 << 20), 10, always);
        assert!(std::fs::read(&live).unwrap().ends_with(b"\n"));
        spool.append(&[row("d")]);
        assert_eq!(read_all(&mut spool), ["a", "b", "d"]);
        assert_eq!(spool.lost(), 0);
    }

    #[test]
    fn unreadable_lines_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spend-10.jsonl");
        let mut text = serde_json::to_vec(&row("a")).unwrap();
        text.extend_from_slice(b"\n{not json}\n\xff\xfe\n");
        text.extend(serde_json::to_vec(&row("b")).unwrap());
        text.push(b'\n');
        std::fs::write(&path, text).unwrap();
        let mut spool = Spool::open_as(config(dir.path(), 1 << 20), 10, always);
        assert_eq!(read_all(&mut spool), ["a", "b"]);
        assert_eq!(spool.lost(), 2);
    }

    #[test]
    fn orphans_are_adopted_once_and_bounded_with_the_live_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = Spool::open_as(config(dir.path(), 1 << 20), 7, always);
        old.append(&[row("a"), row("b")]);
        let size = std::fs::metadata(old.live_file()).unwrap().len();
        // A new process (pid 8) adopts pid 7's file; the bound counts it.
        let mut spool = Spool::open_as(config(dir.path(), size + 10), 8, never);
        assert!(!old.live_file().exists());
        assert_eq!(spool.files().len(), 1);
        assert!(!spool.append(&[row("c")]), "over the bound");
        assert_eq!(spool.lost(), 1);
        assert_eq!(read_all(&mut spool), ["a", "b"]);
        // A third process finds nothing of pid 7 left.
        let third = Spool::open_as(config(dir.path(), 1 << 20), 9, always);
        assert!(third.is_empty());
    }

    #[test]
    fn owners_come_from_file_names() {
        assert_eq!(owner_of(Path::new("/s/spend-12.jsonl")), Some(12));
        assert_eq!(owner_of(Path::new("/s/spend-12-99.jsonl")), Some(12));
        assert_eq!(owner_of(Path::new("/s/spend-x.jsonl")), None);
        assert_eq!(owner_of(Path::new("/s/spend-12.txt")), None);
    }
}
