//! Accounting in the test cluster ([`crate::Options::accounting`]): a private MariaDB server
//! (Debian's `mariadb-server`) and a slurmdbd storing into it, both in the scratch folder and
//! stopped with the other daemons; slurm.conf then stores accounting through slurmdbd, enforces
//! associations, limits and QOS, and orders jobs by `priority/multifactor` with fair-share.
//!
//! MariaDB listens on its own Unix socket (the harness's setup commands) and on a TCP port on
//! 127.0.0.1 (slurmdbd, which would otherwise look for the system's socket); both ports derive
//! from [`controller_port`] so that testbeds of two checkouts do not clash.

use crate::{Testbed, TestbedError, controller_port, io, slurm_plugin_dir, wait_for};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// slurmdbd's port (`DbdPort`, `AccountingStoragePort`).
pub fn dbd_port() -> u16 {
    controller_port() + 5
}

/// The private MariaDB's TCP port on 127.0.0.1.
pub fn mariadb_port() -> u16 {
    controller_port() + 6
}

/// The database user slurmdbd stores as (created at start; the server listens on 127.0.0.1
/// only and lives as long as the testbed).
const DB_USER: &str = "slurm";
const DB_PASS: &str = "hadar-testbed";

/// The slurm.conf lines of a cluster with accounting: the GPU TRES (typed too, so that `sacct`
/// shows the types), enforcement, and multifactor priority with every weight set so that each
/// factor shows in `sprio`. Clients and slurmctld find munged for their slurmdbd connection
/// by `AccountingStoragePass` (`AuthInfo` is only for slurmctld and slurmd).
pub(crate) fn slurm_conf_lines(scratch: &std::path::Path, gpu_types: &[String]) -> String {
    let types: Vec<String> = gpu_types.iter().map(|t| format!("gres/gpu:{t}")).collect();
    format!(
        "AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={}
AccountingStoragePass=socket={}/munge/munge.socket
AccountingStorageTRES=gres/gpu,{}
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/none
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
PriorityWeightQOS=5000
PriorityWeightAge=1000
PriorityWeightJobSize=500
PriorityWeightPartition=1000
PriorityCalcPeriod=1
PriorityMaxAge=1-0
",
        dbd_port(),
        scratch.display(),
        types.join(",")
    )
}

impl Testbed {
    /// Starts MariaDB and slurmdbd and registers the cluster; before slurmctld starts, so that
    /// it finds its cluster and associations at once.
    pub(crate) fn start_accounting(&self) -> Result<(), TestbedError> {
        self.start_mariadb()?;
        self.write_slurmdbd_conf()?;
        self.checked(&mut self.daemon("slurmdbd"))?;
        let ready = || {
            self.run(Command::new("sacctmgr").args(["-n", "list", "cluster"]))
                .is_ok_and(|o| o.status.success())
        };
        wait_for(Duration::from_secs(30), "slurmdbd", ready)?;
        // slurmctld registers an unknown cluster itself at its first start (seen on 22.05 and
        // 24.11); registered here first, the cluster's root account and root's association
        // (without which no job is accepted) are there when slurmctld first loads them.
        self.sacctmgr(&["add", "cluster", "hadartest"])?;
        Ok(())
    }

    fn start_mariadb(&self) -> Result<(), TestbedError> {
        let data = self.path("mysql");
        self.checked(
            Command::new("mariadb-install-db")
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .args([
                    "--user=root",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                    "--skip-name-resolve",
                ]),
        )?;
        let socket = self.path("run/mariadb.sock");
        // mariadbd does not detach: spawned in its own process group, it outlives the test
        // process like the Slurm daemons, and is stopped by its pid file.
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--port={}", mariadb_port()))
            .arg(format!(
                "--pid-file={}",
                self.path("run/mariadbd.pid").display()
            ))
            .arg(format!(
                "--log-error={}",
                self.path("log/mariadb.log").display()
            ))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-name-resolve",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=32M",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        io("starting mariadbd", child)?;
        wait_for(Duration::from_secs(60), "mariadbd's socket", || {
            socket.exists()
        })?;
        let grant = format!(
            "CREATE USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}'; GRANT ALL ON *.* TO '{DB_USER}'@'127.0.0.1';"
        );
        self.checked(
            Command::new("mariadb")
                .arg("--no-defaults")
                .arg(format!("--socket={}", socket.display()))
                .args(["-u", "root", "-e", &grant]),
        )?;
        Ok(())
    }

    /// slurmdbd.conf beside slurm.conf (slurmdbd looks for it in `SLURM_CONF`'s folder), mode
    /// 0600 as slurmdbd demands of a file holding the database password.
    fn write_slurmdbd_conf(&self) -> Result<(), TestbedError> {
        let c = self.scratch.display();
        let text = format!(
            "AuthType=auth/munge
AuthInfo=socket={c}/munge/munge.socket
DbdHost=localhost
DbdPort={}
SlurmUser=root
DebugLevel=info
LogFile={c}/log/slurmdbd.log
PidFile={c}/run/slurmdbd.pid
PluginDir={}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={}
StorageUser={DB_USER}
StoragePass={DB_PASS}
StorageLoc=slurm_acct_db
",
            dbd_port(),
            slurm_plugin_dir().display(),
            mariadb_port()
        );
        self.write_file("etc/slurmdbd.conf", &text)?;
        let path = self.path("etc/slurmdbd.conf");
        io(
            "protecting slurmdbd.conf",
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)),
        )
    }

    /// Runs `sacctmgr -i ARGS` (add or change accounts, users, QOS, limits without asking)
    /// and returns its output.
    pub fn sacctmgr(&self, args: &[&str]) -> Result<String, TestbedError> {
        let mut all = vec!["-i"];
        all.extend_from_slice(args);
        self.client("sacctmgr", &all)
    }

    /// Runs `sshare ARGS` (fair-share figures as slurmctld holds them).
    pub fn sshare(&self, args: &[&str]) -> Result<String, TestbedError> {
        self.client("sshare", args)
    }

    /// Runs `sacct ARGS` (job records as slurmdbd stored them).
    pub fn sacct(&self, args: &[&str]) -> Result<String, TestbedError> {
        self.client("sacct", args)
    }

    /// `sacct`'s rows for job `id` alone (no steps), its `fields` `|`-separated, no header;
    /// empty while slurmdbd has no record of it (or sacct fails).
    pub fn sacct_job(&self, id: u32, fields: &str) -> String {
        self.sacct(&["-n", "-X", "-P", "-j", &id.to_string(), "-o", fields])
            .unwrap_or_default()
    }
}
