//! `hadar check-config`: a `hadar.toml` checked against the live Slurm cluster and this
//! machine, each finding tied to its line in the file, and every GPU type of the cluster with
//! how hadar rates it.
//!
//! Pure over its inputs, so that the checks are unit-tested without a cluster: the file's
//! text, the nodes Slurm reports (read by the caller through `hadar_slurm`), and a [`Probe`]
//! answering what the checks need to know about paths on this machine.

use hadar_core::estimate::{GpuCatalog, SiteGpu, SiteGpuKind};
use hadar_daemon::config::DaemonConfig;
use hadar_daemon::key_lines::Lines;
use hadar_slurm::NodeInfo;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// How bad a finding is: problems make `check-config` fail, warnings do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// hadar would not work as configured.
    Problem,
    /// Worth a look; hadar works.
    Warning,
}

/// One thing found wrong, at its key and line (when the file writes that key).
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// Problem or warning.
    pub severity: Severity,
    /// The line of the file, from 1 (`None`: the key is not written; its default is meant).
    pub line: Option<usize>,
    /// The key, `table.key`.
    pub key: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// How hadar rates a GPU type before any job has reported progress on it.
#[derive(Clone, Debug, PartialEq)]
pub enum Rating {
    /// A column of Gavel's measured throughput table (found by the name, its model, or a
    /// `[gpu_types]` alias when `site`).
    Measured {
        /// The column.
        column: String,
        /// Found through `[gpu_types]`.
        site: bool,
    },
    /// Estimated from a known model's datasheet.
    Datasheet {
        /// The model.
        model: String,
        /// Found through `[gpu_types]`.
        site: bool,
    },
    /// `[gpu_types]`: a known model times a speed.
    Relative {
        /// The model.
        model: String,
        /// The factor.
        speed: f64,
    },
    /// `[gpu_types]`: its own datasheet figures.
    Described {
        /// Peak FP32 TFLOPS.
        fp32_tflops: f64,
        /// Memory, GB.
        memory_gb: f64,
    },
    /// Neither: no job can use it until its owner gives a `throughput=` hint.
    Unknown,
}

impl Rating {
    /// The rating in words, for the table.
    pub fn words(&self) -> String {
        let via = |site: &bool| if *site { " via [gpu_types]" } else { "" };
        match self {
            Rating::Measured { column, site } => {
                format!("measured: Gavel's table, column {column}{}", via(site))
            }
            Rating::Datasheet { model, site } => {
                format!("estimated from the {model} datasheet{}", via(site))
            }
            Rating::Relative { model, speed } => {
                format!("estimated as {speed} x {model} ([gpu_types])")
            }
            Rating::Described {
                fp32_tflops,
                memory_gb,
            } => format!(
                "estimated from its [gpu_types] figures ({fp32_tflops} TFLOPS FP32, {memory_gb} GB)"
            ),
            Rating::Unknown => "unknown: no job can use it (describe it in [gpu_types])".into(),
        }
    }
}

/// One GPU type of the live cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeLine {
    /// The GRES type name, as Slurm reports it.
    pub name: String,
    /// GPUs of that type.
    pub gpus: u32,
    /// Nodes having some.
    pub nodes: usize,
    /// How hadar rates it.
    pub rating: Rating,
}

/// Everything `check-config` found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Findings, problems first, then by line.
    pub findings: Vec<Finding>,
    /// The cluster's GPU types, by name.
    pub types: Vec<TypeLine>,
}

impl Report {
    /// True when some finding is a problem.
    pub fn has_problems(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity == Severity::Problem)
    }
}

/// What the checks need to know about one existing path on this machine.
#[derive(Clone, Debug, PartialEq)]
pub struct PathFacts {
    /// A directory.
    pub dir: bool,
    /// Permission bits.
    pub mode: u32,
    /// This process may write it.
    pub writable: bool,
    /// This process may execute (or, a directory, enter) it.
    pub executable: bool,
    /// The file system's kind when it is known to be local to this machine (`ext4`).
    pub local_fs: Option<&'static str>,
}

