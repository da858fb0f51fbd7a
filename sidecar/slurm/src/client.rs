//! The [`Slurm`] handle: reads the cluster's nodes and jobs, and carries out the daemon's
//! actions on jobs. Each method is one or two client commands; none is retried here (the
//! daemon's round decides what to do after a failure, from Slurm's state).

use crate::SlurmError;
use crate::command::{self, CommandError};
use crate::job::{self, SlurmJob};
use crate::job_cache::{self, Fetch, JobCache, Listing};
use crate::json;
use crate::node::{self, NodeInfo};
use crate::release::{ReadForm, SlurmRelease};
use crate::site::SiteFigures;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where Slurm's commands are and how long they may take.
#[derive(Clone, Debug, PartialEq)]
pub struct SlurmConfig {
    /// The `slurm.conf` to use (`SLURM_CONF`); `None`: Slurm's default.
    pub conf: Option<PathBuf>,
    /// The folder holding `scontrol` and `scancel`; `None`: found on `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// The most time one command may take before it is killed.
    pub timeout: Duration,
    /// How often [`Slurm::jobs`] reads every job in full; between full reads it reads only
    /// the jobs that changed (see [`crate::job_cache`]). Zero: every read is full.
    pub full_read_every: Duration,
    /// How long [`Slurm::site_figures`] keeps the site's rules before reading them again.
    /// Zero: every call reads them.
    pub site_read_every: Duration,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            conf: None,
            bin_dir: None,
            timeout: Duration::from_secs(20),
            full_read_every: Duration::ZERO,
            site_read_every: Duration::ZERO,
        }
    }
}

/// The GPUs a placement gives a job: per node, GPUs per type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSpec {
    /// `(node, [(type, count)])`, nodes in order, types in order.
    pub nodes: Vec<(String, Vec<(String, u32)>)>,
    /// Whether the request names the GPU types (see [`GpuSpec::update_fields`] for when it
    /// must, and what that costs).
    #[serde(default)]
    pub typed: bool,
}

impl GpuSpec {
    /// Total GPUs.
    pub fn total(&self) -> u32 {
        self.nodes
            .iter()
            .flat_map(|(_, g)| g.iter().map(|(_, n)| *n))
            .sum()
    }

