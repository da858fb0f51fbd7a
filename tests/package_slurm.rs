//! The Debian package on the test cluster: `packaging/build-deb` builds it for the Slurm under
//! test, `dpkg -i` installs it, and a managed job runs end to end using only installed files
//! (the plugin from Slurm's plugin folder reading `/etc/hadar/hadar.toml`, the daemon started
//! with the installed unit's `ExecStart`). `dpkg --purge` then removes it, and Slurm's plugin
//! folder is left as it was. The package installs into system folders, so the scenario
//! purges any hadar package left by an earlier run first, and again if it fails midway.
//! `harness = false`: arguments are name filters.

use hadar_slurm_testbed::{Options, Plugin, Scenario, Testbed, run_scenarios, slurm_plugin_dir};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SCENARIOS: &[Scenario] = &[(
    "installed_package_schedules_a_job_and_purge_leaves_slurm_as_it_was",
    installed_package_schedules_a_job_and_purge_leaves_slurm_as_it_was,
)];

/// What the package installs outside Slurm's plugin folder (checked present, then gone).
const INSTALLED: &[&str] = &[
    "/usr/bin/hadar",
    "/usr/libexec/hadar/hadar-fork-run",
    "/etc/hadar/hadar.toml",
    "/lib/systemd/system/hadar-serve.service",
    "/usr/share/man/man1/hadar-serve.1.gz",
    "/usr/share/bash-completion/completions/hadar",
];

fn main() -> std::process::ExitCode {
    let mut options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("package-testbed"));
    // The package brings the plugin; the testbed's own folder stays empty.
    options.plugin = Plugin::None;
    options.machine_config = true;
    run_scenarios(SCENARIOS, options, |bed| {
        let _ = bed.cancel_all();
    })
}

/// Purges the package and stops the daemon when dropped, so a failed run leaves nothing in
/// the system folders for the next one.
struct Installed {
    daemon: Option<Child>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
        purge_any();
    }
}

