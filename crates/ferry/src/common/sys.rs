//! The one module with `unsafe`: thin wrappers over syscalls the standard library lacks
//! (pipes and `splice(2)`, half-close on a raw fd, returning free heap pages to the kernel,
//! opening a TUN device and setting its link up, integer socket options, and `recvmsg(2)`
//! with a datagram's original destination).

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

/// The index of interface `name` (as `ip link` numbers it).
pub fn if_index(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in an interface name"))?;
    // SAFETY: if_nametoindex only reads the NUL-terminated string we pass by valid pointer.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::new(
            io::Error::last_os_error().kind(),
            format!("interface {name}: {}", io::Error::last_os_error()),
        )),
        i => Ok(i),
    }
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

/// The kernel's `struct in6_ifreq` (linux/ipv6.h): what SIOCSIFADDR reads on an IPv6 socket.
#[repr(C)]
struct In6Ifreq {
    addr: libc::in6_addr,
    prefixlen: u32,
    ifindex: libc::c_int,
}

/// Adds `addr/prefix` to the interface `name` (as `ip addr add`: the kernel adds the prefix
/// route; the address goes with the interface). IPv4 through SIOCSIFADDR and SIOCSIFNETMASK,
/// IPv6 through SIOCSIFADDR on an IPv6 socket.
pub fn add_address(name: &str, addr: std::net::IpAddr, prefix: u8) -> io::Result<()> {
    let fail = |what: &str| {
        let e = io::Error::last_os_error();
        io::Error::new(e.kind(), format!("{what} {addr}/{prefix} on {name}: {e}"))
    };
    match addr {
        std::net::IpAddr::V4(a) => {
            let ctl = std::net::UdpSocket::bind("0.0.0.0:0")?;
            let sin = |ip: u32| libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr { s_addr: ip.to_be() },
                sin_zero: [0; 8],
            };
            let mut r = ifreq(name)?;
            // SAFETY: the union's sockaddr member is 16 bytes, as sockaddr_in is; writing a
            // sockaddr_in over it is how the kernel reads an IPv4 interface address.
            unsafe {
                std::ptr::write_unaligned(
                    std::ptr::addr_of_mut!(r.ifr_ifru.ifru_addr).cast::<libc::sockaddr_in>(),
                    sin(u32::from(a)),
                )
            };
            // SAFETY: SIOCSIFADDR reads the ifreq we pass by a valid pointer; `ctl` is ours.
            if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCSIFADDR as _, &mut r) } != 0 {
                return Err(fail("address"));
            }
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            let mut m = ifreq(name)?;
            // SAFETY: as above, a sockaddr_in over the 16-byte netmask member.
            unsafe {
                std::ptr::write_unaligned(
                    std::ptr::addr_of_mut!(m.ifr_ifru.ifru_netmask).cast::<libc::sockaddr_in>(),
                    sin(mask),
                )
            };
            // SAFETY: SIOCSIFNETMASK reads the ifreq we pass by a valid pointer.
            if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCSIFNETMASK as _, &mut m) } != 0 {
                return Err(fail("netmask of"));
            }
        }
        std::net::IpAddr::V6(a) => {
            let ctl = std::net::UdpSocket::bind("[::]:0")?;
            let index = if_index(name).map_err(|_| fail("no interface for"))?;
            let mut r = In6Ifreq {
                addr: libc::in6_addr {
                    s6_addr: a.octets(),
                },
                prefixlen: u32::from(prefix),
                ifindex: index as libc::c_int,
            };
            // SAFETY: SIOCSIFADDR on an IPv6 socket reads an in6_ifreq, which we pass by a
            // valid pointer; `ctl` is our own socket.
            if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCSIFADDR as _, &mut r) } != 0 {
                return Err(fail("address"));
            }
        }
    }
    Ok(())
}

/// `setsockopt(fd, level, name, &value)` for an integer option socket2 has no call for.
pub fn set_int_opt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: i32) -> io::Result<()> {
    let v: libc::c_int = value;
    // SAFETY: setsockopt reads exactly `size_of::<c_int>()` bytes from the valid pointer to `v`.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `setsockopt(fd, level, name, value)` for an option whose value is bytes (a name).
pub fn set_bytes_opt(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &[u8],
) -> io::Result<()> {
    // SAFETY: setsockopt reads exactly `value.len()` bytes from the valid slice.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `getsockopt(fd, level, name)` of an integer option.
pub fn int_opt(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v` and updates `len`, both valid.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// A `sockaddr_in` or `sockaddr_in6` of `len` bytes at `p`, as a socket address.
fn sockaddr_at(p: *const u8, len: usize) -> Option<std::net::SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
    if len < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: the caller's `len` bytes at `p` are initialised; every read below is unaligned
    // and checked against `len` for the type read.
    unsafe {
        let family = std::ptr::read_unaligned(p.cast::<libc::sa_family_t>());
        match family as libc::c_int {
            libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
                let a = std::ptr::read_unaligned(p.cast::<libc::sockaddr_in>());
                let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                Some(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
            }
            libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
                let a = std::ptr::read_unaligned(p.cast::<libc::sockaddr_in6>());
                let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
                Some(SocketAddr::new(ip.into(), u16::from_be(a.sin6_port)))
            }
            _ => None,
        }
    }
}

/// One datagram from a socket with `IP_RECVORIGDSTADDR` / `IPV6_RECVORIGDSTADDR` set: its
/// length, its source, and the destination it was sent to (none when the kernel gave none).
/// Non-blocking: `WouldBlock` when nothing is queued. A datagram longer than `buf` is cut.
pub fn recv_orig_dst(
    fd: RawFd,
    buf: &mut [u8],
) -> io::Result<(usize, std::net::SocketAddr, Option<std::net::SocketAddr>)> {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut src: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for one sockaddr_in6 control message (and a sockaddr_in one), 8-byte aligned.
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain old data; all zeroes is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut src as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` points into live buffers of the lengths it gives.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let source = sockaddr_at(
        (&src as *const libc::sockaddr_storage).cast(),
        msg.msg_namelen as usize,
    )
    .ok_or_else(|| io::Error::other("datagram without an IP source"))?;
    let mut orig = None;
    // SAFETY: CMSG_FIRSTHDR/CMSG_NXTHDR walk the control buffer recvmsg filled, within
    // msg_controllen; each header read is inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let h = std::ptr::read_unaligned(c);
            let data = libc::CMSG_DATA(c) as *const u8;
            let len = (h.cmsg_len as usize).saturating_sub(data as usize - c as usize);
            if (h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_ORIGDSTADDR)
                || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_ORIGDSTADDR)
            {
                orig = sockaddr_at(data, len);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, source, orig))
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
