//! The notice socket: where the job_submit plugin (inside slurmctld) tells the daemon that a
//! managed job arrived, so that the next round starts at once.
//!
//! Only slurmctld may talk to it. Two locks, each enough on its own: the socket file is
//! mode 0600, owned by slurmctld's user, in a directory no other user can write (so nobody
//! can replace it); and every accepted connection's peer credentials (`SO_PEERCRED`) are
//! checked against the allowed uids (root, the daemon's own uid and slurmctld's `SlurmUser`),
//! so a connection from anyone else is dropped unread and reported. A notice is only a
//! wake-up hint (the daemon reads everything from Slurm), so the worst a forged notice could
//! do is start a round early; still, nothing but slurmctld gets that far.

use hadar_request::{Notice, NoticeError};
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest notice line read, in bytes; anything longer is refused.
pub const MAX_NOTICE_BYTES: u64 = 4096;

/// How long a peer may take to send its line.
pub const READ_TIMEOUT: Duration = Duration::from_millis(200);

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The directory holding the socket is writable by other users, who could replace it.
    #[error(
        "{dir}: the socket's directory is writable by users other than its owner (mode {mode:o}); use a directory only root or slurmctld's user can write"
    )]
    UnsafeDirectory {
        /// The directory.
        dir: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// A file system call failed.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The path acted on.
        path: PathBuf,
        /// What was done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// Why one connection's notice was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum NoticeRefused {
    /// The peer is not slurmctld (nor root, nor the daemon's own user).
    #[error("connection from uid {uid} (pid {pid}) refused: only slurmctld's user may notify")]
    Peer {
        /// The peer's uid.
        uid: u32,
        /// The peer's pid.
        pid: i32,
    },
    /// The peer's credentials could not be read.
    #[error("cannot read the peer's credentials: {0}")]
    Credentials(std::io::Error),
    /// Reading failed, timed out, or the bytes are not UTF-8.
    #[error("reading the notice: {0}")]
    Read(std::io::Error),
    /// No newline within [`MAX_NOTICE_BYTES`].
    #[error("notice longer than {MAX_NOTICE_BYTES} bytes or without its newline")]
    TooLong,
    /// The line is not a notice.
    #[error(transparent)]
    Malformed(#[from] NoticeError),
}

/// The peer's `(uid, pid)` of a connected Unix socket, from `SO_PEERCRED`.
pub fn peer_credentials(stream: &UnixStream) -> std::io::Result<(u32, i32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((cred.uid, cred.pid))
}

/// Reads one notice line from `input`: at most [`MAX_NOTICE_BYTES`], UTF-8, newline-ended.
pub fn read_notice(input: impl Read) -> Result<Notice, NoticeRefused> {
    let mut line = String::new();
    let n = BufReader::new(input.take(MAX_NOTICE_BYTES))
        .read_line(&mut line)
        .map_err(NoticeRefused::Read)?;
    if n == 0 || !line.ends_with('\n') {
        return Err(NoticeRefused::TooLong);
    }
    Ok(Notice::decode(&line)?)
}

/// Checks a connection's peer against `allowed` and reads its notice.
pub fn accept_notice(stream: UnixStream, allowed: &[u32]) -> Result<Notice, NoticeRefused> {
    let (uid, pid) = peer_credentials(&stream).map_err(NoticeRefused::Credentials)?;
    if !allowed.contains(&uid) {
        return Err(NoticeRefused::Peer { uid, pid });
    }
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .map_err(NoticeRefused::Read)?;
    read_notice(stream)
}

/// The uids allowed to notify: root, the daemon's own effective uid, and `slurm_user` (the
/// uid of slurm.conf's `SlurmUser`) when known.
pub fn allowed_uids(slurm_user: Option<u32>) -> Vec<u32> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut out = vec![0, me];
    out.extend(slurm_user);
    out.sort_unstable();
    out.dedup();
    out
}

