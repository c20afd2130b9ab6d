//! The crate's only `unsafe`: three libc calls without which the runner cannot signal, time or
//! size its processes.

/// Sends `sig` to `pid` (a child this process started and has not reaped).
pub fn signal(pid: u32, sig: i32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    // SAFETY: kill(2) takes plain integers; a stale PID only yields ESRCH.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Clock ticks per second, the unit of utime/stime in /proc/PID/stat.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf(3) takes an integer name and returns an integer.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Raises the open-files soft limit to the hard limit (children inherit it); returns it.
pub fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit for getrlimit/setrlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        r.rlim_cur = r.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        }
    }
    r.rlim_cur
}
