//! systemd's service notifications (`Type=notify`, `WatchdogSec=`): `READY=1` once the
//! daemon has read Slurm, `WATCHDOG=1` while its loop turns, `STOPPING=1` when it stops.
//! Each is one datagram to the socket named by `$NOTIFY_SOCKET` (a path, or an abstract name
//! written `@name`); without that variable (not started by systemd) nothing is sent.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// Sends service notifications, and keeps the watchdog's pace.
#[derive(Debug)]
pub struct Notifier {
    target: Option<SocketAddr>,
    /// How often to ping the watchdog: half of `$WATCHDOG_USEC` (systemd's advice).
    watchdog_every: Option<Duration>,
    last_ping: Option<Instant>,
    ready: bool,
}

impl Notifier {
    /// A notifier for this process's environment.
    pub fn from_env() -> Notifier {
        let socket = std::env::var("NOTIFY_SOCKET").ok();
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        Notifier::new(socket.as_deref(), usec.as_deref(), pid.as_deref())
    }

    /// A notifier for these values of `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID`
    /// (the watchdog is ours only when no other pid is named).
    pub fn new(
        socket: Option<&str>,
        watchdog_usec: Option<&str>,
        watchdog_pid: Option<&str>,
    ) -> Notifier {
        let target = socket.and_then(address);
        let ours = watchdog_pid.is_none_or(|p| p.parse() == Ok(std::process::id()));
        let watchdog_every = watchdog_usec
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|u| *u > 0 && ours)
            .map(|u| Duration::from_micros(u / 2));
        Notifier {
            target,
            watchdog_every,
            last_ping: None,
            ready: false,
        }
    }

    /// Sends `READY=1` the first time only.
    pub fn ready(&mut self) {
        if !self.ready {
            self.ready = true;
            self.send("READY=1");
        }
    }

    /// Pings the watchdog if half its period has passed since the last ping.
    pub fn tick(&mut self) {
        let Some(every) = self.watchdog_every else {
            return;
        };
        if self.last_ping.is_none_or(|t| t.elapsed() >= every) {
            self.last_ping = Some(Instant::now());
            self.send("WATCHDOG=1");
        }
    }

    /// Sends `STOPPING=1`.
    pub fn stopping(&mut self) {
        self.send("STOPPING=1");
    }

    fn send(&self, state: &str) {
        let Some(target) = &self.target else {
            return;
        };
        // Non-blocking: a receiver that stops reading (its queue full) must not stall the
        // round loop; the notification is dropped and logged instead.
        let sent = UnixDatagram::unbound().and_then(|s| {
            s.set_nonblocking(true)?;
            s.send_to_addr(state.as_bytes(), target)
        });
        if let Err(e) = sent {
            tracing::warn!("cannot notify systemd ({state}): {e}");
        }
    }
}

/// systemd hears of the loop: ready once a round completed or the daemon stands by (or it
/// would be restarted at `TimeoutStartSec`), the watchdog between rounds, stopping.
impl hadar_daemon::observe::RoundObserver for Notifier {
    fn round_end(&mut self, end: &hadar_daemon::observe::RoundEnd<'_>) {
        use hadar_daemon::observe::RoundEnd;
        if matches!(end, RoundEnd::Done { .. } | RoundEnd::Standby) {
            self.ready();
        }
    }

    fn tick(&mut self) {
        Notifier::tick(self);
    }

    fn stopping(&mut self) {
        Notifier::stopping(self);
    }
}

/// The socket address `$NOTIFY_SOCKET` names.
fn address(name: &str) -> Option<SocketAddr> {
    match name.strip_prefix('@') {
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(abstract_name.as_bytes()).ok()
        }
        None if name.starts_with('/') => SocketAddr::from_pathname(name).ok(),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(socket: &UnixDatagram) -> Vec<String> {
        socket.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n) = socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        out
    }

    #[test]
    fn ready_once_watchdog_at_half_its_period_and_stopping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        let mut n = Notifier::new(path.to_str(), Some("200000"), None);
        n.ready();
        n.tick();
        n.tick(); // within 100 ms of the first: not sent
        n.ready();
        std::thread::sleep(Duration::from_millis(120));
        n.tick();
        n.stopping();
        assert_eq!(
            received(&socket),
            vec!["READY=1", "WATCHDOG=1", "WATCHDOG=1", "STOPPING=1"]
        );
    }

    #[test]
    fn an_abstract_socket_is_reached_and_another_pids_watchdog_is_not_ours() {
        let name = format!("hadar-test-{}", std::process::id());
        let socket = UnixDatagram::bind_addr(&address(&format!("@{name}")).unwrap()).unwrap();
        let mut n = Notifier::new(Some(&format!("@{name}")), Some("1000000"), Some("1"));
        n.tick();
        n.ready();
        assert_eq!(received(&socket), vec!["READY=1"]);
        let mut silent = Notifier::new(None, Some("1000000"), None);
        silent.ready();
        silent.tick();
    }

    #[test]
    fn a_receiver_that_stops_reading_does_not_block_the_sender() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let _socket = UnixDatagram::bind(&path).unwrap();
        let mut n = Notifier::new(path.to_str(), None, None);
        // Far more than a datagram socket queues; each send returns at once.
        for _ in 0..5000 {
            n.send("WATCHDOG=1");
        }
        n.stopping();
    }
}