fn installed_package_schedules_a_job_and_purge_leaves_slurm_as_it_was(bed: &mut Testbed) {
    purge_any();
    let plugin_dir = slurm_plugin_dir();
    let before = listing(&plugin_dir);
    let deb = build_package(bed);
    let mut installed = Installed { daemon: None };
    run(Command::new("dpkg").arg("-i").arg(&deb), "dpkg -i");
    for path in INSTALLED {
        assert!(Path::new(path).exists(), "{path} installed");
    }
    let plugin = plugin_dir.join("job_submit_hadar.so");
    assert!(plugin.is_file(), "the plugin in {}", plugin_dir.display());

    // The admin's part: the shared config, slurm.conf, then the unit's command.
    let config = format!(
        "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{conf}\"\n\n\
         [sidecar]\nsocket = \"/run/hadar/hadar.sock\"\nstate = \"/var/lib/hadar/state.db\"\nround_seconds = 2\n",
        conf = bed.path("etc/slurm.conf").display()
    );
    std::fs::write("/etc/hadar/hadar.toml", config).expect("edit /etc/hadar/hadar.toml");
    bed.write_slurm_conf(Some("hadar"))
        .expect("enable the plugin");
    bed.reconfigure().expect("scontrol reconfigure");
    // systemd's RuntimeDirectory= and StateDirectory= of the unit.
    std::fs::create_dir_all("/run/hadar").unwrap();
    let exec = exec_start("/lib/systemd/system/hadar-serve.service");
    assert_eq!(
        exec[0], "/usr/bin/hadar",
        "the unit runs the installed binary: {exec:?}"
    );
    let log = std::fs::File::create(bed.path("log/hadar-serve-package.log")).unwrap();
    installed.daemon = Some(
        Command::new(&exec[0])
            .args(&exec[1..])
            .env("SLURM_CONF", bed.path("etc/slurm.conf"))
            .env("HADAR_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the installed daemon"),
    );

    let sub = bed.sbatch(
        &[
            "--gpus=2",
            &format!("--output={}/out-%j.txt", bed.path("jobs").display()),
        ],
        Some("#!/bin/sh\necho \"GPUs $CUDA_VISIBLE_DEVICES\"\nsleep 2\n"),
    );
    assert!(sub.ok, "sbatch: {}", sub.stderr);
    let id = sub.job_id.unwrap();
    let held = bed.job(id).unwrap();
    assert!(
        held.field("AdminComment")
            .is_some_and(|c| c.starts_with("hadar:v1")),
        "the installed plugin recorded the request: {}",
        held.0
    );
    let done = bed
        .wait_job(
            id,
            &["COMPLETED", "FAILED", "CANCELLED"],
            Duration::from_secs(120),
        )
        .expect("the job ends");
    assert_eq!(
        done.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        done.0
    );
    let out = std::fs::read_to_string(bed.path(&format!("jobs/out-{id}.txt"))).unwrap();
    let gpus = out
        .lines()
        .find_map(|l| l.strip_prefix("GPUs "))
        .unwrap_or("");
    assert_eq!(
        gpus.split(',').count(),
        2,
        "two GPUs given to the job: {out}"
    );
    let explain = Command::new("/usr/bin/hadar")
        .args(["explain", &id.to_string()])
        .output()
        .unwrap();
    let explain = String::from_utf8_lossy(&explain.stdout);
    assert!(
        explain.contains(&format!("job {id}")),
        "hadar explain with the installed config: {explain}"
    );
    println!("    {}", explain.lines().next().unwrap_or(""));

    // Removal, as the admin would: the plugin out of slurm.conf first (prerm refuses otherwise).
    // dpkg passes its environment to the maintainer scripts: SLURM_CONF stands for the site's
    // /etc/slurm/slurm.conf, which prerm's scontrol reads.
    let refused = Command::new("dpkg")
        .args(["--purge", &package_name(&deb)])
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "prerm refuses while slurmctld lists the plugin"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("JobSubmitPlugins"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    if let Some(mut d) = installed.daemon.take() {
        // SAFETY: kill(2) with SIGTERM on the daemon this test started, as systemctl stop does.
        unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
        let _ = d.wait();
    }
    bed.write_slurm_conf(None).unwrap();
    bed.reconfigure().unwrap();
    run(
        Command::new("dpkg")
            .args(["--purge", &package_name(&deb)])
            .env("SLURM_CONF", bed.path("etc/slurm.conf")),
        "dpkg --purge",
    );
    for path in INSTALLED.iter().chain(&["/var/lib/hadar", "/etc/hadar"]) {
        assert!(!Path::new(path).exists(), "{path} removed by purge");
    }
    assert_eq!(
        listing(&plugin_dir),
        before,
        "Slurm's plugin folder as it was"
    );
    drop(installed);
}

/// Builds the package with the test's own `hadar` (the plugin is built for the Slurm under
/// test by the script), into the scratch folder.
fn build_package(bed: &Testbed) -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packaging/build-deb");
    let out = Command::new(script)
        .arg("--out")
        .arg(bed.path("deb"))
        .arg("--hadar")
        .arg(env!("CARGO_BIN_EXE_hadar"))
        .output()
        .expect("run packaging/build-deb");
    assert!(
        out.status.success(),
        "build-deb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `hadar-slurm-26.05.3` out of `.../hadar-slurm-26.05.3_0.1.0_amd64.deb`.
fn package_name(deb: &Path) -> String {
    let file = deb.file_name().unwrap().to_string_lossy();
    file.split('_').next().unwrap().to_string()
}

/// Purges every installed hadar package (an earlier failed run's), forcing past prerm's
/// check: the testbed has just been configured without the plugin.
fn purge_any() {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Package} ${Status}\n", "hadar-slurm-*"])
        .output();
    let Ok(out) = out else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.split_whitespace();
        let (Some(name), status) = (parts.next(), parts.collect::<Vec<_>>().join(" ")) else {
            continue;
        };
        if status.contains("not-installed") {
            continue;
        }
        let _ = Command::new("dpkg")
            .args(["--purge", name])
            .env("HADAR_FORCE_REMOVE", "1")
            .output();
    }
}

fn run(command: &mut Command, what: &str) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The unit's `ExecStart=` command line, split into words.
fn exec_start(unit: &str) -> Vec<String> {
    let text = std::fs::read_to_string(unit).expect("read the installed unit");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line");
    line.split_whitespace().map(str::to_string).collect()
}

fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