/// The `SlurmUser=` of a slurm.conf text (Slurm's default is root), as a uid; `None` when the
/// name is unknown to this machine.
pub fn slurm_user_uid(slurm_conf: &str) -> Option<u32> {
    let name = slurm_conf
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("SlurmUser"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "root".to_string());
    if let Ok(uid) = name.parse::<u32>() {
        return Some(uid);
    }
    uid_of(&name)
}

/// The uid of user `name`, from the password database.
fn uid_of(name: &str) -> Option<u32> {
    let c_name = std::ffi::CString::new(name).ok()?;
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the sizes given; getpwnam_r writes only into them.
    let rc = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some(pwd.pw_uid)
}

/// Binds the socket at `path`: its directory is created (mode 0755) if missing and refused if
/// other users can write it; a stale socket is replaced; the socket file is made mode 0600
/// and, when the daemon runs as root and `owner` is another user, owned by `owner` (so that
/// slurmctld running as that user can connect).
pub fn bind(path: &Path, owner: Option<u32>) -> Result<UnixListener, SocketError> {
    let io = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| SocketError::Io { path, what, source }
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(io("creating the directory", dir))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io("setting the directory's mode", dir))?;
    }
    let meta = std::fs::metadata(dir).map_err(io("reading the directory", dir))?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(SocketError::UnsafeDirectory {
            dir: dir.to_path_buf(),
            mode,
        });
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("removing the old socket", path)(e)),
    }
    let listener = UnixListener::bind(path).map_err(io("binding", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io("setting the socket's mode", path))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if let Some(owner) = owner.filter(|o| *o != me && me == 0) {
        std::os::unix::fs::chown(path, Some(owner), None)
            .map_err(io("giving the socket to slurmctld's user", path))?;
    }
    Ok(listener)
}

