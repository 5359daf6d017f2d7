//! Where series live: one table per core, written only by its core and read
//! by scrapes from any thread, so recording takes no lock and touches no
//! other core's memory.
//!
//! A core's label values are interned as symbols and its series are keyed
//! by their symbols; both are append-only lists ([`AppendOnly`]) that a
//! scrape reads up to their published length. Values are atomics written
//! with plain loads and stores (one writer) and read with loads.
//!
//! Two memos keep the request path from hashing strings and label lists:
//! recently interned texts by address (a hit is confirmed by comparing the
//! text, so a reused address with new contents is interned anew), and
//! label sets ([`CoreWriter::combo`]) each holding the series it resolved
//! per family, so one hash of a request's labels finds all of its series.

use super::families::{Fam, Kind, ALL, MAX_LABELS};
use super::labels::LabelValues;
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
/// Slots of the memo of recently interned texts (a power of two).
const RECENT: usize = 64;
/// Label sets a core memoizes before it starts over.
const MAX_COMBOS: usize = 4096;

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

/// What a label set resolved to in one family.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Slot {
    /// Not looked up yet.
    Unknown,
    /// Its own series.
    Series(u32),
    /// The family was at its cap: the `other` series (counters and
    /// histograms), each observation counted as dropped.
    Overflow(u32),
    /// The family was at its cap and is a gauge: not recorded, each
    /// observation counted as dropped.
    Dropped,
}

/// A memoized label set: the request's label values and, per family, the
/// series they resolved to. A series never changes its labels and a cap,
/// once spent, stays spent, so a resolved slot stays right.
struct Combo {
    labels: LabelValues,
    slots: [Slot; ALL.len()],
}

/// A label set memoized by [`CoreWriter::combo`], valid until the next call.
#[derive(Clone, Copy)]
pub(crate) struct ComboId(u32);

/// One core's writing side: the index of its symbols and series.
pub(crate) struct CoreWriter {
    data: Arc<CoreData>,
    caps: Arc<Caps>,
    hasher: ahash::RandomState,
    symbols: HashTable<u32>,
    families: Box<[HashTable<u32>]>,
    /// The `other` series of each family on this core, once created.
    overflow: Box<[Option<u32>]>,
    /// Recently interned texts: (address, symbol), by address.
    recent: Box<[(usize, u32); RECENT]>,
    /// Memoized label sets, by their values.
    combo_index: HashTable<u32>,
    combos: Vec<Combo>,
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
            recent: Box::new([(0, NONE); RECENT]),
            combo_index: HashTable::new(),
            combos: Vec::new(),
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
    /// table is full. Texts that live at one address (a key's alias, a
    /// deployment's id) are found by it, confirmed by comparing the text.
    pub(crate) fn intern(&mut self, text: &str) -> u32 {
        let text = cut(text);
        let address = text.as_ptr() as usize;
        let slot = (address ^ (address >> 7) ^ text.len()) % RECENT;
        let (seen, id) = self.recent[slot];
        if seen == address
            && self
                .data
                .symbols
                .get(id as usize)
                .is_some_and(|s| **s == *text)
        {
            return id;
        }
        let id = self.intern_hashed(text);
        if id != OTHER {
            self.recent[slot] = (address, id);
        }
        id
    }

