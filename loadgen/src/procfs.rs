//! Resource figures of a process from `/proc`: CPU time, resident memory
//! and open file descriptors.

use std::time::Duration;

/// CPU time (user + system) a process has used so far, from
/// `/proc/<pid>/stat` (clock-tick resolution).
pub fn cpu_time(pid: u32) -> Result<Duration, String> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let ticks = parse_cpu_ticks(&text).ok_or_else(|| format!("{path}: unexpected format"))?;
    Ok(Duration::from_secs_f64(
        ticks as f64 / clock_ticks_per_second(),
    ))
}

/// `utime + stime` from the text of `/proc/<pid>/stat`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces; fields after its
    // closing parenthesis start at field 3 (state). utime and stime are
    // fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// Resident and peak resident memory, in KiB, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_kib: u64,
    /// `VmHWM`: the highest resident size so far.
    pub peak_kib: u64,
}

/// Reads a process's [`Memory`].
pub fn memory(pid: u32) -> Result<Memory, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    parse_memory(&text).ok_or_else(|| format!("{path}: no VmRSS/VmHWM lines"))
}

fn parse_memory(status: &str) -> Option<Memory> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some(Memory {
        rss_kib: field("VmRSS:")?,
        peak_kib: field("VmHWM:")?,
    })
}

/// Number of open file descriptors (sockets included), from
/// `/proc/<pid>/fd`.
pub fn open_fds(pid: u32) -> Result<usize, String> {
    let path = format!("/proc/{pid}/fd");
    std::fs::read_dir(&path)
        .map(|d| d.count())
        .map_err(|e| format!("{path}: {e}"))
}

/// CPU time of the whole machine so far, from the first line of
/// `/proc/stat`: what its CPUs spent running anything (user, nice, system,
/// irq and softirq time), the interrupt part of it apart (with interrupt
/// time accounting, the loopback network's receive work is there, charged
/// to no process), and what the hypervisor gave to others while they
/// wanted to run (steal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MachineCpu {
    /// Time every CPU spent busy, summed over the CPUs.
    pub busy: Duration,
    /// Of `busy`, the time in hard and soft interrupts.
    pub irq: Duration,
    /// Time stolen by the hypervisor, summed over the CPUs.
    pub steal: Duration,
    /// The machine's CPUs (`cpuN` lines).
    pub cpus: usize,
}

/// Reads [`MachineCpu`] from `/proc/stat`.
pub fn machine_cpu() -> Result<MachineCpu, String> {
    let path = "/proc/stat";
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    parse_machine_cpu(&text, clock_ticks_per_second())
        .ok_or_else(|| format!("{path}: unexpected format"))
}

fn parse_machine_cpu(stat: &str, ticks_per_second: f64) -> Option<MachineCpu> {
    let first = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = first
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is
    // already counted in user and nice).
    let field = |i: usize| fields.get(i).copied();
    let busy = [0, 1, 2, 5, 6]
        .into_iter()
        .map(field)
        .try_fold(0u64, |sum, f| sum.checked_add(f?))?;
    let irq = field(5)?.checked_add(field(6)?)?;
    let ticks = |n: u64| Duration::from_secs_f64(n as f64 / ticks_per_second);
    Some(MachineCpu {
        busy: ticks(busy),
        irq: ticks(irq),
        steal: ticks(field(7).unwrap_or(0)),
        cpus: stat
            .lines()
            .filter(|l| {
                l.strip_prefix("cpu")
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count(),
    })
}

/// The 1, 5 and 15-minute load averages, from `/proc/loadavg`.
pub fn load_average() -> Result<[f64; 3], String> {
    let path = "/proc/loadavg";
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    parse_load_average(&text).ok_or_else(|| format!("{path}: unexpected format"))
}

fn parse_load_average(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_name() {
        let stat =
            "1234 (my (odd) name) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 3 0 1 2 3";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn parses_status_memory_lines() {
        let status = "Name:\tgateway\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(
            parse_memory(status),
            Some(Memory {
                rss_kib: 10240,
                peak_kib: 20480
            })
        );
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        // Spin until a clock tick of CPU time is charged (on a busy machine
        // 30 ms of wall time may not be), with a deadline.
        let spin = std::time::Instant::now();
        while cpu_time(pid).unwrap() == Duration::ZERO && spin.elapsed() < Duration::from_secs(10) {
            std::hint::black_box(0);
        }
        assert!(cpu_time(pid).unwrap() > Duration::ZERO);
        let m = memory(pid).unwrap();
        assert!(m.rss_kib > 0 && m.peak_kib >= m.rss_kib);
        assert!(open_fds(pid).unwrap() >= 3);
        assert!(cpu_time(u32::MAX).unwrap_err().contains("/proc/"));
    }

    #[test]
    fn parses_the_machine_line_of_proc_stat() {
        let stat = "cpu  2594 30724 4986 20719 294 10 57 12 5 0\ncpu0 1 2 3 4 5 6 7 8 9 0\ncpu1 1 2 3 4 5 6 7 8 9 0\nintr 1 2\n";
        let m = parse_machine_cpu(stat, 100.0).unwrap();
        // user + nice + system + irq + softirq; idle, iowait and guest left out.
        assert_eq!(m.busy, Duration::from_millis(383_710));
        assert_eq!((m.steal, m.cpus), (Duration::from_millis(120), 2));
        assert_eq!(m.irq, Duration::from_millis(670));
        assert_eq!(parse_machine_cpu("cpu0 1 2 3", 100.0), None);
        assert_eq!(parse_machine_cpu("cpu  1 x 3 4 5 6 7", 100.0), None);
        assert_eq!(
            parse_machine_cpu("cpu  1 2 3", 100.0),
            None,
            "too few fields"
        );
        let now = machine_cpu().unwrap();
        assert!(now.cpus >= 1 && now.busy > Duration::ZERO);
    }

    #[test]
    fn parses_load_averages() {
        assert_eq!(
            parse_load_average("1.96 1.02 0.42 3/186 10542\n"),
            Some([1.96, 1.02, 0.42])
        );
        assert_eq!(parse_load_average("1.0 x"), None);
        assert!(load_average().unwrap()[0] >= 0.0);
    }
}