/// Answers about paths: the machine's file system, or a fake in tests.
pub trait Probe {
    /// Facts about `path`, `None` when it does not exist.
    fn facts(&self, path: &Path) -> Option<PathFacts>;
}

/// What `check-config` learnt of the live cluster.
#[derive(Clone, Copy, Debug)]
pub enum Live<'a> {
    /// The nodes Slurm reports.
    Nodes(&'a [NodeInfo]),
    /// Slurm could not be read (why): the file's own problems are still reported, and the
    /// checks that need the cluster are named as not done.
    Unreachable(&'a str),
}

/// Checks `text` (the file at `shown`) against the `live` cluster and this machine.
pub fn check(shown: &str, text: &str, live: Live<'_>, probe: &dyn Probe) -> Report {
    let lines = Lines::new(text);
    let mut out = Findings::default();
    let nodes = match live {
        Live::Nodes(nodes) => nodes,
        Live::Unreachable(why) => {
            out.problem(
                None,
                "",
                format!(
                    "cannot read the live cluster ({why}): partitions and GPU types were not checked; run check-config where Slurm answers"
                ),
            );
            &[]
        }
    };
    let (catalog, site, partitions) = match DaemonConfig::parse(shown, text) {
        Ok(config) => {
            if let Live::Nodes(nodes) = live {
                check_slurm(&config, nodes, &lines, probe, &mut out);
            }
            check_paths(&config, &lines, probe, &mut out);
            (config.gpu_catalog(), config.gpu_types, config.partitions)
        }
        Err(e) => {
            let message = e.to_string();
            let line = line_in_message(&message);
            let message = message
                .strip_prefix(&format!("{shown}: "))
                .unwrap_or(&message);
            out.problem(line, "", message.to_string());
            (GpuCatalog::builtin(), BTreeMap::new(), Vec::new())
        }
    };
    let types = rate_types(nodes, &catalog, &site);
    // Only the types of the nodes hadar schedules must be rated; the others are listed.
    let scheduled: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| partitions.is_empty() || n.partitions.iter().any(|p| partitions.contains(p)))
        .flat_map(|n| n.gpus.iter().map(|(t, _)| t.as_str()))
        .collect();
    let unknown = types
        .iter()
        .filter(|t| t.rating == Rating::Unknown && scheduled.contains(t.name.as_str()));
    for t in unknown {
        out.problem(
            lines.key(&["gpu_types"]),
            "gpu_types",
            format!(
                "GPU type \"{}\" ({} GPUs on {} nodes) is in neither Gavel's throughput table nor the GPU datasheets: map it to a known model or describe it in [gpu_types]",
                t.name, t.gpus, t.nodes
            ),
        );
    }
    if let Live::Nodes(_) = live {
        check_unused_site_types(&site, &types, &lines, &mut out);
    }
    let mut findings = out.0;
    findings.sort_by_key(|f| (f.severity, f.line.unwrap_or(usize::MAX)));
    Report { findings, types }
}

/// Findings as they are collected.
#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, severity: Severity, line: Option<usize>, key: &str, message: String) {
        self.0.push(Finding {
            severity,
            line,
            key: key.to_string(),
            message,
        });
    }
    fn problem(&mut self, line: Option<usize>, key: &str, message: String) {
        self.add(Severity::Problem, line, key, message);
    }
    fn warning(&mut self, line: Option<usize>, key: &str, message: String) {
        self.add(Severity::Warning, line, key, message);
    }
}

