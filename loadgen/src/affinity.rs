//! CPU pinning, so the gateway under test and the load side (load generator
//! plus mock) do not compete for the same cores.

use std::io;

/// A set of CPU numbers, as `sched_setaffinity` takes it.
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl CpuSet {
    /// The set of `cpus`.
    pub fn of(cpus: impl IntoIterator<Item = usize>) -> CpuSet {
        // SAFETY: cpu_set_t is plain data; all-zero is the empty set and
        // CPU_SET only writes inside it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for cpu in cpus {
                libc::CPU_SET(cpu, &mut set);
            }
            CpuSet(set)
        }
    }

    /// Restricts the calling thread, and every thread or process it creates
    /// afterwards, to this set. Async-signal-safe (a single system call), so
    /// it may run between `fork` and `exec`.
    pub fn apply_to_current_thread(&self) -> io::Result<()> {
        // SAFETY: the set is a valid cpu_set_t of the size passed.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// How the cores are split between the gateway and the load side.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Split {
    /// CPUs for the gateway process.
    pub gateway: Vec<usize>,
    /// CPUs for this process (load generator and in-process mock).
    pub load: Vec<usize>,
}

/// Gives the gateway its first `gateway_workers` CPUs and the load side the
/// rest; `None` when there are not enough CPUs to split.
pub fn split(cpus: usize, gateway_workers: usize) -> Option<Split> {
    (gateway_workers >= 1 && cpus > gateway_workers).then(|| Split {
        gateway: (0..gateway_workers).collect(),
        load: (gateway_workers..cpus).collect(),
    })
}

/// Sets the nice value of the calling thread to `nice` (-20 to 19; below
/// the current value needs root or `CAP_SYS_NICE`). Linux keeps it per
/// thread: threads and processes created by this thread afterwards inherit
/// it, those already running keep theirs.
pub fn set_nice(nice: i32) -> Result<(), String> {
    // SAFETY: setpriority has no memory preconditions; `who` 0 is the
    // calling thread on Linux.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    match rc {
        0 => Ok(()),
        _ => Err(format!(
            "cannot set nice {nice}: {} (a negative value needs root or CAP_SYS_NICE)",
            io::Error::last_os_error()
        )),
    }
}

/// Number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cores() {
        assert_eq!(
            split(2, 1),
            Some(Split {
                gateway: vec![0],
                load: vec![1]
            })
        );
        assert_eq!(split(8, 3).unwrap().load, vec![3, 4, 5, 6, 7]);
        assert_eq!(split(2, 2), None);
        assert_eq!(split(1, 1), None);
    }

    #[test]
    fn renices_the_calling_thread_only() {
        let before = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let (set, child) = std::thread::spawn(|| {
            set_nice(7).unwrap();
            let set = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let child = std::thread::spawn(|| unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) })
                .join()
                .unwrap();
            (set, child)
        })
        .join()
        .unwrap();
        assert_eq!((set, child), (7, 7), "set, and inherited by a new thread");
        assert_eq!(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }, before);
    }

    #[test]
    fn pins_a_thread() {
        std::thread::spawn(|| CpuSet::of([0]).apply_to_current_thread().unwrap())
            .join()
            .unwrap();
    }
}
