//! `--predict --site`: the seeds run under a site's rules, and the simulator predicts them
//! from what `hadar site capture` wrote (issue 43).
//!
//! The rules, set on the test cluster before each seed's runs and cleared after the last:
//!
//! * QOS [`QOS`] with `GrpTRES=gres/gpu=8`: every job of the workload runs under it, so at
//!   most 8 of the cluster's GPUs are busy at once;
//! * reservation [`RESERVATION`] of n4 (2 V100, 2 K80) for root, whom the jobs run as: a job
//!   that does not ask for the reservation may not use n4;
//! * partition `old` (n3, n4) set `DOWN`: the jobs' partition is `gpu`, so a `DOWN` partition
//!   of theirs' nodes must not keep them off n3.
//!
//! Slurm alone (each job asking for its fastest type) and `hadar serve` obey them; the record
//! keeps the captured file, and the model plays the same jobs within it
//! ([`SiteCapture::simulated`]), as `hadar simulate --site` does.

use hadar_daemon::site::file::SiteFile;
use hadar_daemon::site::simulated::SimulatedSite;
use hadar_slurm_testbed::Testbed;
use std::time::{Duration, Instant};

/// The QOS every job of the scenario runs under.
pub const QOS: &str = "pred_cap";
/// The GPUs [`QOS`] lets the jobs hold at once.
pub const QOS_GPUS: u32 = 8;
/// The account the jobs are charged to.
pub const ACCOUNT: &str = "pred_acct";
/// The reservation that keeps the jobs off n4.
pub const RESERVATION: &str = "pred_resv";
/// The partition set `DOWN`.
pub const DOWN_PARTITION: &str = "old";

/// What a seed's record keeps of the site: the file `hadar site capture` wrote, before the
/// runs.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SiteCapture {
    pub file: String,
}

/// The `sbatch` options that put a job under the scenario's account and QOS.
pub fn submit_args() -> Vec<String> {
    vec![format!("--account={ACCOUNT}"), format!("--qos={QOS}")]
}

/// Sets the rules on the test cluster (idempotent: a seed after the first finds them set)
/// and captures them with `hadar` as the daemon's config `config` reads Slurm.
pub fn set_up(
    bed: &Testbed,
    hadar: &std::path::Path,
    config: &std::path::Path,
) -> Result<SiteCapture, String> {
    // `show qos` names a QOS in its field `name`, `show account` an account in `account`.
    let have = |what: &str, field: &str, name: &str| {
        bed.sacctmgr(&["-n", "-P", "show", what, name, &format!("format={field}")])
            .is_ok_and(|out| out.lines().any(|l| l.trim() == name))
    };
    if !have("qos", "name", QOS) {
        sacctmgr(
            bed,
            &["add", "qos", QOS, &format!("GrpTRES=gres/gpu={QOS_GPUS}")],
        )?;
    }
    if !have("account", "account", ACCOUNT) {
        sacctmgr(bed, &["add", "account", ACCOUNT, "fairshare=1"])?;
        sacctmgr(
            bed,
            &[
                "add",
                "user",
                "root",
                &format!("account={ACCOUNT}"),
                &format!("qos=normal,{QOS}"),
            ],
        )?;
    }
    wait_for("slurmctld knows root in the scenario's account", || {
        bed.sshare(&[
            "-n",
            "-P",
            "-A",
            ACCOUNT,
            "-u",
            "root",
            "-o",
            "Account,User",
        ])
        .is_ok_and(|out| out.lines().any(|l| l.trim() == format!("{ACCOUNT}|root")))
    })?;
    let _ = bed.client(
        "scontrol",
        &["delete", &format!("reservation={RESERVATION}")],
    );
    bed.client(
        "scontrol",
        &[
            "create",
            "reservation",
            &format!("reservationname={RESERVATION}"),
            "starttime=now",
            "duration=180",
            "nodes=n4",
            "users=root",
        ],
    )
    .map_err(|e| format!("scontrol create reservation: {e}"))?;
    bed.client(
        "scontrol",
        &[
            "update",
            &format!("partitionname={DOWN_PARTITION}"),
            "state=down",
        ],
    )
    .map_err(|e| format!("scontrol update partition: {e}"))?;
    capture(bed, hadar, config)
}

