//! A real Slurm test cluster on this one machine, for the integration tests and benchmarks
//! of the `job_submit/hadar` plugin.
//!
//! [`Testbed::start`] starts a private munged, one slurmctld and four slurmd (n1: 4 V100,
//! n2: 4 P100, n3: 4 K80, n4: 2 V100 + 2 K80; fake GPUs are symlinks to /dev/null) with all
//! state, logs and pid files in one scratch folder, and waits until every node is idle.
//! Dropping the [`Testbed`] stops every daemon by the PID in its pid file, also when a test
//! panics; [`Testbed::start`] first stops whatever a crashed earlier run left in the same
//! scratch folder.
//!
//! With [`Options::accounting`] it also starts a private MariaDB and slurmdbd (see the
//! `accounting` module).
//!
//! A testbed's ports are fixed (17000-17004, and 17005-17006 for slurmdbd and MariaDB with
//! accounting; or from `HADAR_TESTBED_PORT` for a second checkout working beside the first),
//! so only one testbed per port range can run at a time: a testbed holds a machine-wide lock
//! named after its port (an abstract Unix socket, which the kernel releases when the process
//! dies and which leaves nothing on disk) for its whole life, and a second one on the same
//! ports waits. Testbeds on different port ranges may run at once, also from one checkout
//! against different Slurm releases (`tests/run` runs the older releases' scenarios beside the
//! newest's): on a port range other than the default the scratch folder carries the port in
//! its name, and the plugin is built in a target folder of the release's own
//! ([`plugin_target_dir`]).

mod accounting;
pub use accounting::{dbd_port, mariadb_port};
pub mod bench;
pub mod nodes;
pub use nodes::NodeSpec;

use std::fmt;
use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The default TCP port of the test slurmctld; the slurmd of node `nK` listens on
/// `controller_port() + K` ([`slurmd_port`]).
pub const CONTROLLER_PORT: u16 = 17000;

