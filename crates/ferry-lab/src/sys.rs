//! The crate's only `unsafe`: the libc calls without which the runner cannot signal, time or
//! size its processes, and the testbed cannot enter a network namespace or open its impairment
//! hop's TUN device.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

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

/// Moves the calling thread into the network namespace `ns` (an open `/var/run/netns/NAME`).
/// Only this thread changes namespace; sockets it creates afterwards belong to `ns`.
pub fn enter_netns(ns: &File) -> io::Result<()> {
    // SAFETY: setns(2) takes a descriptor this `File` keeps open and a constant.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags, padded to 40 bytes.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates the TUN device `name` (IFF_TUN, no packet information) in the calling thread's network
/// namespace and returns its descriptor: reads yield one IP packet each, writes inject one. The
/// device lives as long as the descriptor.
pub fn open_tun(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() > 15 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "TUN name of 1-15 bytes",
        ));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; 16],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`; `req` is one, alive for the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

/// Waits until `f` is readable or `timeout_ms` passes; true when readable.
pub fn wait_readable(f: &File, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) reads and writes one pollfd, `p`, alive for the call.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    match r {
        -1 => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}