/// The `line N` a TOML parser message names.
fn line_in_message(message: &str) -> Option<usize> {
    let at = message.find("line ")? + 5;
    let digits: String = message[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Partitions and the slurm.conf against the live cluster.
fn check_slurm(
    config: &DaemonConfig,
    nodes: &[NodeInfo],
    lines: &Lines,
    probe: &dyn Probe,
    out: &mut Findings,
) {
    let live: BTreeSet<&str> = nodes
        .iter()
        .flat_map(|n| n.partitions.iter().map(String::as_str))
        .collect();
    let known = live.iter().copied().collect::<Vec<_>>().join(", ");
    for p in config
        .partitions
        .iter()
        .filter(|p| !live.contains(p.as_str()))
    {
        out.problem(
            lines.element(&["slurm", "managed_partitions"], p),
            "slurm.managed_partitions",
            format!("partition \"{p}\" has no node in the live cluster (its partitions: {known})"),
        );
    }
    let plugin = hadar_request::Config::parse("", lines.text()).ok();
    if let Some(p) = plugin
        .and_then(|c| c.slurm.default_partition)
        .filter(|p| !live.contains(p.as_str()))
    {
        out.problem(
            lines.key(&["slurm", "default_partition"]),
            "slurm.default_partition",
            format!("partition \"{p}\" has no node in the live cluster (its partitions: {known})"),
        );
    }
    if let Some(conf) = &config.slurm_conf
        && probe.facts(conf).is_none_or(|f| f.dir)
    {
        out.problem(
            lines.key(&["slurm", "slurm_conf"]),
            "slurm.slurm_conf",
            format!("{} is not a file", conf.display()),
        );
    }
}

/// The daemon's paths: state, socket, Slurm commands, and the fork runner and spool.
fn check_paths(config: &DaemonConfig, lines: &Lines, probe: &dyn Probe, out: &mut Findings) {
    let s = &config.sidecar;
    let at = |key: &str| lines.key(&["sidecar", key]);
    if let Some(why) = creatable_dir(probe, s.state.parent()) {
        out.problem(
            at("state"),
            "sidecar.state",
            format!("{}: {why}", s.state.display()),
        );
    }
    check_socket_dir(&s.socket, at("socket"), probe, out);
    if let Some(bin) = &s.slurm_bin_dir {
        for cmd in ["scontrol", "scancel", "sbatch"] {
            if !probe
                .facts(&bin.join(cmd))
                .is_some_and(|f| f.executable && !f.dir)
            {
                out.problem(
                    at("slurm_bin_dir"),
                    "sidecar.slurm_bin_dir",
                    format!("{} has no executable {cmd}", bin.display()),
                );
            }
        }
    }
    if s.policy.forks() {
        check_fork(config, lines, probe, out);
    }
}

/// Why a directory cannot be used or made (`None`: it can): it must be a writable directory,
/// or its nearest existing ancestor one (the daemon creates the rest).
fn creatable_dir(probe: &dyn Probe, dir: Option<&Path>) -> Option<String> {
    let dir = dir.filter(|d| !d.as_os_str().is_empty())?;
    let (existing, facts) = dir.ancestors().find_map(|a| Some((a, probe.facts(a)?)))?;
    if !facts.dir {
        Some(format!("{} is not a directory", existing.display()))
    } else if !facts.writable || !facts.executable {
        Some(format!("{} is not writable here", existing.display()))
    } else {
        None
    }
}

/// The socket's directory: usable, and writable by no other user (the daemon refuses one
/// that is, as another user could replace the socket).
fn check_socket_dir(socket: &Path, line: Option<usize>, probe: &dyn Probe, out: &mut Findings) {
    let dir = socket.parent().unwrap_or(Path::new("/"));
    if let Some(why) = creatable_dir(probe, Some(dir)) {
        out.problem(
            line,
            "sidecar.socket",
            format!("{}: {why}", socket.display()),
        );
    } else if let Some(f) = probe.facts(dir)
        && f.mode & 0o022 != 0
    {
        out.problem(
            line,
            "sidecar.socket",
            format!(
                "{} is writable by other users (mode {:o}): the daemon refuses to listen there; use a directory only root or SlurmUser can write",
                dir.display(),
                f.mode & 0o7777
            ),
        );
    }
}

/// `[fork]` under `policy = "hadare"`: the runner and hadar binary, and the spool. All three
/// are used on the compute nodes by each round's copy job, so they are checked where they are
/// seen from this machine: the file must be a program, and the spool a folder users can make
/// their job's folder in.
fn check_fork(config: &DaemonConfig, lines: &Lines, probe: &dyn Probe, out: &mut Findings) {
    let f = &config.fork;
    let programs = [
        ("runner", Some(&f.runner)),
        ("hadar_bin", f.hadar_bin.as_ref()),
    ];
    for (key, path) in programs {
        if let Some(p) = path
            && !probe.facts(p).is_some_and(|x| x.executable && !x.dir)
        {
            out.problem(
                lines.key(&["fork", key]),
                &format!("fork.{key}"),
                format!(
                    "{} is not an executable file on this machine; copy jobs run it on the compute nodes, so install it at this path there",
                    p.display()
                ),
            );
        }
    }
    check_spool(&f.spool, lines.key(&["fork", "spool"]), probe, out);
}

/// The fork spool: copy jobs make each job's folder there as the job's user, so it must be a
/// folder every user may write, sticky like `/tmp`, at the same path on every node. The
/// daemon never opens it, so its absence on this machine is only a warning.
fn check_spool(spool: &Path, line: Option<usize>, probe: &dyn Probe, out: &mut Findings) {
    let create = format!("install -d -m 1777 {}", spool.display());
    match probe.facts(spool) {
        None => out.warning(
            line,
            "fork.spool",
            format!(
                "{} is not on this machine: the daemon's host need not mount it, but every compute node must, at this path (create it once: {create})",
                spool.display()
            ),
        ),
        Some(x) if !x.dir => out.problem(
            line,
            "fork.spool",
            format!("{} is not a directory", spool.display()),
        ),
        Some(x) if x.mode & 0o1777 != 0o1777 => out.problem(
            line,
            "fork.spool",
            format!(
                "{} has mode {:o}: copy jobs make each job's folder there as the job's user, so it must be writable by users and sticky ({create})",
                spool.display(),
                x.mode & 0o7777
            ),
        ),
        Some(x) => {
            if let Some(fs) = x.local_fs {
                out.warning(
                    line,
                    "fork.spool",
                    format!(
                        "{} is on a local file system ({fs}); every node must see it at the same path (a shared file system), unless all slurmd run on this machine",
                        spool.display()
                    ),
                );
            }
        }
    }
}

/// A `[gpu_types]` entry naming no type of the live cluster (a typo, or a type not yet
/// installed).
fn check_unused_site_types(
    site: &BTreeMap<String, SiteGpu>,
    types: &[TypeLine],
    lines: &Lines,
    out: &mut Findings,
) {
    for name in site.keys() {
        if !types.iter().any(|t| t.name.eq_ignore_ascii_case(name)) {
            out.warning(
                lines.key(&["gpu_types", name]),
                "gpu_types",
                format!("\"{name}\" is not a GPU type of the live cluster"),
            );
        }
    }
}

/// Every GPU type of `nodes` with its count, node count and rating.
pub fn rate_types(
    nodes: &[NodeInfo],
    catalog: &GpuCatalog,
    site: &BTreeMap<String, SiteGpu>,
) -> Vec<TypeLine> {
    let mut by_type: BTreeMap<&str, (u32, usize)> = BTreeMap::new();
    for n in nodes {
        for (t, count) in n.gpus.iter().filter(|(t, _)| !t.is_empty()) {
            let e = by_type.entry(t).or_default();
            e.0 += count;
            e.1 += 1;
        }
    }
    let measured = hadar_formats::embedded::throughputs()
        .map(|t| t.gpu_types().to_vec())
        .unwrap_or_default();
    by_type
        .into_iter()
        .map(|(name, (gpus, nodes))| TypeLine {
            name: name.to_string(),
            gpus,
            nodes,
            rating: rate(name, catalog, site, &measured),
        })
        .collect()
}

/// How one type is rated: a `[gpu_types]` entry first, else the name rules of the catalog.
fn rate(
    name: &str,
    catalog: &GpuCatalog,
    site: &BTreeMap<String, SiteGpu>,
    measured: &[String],
) -> Rating {
    let entry = site.iter().find(|(k, _)| k.eq_ignore_ascii_case(name));
    if let Some((_, e)) = entry {
        match e.kind() {
            SiteGpuKind::Relative(model, speed) => return Rating::Relative { model, speed },
            SiteGpuKind::Described => {
                return Rating::Described {
                    fp32_tflops: e.fp32_tflops.unwrap_or_default(),
                    memory_gb: e.memory_gb.unwrap_or_default(),
                };
            }
            SiteGpuKind::Alias(_) => {}
        }
    }
    let site = entry.is_some();
    let Some(spec) = catalog.lookup(name) else {
        return Rating::Unknown;
    };
    match measured.iter().find(|c| c.eq_ignore_ascii_case(&spec.name)) {
        Some(column) => Rating::Measured {
            column: column.clone(),
            site,
        },
        None => Rating::Datasheet {
            model: spec.name.clone(),
            site,
        },
    }
}

/// The machine's file system as a [`Probe`].
pub struct LocalFs;

impl Probe for LocalFs {
    fn facts(&self, path: &Path) -> Option<PathFacts> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(PathFacts {
            dir: meta.is_dir(),
            mode: meta.permissions().mode(),
            writable: access(path, libc::W_OK),
            executable: access(path, libc::X_OK),
            local_fs: local_fs(path),
        })
    }
}

fn c_path(path: &Path) -> Option<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).ok()
}

