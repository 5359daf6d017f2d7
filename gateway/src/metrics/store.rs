//! Where series live: one table per core, written only by its core and read
//! by scrapes from any thread, so recording takes no lock and touches no
//! other core's memory.
//!
//! A core's label values are interned as symbols and its series are keyed
//! by their symbols; both are append-only lists ([`AppendOnly`]) that a
//! scrape reads up to their published length. Values are atomics written
//! with plain loads and stores (one writer) and read with loads.

use super::families::{Fam, Kind, ALL, MAX_LABELS};
use hashbrown::HashTable;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// Items per chunk of an [`AppendOnly`].
const CHUNK: usize = 64;

/// The symbol of the value `None` (LiteLLM's value of an unknown label).
pub(crate) const NONE: u32 = 0;
/// The symbol of `other`: the value of every label of the series that
/// takes the observations of label sets past the cap, and of a value that
/// did not fit the symbol table.
pub(crate) const OTHER: u32 = 1;

/// Distinct label values a core remembers.
const MAX_SYMBOLS: usize = 50_000;
/// Longest label value kept, in bytes; longer ones are cut.
const MAX_VALUE_BYTES: usize = 256;

/// A chunk of an [`AppendOnly`]: [`CHUNK`] slots, each set once.
type Chunk<T> = Box<[OnceLock<T>]>;

/// A list that one thread appends to and any thread reads, without locks.
/// Chunks are allocated as it grows; the capacity is fixed.
pub(crate) struct AppendOnly<T> {
    chunks: Box<[OnceLock<Chunk<T>>]>,
    len: AtomicUsize,
}

impl<T> AppendOnly<T> {
    /// An empty list for up to `capacity` items (rounded up to a chunk).
    pub(crate) fn new(capacity: usize) -> Self {
        AppendOnly {
            chunks: (0..capacity.div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
            len: AtomicUsize::new(0),
        }
    }

    /// Appends `value` and returns its index; `None` when full. Only one
    /// thread may append (a second one's item could be dropped, never
    /// corrupt the list).
    pub(crate) fn push(&self, value: T) -> Option<usize> {
        let i = self.len.load(Relaxed);
        let chunk = self.chunks.get(i / CHUNK)?;
        let slots = chunk.get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect());
        slots.get(i % CHUNK)?.set(value).ok()?;
        self.len.store(i + 1, std::sync::atomic::Ordering::Release);
        Some(i)
    }

    /// The item at `i`, once published.
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / CHUNK)?.get()?.get(i % CHUNK)?.get()
    }

    /// The published items, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        (0..self.len.load(Acquire)).filter_map(|i| self.get(i))
    }
}

/// One series: its label symbols (in the family's label order) and its cells.
pub(crate) struct Series {
    pub(crate) labels: Box<[u32]>,
    pub(crate) cells: Box<[AtomicU64]>,
}

