//! Returning freed memory to the OS after connections close. mimalloc keeps
//! the pages of freed objects for reuse and purges them only while the heap
//! is busy, so a core whose thousands of streams just ended would hold their
//! memory until the next burst. The core's sweeper asks it to collect.

/// Connections closed between two sweeps that make a core collect.
pub const COLLECT_AFTER_CLOSED: usize = 512;

/// Frees this thread's empty pages and purges what mimalloc holds for reuse
/// (when the process runs on mimalloc; otherwise a no-op on an unused heap).
pub fn collect_freed() {
    // SAFETY: `mi_collect` only walks this thread's heap and mimalloc's
    // own segment caches; it takes no pointer from us.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
