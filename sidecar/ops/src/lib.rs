//! `hadar serve`'s operational parts: what runs beside the round loop (`hadar-daemon`)
//! rather than in it. The loop knows none of them; they plug in through its
//! [`hadar_daemon::observe::RoundObserver`] or drive it from outside.
//!
//! * [`metrics`]: Prometheus metrics over HTTP and as a node_exporter textfile.
//! * [`sd_notify`]: systemd's readiness, watchdog and stopping notifications.
//! * [`notices`]: the plugin's notice socket, reachable only by slurmctld's user.
//! * [`check`]: `hadar check-config`, the file checked against the live cluster.
//! * [`shadow`]: shadow mode, deciding as the acting daemon would and acting on nothing.
//! * [`replay`]: each round's snapshot kept, and its decision computed again (`hadar replay`).

pub mod check;
pub mod metrics;
pub mod notices;
pub mod replay;
pub mod sd_notify;
pub mod shadow;
