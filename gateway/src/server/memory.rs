//! Returning memory to the OS when a core has nothing to do. mimalloc keeps
//! the pages of freed objects for reuse and purges them only while the heap
//! is busy, so a core whose connections just ended (thousands of streams, or
//! a load run's few dozen) would hold their memory until the next burst;
//! start-up's own garbage (the config, price tables and migrations parsed
//! once) stays on the main thread's heap, which never allocates again. And
//! the kernel maps an executable 64 KiB around each page start-up touches
//! (fault-around), so the code that runs once (config parsing, migrations)
//! stays in the resident set beside the code that serves requests: about
//! 10 MB of a 14 MB text section for a gateway that runs perhaps a third
//! of it. Nothing here runs on the request path: the core's sweeper calls
//! these every 10 s, and only when the core is idle or just went quiet.

use std::sync::atomic::{AtomicBool, Ordering};

/// Connections closed between two sweeps that make a core collect.
pub const COLLECT_AFTER_CLOSED: usize = 512;

/// Frees this thread's empty pages and purges what mimalloc holds for reuse
/// (when the process runs on mimalloc; otherwise a no-op on an unused heap).
pub fn collect_freed() {
    // SAFETY: `mi_collect` only walks this thread's heap and mimalloc's
    // own segment caches; it takes no pointer from us.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Whether a core's sweep should collect: no connection is open on it and
/// it accepted some since it last collected (`accepted_at_collect`), so an
/// idle core collects once after each busy spell, never while it serves.
pub fn idle_collect_due(open: usize, accepted: u64, accepted_at_collect: u64) -> bool {
    open == 0 && accepted != accepted_at_collect
}

/// Drops this process's page-table entries for its executable's read-only
/// mappings that it never wrote (text and rodata; the relocated `relro`
/// part holds private copies and is left alone), once per process. The
/// pages stay in the page cache: the code that runs from now on faults its
/// pages back in (minor faults, once), and what start-up alone ran no
/// longer counts in the resident set. Returns the bytes released (0 on a
/// second call, or when `/proc` cannot be read).
pub fn release_startup_text() -> usize {
    static RELEASED: AtomicBool = AtomicBool::new(false);
    if RELEASED.swap(true, Ordering::Relaxed) {
        return 0;
    }
    let (Ok(exe), Ok(smaps)) = (
        std::fs::read_link("/proc/self/exe"),
        std::fs::read_to_string("/proc/self/smaps"),
    ) else {
        return 0;
    };
    let mut released = 0;
    for (start, end) in clean_mappings_of(&smaps, &exe.to_string_lossy()) {
        // SAFETY: a private mapping of our own executable that holds no
        // private (written) page: dropping its entries only makes the next
        // access map the same page-cache page again. No Rust object lives
        // in it.
        let done =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if done == 0 {
            released += end - start;
        }
    }
    released
}

/// The address ranges of `exe`'s read-only private mappings (`r-xp`,
/// `r--p`) in a `/proc/<pid>/smaps` text whose `Anonymous` size is 0 (no
/// page of them was ever written, by the dynamic loader's relocations or
/// anything else).
fn clean_mappings_of(smaps: &str, exe: &str) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut candidate = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else {
            continue;
        };
        if let Some(anonymous) = line.strip_prefix("Anonymous:") {
            let clean = anonymous.trim() == "0 kB";
            if let (Some(range), true) = (candidate.take(), clean) {
                ranges.push(range);
            }
        } else if !first.ends_with(':') {
            // A mapping's first line: range, perms, offset, dev, inode, path.
            let perms = fields.next();
            let path = fields.nth(3);
            candidate = match (first.split_once('-'), perms, path) {
                (Some((a, b)), Some("r-xp" | "r--p"), Some(p)) if p == exe => {
                    match (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                        (Ok(a), Ok(b)) if a < b => Some((a, b)),
                        _ => None,
                    }
                }
                _ => None,
            };
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Rss` of `exe`'s text mapping in this process, in kB.
    fn text_rss_kb(exe: &str) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut in_text = false;
        for line in smaps.lines() {
            let mut fields = line.split_whitespace();
            let first = fields.next().unwrap_or("");
            if !first.ends_with(':') {
                in_text = fields.next() == Some("r-xp") && fields.nth(3) == Some(exe);
            } else if in_text && first == "Rss:" {
                return fields.next().unwrap().parse().unwrap();
            }
        }
        panic!("no text mapping of {exe}");
    }

    const SMAPS: &str = "\
55a3e94b7000-55a3e9957000 r--p 00000000 fe:00 10010635                   /opt/gw/gateway
Size:               4736 kB
Rss:                2304 kB
Anonymous:             0 kB
55a3e9957000-55a3ea6c9000 r-xp 0049f000 fe:00 10010635                   /opt/gw/gateway
Size:              13768 kB
Rss:               10536 kB
Anonymous:             0 kB
55a3ea6c9000-55a3ea74b000 r--p 01210000 fe:00 10010635                   /opt/gw/gateway
Size:                520 kB
Rss:                 520 kB
Anonymous:           520 kB
55a3ea74b000-55a3ea752000 rw-p 01291000 fe:00 10010635                   /opt/gw/gateway
Size:                 28 kB
Anonymous:            28 kB
7f110004e000-7f11001a4000 r-xp 00028000 fe:00 2236                       /usr/lib/x86_64-linux-gnu/libc.so.6
Size:               1368 kB
Anonymous:             0 kB
20000580000-20001710000 rw-p 00000000 00:00 0
Size:              17984 kB
Anonymous:          2000 kB
";

    #[test]
    fn only_the_executables_unwritten_read_only_mappings_are_released() {
        assert_eq!(
            clean_mappings_of(SMAPS, "/opt/gw/gateway"),
            vec![
                (0x55a3e94b7000, 0x55a3e9957000),
                (0x55a3e9957000, 0x55a3ea6c9000)
            ],
            "rodata and text; not the relocated relro, the data, libc or the heap"
        );
        assert!(clean_mappings_of(SMAPS, "/opt/gw/other").is_empty());
    }

    #[test]
    fn releasing_start_up_text_shrinks_the_resident_text_once() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy().into_owned();
        let before = text_rss_kb(&exe);
        let released = release_startup_text();
        let after = text_rss_kb(&exe);
        assert!(released > 0, "nothing released");
        // What this test runs after the release faults back a few pages
        // (64 KiB each); the test harness's start-up mapped far more.
        assert!(
            after * 2 < before,
            "text resident {before} kB, then {after} kB"
        );
        assert_eq!(release_startup_text(), 0, "a second call releases nothing");
    }

    #[test]
    fn an_idle_core_collects_once_after_each_busy_spell() {
        assert!(
            !idle_collect_due(0, 0, 0),
            "never served: nothing to give back"
        );
        assert!(
            idle_collect_due(0, 64, 0),
            "served 64 connections, all closed"
        );
        assert!(
            !idle_collect_due(0, 64, 64),
            "collected already, idle since"
        );
        assert!(!idle_collect_due(3, 70, 64), "connections open: no collect");
    }
}