/// Serves `listener` until it fails: each accepted notice calls `on_notice`, each refused
/// connection `on_refused` (which logs it). Connections are handled one at a time with a
/// short read timeout, after the credentials check, so no other user can stall the loop.
pub fn serve(
    listener: UnixListener,
    allowed: &[u32],
    mut on_notice: impl FnMut(Notice),
    mut on_refused: impl FnMut(NoticeRefused),
) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        match accept_notice(conn, allowed) {
            Ok(n) => on_notice(n),
            Err(e) => on_refused(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    const LINE: &str = "hadar-notice v1 uid=1000 hadar:v1 gpus=v100:2 steps=10\n";

    #[test]
    fn reads_a_notice_and_refuses_junk() {
        let n = read_notice(LINE.as_bytes()).unwrap();
        assert_eq!(n.uid, 1000);
        assert!(matches!(
            read_notice(&b"hadar-notice v1 uid=1000"[..]),
            Err(NoticeRefused::TooLong)
        ));
        assert!(matches!(
            read_notice(&b"\xff\xfe\n"[..]),
            Err(NoticeRefused::Read(_))
        ));
        let long = format!("{}\n", "x".repeat(10_000));
        assert!(matches!(
            read_notice(long.as_bytes()),
            Err(NoticeRefused::TooLong)
        ));
        assert!(matches!(
            read_notice(&b"hello\n"[..]),
            Err(NoticeRefused::Malformed(_))
        ));
    }

    #[test]
    fn slurm_user_is_read_from_slurm_conf() {
        assert_eq!(slurm_user_uid("ClusterName=x\nSlurmUser=root\n"), Some(0));
        assert_eq!(
            slurm_user_uid("ClusterName=x\n"),
            Some(0),
            "Slurm's default"
        );
        assert_eq!(
            slurm_user_uid("slurmuser = nobody # comment\n"),
            Some(65534)
        );
        assert_eq!(slurm_user_uid("SlurmUser=123\n"), Some(123));
        assert_eq!(slurm_user_uid("SlurmUser=no-such-user-hadar\n"), None);
        assert_eq!(allowed_uids(Some(65534)), vec![0, 65534]);
    }

    #[test]
    fn socket_is_private_and_its_directory_must_be_safe() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("run/hadar.sock");
        let _l = bind(&path, None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777;
        assert_eq!(dir_mode, 0o755);
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = bind(&open.join("hadar.sock"), None).unwrap_err();
        assert!(matches!(e, SocketError::UnsafeDirectory { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("writable by users other than its owner")
        );
    }

    #[test]
    fn socket_is_given_to_slurmctlds_user_when_run_as_root() {
        if unsafe { libc::geteuid() } != 0 {
            return; // only root can give files away; the tests of this project run as root
        }
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("hadar.sock");
        let _l = bind(&path, Some(65534)).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534);
    }

    /// Connects to `path` as uid/gid `uid` in a forked child and sends `LINE`; returns the
    /// child's exit status: 0 connected, 1 connect refused by the file system, 2 could not
    /// switch user.
    fn connect_as(path: &Path, uid: u32) -> i32 {
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr
            .sun_path
            .iter_mut()
            .zip(path.as_os_str().as_encoded_bytes())
        {
            *d = *s as libc::c_char;
        }
        // SAFETY: the child makes only raw system calls (no allocation) before _exit.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                {
                    libc::_exit(2);
                }
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let rc = libc::connect(
                    fd,
                    (&raw const addr).cast(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                );
                if rc != 0 {
                    libc::_exit(1);
                }
                // The daemon may drop the connection before this write (EPIPE): connecting
                // is what this reports.
                let _ = libc::write(fd, LINE.as_ptr().cast(), LINE.len());
                libc::_exit(0);
            }
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
            libc::WEXITSTATUS(status)
        }
    }

    #[test]
    fn other_users_cannot_connect_and_are_refused_if_they_do() {
        if unsafe { libc::geteuid() } != 0 {
            return; // switching to another uid needs root; the project's tests run as root
        }
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = tmp.path().join("hadar.sock");
        let listener = bind(&path, None).unwrap();
        // The file's mode alone keeps uid 65534 (nobody) out.
        assert_eq!(
            connect_as(&path, 65534),
            1,
            "nobody connected to a 0600 socket"
        );
        // Were the mode ever loosened, the credentials check still refuses the peer, and
        // slurmctld's user (root here) still gets through.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let allowed = allowed_uids(Some(0));
        std::thread::spawn(move || {
            serve(
                listener,
                &allowed,
                |n| {
                    let _ = tx.send(Ok(n.uid));
                },
                |e| {
                    let _ = tx.send(Err(e.to_string()));
                },
            )
        });
        assert_eq!(connect_as(&path, 65534), 0, "nobody could not even connect");
        let refused = rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap_err();
        assert!(
            refused.starts_with("connection from uid 65534"),
            "{refused}"
        );
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(LINE.as_bytes()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Ok(1000));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Arbitrary bytes on the socket (non-UTF-8, truncated, oversized): never a panic,
        /// and a notice is accepted only when it is one well-formed line.
        #[test]
        fn arbitrary_bytes_are_refused_or_a_notice(bytes in proptest::collection::vec(any::<u8>(), 0..6000)) {
            match read_notice(&bytes[..]) {
                Ok(n) => {
                    let end = bytes.iter().position(|b| *b == b'\n').unwrap();
                    let line = std::str::from_utf8(&bytes[..end]).unwrap();
                    prop_assert_eq!(Notice::decode(line).unwrap(), n);
                }
                Err(e) => {
                    let m = e.to_string();
                    prop_assert!(!m.is_empty() && !m.contains('\n') && m.len() < 400, "{}", m);
                }
            }
        }

        /// Valid notices cut short, or with junk appended to the line, are refused cleanly.
        #[test]
        fn truncated_and_extended_notices(cut in 0usize..LINE.len(), junk in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert!(read_notice(&LINE.as_bytes()[..cut]).is_err());
            let mut extended = LINE.trim_end().as_bytes().to_vec();
            extended.extend(&junk);
            extended.push(b'\n');
            if let Ok(n) = read_notice(&extended[..]) {
                prop_assert_eq!(n.uid, 1000);
            }
        }
    }
}
