//! Notifying the sidecar of a new managed job over its Unix socket, within a hard deadline.
//!
//! The socket is non-blocking from the start: `connect` on a Unix stream socket either
//! completes at once, fails at once (no listener: ENOENT or ECONNREFUSED), or reports EAGAIN
//! when the listener's backlog is full, in which case it is retried every millisecond until
//! the deadline. The notice is one short line sent with one non-blocking `send`; if it
//! does not fit the socket buffer at once, it is dropped. The sidecar does not depend on
//! notices (it reads held jobs from Slurm every round), so dropping one only delays it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// Why a notice was not delivered.
#[derive(Debug)]
pub enum NotifyError {
    /// The socket path does not fit a `sockaddr_un`.
    PathTooLong,
    /// A system call failed.
    Os(&'static str, std::io::Error),
    /// The deadline passed.
    Timeout,
    /// Only part of the notice fit.
    Partial,
}

impl std::fmt::Display for NotifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotifyError::PathTooLong => f.write_str("socket path too long"),
            NotifyError::Os(call, e) => write!(f, "{call}: {e}"),
            NotifyError::Timeout => f.write_str("deadline passed"),
            NotifyError::Partial => f.write_str("socket buffer full"),
        }
    }
}

/// Sends `line` to the Unix stream socket at `path`, giving up after `timeout`.
pub fn send(path: &Path, line: &str, timeout: Duration) -> Result<(), NotifyError> {
    let deadline = Instant::now() + timeout;
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(NotifyError::PathTooLong);
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: plain socket(2) call; the descriptor is owned at once.
    let raw = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(NotifyError::Os("socket", std::io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: `addr` is a valid sockaddr_un of the given size.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&raw const addr).cast::<libc::sockaddr>(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        connect_retrying(&fd, &addr, deadline)?;
    }
    // SAFETY: sending from a valid buffer on a valid descriptor, without blocking or SIGPIPE.
    let sent = unsafe {
        libc::send(
            fd.as_raw_fd(),
            line.as_ptr().cast(),
            line.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        return Err(NotifyError::Os("send", std::io::Error::last_os_error()));
    }
    if sent as usize != line.len() {
        return Err(NotifyError::Partial);
    }
    Ok(())
}

/// Retries a connect that found the listener's backlog full (EAGAIN: a Unix stream socket
/// has no connect in progress to wait for) every millisecond until the deadline.
fn connect_retrying(
    fd: &OwnedFd,
    addr: &libc::sockaddr_un,
    deadline: Instant,
) -> Result<(), NotifyError> {
    loop {
        let err = std::io::Error::last_os_error();
        if !matches!(
            err.raw_os_error(),
            Some(libc::EAGAIN) | Some(libc::EINPROGRESS) | Some(libc::EINTR)
        ) {
            return Err(NotifyError::Os("connect", err));
        }
        if Instant::now() >= deadline {
            return Err(NotifyError::Timeout);
        }
        std::thread::sleep(
            Duration::from_millis(1).min(deadline.saturating_duration_since(Instant::now())),
        );
        // SAFETY: as for the first connect.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (addr as *const libc::sockaddr_un).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
    }
}