    /// GPUs per type over all nodes, types in first-seen order.
    pub fn per_type(&self) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = Vec::new();
        for (_, gpus) in &self.nodes {
            for (t, n) in gpus {
                match out.iter_mut().find(|(u, _)| u == t) {
                    Some(e) => e.1 += n,
                    None => out.push((t.clone(), *n)),
                }
            }
        }
        out
    }

    /// GPUs per node, in node order.
    pub fn per_node_counts(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .map(|(_, g)| g.iter().map(|(_, n)| *n).sum())
            .collect()
    }

    /// True when a per-node request describes the placement exactly: every node gets the
    /// same GPUs (typed), or the same number of GPUs (typeless).
    pub fn is_uniform(&self) -> bool {
        if self.typed {
            self.nodes.windows(2).all(|w| w[0].1 == w[1].1)
        } else {
            self.per_node_counts().windows(2).all(|w| w[0] == w[1])
        }
    }

    /// The `scontrol update` fields that give a held job these GPUs: the node list, the node
    /// count, one task per node, and the GPUs as a per-node GRES when [`GpuSpec::is_uniform`],
    /// otherwise as a per-job total.
    ///
    /// Slurm 22.05 keeps every GPU type a job was ever given in its request, at its last
    /// count: an update from `gpu:k80:2` to `gpu:v100:2` leaves the job wanting both (pending
    /// forever on a node without K80; a count of 0 does not remove a type), and a typed
    /// request cannot become typeless. A typeless request (`gpu:2`, the node list decides
    /// the type) can be changed freely, so a job preempted on one type can be placed again
    /// on another. It is exact on a node with one GPU type, or when the job takes every GPU
    /// of its node; elsewhere (part of a node with several types) Slurm would pick the GPUs,
    /// so the request must be `typed`, and the job keeps those types for its life. Slurm
    /// refuses per-job totals of several types, so a typed placement must be uniform.
    pub fn update_fields(&self) -> Vec<String> {
        self.update_fields_keeping(None)
    }

    /// [`GpuSpec::update_fields`] for a job whose user gave a task count (`--ntasks`, kept
    /// in the plugin's record as `tasks=`): the job keeps that count (so an `srun` per task,
    /// one per GPU, still runs as many tasks), raised to the node count if it is lower
    /// (Slurm needs a task per node).
    pub fn update_fields_keeping(&self, tasks: Option<u32>) -> Vec<String> {
        let names: Vec<&str> = self.nodes.iter().map(|(n, _)| n.as_str()).collect();
        let k = self.nodes.len();
        let tasks = tasks.map_or(k, |t| (t as usize).max(k));
        let mut f = vec![
            format!("ReqNodeList={}", names.join(",")),
            format!("NumNodes={k}-{k}"),
            format!("NumTasks={tasks}"),
        ];
        let typed = |gpus: &[(String, u32)], prefix: &str| {
            gpus.iter()
                .map(|(t, n)| format!("{prefix}gpu:{t}:{n}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let uniform = self.is_uniform();
        match (self.typed, self.nodes.first()) {
            (true, Some((_, gpus))) if uniform => f.push(format!("Gres={}", typed(gpus, ""))),
            (true, _) => f.push(format!("TresPerJob={}", typed(&self.per_type(), "gres:"))),
            (false, Some(_)) if uniform => {
                f.push(format!("Gres=gpu:{}", self.per_node_counts()[0]))
            }
            (false, _) => f.push(format!("TresPerJob=gres:gpu:{}", self.total())),
        }
        f
    }
}

/// The `scontrol update` fields that give a job its CPUs and memory (MB) per GPU
/// (`--cpus-per-gpu`, `--mem-per-gpu`); none for an amount not given.
pub fn per_gpu_fields(cpus: Option<u64>, mem_mb: Option<u64>) -> Vec<String> {
    let mut f = Vec::new();
    if let Some(c) = cpus {
        f.push(format!("CpusPerTres=gres/gpu:{c}"));
    }
    if let Some(m) = mem_mb {
        f.push(format!("MemPerTres=gres/gpu:{m}"));
    }
    f
}

/// A handle on one Slurm cluster.
#[derive(Clone, Debug)]
pub struct Slurm {
    config: SlurmConfig,
    /// The release the commands belong to, asked once (`scontrol --version`); clones share it.
    release: Arc<OnceLock<SlurmRelease>>,
    /// Array records whose job id is their array's id (`JobId=12 ArrayJobId=12`), with how
    /// to name them (`12_7`, or `12_[2-7]` for the pending elements the record holds):
    /// slurmctld reads a bare `12` in an update, hold, release or scancel as the whole
    /// array, every element of it. Learned from each listing of the jobs; clones share it.
    array_names: Arc<Mutex<HashMap<u64, String>>>,
    /// The commands run through this handle and the bytes they answered; clones share it.
    io: Arc<IoCounters>,
    /// The jobs as last read, for reading only what changed; clones share them.
    reads: Arc<Mutex<JobReads>>,
    /// The jobs this handle (or a clone) acted on since they were last read.
    acted_on: Arc<Mutex<BTreeSet<u64>>>,
    /// The site's rules as last read, and when; clones share them.
    site: Arc<Mutex<Kept<SiteFigures>>>,
    /// The nodes as last read, and when; clones share them.
    nodes: Arc<Mutex<Kept<Vec<NodeInfo>>>>,
}

/// A read kept for later rounds, with when it was made.
pub(crate) type Kept<T> = Option<(Instant, T)>;

/// The jobs as last read and when they were last read in full.
#[derive(Debug, Default)]
struct JobReads {
    cache: JobCache,
    last_full: Option<Instant>,
    /// Whether the last read saw a job take or give back resources, or one acted on.
    changed: bool,
}

/// What the Slurm commands run so far cost: how many ran and the bytes of their answers
/// (standard output), the load hadar puts on slurmctld as seen from this side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlurmIo {
    pub commands: u64,
    pub bytes_read: u64,
    /// Reads of every job in full.
    pub full_reads: u64,
    /// Job records read in full, by full reads and by reads of the jobs that changed.
    pub jobs_read: u64,
    /// Jobs shown by the listings of reads of what changed.
    pub jobs_listed: u64,
}

impl SlurmIo {
    /// What ran between `earlier` and `self`.
    pub fn since(self, earlier: SlurmIo) -> SlurmIo {
        SlurmIo {
            commands: self.commands.saturating_sub(earlier.commands),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            full_reads: self.full_reads.saturating_sub(earlier.full_reads),
            jobs_read: self.jobs_read.saturating_sub(earlier.jobs_read),
            jobs_listed: self.jobs_listed.saturating_sub(earlier.jobs_listed),
        }
    }
}

#[derive(Debug, Default)]
struct IoCounters {
    commands: std::sync::atomic::AtomicU64,
    bytes_read: std::sync::atomic::AtomicU64,
    full_reads: std::sync::atomic::AtomicU64,
    jobs_read: std::sync::atomic::AtomicU64,
    jobs_listed: std::sync::atomic::AtomicU64,
}

impl IoCounters {
    fn add(counter: &std::sync::atomic::AtomicU64, n: usize) {
        counter.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Slurm {
    /// A handle using these settings.
    pub fn new(config: SlurmConfig) -> Self {
        Slurm {
            config,
            release: Arc::new(OnceLock::new()),
            array_names: Arc::new(Mutex::new(HashMap::new())),
            io: Arc::new(IoCounters::default()),
            reads: Arc::new(Mutex::new(JobReads::default())),
            acted_on: Arc::new(Mutex::new(BTreeSet::new())),
            site: Arc::new(Mutex::new(None)),
            nodes: Arc::new(Mutex::new(None)),
        }
    }

    /// Whether the site's rules, the nodes and the licenses read last may stand for this
    /// round too: the last read of the jobs saw no job take or give back resources and
    /// none acted on (so no GPUs, CPUs or licenses changed hands), and `read_at` is within
    /// [`SlurmConfig::site_read_every`].
    pub(crate) fn unchanged_since(&self, read_at: Instant) -> bool {
        let reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        !reads.changed
            && !self.config.full_read_every.is_zero()
            && read_at.elapsed() < self.config.site_read_every
    }

    /// The site's rules as last read (see [`Slurm::site_figures`]).
    pub(crate) fn kept_site(&self) -> &Mutex<Kept<SiteFigures>> {
        &self.site
    }

    /// The commands run through this handle (and its clones) so far, and the bytes they
    /// answered.
    pub fn io(&self) -> SlurmIo {
        use std::sync::atomic::Ordering::Relaxed;
        SlurmIo {
            commands: self.io.commands.load(Relaxed),
            bytes_read: self.io.bytes_read.load(Relaxed),
            full_reads: self.io.full_reads.load(Relaxed),
            jobs_read: self.io.jobs_read.load(Relaxed),
            jobs_listed: self.io.jobs_listed.load(Relaxed),
        }
    }

    /// How Slurm's commands that act on a job must name job `id`: `A_I` (or `A_[...]`) for
    /// the record of array A that carries the array's own id, else the id. Every action on
    /// a job names it through here, which marks the job to be read again in full.
    fn target(&self, id: u64) -> String {
        self.acted_on
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id);
        let names = self.array_names.lock().unwrap_or_else(|e| e.into_inner());
        names.get(&id).cloned().unwrap_or_else(|| id.to_string())
    }

    /// Learns the names of `jobs` that carry their array's id (see [`Self::target`]).
    fn learn_names(&self, jobs: &[SlurmJob]) {
        let mut names = self.array_names.lock().unwrap_or_else(|e| e.into_inner());
        for j in jobs {
            match &j.array {
                Some(a) if a.array_id == j.id => {
                    names.insert(j.id, a.label());
                }
                _ => {
                    names.remove(&j.id);
                }
            }
        }
    }

    /// The release of Slurm's commands (`scontrol --version`), asked the first time and kept:
    /// a Slurm upgrade restarts the daemon with it, as it reinstalls the plugin.
    pub fn slurm_release(&self) -> Result<SlurmRelease, SlurmError> {
        if let Some(r) = self.release.get() {
            return Ok(r.clone());
        }
        let text = self.run("scontrol", &["--version".into()])?;
        let release = SlurmRelease::parse(&text).ok_or_else(|| SlurmError::Parse {
            what: "scontrol --version",
            detail: format!("expected \"slurm X.Y.Z\", got {:?}", text.trim()),
        })?;
        Ok(self.release.get_or_init(|| release).clone())
    }

    pub(crate) fn read_form(&self) -> Result<ReadForm, SlurmError> {
        Ok(self.slurm_release()?.read_form())
    }

    /// `scontrol show ENTITY` read with `json` where the release answers in JSON, else in
    /// its one-line text form with `text`.
    pub(crate) fn show_in_read_form<T>(
        &self,
        entity: &str,
        json: fn(&str) -> Result<T, SlurmError>,
        text: fn(&str) -> Result<T, SlurmError>,
    ) -> Result<T, SlurmError> {
        let as_json = self.read_form()? == ReadForm::Json;
        let form = if as_json { "--json" } else { "--oneliner" };
        let answer = self.run("scontrol", &["show".into(), entity.into(), form.into()])?;
        if as_json {
            json(&answer)
        } else {
            text(&answer)
        }
    }

    /// Its settings.
    pub fn config(&self) -> &SlurmConfig {
        &self.config
    }

    fn program(&self, name: &str) -> String {
        match &self.config.bin_dir {
            Some(d) => d.join(name).display().to_string(),
            None => name.to_string(),
        }
    }

    /// What every Slurm command is told: Slurm's commands print times in their own local
    /// time zone and in a format SLURM_TIME_FORMAT may change; hadar reads them as standard
    /// UTC times, so every command prints exactly that, whatever zone the daemon runs in.
    fn slurm_env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = vec![
            ("TZ".to_string(), "UTC".to_string()),
            ("SLURM_TIME_FORMAT".to_string(), "standard".to_string()),
        ];
        env.extend(
            self.config
                .conf
                .iter()
                .map(|c| ("SLURM_CONF".to_string(), c.display().to_string())),
        );
        env
    }

    /// Fails at once when the configured slurm.conf is missing, rather than letting each
    /// command wait out its timeout.
    fn conf_exists(&self) -> Result<(), CommandError> {
        let (conf, named_by) = match &self.config.conf {
            Some(conf) => (conf.clone(), "[slurm] slurm_conf"),
            None => match std::env::var_os("SLURM_CONF") {
                Some(conf) if !conf.is_empty() => (PathBuf::from(conf), "SLURM_CONF"),
                _ => return Ok(()),
            },
        };
        if conf.exists() {
            Ok(())
        } else {
            Err(CommandError::MissingConf {
                path: conf.display().to_string(),
                named_by,
            })
        }
    }

    pub(crate) fn run(&self, program: &str, args: &[String]) -> Result<String, CommandError> {
        use std::sync::atomic::Ordering::Relaxed;
        self.conf_exists()?;
        let env = self.slurm_env();
        self.io.commands.fetch_add(1, Relaxed);
        let stdout = command::run(&self.program(program), args, &env, self.config.timeout)?.stdout;
        self.io.bytes_read.fetch_add(stdout.len() as u64, Relaxed);
        Ok(stdout)
    }

    fn scontrol(&self, args: &[String]) -> Result<String, SlurmError> {
        Ok(self.run("scontrol", args)?)
    }

    /// All nodes (`scontrol show node`, as JSON where the release has it). The nodes read
    /// last stand in while no job changed (see [`Slurm::unchanged_since`]): read the jobs
    /// first. A node drained or downed meanwhile is seen within
    /// [`SlurmConfig::site_read_every`]; Slurm starts nothing on it in between.
    pub fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        let mut kept = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((read_at, nodes)) = kept.as_ref()
            && self.unchanged_since(*read_at)
        {
            return Ok(nodes.clone());
        }
        let nodes = self.read_nodes()?;
        *kept = Some((Instant::now(), nodes.clone()));
        Ok(nodes)
    }

    fn read_nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        match self.read_form()? {
            ReadForm::Json => json::parse_nodes(&self.scontrol(&[
                "show".into(),
                "node".into(),
                "--json".into(),
            ])?),
            ReadForm::Text => node::parse_nodes(&self.scontrol(&["show".into(), "node".into()])?),
        }
    }

    /// All jobs Slurm still knows (`scontrol -d show job`), and the records refused as
    /// untrustworthy (see [`job::parse_jobs`]; none are from JSON, where no job's text can
    /// imitate another record). Where the release answers in JSON and
    /// [`SlurmConfig::full_read_every`] is set, only the jobs that changed since the last
    /// read are read in full ([`crate::job_cache`]).
    pub fn jobs(&self) -> Result<(Vec<SlurmJob>, job::Refused), SlurmError> {
        let answer = match self.read_form()? {
            ReadForm::Json if self.config.full_read_every.is_zero() => {
                (self.all_jobs()?, Vec::new())
            }
            ReadForm::Json => (self.changed_jobs()?, Vec::new()),
            ReadForm::Text => {
                let read = self.jobs_from_text()?;
                IoCounters::add(&self.io.full_reads, 1);
                IoCounters::add(&self.io.jobs_read, read.0.len());
                read
            }
        };
        self.learn_names(&answer.0);
        Ok(answer)
    }

    /// Every job, read in full as JSON.
    fn all_jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let jobs = json::parse_jobs(&self.scontrol(&job_args(None, true))?)?;
        IoCounters::add(&self.io.full_reads, 1);
        IoCounters::add(&self.io.jobs_read, jobs.len());
        Ok(jobs)
    }

    /// Every job: the listing, then in full only the jobs it shows changed, unless a full
    /// read is due. A failed read forgets the cache, so the next one is full.
    fn changed_jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let mut reads = self.reads.lock().unwrap_or_else(|e| e.into_inner());
        let acted_on = self
            .acted_on
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let read = self.read_changed(&mut reads, &acted_on);
        match &read {
            Ok(_) => {
                reads.changed |= !acted_on.is_empty();
                let mut marked = self.acted_on.lock().unwrap_or_else(|e| e.into_inner());
                marked.retain(|id| !acted_on.contains(id));
            }
            Err(_) => *reads = JobReads::default(),
        }
        read
    }

    fn read_changed(
        &self,
        reads: &mut JobReads,
        acted_on: &BTreeSet<u64>,
    ) -> Result<Vec<SlurmJob>, SlurmError> {
        let listing = Listing::parse(&self.run(
            "squeue",
            &[
                "-h".into(),
                "-a".into(),
                "-t".into(),
                "all".into(),
                "-o".into(),
                job_cache::LISTING_FORMAT.into(),
            ],
        )?);
        IoCounters::add(&self.io.jobs_listed, listing.lines.len());
        let due = reads
            .last_full
            .is_none_or(|t| t.elapsed() >= self.config.full_read_every);
        let fetch = match due {
            true => Fetch::All,
            false => reads.cache.to_fetch(&listing, acted_on),
        };

        Ok(match fetch {
            Fetch::All => {
                let all = self.all_jobs()?;
                reads.last_full = Some(Instant::now());
                reads.changed = true;
                reads.cache.replace(&listing, all)
            }
            Fetch::Nothing => {
                let jobs = reads.cache.merge(&listing, Vec::new());
                reads.changed = reads.cache.resources_moved();
                jobs
            }
            Fetch::Some(ids) => {
                let fresh = self.jobs_named(&ids)?;
                let jobs = reads.cache.merge(&listing, fresh);
                reads.changed = reads.cache.resources_moved();
                jobs
            }
        })
    }

    /// Jobs `ids` read in full (`squeue --json --jobs`, which answers with the detail of
    /// `scontrol -d show job --json`); a job that left Slurm meanwhile is not in the answer.
    fn jobs_named(&self, ids: &BTreeSet<u64>) -> Result<Vec<SlurmJob>, SlurmError> {
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let args = [
            "-a".to_string(),
            "-t".into(),
            "all".into(),
            "--json".into(),
            format!("--jobs={}", list.join(",")),
        ];
        match self.run("squeue", &args) {
            Ok(text) => {
                let jobs = json::parse_jobs(&text)?;
                IoCounters::add(&self.io.jobs_read, jobs.len());
                Ok(jobs)
            }
            Err(CommandError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => {
                Ok(Vec::new())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn jobs_from_text(&self) -> Result<(Vec<SlurmJob>, job::Refused), SlurmError> {
        let text = self.scontrol(&job_args(None, false))?;
        if text.trim() == "No jobs in the system" {
            return Ok((Vec::new(), Vec::new()));
        }
        let (mut jobs, mut refused) = job::parse_jobs(&text);
        // A comment with line breaks can also imitate a record of a job id Slurm does not
        // have, a phantom the daemon would plan for. `squeue` lists the ids alone, with no
        // user text (asked after scontrol, so every job scontrol showed is still listed
        // unless it left Slurm in between, which costs it one round).
        let listed = self.job_ids()?;
        jobs.retain(|j| {
            let real = listed.contains(&j.id);
            if !real {
                refused.push((
                    j.id.to_string(),
                    "squeue does not list this job id: a record forged by another job's text"
                        .into(),
                ));
            }
            real
        });
        // A record refused in the full listing may be another job's victim: a comment with
        // line breaks can imitate whole lines, even a whole record with this job's id (then
        // both copies are refused). Each such job is read again on its own, where the text
        // holds only its owner's free text, and kept if that is exactly one sound record.
        let mut still_refused = Vec::new();
        let mut accepted: std::collections::HashSet<u64> = jobs.iter().map(|j| j.id).collect();
        for (id_text, why) in refused {
            let alone = match id_text.parse::<u64>() {
                Ok(id) if listed.contains(&id) && !accepted.contains(&id) => self.job_alone(id)?,
                _ => None,
            };
            match alone {
                Some(j) => {
                    accepted.insert(j.id);
                    jobs.push(j);
                }
                None => still_refused.push((id_text, why)),
            }
        }
        Ok((jobs, still_refused))
    }

    /// The ids of every job Slurm knows (`squeue -h -t all -o %A`: one id per line, for
    /// job array elements and het components alike).
    fn job_ids(&self) -> Result<std::collections::HashSet<u64>, SlurmError> {
        let text = self.run(
            "squeue",
            &[
                "-h".into(),
                "-t".into(),
                "all".into(),
                "-o".into(),
                "%A".into(),
            ],
        )?;
        Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Job `id` read on its own, if its record is exactly one well-formed, unambiguous
    /// record of that id.
    fn job_alone(&self, id: u64) -> Result<Option<SlurmJob>, SlurmError> {
        match self.scontrol(&job_args(Some(id.to_string()), false)) {
            Ok(text) => {
                let (mut jobs, refused) = job::parse_jobs(&text);
                let sound = refused.is_empty() && jobs.len() == 1 && jobs[0].id == id;
                Ok(sound.then(|| jobs.remove(0)))
            }
            Err(SlurmError::Command(CommandError::Failed { stderr, .. }))
                if stderr.contains("Invalid job id") =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// One job, `None` when Slurm no longer knows it.
    pub fn job(&self, id: u64) -> Result<Option<SlurmJob>, SlurmError> {
        let form = self.read_form()?;
        match self.scontrol(&job_args(Some(id.to_string()), form == ReadForm::Json)) {
            Ok(text) if form == ReadForm::Json => {
                Ok(json::parse_jobs(&text)?.into_iter().find(|j| j.id == id))
            }
            Ok(text) => Ok(job::parse_jobs(&text).0.into_iter().find(|j| j.id == id)),
            Err(SlurmError::Command(CommandError::Failed { stderr, .. }))
                if stderr.contains("Invalid job id") =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Gives a pending job its nodes and GPUs ([`GpuSpec::update_fields`]). A GPU request of
    /// the other kind (per node or per job) left from an earlier placement is cleared first,
    /// so that a job placed again after a preemption carries only its new request.
    pub fn set_placement(&self, id: u64, spec: &GpuSpec) -> Result<(), SlurmError> {
        let current = self.job(id)?;
        self.update_placement(id, current.as_ref(), spec, &[])
    }

    /// [`Slurm::set_placement`] of the pending job `current` (as read: it is not read
    /// again) and `StartTime=now` with it, and the job's `Comment` set to `comment` if given,
    /// in one `scontrol update` (two when a GPU request of the other kind must be cleared
    /// first): a start costs slurmctld one update RPC fewer, and one job read fewer, than
    /// the separate calls.
    pub fn place_and_start(
        &self,
        current: &SlurmJob,
        spec: &GpuSpec,
        comment: Option<&str>,
    ) -> Result<(), SlurmError> {
        let mut more = vec!["StartTime=now".to_string()];
        more.extend(comment.map(|c| format!("Comment={c}")));
        self.update_placement(current.id, Some(current), spec, &more)
    }

    fn update_placement(
        &self,
        id: u64,
        current: Option<&SlurmJob>,
        spec: &GpuSpec,
        more: &[String],
    ) -> Result<(), SlurmError> {
        let stale = match current {
            Some(j) if spec.is_uniform() && j.tres_per_job.is_some() => Some("TresPerJob="),
            Some(j) if !spec.is_uniform() && j.tres_per_node.is_some() => Some("Gres="),
            _ => None,
        };
        if let Some(clear) = stale {
            self.scontrol(&[
                "update".to_string(),
                format!("JobId={}", self.target(id)),
                clear.to_string(),
            ])?;
        }
        let tasks = current.and_then(|j| j.recorded_tasks());
        let (cpus, mem) = current.map_or((None, None), |j| j.recorded_per_gpu());
        let mut args = vec!["update".to_string(), format!("JobId={}", self.target(id))];
        args.extend(spec.update_fields_keeping(tasks));
        args.extend(per_gpu_fields(cpus, mem));
        args.extend_from_slice(more);
        self.scontrol(&args)?;
        Ok(())
    }

    /// Makes a requeued job eligible at once (Slurm otherwise waits about two minutes).
    pub fn start_now(&self, id: u64) -> Result<(), SlurmError> {
        self.scontrol(&[
            "update".into(),
            format!("JobId={}", self.target(id)),
            "StartTime=now".into(),
        ])
        .map(|_| ())
    }

    /// Releases a held job.
    pub fn release(&self, id: u64) -> Result<(), SlurmError> {
        self.scontrol(&["release".into(), self.target(id)])
            .map(|_| ())
    }

    /// Releases the held jobs `ids`, naming up to [`IDS_PER_COMMAND`] in one `scontrol
    /// release` (which releases them one by one, an RPC each, and carries on past a job it
    /// cannot release); returns the jobs whose release failed, with Slurm's words. A command
    /// that failed for another reason (it timed out, say) is an error for all.
    pub fn release_many(&self, ids: &[u64]) -> Result<Vec<(u64, String)>, SlurmError> {
        self.each_listed(ids, |names| {
            let args = vec!["release".to_string(), names.join(",")];
            self.scontrol(&args).map(|_| ())
        })
    }

    /// Sends `signal` (a name such as `USR1`) to every process of each job of `ids`, batch
    /// scripts included, naming up to [`IDS_PER_COMMAND`] in one `scancel`; returns the jobs
    /// it could not signal, with Slurm's words (as [`Slurm::release_many`]).
    pub fn signal_many(&self, ids: &[u64], signal: &str) -> Result<Vec<(u64, String)>, SlurmError> {
        self.each_listed(ids, |names| {
            let mut args = vec!["--full".to_string(), format!("--signal={signal}")];
            args.extend(names.iter().map(|n| n.to_string()));
            Ok(self.run("scancel", &args).map(|_| ())?)
        })
    }

    /// Requeues each running job of `ids` held, naming up to [`IDS_PER_COMMAND`] in one
    /// `scontrol requeuehold`; returns the jobs it could not requeue, with Slurm's words (as
    /// [`Slurm::release_many`]).
    pub fn requeue_hold_many(&self, ids: &[u64]) -> Result<Vec<(u64, String)>, SlurmError> {
        self.each_listed(ids, |names| {
            let args = vec![
                "requeuehold".to_string(),
                REQUEUE_RUNNING_ONLY.to_string(),
                names.join(","),
            ];
            self.scontrol(&args).map(|_| ())
        })
    }

    /// Runs `command` on the names of `ids`, up to [`IDS_PER_COMMAND`] at a time, each job
    /// marked acted on; returns the jobs a failed command's stderr names, with why (all of
    /// its jobs when it names none). A command that failed in another way (it timed out,
    /// say) is an error for all.
    fn each_listed(
        &self,
        ids: &[u64],
        command: impl Fn(&[&str]) -> Result<(), SlurmError>,
    ) -> Result<Vec<(u64, String)>, SlurmError> {
        let mut failed = Vec::new();
        for chunk in ids.chunks(IDS_PER_COMMAND) {
            let names: Vec<(u64, String)> =
                chunk.iter().map(|id| (*id, self.target(*id))).collect();
            let list: Vec<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
            match command(&list) {
                Ok(()) => {}
                Err(SlurmError::Command(CommandError::Failed { stderr, .. })) => {
                    failed.extend(per_job_failures(&names, &stderr));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(failed)
    }

    /// Holds a pending job.
    pub fn hold(&self, id: u64) -> Result<(), SlurmError> {
        self.scontrol(&["hold".into(), self.target(id)]).map(|_| ())
    }

    /// Sends `signal` (a name such as `USR1`) to every process of a job, batch script
    /// included.
    pub fn signal(&self, id: u64, signal: &str) -> Result<(), SlurmError> {
        Ok(self
            .run(
                "scancel",
                &[
                    "--full".into(),
                    format!("--signal={signal}"),
                    self.target(id),
                ],
            )
            .map(|_| ())?)
    }

    /// Gives a pending job back a GPU request (`Gres=...` or `TresPerJob=...`, as
    /// `request` says; any other kind left from a placement is cleared first, and so is a
    /// node list a placement set) and sets its admin comment, in one update: the fail-open
    /// command's hand-over to Slurm, whose mark must never be on a job without its request.
    pub fn restore_request(
        &self,
        id: u64,
        request: &[String],
        admin_comment: &str,
    ) -> Result<(), SlurmError> {
        if let Some(j) = self.job(id)? {
            let per_node = request.iter().any(|f| f.starts_with("Gres="));
            let mut clear = Vec::new();
            if per_node && j.tres_per_job.is_some() {
                clear.push("TresPerJob=".to_string());
            }
            if !per_node && j.tres_per_node.is_some() {
                clear.push("Gres=".to_string());
            }
            if !j.req_nodes.is_empty() {
                clear.push("ReqNodeList=".to_string());
            }
            if !clear.is_empty() {
                let mut args = vec!["update".to_string(), format!("JobId={}", self.target(id))];
                args.extend(clear);
                self.scontrol(&args)?;
            }
        }
        let mut args = vec!["update".to_string(), format!("JobId={}", self.target(id))];
        args.extend(request.iter().cloned());
        args.push(format!("AdminComment={admin_comment}"));
        self.scontrol(&args).map(|_| ())
    }

    /// Sets a job's admin comment (root or a Slurm operator only; users cannot).
    pub fn set_admin_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        self.scontrol(&[
            "update".into(),
            format!("JobId={}", self.target(id)),
            format!("AdminComment={text}"),
        ])
        .map(|_| ())
    }

    /// Splits pending element `task` of array `array_id` off into a job record of its own
    /// (with its own job id), by setting its admin comment to `admin_comment` (the record
    /// it already carries, so nothing else changes): slurmctld splits a pending element off
    /// whenever `JobId=A_I` of it is updated.
    pub fn split_array_element(
        &self,
        array_id: u64,
        task: u32,
        admin_comment: &str,
    ) -> Result<(), SlurmError> {
        // The array's own record loses the element: read it again.
        self.acted_on
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(array_id);
        self.scontrol(&[
            "update".into(),
            format!("JobId={array_id}_{task}"),
            format!("AdminComment={admin_comment}"),
        ])
        .map(|_| ())
    }

    /// Removes a pending job's GPU request, per node and per job, as the plugin does at
    /// submission (the daemon gives GPUs only with a placement).
    pub fn clear_gpu_request(&self, id: u64) -> Result<(), SlurmError> {
        let Some(j) = self.job(id)? else {
            return Ok(());
        };
        let mut args = vec!["update".to_string(), format!("JobId={}", self.target(id))];
        if j.tres_per_node.is_some() {
            args.push("Gres=".into());
        }
        if j.tres_per_job.is_some() {
            args.push("TresPerJob=".into());
        }
        if args.len() > 2 {
            self.scontrol(&args)?;
        }
        Ok(())
    }

    /// Requeues a running job and holds it.
    pub fn requeue_hold(&self, id: u64) -> Result<(), SlurmError> {
        self.scontrol(&[
            "requeuehold".into(),
            REQUEUE_RUNNING_ONLY.into(),
            self.target(id),
        ])
        .map(|_| ())
    }

    /// Submits the batch script at `script` on behalf of user `uid` and group `gid` (root
    /// only: `sbatch --uid --gid`), from working directory `workdir`; returns the new job's
    /// id. The job runs as that user, never as root.
    pub fn submit_as(
        &self,
        uid: u32,
        gid: u32,
        script: &std::path::Path,
        workdir: &std::path::Path,
    ) -> Result<u64, SlurmError> {
        // The job gets the submitting environment (`--export=ALL` in the script): sbatch
        // runs with only PATH, LANG and Slurm's own variables, so nothing else of the
        // daemon's environment reaches the user's job. (Naming variables in --export instead
        // makes 24.11 and later load the user's login environment on the node, which fails
        // for users without a login shell and requeues the job.)
        self.conf_exists()?;
        let mut env: Vec<(String, String)> = self
            .config
            .conf
            .iter()
            .map(|c| ("SLURM_CONF".to_string(), c.display().to_string()))
            .collect();
        for keep in ["PATH", "LANG", "SLURM_CONF"] {
            if !env.iter().any(|(k, _)| k == keep)
                && let Ok(v) = std::env::var(keep)
            {
                env.push((keep.to_string(), v));
            }
        }
        self.io
            .commands
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out = command::run_in(
            &self.program("sbatch"),
            &[
                "--parsable".into(),
                format!("--uid={uid}"),
                format!("--gid={gid}"),
                format!("--chdir={}", workdir.display()),
                script.display().to_string(),
            ],
            command::Environment::Only(&env),
            self.config.timeout,
        )?
        .stdout;
        let first = out.trim().split(';').next().unwrap_or("").trim();
        first.parse().map_err(|_| SlurmError::Parse {
            what: "sbatch --parsable",
            detail: format!("expected a job id, got {:?}", out.trim()),
        })
    }

    /// Cancels a job (every component of a heterogeneous job).
    pub fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        Ok(self.run("scancel", &[self.target(id)]).map(|_| ())?)
    }

    /// The batch script a job was submitted with (`scontrol write batch_script ID -`).
    pub fn batch_script(&self, id: u64) -> Result<String, SlurmError> {
        self.scontrol(&[
            "write".into(),
            "batch_script".into(),
            id.to_string(),
            "-".into(),
        ])
    }

    /// Sets the `Comment` of every job of `ids` to `text`, naming up to [`IDS_PER_COMMAND`]
    /// jobs in one `scontrol update` (which updates them one by one: one process, an RPC
    /// each). A job that failed does not stop the others; the first failure is returned.
    pub fn set_comments(&self, ids: &[u64], text: &str) -> Result<(), SlurmError> {
        // An array's record named `A_[1,3-5]` holds commas of its own: it goes alone.
        let (alone, listed): (Vec<String>, Vec<String>) = ids
            .iter()
            .map(|id| self.target(*id))
            .partition(|name| name.contains('['));
        let lists = listed
            .chunks(IDS_PER_COMMAND)
            .map(|c| c.join(","))
            .chain(alone);
        let mut first_failure = None;
        for list in lists {
            let args = [
                "update".to_string(),
                format!("JobId={list}"),
                format!("Comment={text}"),
            ];
            if let Err(e) = self.scontrol(&args) {
                first_failure.get_or_insert(e);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// Sets a job's `Comment` (the job's own progress channel; also what a job's owner may do).
    pub fn set_comment(&self, id: u64, text: &str) -> Result<(), SlurmError> {
        self.scontrol(&[
            "update".into(),
            format!("JobId={}", self.target(id)),
            format!("Comment={text}"),
        ])
        .map(|_| ())
    }
}

/// The most job ids one command names (`scontrol update JobId=A,B,...`), which keeps its
/// argument well under any system's limit.
const IDS_PER_COMMAND: usize = 500;

/// `scontrol requeue`'s option that leaves a job alone unless it is running or suspended.
/// Slurm requeues an ended job too, and runs it again: a job that ends between the round's
/// read and its requeue must not be (slurmctld decides, under its own lock).
const REQUEUE_RUNNING_ONLY: &str = "Incomplete";

/// The jobs of `names` (id and the name the command gave it) that a command's `stderr` says
/// failed, with why. Slurm's tools word it three ways: `<why> for job <name>` (scontrol),
/// `... on job id <name>: <why>` (scancel) and `<name>: <why>` (an array element's answer).
/// A failure that names no job of `names` (the command failed as a whole) counts for every job.
fn per_job_failures(names: &[(u64, String)], stderr: &str) -> Vec<(u64, String)> {
    let named = |name: &str| {
        names
            .iter()
            .find(|(_, n)| n == name.trim())
            .map(|(id, _)| *id)
    };
    let mut failed: Vec<(u64, String)> = Vec::new();
    for line in stderr.lines() {
        let found = if let Some((why, name)) = line.rsplit_once(" for job ") {
            named(name).map(|id| (id, why))
        } else if let Some((_, rest)) = line.split_once(" on job id ") {
            rest.split_once(':')
                .and_then(|(name, why)| named(name).map(|id| (id, why)))
        } else {
            line.split_once(':')
                .and_then(|(name, why)| named(name).map(|id| (id, why)))
        };
        if let Some((id, why)) = found {
            failed.push((id, why.trim().to_string()));
        }
    }
    if failed.is_empty() {
        let why = stderr.trim().to_string();
        return names.iter().map(|(id, _)| (*id, why.clone())).collect();
    }
    failed
}

/// `scontrol -d show job [ID] [--json]`: the detail (`-d`) gives each node's GPUs.
fn job_args(id: Option<String>, json: bool) -> Vec<String> {
    let mut args: Vec<String> = vec!["-d".into(), "show".into(), "job".into()];
    args.extend(id);
    if json {
        args.push("--json".into());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_on_many_jobs_names_the_jobs_that_failed() {
        let names = [
            (7, "7".to_string()),
            (8, "8".to_string()),
            (12, "12_3".to_string()),
        ];
        let stderr = "Job has already finished for job 8\nInvalid job id specified for job 12_3\n";
        assert_eq!(
            per_job_failures(&names, stderr),
            vec![
                (8, "Job has already finished".to_string()),
                (12, "Invalid job id specified".to_string())
            ]
        );
        let scancel = "scancel: error: Kill job error on job id 7: Job/step already completing or completed\n";
        assert_eq!(
            per_job_failures(&names, scancel),
            vec![(7, "Job/step already completing or completed".to_string())]
        );
        assert_eq!(
            per_job_failures(&names, "12_3: Job is pending execution\n"),
            vec![(12, "Job is pending execution".to_string())]
        );
        let whole = per_job_failures(&names, "scontrol: error: slurm_conf: no such file\n");
        assert_eq!(
            whole.len(),
            3,
            "a failure naming no job counts for all: {whole:?}"
        );
    }

    #[test]
    fn a_missing_slurm_conf_fails_at_once_naming_the_file() {
        let client = Slurm::new(SlurmConfig {
            conf: Some(PathBuf::from("/nonexistent/hadar-test/slurm.conf")),
            // A program that would wait out the timeout if it were run.
            bin_dir: Some(PathBuf::from("/bin")),
            timeout: Duration::from_secs(30),
            ..Default::default()
        });
        let err = client.run("sleep", &["30".into()]).unwrap_err();
        assert!(matches!(err, CommandError::MissingConf { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("/nonexistent/hadar-test/slurm.conf"),
            "{err}"
        );
    }

    #[test]
    fn each_command_and_the_bytes_it_answered_are_counted_across_clones() {
        let conf = tempfile::NamedTempFile::new().unwrap();
        let client = Slurm::new(SlurmConfig {
            conf: Some(conf.path().to_path_buf()),
            bin_dir: Some(PathBuf::from("/bin")),
            timeout: Duration::from_secs(10),
            ..Default::default()
        });
        let before = client.io();
        assert_eq!(client.run("echo", &["hello".into()]).unwrap(), "hello\n");
        let clone = client.clone();
        clone.run("echo", &["-n".into(), "abc".into()]).unwrap();
        assert!(client.run("false", &[]).is_err());
        let spent = client.io().since(before);
        assert_eq!(spent.commands, 3, "a failed command counts too");
        assert_eq!(spent.bytes_read, 6 + 3);
    }

    fn spec(nodes: &[(&str, &[(&str, u32)])]) -> GpuSpec {
        GpuSpec {
            typed: false,
            nodes: nodes
                .iter()
                .map(|(n, g)| {
                    (
                        n.to_string(),
                        g.iter().map(|(t, c)| (t.to_string(), *c)).collect(),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn uniform_placements_use_a_typeless_per_node_gres() {
        let s = spec(&[("n1", &[("v100", 2)]), ("n3", &[("k80", 2)])]);
        assert_eq!(
            s.update_fields(),
            [
                "ReqNodeList=n1,n3",
                "NumNodes=2-2",
                "NumTasks=2",
                "Gres=gpu:2"
            ]
        );
        let s = spec(&[("n4", &[("v100", 2), ("k80", 2)])]);
        assert_eq!(
            s.update_fields(),
            ["ReqNodeList=n4", "NumNodes=1-1", "NumTasks=1", "Gres=gpu:4"]
        );
        assert_eq!(s.total(), 4);
    }

    #[test]
    fn a_users_task_count_is_kept_and_raised_to_the_node_count_only() {
        let one = spec(&[("n1", &[("v100", 2)])]);
        assert_eq!(one.update_fields_keeping(Some(2))[2], "NumTasks=2");
        let two = spec(&[("n1", &[("v100", 1)]), ("n2", &[("v100", 1)])]);
        assert_eq!(two.update_fields_keeping(Some(1))[2], "NumTasks=2");
        assert_eq!(two.update_fields_keeping(Some(4))[2], "NumTasks=4");
        assert_eq!(two.update_fields_keeping(None)[2], "NumTasks=2");
    }

    #[test]
    fn typed_placements_name_their_types() {
        let mut s = spec(&[("n4", &[("v100", 1)]), ("n5", &[("v100", 1)])]);
        s.typed = true;
        assert_eq!(
            s.update_fields(),
            [
                "ReqNodeList=n4,n5",
                "NumNodes=2-2",
                "NumTasks=2",
                "Gres=gpu:v100:1"
            ]
        );
        let mut s = spec(&[("n1", &[("v100", 1)]), ("n4", &[("k80", 1)])]);
        s.typed = true;
        assert!(!s.is_uniform());
        assert_eq!(
            s.update_fields()[3],
            "TresPerJob=gres:gpu:v100:1,gres:gpu:k80:1"
        );
    }

    #[test]
    fn uneven_placements_use_a_typeless_per_job_total() {
        let s = spec(&[("n1", &[("v100", 3)]), ("n3", &[("k80", 1)])]);
        assert!(!s.is_uniform());
        assert_eq!(
            s.update_fields(),
            [
                "ReqNodeList=n1,n3",
                "NumNodes=2-2",
                "NumTasks=2",
                "TresPerJob=gres:gpu:4"
            ]
        );
        assert_eq!(
            s.per_type(),
            vec![("v100".to_string(), 3), ("k80".to_string(), 1)]
        );
    }
}
