//! The one module with `unsafe`: thin wrappers over syscalls the standard library lacks
//! (pipes and `splice(2)`, half-close on a raw fd, returning free heap pages to the kernel,
//! opening a TUN device and setting its link up).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// Returns the heap pages the allocator keeps free to the kernel: called once the config is
/// loaded and the instance started, so the garbage of loading (JSON trees, geodata read
/// buffers, table builders) leaves the resident set, as Xray's `debug.FreeOSMemory()` after
/// start. glibc's allocator only; elsewhere it does nothing.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only hands free pages of glibc's arenas back (madvise/brk); it
    // reads and writes no live allocation and takes the arenas' own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Raises the soft open-files limit to the hard one, as Go's runtime does for Xray at start (a
/// systemd service often gets 1,024 soft under a hard limit of 500,000), and returns the soft
/// limit now in force.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the rlimit struct we pass by valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if r.rlim_cur < r.rlim_max {
        let want = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        // SAFETY: setrlimit only reads the rlimit struct we pass by valid pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return Ok(want.rlim_cur);
        }
    }
    Ok(r.rlim_cur)
}

/// A kernel pipe used as the intermediate buffer for `splice(2)`.
pub struct Pipe {
    pub read: OwnedFd,
    pub write: OwnedFd,
}

impl Pipe {
    /// Creates a non-blocking, close-on-exec pipe and asks for `size` bytes of capacity.
    pub fn new(size: usize) -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two c_ints for pipe2 to fill.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        if size > 0 {
            // SAFETY: F_SETPIPE_SZ on an fd we own; failure only means the default size stays.
            unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) };
        }
        Ok(Pipe { read, write })
    }
}

/// Moves up to `len` bytes from `from` to `to` without copying through user space.
/// Returns `Ok(0)` at end of input; `WouldBlock` when either side is not ready.
pub fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: plain syscall on caller-provided fds with null offsets (both are sockets or pipes).
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `shutdown(fd, SHUT_WR)`: sends FIN while the read half stays open.
pub fn shutdown_write(fd: RawFd) -> io::Result<()> {
    // SAFETY: shutdown on an fd owned by a live socket object of the caller.
    let rc = unsafe { libc::shutdown(fd, libc::SHUT_WR) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            return Ok(());
        }
        return Err(e);
    }
    Ok(())
}

/// An interface request for `name` (truncated to the kernel's 15 bytes + NUL).
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} is not 1 to 15 bytes without '/', space or NUL"),
        ));
    }
    // SAFETY: ifreq is plain old data (a name array and a union of integers, addresses and a
    // pointer); all zeroes is a valid value of each.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

/// Opens a TUN device called `name` (created if absent, gone when the file closes unless made
/// persistent elsewhere): IP packets without a protocol header (`IFF_TUN | IFF_NO_PI`), one
/// queue, non-blocking. Its MTU is set to `mtu` and its link is set up; nothing else of the
/// interface (addresses, routes) is touched. Needs a tokio runtime (the file is registered
/// with its reactor).
pub fn open_tun(name: &str, mtu: u32) -> io::Result<tokio::io::unix::AsyncFd<std::fs::File>> {
    let mut req = ifreq(name)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")
        .map_err(|e| io::Error::new(e.kind(), format!("/dev/net/tun: {e}")))?;
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads (and writes back the name into) the ifreq we pass by a valid
    // pointer, on the tun fd we own.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("TUNSETIFF {name}: {e}")));
    }
    let ctl =
        std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| std::net::UdpSocket::bind("[::]:0"))?;
    let mut m = ifreq(name)?;
    m.ifr_ifru.ifru_mtu = mtu as libc::c_int;
    // SAFETY: SIOCSIFMTU reads the ifreq we pass by a valid pointer; `ctl` is our own socket.
    if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCSIFMTU as _, &mut m) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("MTU {mtu} on {name}: {e}"),
        ));
    }
    let mut f = ifreq(name)?;
    // SAFETY: SIOCGIFFLAGS writes the flags into the ifreq we pass by a valid pointer.
    if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut f) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS succeeded, so the union holds the flags.
    let flags = unsafe { f.ifr_ifru.ifru_flags };
    f.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads the ifreq we pass by a valid pointer.
    if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCSIFFLAGS as _, &mut f) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("link up {name}: {e}")));
    }
    // SAFETY: the File owns its fd, and nothing replaces or closes that fd while the AsyncFd
    // owns the File (it is only read and written through it).
    unsafe { tokio::io::unix::AsyncFd::register(file) }.map_err(|e| e.into_parts().1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn splice_moves_bytes_through_a_pipe() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (c, mut d) = UnixStream::pair().unwrap();
        let p = Pipe::new(1 << 16).unwrap();
        a.write_all(b"hello splice").unwrap();
        let n = splice(b.as_raw_fd(), p.write.as_raw_fd(), 1 << 16).unwrap();
        assert_eq!(n, 12);
        let m = splice(p.read.as_raw_fd(), c.as_raw_fd(), n).unwrap();
        assert_eq!(m, 12);
        let mut out = [0u8; 12];
        d.read_exact(&mut out).unwrap();
        assert_eq!(&out, b"hello splice");
        // Nothing left: non-blocking splice says WouldBlock.
        let e = splice(b.as_raw_fd(), p.write.as_raw_fd(), 1 << 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }
}
