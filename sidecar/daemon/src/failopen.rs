//! Fail-open: when no round has completed for `[sidecar] fail_open_after`, the managed jobs
//! hadar holds go back to Slurm's own scheduling with the GPU request their user wrote, so a
//! dead daemon (crashed in a loop, its host down, its database corrupt) never leaves the GPU
//! partition idle with jobs waiting.
//!
//! The switch must not depend on the daemon: the daemon only writes a heartbeat, a small
//! plain file rewritten atomically after each completed round (readable when the database is
//! not, and on a shared state location readable from any host), and `hadar fail-open`, run by
//! a systemd timer or by hand, reads it and acts on Slurm alone. Each job it hands over is
//! marked in its record (the admin comment, which users cannot change) in two steps
//! ([`FailOpenMark`]), so a crash of the command, a second copy of it running at the same
//! time, or a hold the job's owner places later are all told apart from Slurm's state. When
//! the daemon comes back it takes marked jobs Slurm has not started back (held again, GPU
//! request stripped, mark removed) and adopts the running ones ([`take_back`]).

use crate::config::DaemonConfig;
use hadar_request::{FailOpenMark, Record, Scope};
use hadar_slurm::{JobStatus, Slurm, SlurmError, SlurmJob};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The first word of a heartbeat file.
pub const HEARTBEAT_TAG: &str = "hadar-heartbeat:v1";

/// Why fail-open could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum FailOpenError {
    /// A file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Slurm could not be read.
    #[error("reading Slurm's jobs: {0}")]
    Slurm(#[from] SlurmError),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl Fn(std::io::Error) -> FailOpenError + 'a {
    move |source| FailOpenError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// What the daemon writes after each completed round.
#[derive(Clone, Debug, PartialEq)]
pub struct Heartbeat {
    /// The round that completed.
    pub round: u64,
    /// When it completed, Unix seconds.
    pub at_unix: f64,
    /// Who wrote it (`host:pid`), for the log and `hadar status`.
    pub holder: String,
}

impl Heartbeat {
    /// One line: `hadar-heartbeat:v1 round=N at=UNIX holder=HOST:PID`.
    pub fn encode(&self) -> String {
        format!(
            "{HEARTBEAT_TAG} round={} at={:.3} holder={}\n",
            self.round, self.at_unix, self.holder
        )
    }

    /// Reads a heartbeat line back; `Err` says what is wrong with it.
    pub fn decode(text: &str) -> Result<Heartbeat, String> {
        let mut words = text.split_whitespace();
        if words.next() != Some(HEARTBEAT_TAG) {
            return Err(format!("does not start with {HEARTBEAT_TAG}"));
        }
        let (mut round, mut at, mut holder) = (None, None, None);
        for w in words {
            match w.split_once('=') {
                Some(("round", v)) => round = v.parse().ok(),
                Some(("at", v)) => at = v.parse::<f64>().ok().filter(|t| t.is_finite()),
                Some(("holder", v)) => holder = Some(v.to_string()),
                _ => return Err(format!("unexpected word `{w}`")),
            }
        }
        Ok(Heartbeat {
            round: round.ok_or("no round=")?,
            at_unix: at.ok_or("no valid at=")?,
            holder: holder.unwrap_or_default(),
        })
    }
}

/// `host:pid` of this process.
pub fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!("{host}:{}", std::process::id())
}