/// The test slurmctld's TCP port: `HADAR_TESTBED_PORT` if set to a port number (so that two
/// checkouts on one machine can each run their testbed), else [`CONTROLLER_PORT`].
pub fn controller_port() -> u16 {
    std::env::var("HADAR_TESTBED_PORT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(CONTROLLER_PORT)
}

/// The TCP port of the slurmd of the node at `index` (0-based): the controller's port plus
/// its number for n1 to n4, then past slurmdbd's and MariaDB's ports (the controller's plus
/// 5 and 6) for the nodes of a large cluster.
pub fn slurmd_port(index: usize) -> u16 {
    let k = index as u16 + 1;
    controller_port() + if k <= 4 { k } else { k + 2 }
}

/// The test cluster's nodes and their GPUs: (node, [(type, count)]).
pub const NODES: [(&str, &[(&str, u32)]); 4] = [
    ("n1", &[("v100", 4)]),
    ("n2", &[("p100", 4)]),
    ("n3", &[("k80", 4)]),
    ("n4", &[("v100", 2), ("k80", 2)]),
];

/// Each node's features (`Features=`), in [`NODES`]' order, for jobs that ask for some with
/// `--constraint`: its GPU types, and `nvlink` on n1 alone.
pub const NODE_FEATURES: [&str; 4] = ["v100,nvlink", "p100", "k80", "v100,k80"];

/// The daemons a testbed starts, as their process names appear in `/proc/PID/comm`; `hadar`
/// is the playground's `hadar serve`, which writes its pid file beside Slurm's; slurmdbd and
/// mariadbd run when the testbed has accounting.
const DAEMONS: [&str; 6] = [
    "slurmctld",
    "slurmd",
    "munged",
    "hadar",
    "slurmdbd",
    "mariadbd",
];

/// What went wrong while starting or driving the testbed.
#[derive(Debug)]
pub enum TestbedError {
    /// A file operation failed.
    Io(String, std::io::Error),
    /// A command failed.
    Command(String),
    /// Something did not happen in time.
    Timeout(String),
}

impl fmt::Display for TestbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TestbedError::Io(what, e) => write!(f, "{what}: {e}"),
            TestbedError::Command(m) | TestbedError::Timeout(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for TestbedError {}

fn io<T>(what: impl Into<String>, r: std::io::Result<T>) -> Result<T, TestbedError> {
    r.map_err(|e| TestbedError::Io(what.into(), e))
}

/// Where the plugin comes from.
#[derive(Clone, Debug)]
pub enum Plugin {
    /// No plugin: `JobSubmitPlugins` is not set.
    None,
    /// Run the repository's `slurm-plugin/install.sh --plugin-dir <scratch>/plugins`
    /// (which builds the plugin) and enable it.
    InstallScript(PathBuf),
}

/// How to start a testbed.
#[derive(Clone, Debug)]
pub struct Options {
    /// The scratch folder holding all state; wiped at start. The tests' clusters ask for it
    /// through [`scratch_on_this_port`], so that runs on other ports keep apart; a folder a
    /// user named (the playground's) is used as named.
    pub scratch: PathBuf,
    /// The plugin to install and enable.
    pub plugin: Plugin,
    /// The content of `hadar.toml` (placed next to slurm.conf); `{scratch}` is replaced by the
    /// scratch folder.
    pub hadar_toml: String,
    /// The time zone (`TZ`) slurmctld and the slurmd run in, as a cluster outside UTC does;
    /// `None`: the test process's own.
    pub time_zone: Option<String>,
    /// The plugin reads the machine's configuration (`/etc/hadar/hadar.toml`, as on a real
    /// cluster: the package test) instead of the testbed's `hadar.toml`.
    pub machine_config: bool,
    /// Accounting: MariaDB and slurmdbd in the scratch folder, `priority/multifactor` with
    /// fair-share, associations, limits and QOS enforced (see the `accounting` module).
    pub accounting: bool,
    /// The nodes: the four of [`NODES`] unless a size was asked for ([`nodes::sized`]).
    pub nodes: Vec<NodeSpec>,
}

impl Options {
    /// A cluster in `scratch` ([`scratch_on_this_port`]) with this repository's plugin installed by its own install
    /// script (`slurm-plugin/install.sh`, as an admin would) and [`DEFAULT_HADAR_TOML`].
    pub fn installed(scratch: PathBuf) -> Options {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        Options {
            scratch: scratch_on_this_port(&scratch),
            plugin: Plugin::InstallScript(root.join("slurm-plugin/install.sh")),
            hadar_toml: DEFAULT_HADAR_TOML.to_string(),
            time_zone: None,
            machine_config: false,
            accounting: false,
            nodes: nodes::default_nodes(),
        }
    }
}

/// The Slurm installation the testbed runs: Debian's package, or a release built from source
/// by `tests/build-slurm` and selected by `tests/slurm-env`, which puts its programs first on
/// `PATH` and names its prefix in `HADAR_SLURM_PREFIX`.
pub fn slurm_prefix() -> Option<PathBuf> {
    std::env::var_os("HADAR_SLURM_PREFIX")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// The folder holding Slurm's own plugins for the selected installation.
pub fn slurm_plugin_dir() -> PathBuf {
    match slurm_prefix() {
        Some(prefix) => prefix.join("lib/slurm"),
        None => PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm"),
    }
}

/// Where `slurm-plugin/install.sh` builds the plugin for the Slurm on `PATH`: a cargo target
/// folder of each release's own (`target/plugin-26.05.3`), so that runs against two releases
/// at once neither rebuild the plugin at every testbed start nor install each other's library.
pub fn plugin_target_dir() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let release = slurm_release().unwrap_or_else(|| "unknown".to_string());
    root.join("target").join(format!("plugin-{release}"))
}

/// The plugin library `slurm-plugin/install.sh` built for the Slurm on `PATH`.
pub fn built_plugin() -> PathBuf {
    plugin_target_dir().join("release/libjob_submit_hadar.so")
}

/// The scratch folder a test cluster uses for `asked`: `asked` itself on the default ports,
/// and `asked` with the port appended on any other (`fork-testbed-17800`), so that test
/// clusters of one checkout on two port ranges never share, or clear, one folder.
pub fn scratch_on_this_port(asked: &Path) -> PathBuf {
    let port = controller_port();
    if port == CONTROLLER_PORT {
        return asked.to_path_buf();
    }
    let mut name = asked.file_name().unwrap_or_default().to_os_string();
    name.push(format!("-{port}"));
    asked.with_file_name(name)
}

/// The release of the Slurm the testbed runs (`26.05.3`), from `slurmctld -V`.
pub fn slurm_release() -> Option<String> {
    let out = Command::new("slurmctld").arg("-V").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().nth(1).map(str::to_string)
}

/// The (major, minor) of [`slurm_release`], e.g. (26, 5); (0, 0) when unknown.
pub fn slurm_series() -> (u32, u32) {
    slurm_release()
        .and_then(|r| {
            let mut parts = r.split('.');
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
        .unwrap_or((0, 0))
}

/// The Hadar configuration the tests use: partitions `gpu` (the default, all nodes) and `old`
/// (n3, n4: the K80 nodes) are managed, `cpu` (all nodes) is not; the sidecar socket lives in
/// the scratch folder.
pub const DEFAULT_HADAR_TOML: &str = r#"# hadar.toml of the Slurm test cluster
[slurm]
managed_partitions = ["gpu", "old"]
default_partition = "gpu"

[plugin]
notify_timeout_ms = 5

[sidecar]
socket = "{scratch}/run/hadar.sock"
"#;

/// A running test cluster. Dropping it stops every daemon.
pub struct Testbed {
    scratch: PathBuf,
    time_zone: Option<String>,
    machine_config: bool,
    accounting: bool,
    nodes: Vec<NodeSpec>,
    /// Output of the install command, if the plugin was installed.
    pub install_output: String,
    last_reconfigure: Instant,
    _lock: UnixListener,
}

/// The result of one `sbatch`.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// Whether sbatch exited with success.
    pub ok: bool,
    /// The job id it printed, if any.
    pub job_id: Option<u32>,
    /// sbatch's standard output.
    pub stdout: String,
    /// sbatch's standard error.
    pub stderr: String,
}

impl Testbed {
    /// Starts a testbed: waits for the machine-wide lock, stops leftovers of an earlier run in
    /// the same scratch folder, writes the configuration, installs the plugin if asked, starts
    /// munged, slurmctld and the four slurmd, and waits until all nodes are idle.
    pub fn start(options: Options) -> Result<Testbed, TestbedError> {
        let lock = acquire_lock(Duration::from_secs(900))?;
        let scratch = options.scratch.clone();
        stop_daemons(&scratch.join("run"));
        let last_slurmd = slurmd_port(options.nodes.len().saturating_sub(1)) - controller_port();
        check_ports_free(if options.accounting {
            last_slurmd.max(6)
        } else {
            last_slurmd
        })?;
        if scratch.exists() {
            io(
                format!("removing {}", scratch.display()),
                std::fs::remove_dir_all(&scratch),
            )?;
        }
        for sub in [
            "etc", "munge", "state", "spool", "run", "log", "plugins", "jobs", "mysql",
        ] {
            io(
                "creating the scratch folder",
                std::fs::create_dir_all(scratch.join(sub)),
            )?;
        }
        for node in &options.nodes {
            let dir = scratch.join("dev").join(&node.name);
            io("creating fake GPU devices", std::fs::create_dir_all(&dir))?;
            for i in 0..node.gpu_count() {
                io(
                    "creating fake GPU devices",
                    std::os::unix::fs::symlink("/dev/null", dir.join(format!("gpu{i}"))),
                )?;
            }
        }
        let mut testbed = Testbed {
            scratch,
            time_zone: options.time_zone.clone(),
            machine_config: options.machine_config,
            accounting: options.accounting,
            nodes: options.nodes.clone(),
            install_output: String::new(),
            last_reconfigure: Instant::now(),
            _lock: lock,
        };
        let plugins = match &options.plugin {
            Plugin::None => None,
            Plugin::InstallScript(_) => Some("hadar"),
        };
        testbed.write_slurm_conf(plugins)?;
        testbed.write_file("etc/gres.conf", &testbed.gres_conf())?;
        testbed.write_hadar_toml(&options.hadar_toml)?;
        if let Plugin::InstallScript(script) = &options.plugin {
            let plugin_dir = testbed.path("plugins");
            let out = testbed.run(
                Command::new(script)
                    .arg("--plugin-dir")
                    .arg(&plugin_dir)
                    .env("CARGO_TARGET_DIR", plugin_target_dir()),
            )?;
            if !out.status.success() {
                return Err(TestbedError::Command(format!(
                    "{} failed: {}{}",
                    script.display(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            testbed.install_output = String::from_utf8_lossy(&out.stdout).into_owned();
        }
        testbed.start_munge()?;
        if testbed.accounting {
            testbed.start_accounting()?;
        }
        let conf = testbed.path("etc/slurm.conf");
        testbed.checked(testbed.daemon("slurmctld").arg("-c").arg("-f").arg(&conf))?;
        for node in &testbed.nodes {
            testbed.start_node(&node.name)?;
        }
        // About 25 ms per node was measured for 128 nodes to come up; a minute covers the
        // four-node cluster and leaves room for a loaded machine.
        let up = Duration::from_secs(60) + Duration::from_millis(250) * testbed.nodes.len() as u32;
        testbed.wait_nodes_idle(up)?;
        testbed.last_reconfigure = Instant::now();
        Ok(testbed)
    }

    /// Its nodes.
    pub fn nodes(&self) -> &[NodeSpec] {
        &self.nodes
    }

    /// A path inside the scratch folder.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.scratch.join(relative)
    }

    /// The scratch folder.
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    fn write_file(&self, relative: &str, text: &str) -> Result<(), TestbedError> {
        let path = self.path(relative);
        io(
            format!("writing {}", path.display()),
            std::fs::write(&path, text),
        )
    }

    /// Writes `hadar.toml` next to slurm.conf (`{scratch}` replaced by the scratch folder),
    /// where slurmctld's `HADAR_CONFIG` points. Takes effect at the next [`Testbed::reconfigure`].
    pub fn write_hadar_toml(&self, text: &str) -> Result<(), TestbedError> {
        self.write_file(
            "etc/hadar.toml",
            &text.replace("{scratch}", &self.scratch.display().to_string()),
        )
    }

    /// Writes slurm.conf with `JobSubmitPlugins` set to `plugins` (or unset).
    pub fn write_slurm_conf(&self, plugins: Option<&str>) -> Result<(), TestbedError> {
        let c = self.scratch.display();
        let port = controller_port();
        let slurm_plugins = slurm_plugin_dir().display().to_string();
        let mut conf = format!(
            "ClusterName=hadartest
SlurmctldHost=localhost
SlurmctldPort={port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={c}/munge/munge.socket
StateSaveLocation={c}/state
SlurmdSpoolDir={c}/spool/%n
SlurmctldPidFile={c}/run/slurmctld.pid
SlurmdPidFile={c}/run/slurmd-%n.pid
SlurmctldLogFile={c}/log/slurmctld.log
SlurmdLogFile={c}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobCompType=jobcomp/filetxt
JobCompLoc={c}/log/jobcomp.txt
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=20
MinJobAge=600
MaxJobCount=100000
Licenses=matlab:2
PluginDir={c}/plugins:{slurm_plugins}
"
        );
        if let Some(p) = plugins {
            conf.push_str(&format!("JobSubmitPlugins={p}\n"));
        }
        conf.push_str(&if self.accounting {
            accounting::slurm_conf_lines(&self.scratch, &nodes::gpu_types(&self.nodes))
        } else {
            "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
                .to_string()
        });
        for (i, node) in self.nodes.iter().enumerate() {
            let gres: Vec<String> = node
                .gpus
                .iter()
                .map(|(t, n)| format!("gpu:{t}:{n}"))
                .collect();
            conf.push_str(&format!(
                "NodeName={} NodeHostname=localhost NodeAddr=127.0.0.1 Port={} CPUs=8 RealMemory=4000 Gres={} Features={}\n",
                node.name,
                slurmd_port(i),
                gres.join(","),
                node.features
            ));
        }
        // With accounting, usage (fair-share, `sshare`'s RawUsage) is billed in GPU-seconds,
        // as on a GPU cluster, rather than Slurm's default of CPU-seconds.
        let billing = if self.accounting {
            " TRESBillingWeights=GRES/gpu=1"
        } else {
            ""
        };
        // `old`: the nodes with K80s (n3 and n4 of the four-node cluster).
        let names = |keep: &dyn Fn(&NodeSpec) -> bool| {
            let names: Vec<&str> = self
                .nodes
                .iter()
                .filter(|n| keep(n))
                .map(|n| n.name.as_str())
                .collect();
            names.join(",")
        };
        let all = names(&|_| true);
        let old = names(&|n| n.gpus.iter().any(|(t, _)| t == "k80"));
        for line in [
            format!("PartitionName=gpu Nodes={all} Default=YES"),
            format!("PartitionName=cpu Nodes={all}"),
            format!("PartitionName=old Nodes={old}"),
        ] {
            conf.push_str(&format!("{line} MaxTime=INFINITE State=UP{billing}\n"));
        }
        self.write_file("etc/slurm.conf", &conf)
    }

    fn gres_conf(&self) -> String {
        let mut text = String::from("AutoDetect=off\n");
        for node in &self.nodes {
            let mut first = 0;
            for (t, n) in &node.gpus {
                let files = format!(
                    "{}/dev/{}/gpu[{first}-{}]",
                    self.scratch.display(),
                    node.name,
                    first + n - 1
                );
                text.push_str(&format!(
                    "NodeName={} Name=gpu Type={t} File={files}\n",
                    node.name
                ));
                first += n;
            }
        }
        text
    }

    fn start_munge(&self) -> Result<(), TestbedError> {
        let key = self.path("munge/munge.key");
        let mut bytes = vec![0u8; 1024];
        let mut urandom = io("opening /dev/urandom", std::fs::File::open("/dev/urandom"))?;
        io(
            "reading /dev/urandom",
            std::io::Read::read_exact(&mut urandom, &mut bytes),
        )?;
        io("writing the munge key", std::fs::write(&key, &bytes))?;
        io(
            "protecting the munge key",
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)),
        )?;
        let socket = self.path("munge/munge.socket");
        self.checked(
            Command::new("munged")
                .arg("--force")
                .arg(format!("--socket={}", socket.display()))
                .arg(format!("--key-file={}", key.display()))
                .arg(format!(
                    "--pid-file={}",
                    self.path("run/munged.pid").display()
                ))
                .arg(format!(
                    "--log-file={}",
                    self.path("log/munged.log").display()
                ))
                .arg(format!(
                    "--seed-file={}",
                    self.path("munge/munged.seed").display()
                )),
        )?;
        wait_for(Duration::from_secs(10), "munged's socket", || {
            socket.exists()
        })
    }

    fn wait_nodes_idle(&self, timeout: Duration) -> Result<(), TestbedError> {
        let mut last = String::new();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(out) =
                self.run(Command::new("sinfo").args(["-h", "-N", "-p", "gpu", "-o", "%N %T"]))
            {
                last = String::from_utf8_lossy(&out.stdout).into_owned();
                let idle = last.lines().filter(|l| l.ends_with(" idle")).count();
                if idle == self.nodes.len() {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(TestbedError::Timeout(format!(
            "nodes not idle after {timeout:?}; last sinfo: {last}; see {}",
            self.path("log").display()
        )))
    }

    /// A Slurm client command with `SLURM_CONF` pointing at the testbed, printing times in
    /// UTC (`TZ=UTC`), as the tests read them, whatever zone the cluster runs in.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.path("etc/slurm.conf"))
            .env("TZ", "UTC")
            .current_dir(self.path("jobs"));
        c
    }

    fn run(&self, cmd: &mut Command) -> Result<Output, TestbedError> {
        cmd.env("SLURM_CONF", self.path("etc/slurm.conf"))
            .stdin(Stdio::null());
        io(format!("running {cmd:?}"), cmd.output())
    }

    fn checked(&self, cmd: &mut Command) -> Result<Output, TestbedError> {
        let out = self.run(cmd)?;
        if !out.status.success() {
            return Err(TestbedError::Command(format!(
                "{cmd:?} failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(out)
    }

    /// Runs `sbatch ARGS`, feeding `script` on standard input when given.
    pub fn sbatch(&self, args: &[&str], script: Option<&str>) -> Submitted {
        let mut cmd = self.command("sbatch");
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if script.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let out = cmd.spawn().and_then(|mut child| {
            if let (Some(text), Some(mut stdin)) = (script, child.stdin.take()) {
                stdin.write_all(text.as_bytes())?;
            }
            child.wait_with_output()
        });
        match out {
            Ok(out) => {
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                let job_id = stdout
                    .trim()
                    .strip_prefix("Submitted batch job ")
                    .and_then(|s| s.trim().parse().ok());
                Submitted {
                    ok: out.status.success(),
                    job_id,
                    stdout,
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                }
            }
            Err(e) => Submitted {
                ok: false,
                job_id: None,
                stdout: String::new(),
                stderr: format!("cannot run sbatch: {e}"),
            },
        }
    }

    /// Runs a Slurm client command and returns its standard output (an error if it fails).
    pub fn client(&self, program: &str, args: &[&str]) -> Result<String, TestbedError> {
        let out = self.checked(self.command(program).args(args))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `scontrol show job ID`, parsed. For a het job leader, scontrol shows every component;
    /// only the record of job `id` itself is kept.
    pub fn job(&self, id: u32) -> Result<JobInfo, TestbedError> {
        let text = self.client("scontrol", &["show", "job", &id.to_string()])?;
        Ok(JobInfo::only(&text, id))
    }

    /// Waits until job `id` reaches one of `states` (e.g. `COMPLETED`), returning its info.
    pub fn wait_job(
        &self,
        id: u32,
        states: &[&str],
        timeout: Duration,
    ) -> Result<JobInfo, TestbedError> {
        let deadline = Instant::now() + timeout;
        loop {
            let info = self.job(id)?;
            if info
                .field("JobState")
                .is_some_and(|s| states.contains(&s.as_str()))
            {
                return Ok(info);
            }
            if Instant::now() >= deadline {
                return Err(TestbedError::Timeout(format!(
                    "job {id} not in {states:?} after {timeout:?}: {}",
                    info.0
                )));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs `scontrol reconfigure`. slurmctld stamps its re-read configuration with a time in
    /// whole seconds, which the plugin watches; so a reconfigure is never issued within the
    /// same second as the previous one or as the start.
    pub fn reconfigure(&mut self) -> Result<(), TestbedError> {
        let since = self.last_reconfigure.elapsed();
        if since < Duration::from_millis(1100) {
            std::thread::sleep(Duration::from_millis(1100) - since);
        }
        self.client("scontrol", &["reconfigure"])?;
        self.last_reconfigure = Instant::now();
        Ok(())
    }

    /// slurmctld's log so far.
    pub fn controller_log(&self) -> String {
        std::fs::read_to_string(self.path("log/slurmctld.log")).unwrap_or_default()
    }

    /// Restarts slurmctld as an admin would (`systemctl restart slurmctld`): SIGTERM, wait for
    /// it to exit, start it again on the same state (no `-c`), wait until it answers.
    pub fn restart_controller(&mut self) -> Result<(), TestbedError> {
        self.stop_controller()?;
        self.start_controller()
    }

    /// Stops slurmctld as `systemctl stop slurmctld` would: SIGTERM, then waits for it to
    /// exit. Running jobs go on; clients fail until [`Testbed::start_controller`].
    pub fn stop_controller(&mut self) -> Result<(), TestbedError> {
        let pid_file = self.path("run/slurmctld.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .ok_or_else(|| TestbedError::Command(format!("no pid in {}", pid_file.display())))?;
        if is_our_daemon(pid) {
            // SAFETY: kill(2) on the pid of our slurmctld.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        wait_for(Duration::from_secs(30), "slurmctld to stop", || {
            !is_our_daemon(pid)
        })
    }

    /// Starts slurmctld again unless it answers `scontrol ping`.
    pub fn ensure_controller(&mut self) -> Result<(), TestbedError> {
        let up = self
            .run(Command::new("scontrol").arg("ping"))
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"));
        if up { Ok(()) } else { self.start_controller() }
    }

    /// Starts slurmctld again on its saved state (no `-c`) and waits until it answers.
    pub fn start_controller(&mut self) -> Result<(), TestbedError> {
        let conf = self.path("etc/slurm.conf");
        self.checked(self.daemon("slurmctld").arg("-f").arg(&conf))?;
        wait_for(Duration::from_secs(30), "slurmctld to answer", || {
            self.run(Command::new("scontrol").arg("ping"))
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"))
        })?;
        self.last_reconfigure = Instant::now();
        Ok(())
    }

    /// Kills node `node` as a crash would: SIGKILL to its slurmd, to the slurmstepd of every
    /// job running there and to those jobs' processes. slurmctld notices only when the node
    /// stops answering (`SlurmdTimeout`), marks it down and requeues its batch jobs.
    pub fn kill_node(&self, node: &str) -> Result<(), TestbedError> {
        let jobs = self.client("squeue", &["-h", "-w", node, "-o", "%A"])?;
        let ids: Vec<String> = jobs.split_whitespace().map(str::to_string).collect();
        let pid_file = self.path(&format!("run/slurmd-{node}.pid"));
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|&p| is_our_daemon(p))
        {
            // SAFETY: kill(2) on the pid of this node's slurmd.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let node_mark = format!("SLURMD_NODENAME={node}");
        for process in testbed_processes(&self.scratch)? {
            let stepd_of_ours = process.cmdline.starts_with("slurmstepd:")
                && ids
                    .iter()
                    .any(|id| process.cmdline.contains(&format!("[{id}.")));
            if stepd_of_ours || process.has_env(&node_mark) {
                // SAFETY: kill(2) on a slurmstepd or job process of the node being killed.
                unsafe { libc::kill(process.pid, libc::SIGKILL) };
            }
        }
        Ok(())
    }

    /// Starts node `node`'s slurmd again (after [`Testbed::kill_node`]); with
    /// `ReturnToService=2` the node returns to service once it registers.
    pub fn start_node(&self, node: &str) -> Result<(), TestbedError> {
        let conf = self.path("etc/slurm.conf");
        self.checked(
            self.daemon("slurmd")
                .arg("-N")
                .arg(node)
                .arg("-f")
                .arg(&conf),
        )
        .map(|_| ())
    }

    /// A Slurm daemon (slurmctld, slurmd) to start, in the testbed's time zone, with the
    /// plugin pointed at the testbed's `hadar.toml` (never at a machine-wide
    /// `/etc/hadar/hadar.toml` an installed hadar may have left).
    fn daemon(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        if !self.machine_config {
            c.env("HADAR_CONFIG", self.path("etc/hadar.toml"));
        }
        if let Some(tz) = &self.time_zone {
            c.env("TZ", tz);
        }
        c
    }

    /// The time zone the testbed's Slurm daemons run in, if not the test process's.
    pub fn time_zone(&self) -> Option<&str> {
        self.time_zone.as_deref()
    }

    /// Leaves the cluster running when this value goes away (the playground's `up`): its
    /// daemons outlive the process, and [`stop_daemons`] on its `run` folder stops them.
    pub fn keep_running(self) {
        std::mem::forget(self);
    }

    /// Cancels every job (`scancel --user=root`; only the tests submit here).
    pub fn cancel_all(&self) -> Result<(), TestbedError> {
        self.client("scancel", &["--user=root"]).map(|_| ())
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        stop_daemons(&self.path("run"));
        stop_strays(&self.scratch);
    }
}

/// Stops daemons of the testbed in `scratch` that no pid file named when
/// [`stop_daemons`] read them: a slurmctld handing over to a new process after a
/// reconfigure may write its pid file only after that reading, and the new process then
/// outlived the testbed and held its ports (seen on 26.05). Found by process (their
/// working folder or `SLURM_CONF` is the testbed's), until two scans half a second apart
/// find none.
fn stop_strays(scratch: &Path) {
    let mut quiet = 0;
    for _ in 0..40 {
        let strays: Vec<i32> = testbed_processes(scratch)
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.pid)
            .filter(|&pid| is_our_daemon(pid))
            .collect();
        if strays.is_empty() {
            quiet += 1;
            if quiet == 2 {
                return;
            }
        } else {
            quiet = 0;
            for pid in strays {
                // SAFETY: kill(2) on a daemon of this testbed (checked above).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The text of `scontrol show job`.
#[derive(Debug, Clone)]
pub struct JobInfo(pub String);

impl JobInfo {
    /// The record of job `id` out of `scontrol show job` text holding one or more records
    /// (each starts with a `JobId=` line); the whole text if none matches.
    pub fn only(text: &str, id: u32) -> JobInfo {
        let head = format!("JobId={id} ");
        let mut records: Vec<String> = Vec::new();
        for line in text.lines() {
            if line.starts_with("JobId=") || records.is_empty() {
                records.push(String::new());
            }
            if let Some(r) = records.last_mut() {
                r.push_str(line);
                r.push('\n');
            }
        }
        let found = records.into_iter().find(|r| r.starts_with(&head));
        JobInfo(found.unwrap_or_else(|| text.to_string()))
    }

    /// A TRES field (`TresPerNode`, `TresPerJob`) in one spelling: 22.05 writes
    /// `gres:gpu:v100:1`, later releases `gres/gpu:v100:1`; this gives the latter.
    pub fn gres_field(&self, key: &str) -> Option<String> {
        self.field(key).map(|v| v.replace("gres:", "gres/"))
    }

    /// The value of `Key=` (for `Comment`, `AdminComment` and `Command` the rest of the line,
    /// since those may contain spaces; trailing spaces trimmed). `None` if absent.
    pub fn field(&self, key: &str) -> Option<String> {
        let needle = format!("{key}=");
        for line in self.0.lines() {
            let mut start = 0;
            while let Some(pos) = line[start..].find(&needle) {
                let at = start + pos;
                if at == 0 || line.as_bytes()[at - 1] == b' ' {
                    let value = &line[at + needle.len()..];
                    let value = if matches!(key, "Comment" | "AdminComment" | "Command") {
                        value.trim_end()
                    } else {
                        value.split(' ').next().unwrap_or("")
                    };
                    return Some(value.to_string());
                }
                start = at + needle.len();
            }
        }
        None
    }
}

/// A sidecar that is alive but stuck: it listens on the socket and never accepts, and its
/// listen backlog is full, so every further connect finds no room (EAGAIN). This is the case
/// where the plugin must wait at most `plugin.notify_timeout_ms` and then give up.
pub struct StuckSidecar {
    _listener: UnixListener,
    _queued: Vec<std::os::fd::OwnedFd>,
    path: PathBuf,
}

impl StuckSidecar {
    /// Binds `path` and fills the listener's backlog with non-blocking connections.
    pub fn start(path: &Path) -> Result<StuckSidecar, TestbedError> {
        use std::os::fd::FromRawFd;
        let _ = std::fs::remove_file(path);
        let listener = io(
            format!("binding {}", path.display()),
            UnixListener::bind(path),
        )?;
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (dst, src) in addr
            .sun_path
            .iter_mut()
            .zip(path.as_os_str().as_encoded_bytes())
        {
            *dst = *src as libc::c_char;
        }
        let mut queued = Vec::new();
        loop {
            // SAFETY: plain socket/connect calls on a descriptor owned at once.
            let fd = unsafe {
                libc::socket(
                    libc::AF_UNIX,
                    libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                    0,
                )
            };
            if fd < 0 {
                return Err(TestbedError::Io(
                    "socket".into(),
                    std::io::Error::last_os_error(),
                ));
            }
            let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            let rc = unsafe {
                libc::connect(
                    fd,
                    (&raw const addr).cast::<libc::sockaddr>(),
                    std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EAGAIN) {
                    break;
                }
                return Err(TestbedError::Io(
                    "filling the stuck sidecar's backlog".into(),
                    e,
                ));
            }
            queued.push(owned);
            if queued.len() > 100_000 {
                return Err(TestbedError::Command(
                    "the listen backlog never filled".into(),
                ));
            }
        }
        Ok(StuckSidecar {
            _listener: listener,
            _queued: queued,
            path: path.to_path_buf(),
        })
    }
}

impl Drop for StuckSidecar {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Takes the machine-wide testbed lock, waiting up to `timeout` for another testbed to end.
fn acquire_lock(timeout: Duration) -> Result<UnixListener, TestbedError> {
    let addr = io(
        "making the lock address",
        SocketAddr::from_abstract_name(format!("hadar-slurm-testbed-lock-{}", controller_port())),
    )?;
    let deadline = Instant::now() + timeout;
    let mut told = false;
    loop {
        match UnixListener::bind_addr(&addr) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                if !told {
                    eprintln!(
                        "slurm testbed: another test cluster is running on this machine; waiting for it to end"
                    );
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(TestbedError::Io("taking the testbed lock".into(), e)),
        }
    }
}

/// Fails if Slurm's test ports are taken (by a cluster this harness did not start).
/// `count`: the ports after the controller's that the testbed uses.
fn check_ports_free(count: u16) -> Result<(), TestbedError> {
    // A testbed stopped a moment ago (the previous test binary's) may still be letting go of
    // its ports: 26.05's slurmd and its slurmstepd take a few seconds to exit.
    let deadline = Instant::now() + Duration::from_secs(45);
    let first = controller_port();
    loop {
        let taken = (first..=first + count).find_map(|port| {
            std::net::TcpListener::bind(("0.0.0.0", port))
                .err()
                .map(|e| (port, e))
        });
        match taken {
            None => return Ok(()),
            Some(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(250)),
            Some((port, e)) => {
                return Err(TestbedError::Command(format!(
                    "TCP port {port} is taken ({e}): another Slurm is running on the test ports; stop it (`ss -ltnp 'sport = :{port}'` names it)"
                )));
            }
        }
    }
}

/// Stops every daemon whose pid file is in `run_dir`: SIGTERM to all at once, then waits for
/// them to exit, SIGKILL after 15 s. A pid whose process is not one of our daemons (a
/// recycled pid) is left alone. The pid files are read again until none names a live daemon:
/// from 23.11 on, a slurmd or slurmctld that was reconfiguring hands over to a new process,
/// which writes its own pid after the first reading.
pub fn stop_daemons(run_dir: &Path) {
    for _ in 0..4 {
        let pids = live_daemons(run_dir);
        if pids.is_empty() {
            return;
        }
        for &pid in &pids {
            // SAFETY: kill(2) on a pid we checked is one of our daemons.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && pids.iter().any(|&p| is_our_daemon(p)) {
            std::thread::sleep(Duration::from_millis(100));
        }
        for pid in pids.into_iter().filter(|&p| is_our_daemon(p)) {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A process that belongs to the testbed in a scratch folder.
struct TestbedProcess {
    pid: i32,
    cmdline: String,
    environ: Vec<u8>,
}

impl TestbedProcess {
    fn has_env(&self, key_value: &str) -> bool {
        self.environ
            .split(|b| *b == 0)
            .any(|kv| kv == key_value.as_bytes())
    }
}

/// The processes of the testbed in `scratch`, this one excepted. Other checkouts' testbeds
/// use the same node names and job ids: only processes that carry this testbed's SLURM_CONF
/// (slurmd is started with it, and passes it to the jobs, and on 22.05 to its slurmstepd) or
/// run in its scratch folder (26.05's slurmstepd clears its environment) are ours.
fn testbed_processes(scratch: &Path) -> Result<Vec<TestbedProcess>, TestbedError> {
    let conf_mark = format!("SLURM_CONF={}", scratch.join("etc/slurm.conf").display());
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in io("listing /proc", std::fs::read_dir("/proc"))?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let process = TestbedProcess {
            pid,
            cmdline: String::from_utf8_lossy(&cmdline).into_owned(),
            environ: std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default(),
        };
        let in_scratch = std::fs::read_link(format!("/proc/{pid}/cwd"))
            .is_ok_and(|cwd| cwd.starts_with(scratch));
        if in_scratch || process.has_env(&conf_mark) {
            found.push(process);
        }
    }
    Ok(found)
}

/// Kills (SIGKILL) every process left of the testbed in `scratch` once its daemons are
/// stopped: slurmstepd and the jobs they ran, which outlive a stopped slurmd.
pub fn kill_leftovers(scratch: &Path) -> Result<(), TestbedError> {
    for process in testbed_processes(scratch)? {
        // SAFETY: kill(2) on a process of this testbed.
        unsafe { libc::kill(process.pid, libc::SIGKILL) };
    }
    Ok(())
}

/// The pids in `run_dir`'s pid files that are live daemons of ours.
fn live_daemons(run_dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pid"))
        .filter_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<i32>().ok())
        .filter(|&pid| pid > 1 && is_our_daemon(pid))
        .collect()
}

/// Whether `pid` is alive (not a zombie) and runs one of the testbed's daemons.
fn is_our_daemon(pid: i32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let zombie = stat
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('Z'));
    DAEMONS.contains(&comm.trim()) && !zombie
}

fn wait_for(
    timeout: Duration,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<(), TestbedError> {
    let deadline = Instant::now() + timeout;
    while !ready() {
        if Instant::now() >= deadline {
            return Err(TestbedError::Timeout(format!(
                "{what} not ready after {timeout:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A named scenario that runs against the test cluster.
pub type Scenario = (&'static str, fn(&mut Testbed));

/// Picks the scenarios a test binary was asked for, from libtest-style arguments: names are
/// substring filters, `--skip NAME` leaves matching scenarios out, `--list` asks for the
/// list only; libtest's other flags (`--test-threads N`, `--format F`, ...) are accepted and
/// ignored, so `cargo test` and `cargo nextest` can drive these `harness = false` binaries.
/// Returns whether only a list was asked for, and the selected scenarios in their order.
pub fn select_scenarios(
    scenarios: &[Scenario],
    args: impl Iterator<Item = String>,
) -> (bool, Vec<&Scenario>) {
    let mut filters = Vec::new();
    let mut skips = Vec::new();
    let mut list = false;
    let mut args = args;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--list" => list = true,
            "--skip" => skips.extend(args.next()),
            "--test-threads" | "--format" | "--color" | "-Z" => {
                args.next();
            }
            s if s.starts_with('-') => {}
            s => filters.push(s.to_string()),
        }
    }
    let selected = scenarios
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .filter(|(name, _)| !skips.iter().any(|s| name.contains(s.as_str())))
        .collect();
    (list, selected)
}

/// Runs a `harness = false` test binary's scenarios on one test cluster: selects them from
/// the command line ([`select_scenarios`]), starts the cluster with `options`, runs each
/// scenario (a panic fails it, the others go on), cancels its jobs and calls `after_each`
/// before the next one, tears the cluster down, and prints libtest-style result lines that
/// `cargo test` and CI read. Returns the process's exit code.
pub fn run_scenarios(
    scenarios: &[Scenario],
    options: Options,
    after_each: fn(&Testbed),
) -> std::process::ExitCode {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let (list, selected) = select_scenarios(scenarios, std::env::args().skip(1));
    if list {
        for (name, _) in &selected {
            println!("{name}: test");
        }
        return std::process::ExitCode::SUCCESS;
    }
    if selected.is_empty() {
        println!("running 0 tests (no Slurm scenario selected)");
        return std::process::ExitCode::SUCCESS;
    }
    println!(
        "starting the Slurm test cluster in {}",
        options.scratch.display()
    );
    let mut bed = match Testbed::start(options) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot start the Slurm test cluster: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!("running {} tests", selected.len());
    let mut failed = Vec::new();
    for (name, scenario) in &selected {
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| scenario(&mut bed)));
        // A scenario that failed while slurmctld was stopped would fail every one after it.
        if outcome.is_err()
            && let Err(e) = bed.ensure_controller()
        {
            eprintln!("slurmctld could not be started again after {name}: {e}");
        }
        let _ = bed.cancel_all();
        after_each(&bed);
        match outcome {
            Ok(()) => println!(
                "test {name} ... ok ({:.0} s)",
                started.elapsed().as_secs_f64()
            ),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    drop(bed);
    if failed.is_empty() {
        println!("\ntest result: ok. {} passed", selected.len());
        std::process::ExitCode::SUCCESS
    } else {
        println!("\ntest result: FAILED. failures: {}", failed.join(", "));
        std::process::ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_fields_with_and_without_spaces() {
        let info = JobInfo(
            "JobId=7 JobName=wrap\n   Priority=0 Nice=0\n   JobState=PENDING Reason=JobHeldUser Dependency=(null)\n   AdminComment=hadar:v1 gpus-per-node=2 \n   Comment=hello world \n".into(),
        );
        assert_eq!(info.field("JobState").as_deref(), Some("PENDING"));
        assert_eq!(info.field("Priority").as_deref(), Some("0"));
        assert_eq!(info.field("Comment").as_deref(), Some("hello world"));
        assert_eq!(
            info.field("AdminComment").as_deref(),
            Some("hadar:v1 gpus-per-node=2")
        );
        assert_eq!(info.field("Name"), None, "JobName= must not match Name=");
        assert_eq!(info.field("TresPerNode"), None);
    }

    #[test]
    fn only_keeps_the_asked_component() {
        let text =
            "JobId=15 HetJobId=15\n   TresPerNode=a\n\nJobId=16 HetJobId=15\n   TresPerNode=b\n";
        assert_eq!(
            JobInfo::only(text, 16).field("TresPerNode").as_deref(),
            Some("b")
        );
        assert_eq!(
            JobInfo::only(text, 15).field("TresPerNode").as_deref(),
            Some("a")
        );
    }
}