fn access(path: &Path, mode: libc::c_int) -> bool {
    // SAFETY: access(2) on a NUL-terminated path.
    c_path(path).is_some_and(|p| unsafe { libc::access(p.as_ptr(), mode) } == 0)
}

/// The name of the file system holding `path` when it is one that lives on this machine
/// only (so another node cannot see it), from statfs(2)'s magic number.
fn local_fs(path: &Path) -> Option<&'static str> {
    let p = c_path(path)?;
    // SAFETY: statfs(2) fills a zeroed struct from a NUL-terminated path.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(p.as_ptr(), &mut s) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    let magic = s.f_type as i64;
    [
        (0xEF53, "ext4"),
        (0x5846_5342, "xfs"),
        (0x0102_1994, "tmpfs"),
        (0x9123_683E, "btrfs"),
        (0x794C_7630, "overlayfs"),
        (0x2FC1_2FC1, "zfs"),
    ]
    .into_iter()
    .find(|(m, _)| *m == magic)
    .map(|(_, name)| name)
}

/// The config file's default and where `check-config` reads it from.
pub fn default_path() -> PathBuf {
    PathBuf::from(hadar_request::config::DEFAULT_PATH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::NodeState;
    use std::collections::HashMap;

    /// A fake machine: the paths it has, with their facts.
    #[derive(Default)]
    struct Fake(HashMap<PathBuf, PathFacts>);

    impl Fake {
        fn dir(mut self, p: &str, mode: u32) -> Self {
            let facts = PathFacts {
                dir: true,
                mode,
                writable: true,
                executable: true,
                local_fs: None,
            };
            self.0.insert(p.into(), facts);
            self
        }
        fn exe(mut self, p: &str) -> Self {
            let facts = PathFacts {
                dir: false,
                mode: 0o755,
                writable: false,
                executable: true,
                local_fs: None,
            };
            self.0.insert(p.into(), facts);
            self
        }
    }

    impl Probe for Fake {
        fn facts(&self, path: &Path) -> Option<PathFacts> {
            self.0.get(path).cloned()
        }
    }

    fn machine() -> Fake {
        Fake::default()
            .dir("/", 0o755)
            .dir("/var/lib", 0o755)
            .dir("/run", 0o755)
    }

    fn node(name: &str, gpus: &[(&str, u32)], partitions: &[&str]) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            state: NodeState::parse("IDLE"),
            gpus: gpus.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
            partitions: partitions.iter().map(|p| p.to_string()).collect(),
            features: Vec::new(),
            free: Default::default(),
        }
    }

    fn cluster() -> Vec<NodeInfo> {
        vec![
            node("n1", &[("v100", 4)], &["gpu"]),
            node("n2", &[("V100M32", 4)], &["gpu"]),
            node("n3", &[("a100_80g", 2), ("k80", 2)], &["gpu", "old"]),
        ]
    }

    /// Each finding's line and key, in the report's order.
    fn lines_and_keys(r: &Report) -> Vec<(Option<usize>, &str)> {
        r.findings
            .iter()
            .map(|f| (f.line, f.key.as_str()))
            .collect()
    }

    const GOOD: &str =
        "[slurm]\nmanaged_partitions = [\"gpu\", \"old\"]\ndefault_partition = \"gpu\"\n";

    #[test]
    fn a_good_file_has_no_finding_and_every_type_is_rated() {
        let r = check("h.toml", GOOD, Live::Nodes(&cluster()), &machine());
        assert_eq!(r.findings, vec![], "{r:?}");
        let rated: Vec<(&str, u32, usize, String)> = r
            .types
            .iter()
            .map(|t| (t.name.as_str(), t.gpus, t.nodes, t.rating.words()))
            .collect();
        assert_eq!(rated.len(), 4);
        assert!(
            rated.contains(&(
                "V100M32",
                4,
                1,
                "estimated from the v100-32gb datasheet".into()
            )),
            "{rated:?}"
        );
        assert!(
            rated.contains(&(
                "a100_80g",
                2,
                1,
                "estimated from the a100-80gb datasheet".into()
            )),
            "{rated:?}"
        );
        assert!(
            rated.contains(&("v100", 4, 1, "measured: Gavel's table, column v100".into())),
            "{rated:?}"
        );
    }

    #[test]
    fn unknown_partitions_are_named_on_their_line() {
        let text = "[slurm]\nmanaged_partitions = [\n  \"gpu\",\n  \"nosuch\",\n]\ndefault_partition = \"gpx\"\n";
        let r = check("h.toml", text, Live::Nodes(&cluster()), &machine());
        let found = lines_and_keys(&r);
        assert_eq!(
            found,
            vec![
                (Some(4), "slurm.managed_partitions"),
                (Some(6), "slurm.default_partition")
            ]
        );
        assert!(
            r.findings[0].message.contains("\"nosuch\"")
                && r.findings[0].message.contains("gpu, old")
        );
        assert!(r.has_problems());
    }

    #[test]
    fn an_unknown_gpu_type_is_a_problem_until_gpu_types_describes_it() {
        let mut nodes = cluster();
        nodes.push(node("n8", &[("zq8", 2)], &["cpu"]));
        nodes.push(node("n9", &[("zq7", 8)], &["gpu"]));
        let r = check("h.toml", GOOD, Live::Nodes(&nodes), &machine());
        assert_eq!(r.findings.len(), 1, "only zq7 is scheduled: {r:?}");
        assert!(
            r.types
                .iter()
                .any(|t| t.name == "zq8" && t.rating == Rating::Unknown)
        );
        assert!(
            r.findings[0]
                .message
                .contains("\"zq7\" (8 GPUs on 1 nodes)")
        );
        let text =
            format!("{GOOD}[gpu_types]\nzq7 = {{ model = \"a100\", speed = 1.5 }}\nzz = \"k80\"\n");
        let r = check("h.toml", &text, Live::Nodes(&nodes), &machine());
        let zq7 = r.types.iter().find(|t| t.name == "zq7").unwrap();
        assert_eq!(zq7.rating.words(), "estimated as 1.5 x a100 ([gpu_types])");
        assert!(!r.has_problems(), "{r:?}");
        assert_eq!(r.findings.len(), 1);
        assert_eq!(
            (r.findings[0].line, r.findings[0].severity),
            (Some(6), Severity::Warning)
        );
        let text = format!("{GOOD}[gpu_types]\nzq7 = \"rtx9090\"\n");
        let r = check("h.toml", &text, Live::Nodes(&nodes), &machine());
        let bad = r
            .findings
            .iter()
            .find(|f| f.message.contains("rtx9090"))
            .unwrap();
        assert!(
            bad.message.contains("gpu_types.zq7") && bad.line == Some(5),
            "{r:?}"
        );
    }

    #[test]
    fn a_broken_file_is_one_problem_at_its_line() {
        let r = check(
            "h.toml",
            "[slurm]\n\n[sidecar]\nround_second = 3\n",
            Live::Nodes(&cluster()),
            &machine(),
        );
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].line, Some(4));
        assert!(r.findings[0].message.contains("round_second"));
        assert_eq!(r.types.len(), 4, "the types are still listed");
    }

    #[test]
    fn paths_are_checked_for_what_the_daemon_needs() {
        let text = "[sidecar]\nstate = \"/nowhere/x/state.db\"\nsocket = \"/tmp/hadar.sock\"\npolicy = \"hadare\"\nslurm_bin_dir = \"/opt/slurm/bin\"\n[fork]\nrunner = \"/usr/libexec/hadar/hadar-fork-run\"\nspool = \"/srv/spool/fork\"\n";
        let fake = machine()
            .dir("/tmp", 0o1777)
            .exe("/opt/slurm/bin/scontrol")
            .exe("/opt/slurm/bin/scancel")
            .exe("/opt/slurm/bin/sbatch");
        let mut fake = fake;
        fake.0.get_mut(Path::new("/")).unwrap().writable = false;
        let r = check("h.toml", text, Live::Nodes(&cluster()), &fake);
        let found = lines_and_keys(&r);
        assert_eq!(
            found,
            vec![
                (Some(2), "sidecar.state"),
                (Some(3), "sidecar.socket"),
                (Some(7), "fork.runner"),
                (Some(8), "fork.spool"),
            ],
            "{r:?}"
        );
        assert!(r.findings[1].message.contains("mode 1777"));
        assert_eq!(r.findings[3].severity, Severity::Warning, "{r:?}");
        assert!(
            r.findings[3].message.contains("every compute node must"),
            "{r:?}"
        );
        let fake = machine()
            .dir("/srv/spool/fork", 0o755)
            .exe("/usr/libexec/hadar/hadar-fork-run")
            .dir("/tmp", 0o755)
            .dir("/nowhere", 0o755);
        let mut fake = fake;
        fake.0
            .get_mut(Path::new("/srv/spool/fork"))
            .unwrap()
            .local_fs = Some("ext4");
        let r = check("h.toml", text, Live::Nodes(&cluster()), &fake);
        let found: Vec<(&str, Severity)> = r
            .findings
            .iter()
            .map(|f| (f.key.as_str(), f.severity))
            .collect();
        assert_eq!(
            found,
            vec![
                ("sidecar.slurm_bin_dir", Severity::Problem),
                ("sidecar.slurm_bin_dir", Severity::Problem),
                ("sidecar.slurm_bin_dir", Severity::Problem),
                ("fork.spool", Severity::Problem),
            ],
            "{r:?}"
        );
        assert!(r.findings[3].message.contains("mode 755"), "{r:?}");
        let spool = fake.0.get_mut(Path::new("/srv/spool/fork")).unwrap();
        spool.mode = 0o41777;
        let r = check("h.toml", text, Live::Nodes(&cluster()), &fake);
        let spool_findings: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.key == "fork.spool")
            .collect();
        assert_eq!(spool_findings.len(), 1, "{r:?}");
        assert_eq!(spool_findings[0].severity, Severity::Warning);
        assert!(
            spool_findings[0]
                .message
                .contains("local file system (ext4)")
        );
    }

    #[test]
    fn without_slurm_the_file_is_still_checked() {
        let text = "[sidecar]\nstate = \"/nowhere/x/state.db\"\n[slurm]\nmanaged_partitions = [\"nosuch\"]\n";
        let mut fake = machine();
        fake.0.get_mut(Path::new("/")).unwrap().writable = false;
        let r = check(
            "h.toml",
            text,
            Live::Unreachable("slurmctld not responding"),
            &fake,
        );
        assert_eq!(
            lines_and_keys(&r),
            vec![(Some(2), "sidecar.state"), (None, "")],
            "the state path is named; the partition is not judged without the cluster: {r:?}"
        );
        assert!(r.findings[1].message.contains("slurmctld not responding"));
        assert!(r.has_problems());
    }
}