/// Clears what [`set_up`] set on the cluster but the accounts (which do nothing to jobs that
/// do not name them).
pub fn tear_down(bed: &Testbed) {
    let _ = bed.client(
        "scontrol",
        &["delete", &format!("reservation={RESERVATION}")],
    );
    let _ = bed.client(
        "scontrol",
        &[
            "update",
            &format!("partitionname={DOWN_PARTITION}"),
            "state=up",
        ],
    );
}

fn sacctmgr(bed: &Testbed, args: &[&str]) -> Result<(), String> {
    bed.sacctmgr(args)
        .map(drop)
        .map_err(|e| format!("sacctmgr {}: {e}", args.join(" ")))
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("waited 30 s, in vain, until {what}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(())
}

/// `hadar site capture --config CONFIG --out -`.
fn capture(
    bed: &Testbed,
    hadar: &std::path::Path,
    config: &std::path::Path,
) -> Result<SiteCapture, String> {
    let run = std::process::Command::new(hadar)
        .args(["site", "capture", "--out", "-", "--config"])
        .arg(config)
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .output()
        .map_err(|e| format!("running {} site capture: {e}", hadar.display()))?;
    if !run.status.success() {
        return Err(format!(
            "hadar site capture: {}",
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let file = String::from_utf8(run.stdout).map_err(|e| format!("hadar site capture: {e}"))?;
    SiteFile::parse(&file, "the capture").map_err(|e| e.to_string())?;
    Ok(SiteCapture { file })
}

impl SiteCapture {
    /// The captured file with a `[[job]]` table naming the workload's `jobs` jobs as the
    /// scenario submits them: what a user gives `hadar simulate --site`.
    pub fn with_jobs(&self, jobs: usize) -> String {
        format!(
            "{}\n[[job]]\njobs = \"0-{}\"\nuser = \"root\"\naccount = \"{ACCOUNT}\"\nqos = \"{QOS}\"\npartition = \"gpu\"\n",
            self.file,
            jobs.saturating_sub(1)
        )
    }

    /// The site the model plays `jobs` jobs in (simulated job `i` is the workload's job `i`),
    /// second 0 of the simulation at `epoch_unix` (the first submission), priority weighing
    /// by `strength`.
    pub fn simulated(
        &self,
        jobs: usize,
        epoch_unix: f64,
        strength: f64,
    ) -> Result<SimulatedSite, String> {
        let origin = "the record's site capture";
        let file = SiteFile::parse(&self.with_jobs(jobs), origin).map_err(|e| e.to_string())?;
        let ids = file.identities(jobs, origin).map_err(|e| e.to_string())?;
        Ok(SimulatedSite::new(file.slurm, ids, epoch_unix, strength))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_captured_file_names_every_job_as_the_scenario_submits_it() {
        let capture = SiteCapture {
            file: std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../data/site-test-cluster.toml"
            ))
            .unwrap()
            .lines()
            .take_while(|l| !l.starts_with("[[job]]"))
            .collect::<Vec<_>>()
            .join("\n"),
        };
        let file = SiteFile::parse(&capture.with_jobs(16), "t").unwrap();
        let ids = file.identities(16, "t").unwrap();
        assert_eq!(ids.len(), 16);
        assert_eq!(ids[&15].qos, QOS);
        assert_eq!(ids[&0].account, ACCOUNT);
        assert!(capture.simulated(16, 1.0e9, 1.0).is_ok());
        assert!(
            file.identities(15, "t").is_err(),
            "the table names a job past a 15-job workload's last"
        );
    }
}