    fn intern_hashed(&mut self, text: &str) -> u32 {
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

    /// The memo of the label set `v`, made when new (the memo starts over
    /// past [`MAX_COMBOS`] sets).
    pub(crate) fn combo(&mut self, v: &LabelValues) -> ComboId {
        let hash = self.hasher.hash_one(v.raw());
        let combos = &self.combos;
        if let Some(&i) = self
            .combo_index
            .find(hash, |&i| combos[i as usize].labels.raw() == v.raw())
        {
            return ComboId(i);
        }
        if self.combos.len() >= MAX_COMBOS {
            self.combos.clear();
            self.combo_index.clear();
        }
        let i = self.combos.len() as u32;
        self.combos.push(Combo {
            labels: *v,
            slots: [Slot::Unknown; ALL.len()],
        });
        let (hasher, combos) = (&self.hasher, &self.combos);
        self.combo_index.insert_unique(hash, i, |&i| {
            hasher.hash_one(combos[i as usize].labels.raw())
        });
        ComboId(i)
    }

    /// The series of `fam` at the labels of `combo`, created when new. Past
    /// the cap, a counter's or histogram's observations go to the family's
    /// `other` series (so totals stay exact) and a gauge's are dropped
    /// (`None`); both are counted.
    pub(crate) fn combo_series(&mut self, combo: ComboId, fam: Fam) -> Option<&Series> {
        let c = combo.0 as usize;
        let mut slot = self.combos.get(c)?.slots[fam.index()];
        if slot == Slot::Unknown {
            let (labels, len) = self.combos[c].labels.of(fam);
            slot = self.resolve(fam, &labels[..len]);
            self.combos[c].slots[fam.index()] = slot;
        }
        self.use_slot(fam, slot)
    }

    /// The series an observation of `slot` goes to; counts it dropped past
    /// the cap.
    fn use_slot(&self, fam: Fam, slot: Slot) -> Option<&Series> {
        let family = &self.data.families[fam.index()];
        let id = match slot {
            Slot::Unknown => return None,
            Slot::Series(id) => id,
            Slot::Overflow(id) => {
                family
                    .dropped
                    .store(family.dropped.load(Relaxed) + 1, Relaxed);
                id
            }
            Slot::Dropped => {
                family
                    .dropped
                    .store(family.dropped.load(Relaxed) + 1, Relaxed);
                return None;
            }
        };
        family.series.get(id as usize)
    }

    /// Where observations of `fam` with `labels` go, creating the series
    /// (or the family's `other` series past the cap) when new;
    /// [`Slot::Unknown`] only if a table is full.
    fn resolve(&mut self, fam: Fam, labels: &[u32]) -> Slot {
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
        match found {
            Some(id) => Slot::Series(id),
            None if self.caps.take(fam) => {
                let Some(id) = family.series.push(Series::new(labels, spec.cells())) else {
                    return Slot::Unknown;
                };
                let id = id as u32;
                let hasher = &self.hasher;
                self.families[i].insert_unique(hash, id, |&s| {
                    hasher.hash_one(family.series.get(s as usize).map_or(&[][..], |s| &s.labels))
                });
                Slot::Series(id)
            }
            None if spec.kind == Kind::Gauge => Slot::Dropped,
            None => match self.overflow[i] {
                Some(id) => Slot::Overflow(id),
                None => {
                    let others = [OTHER; MAX_LABELS];
                    let labels = &others[..labels.len().min(MAX_LABELS)];
                    let Some(id) = family.series.push(Series::new(labels, spec.cells())) else {
                        return Slot::Unknown;
                    };
                    self.overflow[i] = Some(id as u32);
                    Slot::Overflow(id as u32)
                }
            },
        }
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

    /// A label set whose `fam` labels are all `x`.
    fn combo(w: &mut CoreWriter, x: u32) -> ComboId {
        let mut v = LabelValues::default();
        for l in super::super::families::Fam::ProxyTotalRequests
            .spec()
            .labels
            .iter()
            .chain(Fam::DeploymentState.spec().labels)
            .chain(Fam::DeploymentCooledDown.spec().labels)
        {
            v.set(*l, x);
        }
        w.combo(&v)
    }

    #[test]
    fn past_the_cap_counters_share_the_other_series_and_gauges_drop() {
        let caps = Arc::new(Caps::new(2));
        let (mut w, data) = CoreWriter::new(caps.clone());
        let (mut w2, data2) = CoreWriter::new(caps);
        let fam = Fam::DeploymentCooledDown;
        for (second, x) in [(false, 3), (false, 3), (true, 4)] {
            let w = if second { &mut w2 } else { &mut w };
            let c = combo(w, x);
            w.combo_series(c, fam).unwrap().add_f64(0, 1.0);
        }
        // Past the cap, and again through the memo of the same label set:
        // both observations land on `other` and both count as dropped.
        for _ in 0..2 {
            let c = combo(&mut w, 5);
            let other = w.combo_series(c, fam).unwrap();
            assert!(other.labels.iter().all(|&l| l == OTHER));
            other.add_f64(0, 1.0);
        }
        let total: f64 = [&data, &data2]
            .iter()
            .flat_map(|d| d.families[fam.index()].series.iter())
            .map(|s| f64::from_bits(s.cells[0].load(Relaxed)))
            .sum();
        assert_eq!(total, 5.0, "no observation is lost");
        assert_eq!(data.families[fam.index()].series.iter().count(), 2);
        assert_eq!(data.families[fam.index()].dropped.load(Relaxed), 2);
        let gauge = Fam::DeploymentState;
        for x in [5, 6] {
            let c = combo(&mut w, x);
            assert!(w.combo_series(c, gauge).is_some());
        }
        for _ in 0..3 {
            let c = combo(&mut w, 7);
            assert!(w.combo_series(c, gauge).is_none(), "a gauge past the cap");
        }
        assert_eq!(data.families[gauge.index()].dropped.load(Relaxed), 3);
    }

    #[test]
    fn a_memoized_label_set_finds_its_series_and_a_changed_one_a_new_series() {
        let (mut w, data) = CoreWriter::new(Arc::new(Caps::new(100)));
        let fam = Fam::ProxyTotalRequests;
        let mut v = LabelValues::default();
        v.set(super::super::families::L::Team, w.intern("team-a"));
        let a = w.combo(&v);
        w.combo_series(a, fam).unwrap().add_f64(0, 1.0);
        let again = w.combo(&v);
        w.combo_series(again, fam).unwrap().add_f64(0, 1.0);
        // The key moved to another team (an update, a reload): new labels.
        v.set(super::super::families::L::Team, w.intern("team-b"));
        let b = w.combo(&v);
        w.combo_series(b, fam).unwrap().add_f64(0, 1.0);
        let series: Vec<(String, f64)> = data.families[fam.index()]
            .series
            .iter()
            .map(|s| {
                let team = fam
                    .spec()
                    .labels
                    .iter()
                    .position(|l| *l == super::super::families::L::Team)
                    .unwrap();
                (
                    data.symbol(s.labels[team]).to_string(),
                    f64::from_bits(s.cells[0].load(Relaxed)),
                )
            })
            .collect();
        assert_eq!(series, [("team-a".into(), 2.0), ("team-b".into(), 1.0)]);
        // The memo starts over when full; series stay where they are.
        for x in 0..MAX_COMBOS as u32 + 10 {
            let mut u = LabelValues::default();
            u.set(super::super::families::L::EndUser, x + 1000);
            w.combo(&u);
        }
        assert!(w.combos.len() < MAX_COMBOS);
        let c = w.combo(&v);
        w.combo_series(c, fam).unwrap().add_f64(0, 1.0);
        assert_eq!(data.families[fam.index()].series.iter().count(), 2);
    }

    #[test]
    fn a_text_at_a_known_address_with_new_contents_is_interned_anew() {
        let (mut w, data) = CoreWriter::new(Arc::new(Caps::new(10)));
        let mut alias = String::from("alias-one");
        let one = w.intern(&alias);
        assert_eq!(w.intern(&alias), one, "found by its address");
        let address = alias.as_ptr();
        alias.replace_range(.., "alias-two");
        assert_eq!(alias.as_ptr(), address, "same buffer");
        let two = w.intern(&alias);
        assert_ne!(two, one);
        assert_eq!(data.symbol(two), "alias-two");
        assert_eq!(w.intern("alias-one"), one, "and by hash elsewhere");
    }
}