/// Whether `holder` (a [`holder`] string) is a process of this host that has ended: no
/// process has its id, or one that is not this program does (the id was reused). A daemon
/// restarted after a crash (systemd's `Restart=`) then takes the dead one's lease at once
/// instead of waiting out `lease_seconds`. A holder on another host is never judged here;
/// this assumes that daemons sharing a host name share its process ids (not two containers
/// with one host name and separate PID namespaces).
pub fn holder_died(holder: &str) -> bool {
    let Some((host, pid)) = holder.rsplit_once(':') else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    let ours = self::holder();
    let our_host = ours.rsplit_once(':').map(|(h, _)| h);
    if our_host != Some(host) || pid == std::process::id() {
        return false;
    }
    let comm = |p: &str| std::fs::read_to_string(format!("/proc/{p}/comm"));
    match (comm(&pid.to_string()), comm("self")) {
        (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => true,
        (Ok(theirs), Ok(mine)) => theirs != mine,
        _ => false,
    }
}

/// Writes the heartbeat atomically: a temporary file beside it, synced, renamed over it.
/// A reader sees the old line or the new one, never half of one.
pub fn write_heartbeat(path: &Path, hb: &Heartbeat) -> Result<(), FailOpenError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp).map_err(io("writing heartbeat", &tmp))?;
    f.write_all(hb.encode().as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(io("writing heartbeat", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("renaming heartbeat into", path))
}

/// What reading the heartbeat found.
#[derive(Clone, Debug, PartialEq)]
pub enum HeartbeatRead {
    /// A well-formed heartbeat.
    Present(Heartbeat),
    /// No file (never written, or deleted).
    Missing,
    /// A file that is not a heartbeat (taken as missing, and said so).
    Unreadable(String),
}

/// Reads the heartbeat file.
pub fn read_heartbeat(path: &Path) -> HeartbeatRead {
    match std::fs::read_to_string(path) {
        Ok(text) => match Heartbeat::decode(&text) {
            Ok(hb) => HeartbeatRead::Present(hb),
            Err(why) => HeartbeatRead::Unreadable(format!("{}: {why}", path.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => HeartbeatRead::Missing,
        Err(e) => HeartbeatRead::Unreadable(format!("{}: {e}", path.display())),
    }
}

/// What the fail-open command remembers between runs, as JSON in `<heartbeat>.fail-open`
/// (a plain file, for the same reason as the heartbeat). `hadar status` reads it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailOpenState {
    /// When a run first found the heartbeat missing or unreadable (a missing heartbeat counts
    /// as stale only once it has been missing for `fail_open_after`).
    pub missing_since_unix: Option<f64>,
    /// When the cluster was first failed open, Unix seconds.
    pub failed_open_at_unix: Option<f64>,
    /// Why, in words.
    pub reason: Option<String>,
    /// Jobs handed to Slurm.
    pub released: Vec<u64>,
    /// Forked jobs left waiting for the daemon, with why.
    pub waiting: Vec<(u64, String)>,
}

/// The fail-open state file beside the heartbeat.
pub fn state_path(heartbeat: &Path) -> PathBuf {
    let mut p = heartbeat.as_os_str().to_owned();
    p.push(".fail-open");
    PathBuf::from(p)
}

/// Reads the fail-open state (absent or unreadable: a fresh one).
pub fn read_state(heartbeat: &Path) -> FailOpenState {
    std::fs::read_to_string(state_path(heartbeat))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn write_state(heartbeat: &Path, state: &FailOpenState) -> Result<(), FailOpenError> {
    let path = state_path(heartbeat);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let text = serde_json::to_string_pretty(state).unwrap_or_default();
    std::fs::write(&tmp, text).map_err(io("writing fail-open state", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("renaming fail-open state into", &path))
}

/// Removes the fail-open state: the daemon completed a round and took the cluster back.
pub fn clear_state(heartbeat: &Path) -> Result<(), FailOpenError> {
    match std::fs::remove_file(state_path(heartbeat)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io("removing fail-open state", &state_path(heartbeat))(e))
        }
        _ => Ok(()),
    }
}

/// Whether the daemon is alive, from its heartbeat.
#[derive(Clone, Debug, PartialEq)]
pub enum Health {
    /// A round completed `age_s` seconds ago, within the limit.
    Alive {
        /// Seconds since the last completed round.
        age_s: f64,
    },
    /// No heartbeat yet, for less than the limit: wait.
    MissingSince {
        /// When it was first found missing.
        since_unix: f64,
    },
    /// No round for longer than the limit: fail open.
    Stale {
        /// Why, in words.
        reason: String,
    },
}

/// Judges the heartbeat at `now_unix` against `after` seconds. `missing_since` is when an
/// earlier run first found it missing. A heartbeat from the future (a clock set back, or a
/// writer whose clock runs ahead) counts as fresh: failing open wrongly costs the plan, not
/// jobs, but the command must not fail open a cluster whose daemon is writing.
pub fn judge(
    read: &HeartbeatRead,
    missing_since: Option<f64>,
    now_unix: f64,
    after: f64,
) -> Health {
    match read {
        HeartbeatRead::Present(hb) => {
            let age_s = (now_unix - hb.at_unix).max(0.0);
            if age_s <= after {
                Health::Alive { age_s }
            } else {
                Health::Stale {
                    reason: format!(
                        "no round completed for {age_s:.0} s (limit {after:.0} s; last round {} by {})",
                        hb.round, hb.holder
                    ),
                }
            }
        }
        HeartbeatRead::Missing | HeartbeatRead::Unreadable(_) => {
            let since = missing_since.unwrap_or(now_unix);
            let what = match read {
                HeartbeatRead::Unreadable(why) => format!("unreadable heartbeat ({why})"),
                _ => "no heartbeat".to_string(),
            };
            if now_unix - since > after {
                Health::Stale {
                    reason: format!("{what} for {:.0} s (limit {after:.0} s)", now_unix - since),
                }
            } else {
                Health::MissingSince { since_unix: since }
            }
        }
    }
}

/// What fail-open does with one Slurm job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A managed job hadar holds: give back its request, mark it, release it.
    Release,
    /// A job a crashed run gave back its request and marked, but may not have released.
    FinishRelease,
    /// Marked released and pending: done (a hold on it now is its owner's).
    AlreadyReleased,
    /// Left held for the daemon, with why.
    Wait(String),
    /// Not hadar's to release now (running, released, ended, not managed): untouched.
    Untouched,
}

/// What fail-open does with `job`. `forks_wait`: forked jobs (`fork=yes` under
/// `policy = "hadare"`) stay held, because their rounds' copies and consolidated checkpoints
/// are the daemon's to continue; under `policy = "hadar"` such a job is an ordinary job.
pub fn choose(job: &SlurmJob, forks_wait: bool) -> Choice {
    let Some(text) = job.admin_comment.as_deref() else {
        return Choice::Untouched;
    };
    if !crate::reconcile::is_managed(job) || job.status != JobStatus::Pending {
        return Choice::Untouched;
    }
    let Ok(record) = Record::decode(text) else {
        return Choice::Wait("its hadar record cannot be read".into());
    };
    if record.het_offset.is_some() || job.het_job_id.is_some() {
        return Choice::Untouched; // hadar never schedules het components; Slurm keeps them
    }
    match (FailOpenMark::of(text), job.is_held()) {
        (Some(FailOpenMark::Releasing(_)), true) => Choice::FinishRelease,
        (Some(FailOpenMark::Releasing(_)), false) => Choice::FinishRelease,
        (Some(FailOpenMark::Released(_)), _) => Choice::AlreadyReleased,
        (None, false) => Choice::Untouched, // released by the daemon: being started
        (None, true) if forks_wait && record.directives.may_fork == Some(true) => Choice::Wait(
            "a forked job (fork=yes under policy = \"hadare\") waits for the daemon".into(),
        ),
        (None, true) => Choice::Release,
    }
}

/// The `scontrol update` fields that give a job back the GPU request its user wrote.
pub fn request_fields(record: &Record) -> Vec<String> {
    let counts: Vec<String> = record
        .gpus
        .counts
        .iter()
        .map(|c| match &c.gpu_type {
            Some(t) => format!("gpu:{t}:{}", c.count),
            None => format!("gpu:{}", c.count),
        })
        .collect();
    let d = &record.directives;
    let per_gpu = hadar_slurm::client::per_gpu_fields(d.cpus_per_gpu, d.mem_per_gpu_mb);
    let mut fields = match record.gpus.scope {
        Scope::PerNode => vec![format!("Gres={}", counts.join(","))],
        Scope::PerJob => vec![format!(
            "TresPerJob={}",
            counts
                .iter()
                .map(|c| format!("gres:{c}"))
                .collect::<Vec<_>>()
                .join(",")
        )],
    };
    fields.extend(per_gpu);
    fields
}

/// What one `hadar fail-open` run found and did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    /// Whether the cluster is (now) failed open.
    pub failed_open: bool,
    /// The heartbeat's verdict, in words.
    pub health: String,
    /// Jobs handed to Slurm by this run (or that would be, with `--dry-run`).
    pub released: Vec<u64>,
    /// Jobs left held for the daemon, with why.
    pub waiting: Vec<(u64, String)>,
    /// Jobs whose hand-over failed (tried again next run), with the error.
    pub errors: Vec<(u64, String)>,
}

/// One run of `hadar fail-open` at `now_unix`: judges the heartbeat and, when it is stale,
/// hands every managed job hadar holds to Slurm. Takes an exclusive lock beside the
/// heartbeat, so two runs never interleave (each step is idempotent besides).
pub fn run(
    config: &DaemonConfig,
    slurm: &Slurm,
    now: &dyn Fn() -> f64,
    dry_run: bool,
) -> Result<Report, FailOpenError> {
    let heartbeat = config.sidecar.heartbeat_path();
    let _lock = Lock::take(&heartbeat)?;
    let after = config.sidecar.fail_open_after;
    let mut state = read_state(&heartbeat);
    let read = read_heartbeat(&heartbeat);
    let health = judge(&read, state.missing_since_unix, now(), after);
    let mut report = Report::default();
    match &health {
        Health::Alive { age_s } => {
            report.health = format!("the daemon is alive: last round {age_s:.0} s ago");
            if state.failed_open_at_unix.is_some() || state.missing_since_unix.is_some() {
                state.missing_since_unix = None;
                if !dry_run {
                    write_state(&heartbeat, &state)?;
                }
            }
            return Ok(report);
        }
        Health::MissingSince { since_unix } => {
            report.health = format!(
                "no heartbeat at {} since {:.0} s ago (fails open after {after:.0} s)",
                heartbeat.display(),
                now() - since_unix
            );
            if state.missing_since_unix.is_none() && !dry_run {
                state.missing_since_unix = Some(*since_unix);
                write_state(&heartbeat, &state)?;
            }
            return Ok(report);
        }
        Health::Stale { reason } => report.health = reason.clone(),
    }
    report.failed_open = true;
    let forks_wait = config.sidecar.policy.forks();
    let (jobs, _) = slurm.jobs()?;
    for job in &jobs {
        let choice = choose(job, forks_wait);
        let text = job.admin_comment.clone().unwrap_or_default();
        match choice {
            Choice::Untouched | Choice::AlreadyReleased => continue,
            Choice::Wait(why) => {
                report.waiting.push((job.id, why));
                continue;
            }
            Choice::Release | Choice::FinishRelease => {}
        }
        if dry_run {
            report.released.push(job.id);
            continue;
        }
        // A daemon that came back while this run went through the queue takes over.
        if let HeartbeatRead::Present(hb) = read_heartbeat(&heartbeat)
            && now() - hb.at_unix <= after
        {
            report.health = format!("the daemon came back (round {}); stopped", hb.round);
            break;
        }
        let at = now() as u64;
        let outcome = hand_over(slurm, job, &text, at);
        match outcome {
            Ok(()) => {
                tracing::info!(
                    job = job.id,
                    "failed open: released to Slurm with its own GPU request"
                );
                report.released.push(job.id);
            }
            Err(e) => {
                tracing::warn!(
                    job = job.id,
                    "could not fail this job open (tried again next run): {e}"
                );
                report.errors.push((job.id, e.to_string()));
            }
        }
    }
    if !dry_run {
        state.failed_open_at_unix.get_or_insert(now());
        state.reason = Some(report.health.clone());
        for id in &report.released {
            if !state.released.contains(id) {
                state.released.push(*id);
            }
        }
        state.waiting = report.waiting.clone();
        write_state(&heartbeat, &state)?;
    }
    Ok(report)
}

/// Gives `job` back its request and marks it releasing (one update), releases it, marks it
/// released. A run cut short anywhere leaves a state the next run finishes ([`choose`]).
fn hand_over(slurm: &Slurm, job: &SlurmJob, text: &str, at: u64) -> Result<(), SlurmError> {
    let record = Record::decode(text).map_err(|e| SlurmError::Parse {
        what: "hadar record",
        detail: e.to_string(),
    })?;
    let at = FailOpenMark::of(text).map_or(at, FailOpenMark::at);
    slurm.restore_request(
        job.id,
        &request_fields(&record),
        &FailOpenMark::Releasing(at).apply(text),
    )?;
    // Only a held job is released: one its owner released meanwhile needs nothing.
    if slurm.job(job.id)?.is_some_and(|j| j.is_held()) {
        slurm.release(job.id)?;
    }
    slurm.set_admin_comment(job.id, &FailOpenMark::Released(at).apply(text))
}

/// An exclusive `flock` on `<heartbeat>.lock`, held until dropped (the kernel drops it if
/// the process dies).
struct Lock(std::fs::File);

impl Lock {
    fn take(heartbeat: &Path) -> Result<Lock, FailOpenError> {
        let mut p = heartbeat.as_os_str().to_owned();
        p.push(".lock");
        let path = PathBuf::from(p);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("opening lock", &path))?;
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a file descriptor this function owns.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io("locking", &path)(std::io::Error::last_os_error()));
        }
        Ok(Lock(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as above; closing the file would release it too.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// What the daemon does with a failed-open job when it comes back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TakeBack {
    /// Not started by Slurm: hold it again, strip its GPU request, remove the mark.
    Manage,
    /// Running under Slurm: remove the mark and schedule it as a running job.
    Adopt,
    /// Ended, or nothing to do.
    Nothing,
}

/// What the daemon does with `job` (pure).
pub fn take_back(job: &SlurmJob) -> TakeBack {
    let Some(text) = job.admin_comment.as_deref() else {
        return TakeBack::Nothing;
    };
    if FailOpenMark::of(text).is_none() {
        return TakeBack::Nothing;
    }
    match job.status {
        JobStatus::Pending => TakeBack::Manage,
        JobStatus::Running | JobStatus::Suspended | JobStatus::Completing => TakeBack::Adopt,
        _ => TakeBack::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, status: JobStatus, held: bool, comment: Option<&str>) -> SlurmJob {
        SlurmJob {
            admin_comment: comment.map(str::to_string),
            ..crate::reconcile::tests::sj(id, status, held)
        }
    }

    const REC: &str = "hadar:v1 gpus-per-node=v100:2 steps=10";

    #[test]
    fn only_held_managed_jobs_fail_open_and_each_once() {
        use JobStatus::*;
        assert_eq!(
            choose(&job(1, Pending, true, Some(REC)), false),
            Choice::Release
        );
        // Unmanaged, running, released by the daemon, ended: untouched.
        assert_eq!(
            choose(&job(2, Pending, true, None), false),
            Choice::Untouched
        );
        assert_eq!(
            choose(&job(3, Pending, true, Some("notes by an admin")), false),
            Choice::Untouched
        );
        assert_eq!(
            choose(&job(4, Running, false, Some(REC)), false),
            Choice::Untouched
        );
        assert_eq!(
            choose(&job(5, Pending, false, Some(REC)), false),
            Choice::Untouched
        );
        assert_eq!(
            choose(&job(6, Completed, false, Some(REC)), false),
            Choice::Untouched
        );
        // A run cut short after the request was restored finishes the hand-over.
        let releasing = FailOpenMark::Releasing(7).apply(REC);
        assert_eq!(
            choose(&job(7, Pending, true, Some(&releasing)), false),
            Choice::FinishRelease
        );
        // Released before and held now: its owner's hold, which stays.
        let released = FailOpenMark::Released(7).apply(REC);
        assert_eq!(
            choose(&job(8, Pending, true, Some(&released)), false),
            Choice::AlreadyReleased
        );
        // Forked jobs wait under hadare and fail open under hadar.
        let fork = "hadar:v1 gpus=2 fork=yes";
        assert!(matches!(
            choose(&job(9, Pending, true, Some(fork)), true),
            Choice::Wait(_)
        ));
        assert_eq!(
            choose(&job(9, Pending, true, Some(fork)), false),
            Choice::Release
        );
        // Het components are never hadar's.
        let mut het = job(10, Pending, true, Some("hadar:v1 gpus=1 het=1"));
        het.het_job_id = Some(10);
        assert_eq!(choose(&het, false), Choice::Untouched);
    }

    #[test]
    fn the_users_own_request_comes_back() {
        let r = |t: &str| request_fields(&Record::decode(t).unwrap());
        assert_eq!(
            r("hadar:v1 gpus-per-node=v100:2 nodes=2"),
            vec!["Gres=gpu:v100:2"]
        );
        assert_eq!(r("hadar:v1 gpus-per-node=4"), vec!["Gres=gpu:4"]);
        assert_eq!(r("hadar:v1 gpus=3"), vec!["TresPerJob=gres:gpu:3"]);
        assert_eq!(
            r("hadar:v1 gpus=v100:1,k80:2 failed-open=5"),
            vec!["TresPerJob=gres:gpu:v100:1,gres:gpu:k80:2"]
        );
        assert_eq!(
            r("hadar:v1 gpus=2 cpus-per-gpu=2 mem-per-gpu=1000"),
            vec![
                "TresPerJob=gres:gpu:2",
                "CpusPerTres=gres/gpu:2",
                "MemPerTres=gres/gpu:1000"
            ]
        );
    }

    #[test]
    fn the_heartbeat_decides_when_to_fail_open() {
        let hb = |at: f64| {
            HeartbeatRead::Present(Heartbeat {
                round: 3,
                at_unix: at,
                holder: "h:1".into(),
            })
        };
        assert_eq!(
            judge(&hb(100.0), None, 150.0, 60.0),
            Health::Alive { age_s: 50.0 }
        );
        let Health::Stale { reason } = judge(&hb(100.0), None, 161.0, 60.0) else {
            panic!("61 s without a round is past a 60 s limit");
        };
        assert!(reason.contains("no round completed for 61 s"), "{reason}");
        // A heartbeat ahead of this clock is fresh, not stale.
        assert_eq!(
            judge(&hb(500.0), None, 161.0, 60.0),
            Health::Alive { age_s: 0.0 }
        );
        // Missing: counted from when it was first found missing.
        assert_eq!(
            judge(&HeartbeatRead::Missing, None, 1000.0, 60.0),
            Health::MissingSince { since_unix: 1000.0 }
        );
        assert!(matches!(
            judge(&HeartbeatRead::Missing, Some(1000.0), 1061.0, 60.0),
            Health::Stale { .. }
        ));
        let bad = HeartbeatRead::Unreadable("x: garbage".into());
        let Health::Stale { reason } = judge(&bad, Some(0.0), 100.0, 60.0) else {
            panic!("an unreadable heartbeat counts as missing");
        };
        assert!(
            reason.contains("unreadable heartbeat (x: garbage)"),
            "{reason}"
        );
    }

    #[test]
    fn heartbeats_round_trip_and_are_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hb");
        assert_eq!(read_heartbeat(&path), HeartbeatRead::Missing);
        let hb = Heartbeat {
            round: 12,
            at_unix: 1_700_000_000.5,
            holder: "ctl1:42".into(),
        };
        write_heartbeat(&path, &hb).unwrap();
        assert_eq!(read_heartbeat(&path), HeartbeatRead::Present(hb));
        std::fs::write(&path, "round=1").unwrap();
        assert!(matches!(
            read_heartbeat(&path),
            HeartbeatRead::Unreadable(_)
        ));
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary left"
        );
    }

    #[test]
    fn a_holder_is_dead_only_when_this_host_runs_no_such_program_under_its_id() {
        let host = holder().rsplit_once(':').unwrap().0.to_string();
        assert!(!holder_died(&holder()), "this process is alive");
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        let pid = ended.id();
        ended.wait().unwrap();
        assert!(holder_died(&format!("{host}:{pid}")));
        // An id now used by another program: the holder it named is gone.
        let mut other = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(holder_died(&format!("{host}:{}", other.id())));
        other.kill().unwrap();
        other.wait().unwrap();
        // Another host's holder, or no holder at all, is never judged dead from here.
        assert!(!holder_died(&format!("{host}-elsewhere:{pid}")));
        assert!(!holder_died("not a holder"));
        assert!(!holder_died(&format!("{host}:x")));
    }

    #[test]
    fn the_daemon_takes_back_pending_jobs_and_adopts_running_ones() {
        let marked = FailOpenMark::Released(5).apply(REC);
        assert_eq!(
            take_back(&job(1, JobStatus::Pending, false, Some(&marked))),
            TakeBack::Manage
        );
        assert_eq!(
            take_back(&job(1, JobStatus::Running, false, Some(&marked))),
            TakeBack::Adopt
        );
        assert_eq!(
            take_back(&job(1, JobStatus::Completed, false, Some(&marked))),
            TakeBack::Nothing
        );
        assert_eq!(
            take_back(&job(1, JobStatus::Pending, true, Some(REC))),
            TakeBack::Nothing
        );
    }
}
