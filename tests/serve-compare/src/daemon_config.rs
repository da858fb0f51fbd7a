//! The `hadar.toml` the comparison's daemon runs with: one writer for every mode, so a
//! setting lands in the table `hadar serve` reads it from (a key in the wrong table is a
//! parse error and no daemon).

use hadar_daemon::config::PolicyChoice;
use std::fmt::Write as _;
use std::path::Path;

/// What one run's daemon is told.
pub struct DaemonSettings<'a> {
    /// The test cluster's slurm.conf.
    pub slurm_conf: &'a Path,
    /// The daemon's socket.
    pub socket: &'a Path,
    /// Its state database.
    pub state: &'a Path,
    /// Seconds per round.
    pub round_s: f64,
    /// The emulated jobs' time scale (`[sidecar] throughput_scale`).
    pub throughput_scale: f64,
    /// `false`: `[sidecar] earliest_finish_types = false` (no commitment look-ahead).
    pub look_ahead: bool,
    /// `[sidecar] policy`.
    pub policy: PolicyChoice,
    /// For HadarE, where the forked jobs' copies run from (`[fork]`).
    pub fork: Option<ForkPaths<'a>>,
}

/// Where forked jobs' copies run from.
pub struct ForkPaths<'a> {
    /// `[fork] spool`.
    pub spool: &'a Path,
    /// `[fork] runner`.
    pub runner: &'a Path,
}

/// A restart on this cluster is a checkpoint, a requeue and a start: about a round.
const RESTART_SECONDS: f64 = 3.0;

impl DaemonSettings<'_> {
    /// The file's text.
    pub fn render(&self) -> String {
        let mut text = format!(
            "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{}\"\n\n[sidecar]\nsocket = \"{}\"\nstate = \"{}\"\nround_seconds = {}\nwake_settle_seconds = 0.5\npreempt_grace_seconds = 1\nrestart_seconds = {RESTART_SECONDS}\nthroughput_scale = {}\n",
            self.slurm_conf.display(),
            self.socket.display(),
            self.state.display(),
            self.round_s,
            self.throughput_scale,
        );
        if !self.look_ahead {
            text.push_str("earliest_finish_types = false\n");
        }
        if self.policy != PolicyChoice::HADAR {
            let _ = writeln!(text, "policy = \"{}\"", self.policy);
        }
        if let Some(p) = &self.fork {
            let _ = write!(
                text,
                "\n[fork]\nspool = \"{}\"\nrunner = \"{}\"\ndeadline_margin_seconds = 2\n",
                p.spool.display(),
                p.runner.display(),
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_daemon::DaemonConfig;

    fn settings(look_ahead: bool) -> DaemonSettings<'static> {
        DaemonSettings {
            slurm_conf: Path::new("/t/etc/slurm.conf"),
            socket: Path::new("/t/run/hadar.sock"),
            state: Path::new("/t/state.db"),
            round_s: 3.0,
            throughput_scale: 10.0,
            look_ahead,
            policy: PolicyChoice::HADAR,
            fork: None,
        }
    }

    #[test]
    fn every_mode_writes_a_file_the_daemon_reads_as_meant() {
        let plain = DaemonConfig::parse("c.toml", &settings(true).render()).unwrap();
        assert!(plain.sidecar.earliest_finish_types);
        assert_eq!(plain.sidecar.round_seconds, 3.0);
        assert_eq!(plain.sidecar.restart_seconds, RESTART_SECONDS);
        assert_eq!(plain.sidecar.throughput_scale, 10.0);

        // --no-lookahead: the key is [sidecar]'s (it once went to [hadar], which refuses it).
        let off = DaemonConfig::parse("c.toml", &settings(false).render()).unwrap();
        assert!(!off.sidecar.earliest_finish_types);

        let mut forked = settings(false);
        forked.policy = PolicyChoice::HADARE;
        forked.fork = Some(ForkPaths {
            spool: Path::new("/t/spool"),
            runner: Path::new("/r/hadar-fork-run"),
        });
        let c = DaemonConfig::parse("c.toml", &forked.render()).unwrap();
        assert!(!c.sidecar.earliest_finish_types);
        assert_eq!(c.fork.spool, Path::new("/t/spool"));
        assert_eq!(c.sidecar.policy, PolicyChoice::HADARE);

        let mut gavel = settings(true);
        gavel.policy = PolicyChoice::new(hadar_core::policies::PolicyName::Gavel).unwrap();
        let c = DaemonConfig::parse("c.toml", &gavel.render()).unwrap();
        assert_eq!(c.sidecar.policy, gavel.policy);
    }
}