impl Series {
    fn new(labels: &[u32], cells: usize) -> Self {
        Series {
            labels: labels.into(),
            cells: (0..cells).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds `v` to the float in cell `i` (one writer: load, then store).
    pub(crate) fn add_f64(&self, i: usize, v: f64) {
        if let Some(cell) = self.cells.get(i) {
            let now = f64::from_bits(cell.load(Relaxed)) + v;
            cell.store(now.to_bits(), Relaxed);
        }
    }

    /// Adds one to the count in cell `i`.
    pub(crate) fn add_one(&self, i: usize) {
        if let Some(cell) = self.cells.get(i) {
            cell.store(cell.load(Relaxed).wrapping_add(1), Relaxed);
        }
    }

    /// Sets a gauge: the value, and the instant it was set (for the scrape,
    /// which keeps the value set last on any core).
    pub(crate) fn set(&self, v: f64, stamp: u64) {
        if let [value, at] = &self.cells[..] {
            value.store(v.to_bits(), Relaxed);
            at.store(stamp, Relaxed);
        }
    }
}

/// What a scrape reads of one core.
pub(crate) struct CoreData {
    pub(crate) symbols: AppendOnly<Box<str>>,
    pub(crate) families: Box<[FamilyData]>,
}

/// One family's series on one core.
pub(crate) struct FamilyData {
    pub(crate) series: AppendOnly<Series>,
    /// Observations that found the family at its cap (recorded on the
    /// `other` series, or, for a gauge, not recorded).
    pub(crate) dropped: AtomicU64,
}

impl CoreData {
    /// The text of symbol `id`.
    pub(crate) fn symbol(&self, id: u32) -> &str {
        self.symbols.get(id as usize).map_or("other", |s| s)
    }
}

/// The process-wide part of the tables: how many series each family has
/// across cores, against the cap. A core touches a count only when it
/// creates a series, never per observation.
pub(crate) struct Caps {
    pub(crate) max_series: usize,
    counts: Box<[AtomicUsize]>,
    /// The clock of gauge stamps, shared so stamps compare across cores.
    epoch: std::time::Instant,
}

impl Caps {
    /// Counts for every family, capped at `max_series` each.
    pub(crate) fn new(max_series: usize) -> Self {
        Caps {
            max_series,
            counts: ALL.iter().map(|_| AtomicUsize::new(0)).collect(),
            epoch: std::time::Instant::now(),
        }
    }

    /// Takes one series of `fam` from the cap; `false` when it is spent.
    fn take(&self, fam: Fam) -> bool {
        let count = &self.counts[fam.index()];
        if count.fetch_add(1, Relaxed) < self.max_series {
            true
        } else {
            count.fetch_sub(1, Relaxed);
            false
        }
    }
}

/// One core's writing side: the index of its symbols and series.
pub(crate) struct CoreWriter {
    data: Arc<CoreData>,
    caps: Arc<Caps>,
    hasher: ahash::RandomState,
    symbols: HashTable<u32>,
    families: Box<[HashTable<u32>]>,
    /// The `other` series of each family on this core, once created.
    overflow: Box<[Option<u32>]>,
}

impl CoreWriter {
    /// A new core's tables, and what scrapes read of them.
    pub(crate) fn new(caps: Arc<Caps>) -> (CoreWriter, Arc<CoreData>) {
        let data = Arc::new(CoreData {
            symbols: AppendOnly::new(MAX_SYMBOLS),
            families: ALL
                .iter()
                .map(|_| FamilyData {
                    series: AppendOnly::new(caps.max_series + 1),
                    dropped: AtomicU64::new(0),
                })
                .collect(),
        });
        let seed = || fastrand::u64(..);
        let mut writer = CoreWriter {
            data: data.clone(),
            caps,
            hasher: ahash::RandomState::with_seeds(seed(), seed(), seed(), seed()),
            symbols: HashTable::new(),
            families: ALL.iter().map(|_| HashTable::new()).collect(),
            overflow: ALL.iter().map(|_| None).collect(),
        };
        let none = writer.intern("None");
        let other = writer.intern("other");
        debug_assert_eq!((none, other), (NONE, OTHER));
        (writer, data)
    }

    /// Now, as a gauge stamp: later sets have larger stamps on every core.
    pub(crate) fn stamp(&self) -> u64 {
        u64::try_from(self.caps.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    /// The symbol of `text` (cut to [`MAX_VALUE_BYTES`]); [`OTHER`] when the
    /// table is full.
    pub(crate) fn intern(&mut self, text: &str) -> u32 {
        let text = cut(text);
        let hash = self.hasher.hash_one(text);
        let data = &self.data;
        if let Some(&id) = self.symbols.find(hash, |&id| {
            data.symbols.get(id as usize).is_some_and(|s| **s == *text)
        }) {
            return id;
        }
        let Some(id) = data.symbols.push(text.into()) else {
            return OTHER;
        };
        let id = id as u32;
        let hasher = &self.hasher;
        self.symbols.insert_unique(hash, id, |&id| {
            hasher.hash_one(data.symbols.get(id as usize).map_or("", |s| &**s))
        });
        id
    }

    /// The series of `fam` with `labels`, created when new. Past the cap, a
    /// counter's or histogram's observations go to the family's `other`
    /// series (so totals stay exact) and a gauge's are dropped (`None`).
    pub(crate) fn series(&mut self, fam: Fam, labels: &[u32]) -> Option<&Series> {
        let i = fam.index();
        let family = &self.data.families[i];
        let hash = self.hasher.hash_one(labels);
        let found = self.families[i]
            .find(hash, |&s| {
                family
                    .series
                    .get(s as usize)
                    .is_some_and(|s| *s.labels == *labels)
            })
            .copied();
        let spec = fam.spec();
        let id = match found {
            Some(id) => id,
            None if self.caps.take(fam) => {
                let id = family.series.push(Series::new(labels, spec.cells()))? as u32;
                let hasher = &self.hasher;
                self.families[i].insert_unique(hash, id, |&s| {
                    hasher.hash_one(family.series.get(s as usize).map_or(&[][..], |s| &s.labels))
                });
                id
            }
            None => {
                family
                    .dropped
                    .store(family.dropped.load(Relaxed) + 1, Relaxed);
                if spec.kind == Kind::Gauge {
                    return None;
                }
                match self.overflow[i] {
                    Some(id) => id,
                    None => {
                        let others = [OTHER; MAX_LABELS];
                        let labels = &others[..labels.len().min(MAX_LABELS)];
                        let id = family.series.push(Series::new(labels, spec.cells()))? as u32;
                        self.overflow[i] = Some(id);
                        id
                    }
                }
            }
        };
        family.series.get(id as usize)
    }
}

/// `text` cut to at most [`MAX_VALUE_BYTES`], at a character boundary.
fn cut(text: &str) -> &str {
    if text.len() <= MAX_VALUE_BYTES {
        return text;
    }
    let mut end = MAX_VALUE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_only_publishes_in_order_and_refuses_past_its_capacity() {
        let list = AppendOnly::new(100);
        for i in 0..128 {
            assert_eq!(list.push(i), Some(i));
        }
        assert_eq!(list.push(128), None, "capacity is rounded up to a chunk");
        assert_eq!(
            list.iter().copied().sum::<usize>(),
            (0..128usize).sum::<usize>()
        );
        assert_eq!(list.get(127), Some(&127));
        assert_eq!(list.get(128), None);
    }

    #[test]
    fn symbols_are_interned_once_and_long_values_cut() {
        let (mut w, data) = CoreWriter::new(Arc::new(Caps::new(10)));
        assert_eq!(w.intern("None"), NONE);
        let a = w.intern("team-a");
        assert_eq!(w.intern("team-a"), a);
        assert_ne!(w.intern("team-b"), a);
        let long = "é".repeat(200);
        let id = w.intern(&long);
        assert!(data.symbol(id).len() <= MAX_VALUE_BYTES);
        assert!(long.starts_with(data.symbol(id)));
    }

    #[test]
    fn past_the_cap_counters_share_the_other_series_and_gauges_drop() {
        let caps = Arc::new(Caps::new(2));
        let (mut w, data) = CoreWriter::new(caps.clone());
        let (mut w2, data2) = CoreWriter::new(caps);
        let fam = Fam::DeploymentCooledDown;
        let n = fam.spec().labels.len();
        let labels = |x: u32| vec![x + 2; n];
        w.series(fam, &labels(1)).unwrap().add_f64(0, 1.0);
        w.series(fam, &labels(1)).unwrap().add_f64(0, 1.0);
        w2.series(fam, &labels(2)).unwrap().add_f64(0, 1.0);
        let other = w.series(fam, &labels(3)).unwrap();
        assert!(other.labels.iter().all(|&l| l == OTHER));
        other.add_f64(0, 1.0);
        let total: f64 = [&data, &data2]
            .iter()
            .flat_map(|d| d.families[fam.index()].series.iter())
            .map(|s| f64::from_bits(s.cells[0].load(Relaxed)))
            .sum();
        assert_eq!(total, 4.0, "no observation is lost");
        assert_eq!(data.families[fam.index()].dropped.load(Relaxed), 1);
        let gauge = Fam::DeploymentState;
        let g = vec![5; gauge.spec().labels.len()];
        assert!(w.series(gauge, &g).is_some());
        assert!(w.series(gauge, &[6; 4]).is_some());
        assert!(w.series(gauge, &[7; 4]).is_none(), "a gauge past the cap");
    }
}
