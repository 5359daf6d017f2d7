//! Raising `RLIMIT_NOFILE` so thousands of sockets fit. Child processes
//! (the gateway) inherit the raised limit.

/// Raises the soft open-file limit to at least `needed` (up to the hard
/// limit) and returns the new soft limit. Fails when the hard limit is
/// below `needed`.
pub fn raise_to(needed: u64) -> Result<u64, String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
    }
    if lim.rlim_cur >= needed {
        return Ok(lim.rlim_cur);
    }
    if lim.rlim_max < needed {
        return Err(format!(
            "need {needed} open files but the hard limit is {} (raise it with `ulimit -Hn` or use fewer streams)",
            lim.rlim_max
        ));
    }
    lim.rlim_cur = needed;
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
    }
    Ok(needed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_to_a_small_number_is_a_no_op() {
        assert!(raise_to(16).unwrap() >= 16);
        assert!(raise_to(u64::MAX - 1).unwrap_err().contains("hard limit"));
    }
}
