//! Attacks on hadar from ordinary users, tried against a real Slurm: the test cluster of
//! the shared harness (slurmctld with the job_submit/hadar plugin, four slurmd), the real
//! `hadar serve`, and two unprivileged users (`hadar-alice`, `hadar-bob`, created with
//! `useradd` if missing) who submit and meddle through Slurm's own commands, run as them
//! with `setpriv`. Each scenario tries one attack of docs/threat-model.md and checks that it
//! fails. `harness = false`: arguments are name filters, `--skip NAME`, `--list`.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{Options, Scenario, Testbed, run_scenarios};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Output, Stdio};
use std::time::{Duration, Instant};

const SCENARIOS: &[Scenario] = &[
    (
        "notice_socket_is_private_to_slurmctlds_user",
        notice_socket_is_private_to_slurmctlds_user,
    ),
    (
        "shell_metacharacters_in_user_strings_run_nothing",
        shell_metacharacters_in_user_strings_run_nothing,
    ),
    (
        "a_user_cannot_act_on_another_users_job",
        a_user_cannot_act_on_another_users_job,
    ),
    (
        "a_job_released_by_its_owner_is_held_again",
        a_job_released_by_its_owner_is_held_again,
    ),
    (
        "averaging_and_user_paths_run_as_the_jobs_owner",
        averaging_and_user_paths_run_as_the_jobs_owner,
    ),
];

const ALICE: &str = "hadar-alice";
/// A job id no test reaches, for a record forged in a comment.
const PHANTOM: u32 = 987_654;
const BOB: &str = "hadar-bob";

fn main() -> ExitCode {
    let options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("security-testbed"));
    run_scenarios(SCENARIOS, options, clean_up)
}

// ----- users -----

/// A test user: uid, gid, and a private working folder in the scratch area.
struct User {
    uid: u32,
    gid: u32,
    dir: PathBuf,
}

/// Creates (if missing) the system user `name` and its folder under the scratch area.
fn user(bed: &Testbed, name: &'static str) -> User {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, name]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let out = Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/bin/sh", name])
            .output()
            .expect("run useradd");
        assert!(
            out.status.success(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (uid, gid) = (id("-u").unwrap(), id("-g").unwrap());
    let dir = bed.path(&format!("users/{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // The folders above it must be traversable by the user.
    for p in [bed.path("users"), bed.scratch().to_path_buf()] {
        let mode = std::fs::metadata(&p).unwrap().mode();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode((mode | 0o711) & 0o7777))
            .unwrap();
    }
    User { uid, gid, dir }
}

impl User {
    /// Runs `program args` as this user (same environment, `SLURM_CONF` set), in its folder.
    fn run(&self, bed: &Testbed, program: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = bed.command("setpriv");
        cmd.args([
            "--reuid",
            &self.uid.to_string(),
            "--regid",
            &self.gid.to_string(),
            "--clear-groups",
            "--",
            program,
        ])
        .args(args)
        .current_dir(&self.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn().expect("run setpriv");
        if let (Some(text), Some(mut s)) = (stdin, child.stdin.take()) {
            std::io::Write::write_all(&mut s, text.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// `sbatch ARGS` with `script` on standard input, as this user; the output goes to its
    /// folder. Returns the job id, or sbatch's error text.
    fn sbatch(&self, bed: &Testbed, args: &[&str], script: &str) -> Result<u32, String> {
        let out_arg = format!("--output={}/out-%j.txt", self.dir.display());
        let mut all = vec![out_arg.as_str()];
        all.extend_from_slice(args);
        let out = self.run(bed, "sbatch", &all, Some(script));
        let stdout = String::from_utf8_lossy(&out.stdout);
        match stdout
            .trim()
            .strip_prefix("Submitted batch job ")
            .and_then(|s| s.trim().parse().ok())
        {
            Some(id) if out.status.success() => Ok(id),
            _ => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }

    fn output(&self, id: u32) -> String {
        std::fs::read_to_string(self.dir.join(format!("out-{id}.txt"))).unwrap_or_default()
    }
}

fn clean_up(bed: &Testbed) {
    for u in [ALICE, BOB] {
        let _ = bed.client("scancel", &[&format!("--user={u}")]);
    }
    serve::wait_queue_empty(bed);
}

// ----- the daemon -----

use serve::{Serve, TIME_SCALE};

/// `hadar explain ID --format json` against the daemon's state.
fn explain(serve: &Serve, id: u32) -> serde_json::Value {
    serde_json::from_str(&serve.hadar(&["explain", &id.to_string(), "--format", "json"])).unwrap()
}

// ----- helpers -----

fn daemon_log(bed: &Testbed) -> String {
    std::fs::read_to_string(bed.path("log/hadar-serve.log")).unwrap_or_default()
}

fn emulate_script(steps: u64, extra: &str) -> String {
    format!(
        "#!/bin/sh\n#HADAR type=resnet50-b64 steps={steps} {extra}\nexec {hadar} emulate --job-type resnet50-b64 --steps {steps} --time-scale {TIME_SCALE} --report-every 1\n",
        hadar = env!("CARGO_BIN_EXE_hadar")
    )
}

fn field(bed: &Testbed, id: u32, key: &str) -> String {
    bed.job(id)
        .ok()
        .and_then(|j| j.field(key))
        .unwrap_or_default()
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn wait_done(bed: &Testbed, id: u32, secs: u64) -> String {
    let info = bed
        .wait_job(
            id,
            &["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"],
            Duration::from_secs(secs),
        )
        .unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", tail(&daemon_log(bed))));
    info.field("JobState").unwrap_or_default()
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

// ----- scenarios -----

/// The notice socket is mode 0600 and owned by slurmctld's user (root on the test cluster):
/// another user cannot even connect. (The daemon's unit tests also show a connection from
/// another uid dropped by the SO_PEERCRED check when the mode is loosened.)
fn notice_socket_is_private_to_slurmctlds_user(bed: &mut Testbed) {
    let alice = user(bed, ALICE);
    let _serve = Serve::start(bed, "socket");
    let sock = bed.path("run/hadar.sock");
    wait_until("the daemon's socket", 20, || sock.exists());
    let meta = std::fs::metadata(&sock).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "socket mode");
    assert_eq!(meta.uid(), 0, "socket owner");
    let dir_mode = std::fs::metadata(sock.parent().unwrap()).unwrap().mode();
    assert_eq!(dir_mode & 0o022, 0, "socket directory writable by others");
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({:?})\ns.sendall(b'hadar-notice v1 uid=0 hadar:v1 gpus=1\\n')\n",
        sock.display().to_string()
    );
    let out = alice.run(bed, "/usr/bin/python3", &["-c", &script], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "alice connected to the notice socket"
    );
    assert!(err.contains("Permission denied"), "{err}");
}

/// Job names, comments, directive values and paths full of shell syntax: the plugin refuses
/// the malformed directives (saying so), the daemon schedules the job by argv-only
/// commands, `hadar status`/`explain` print the name, and no injected command ever runs.
fn shell_metacharacters_in_user_strings_run_nothing(bed: &mut Testbed) {
    let alice = user(bed, ALICE);
    let serve = Serve::start(bed, "shell");
    // A folder anyone may write to: an injected `touch` by any user would leave a file.
    let marker = bed.path("pwned");
    std::fs::create_dir_all(&marker).unwrap();
    std::fs::set_permissions(&marker, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let m = marker.display().to_string();
    // Also a terminal escape (clear screen, set title): it must not reach the terminal of
    // an administrator who runs `hadar status`.
    let name = format!(
        "x$(touch {m}/name1);touch {m}/name2;`touch {m}/name3`|touch {m}/name4\u{1b}[2J\u{1b}]0;owned\u{7}"
    );
    let comment = format!("c $(touch {m}/comment1) `touch {m}/comment2`; touch {m}/comment3");
    let id = alice
        .sbatch(
            bed,
            &[
                &format!("--job-name={name}"),
                &format!("--comment={comment}"),
                "--gpus=1",
            ],
            &emulate_script(300, ""),
        )
        .expect("a managed job with a hostile name and comment is accepted");
    // Hostile directive values are refused at submission with a clear message.
    let refused = [
        format!("#!/bin/sh\n#HADAR type=$(touch {m}/directive1)\ntrue\n"),
        format!("#!/bin/sh\n#HADAR steps=1;touch {m}/directive2\ntrue\n"),
        format!("#!/bin/sh\n#HADAR gpu-types=`touch {m}/directive3`\ntrue\n"),
    ];
    for script in &refused {
        let e = alice
            .sbatch(bed, &["--gpus=1"], script)
            .expect_err("a hostile directive was accepted");
        assert!(e.contains("hadar: malformed value"), "{e}");
    }
    let e = alice
        .sbatch(
            bed,
            &[
                "--gpus=1",
                &format!("--comment=hadar: type=a;touch {m}/comment4"),
            ],
            "#!/bin/sh\ntrue\n",
        )
        .expect_err("a hostile --comment directive was accepted");
    assert!(e.contains("unknown directive `touch`"), "{e}");
    assert_eq!(wait_done(bed, id, 120), "COMPLETED", "{}", alice.output(id));
    let status = serve.hadar(&["status", "--all"]);
    assert!(status.contains(&id.to_string()), "{status}");
    let explained_text = serve.hadar(&["explain", &id.to_string()]);
    for out in [&status, &explained_text] {
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}'),
            "a terminal escape from the job name was printed: {out:?}"
        );
    }
    let explained = explain(&serve, id);
    assert_eq!(explained["job"]["name"].as_str(), Some(name.as_str()));
    let left: Vec<_> = std::fs::read_dir(&marker)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "injected commands ran: {left:?}");
}

/// Alice tries to act on Bob's managed job through Slurm (progress comment, release,
/// hold, requeue, cancel), through directives and through a job name and comment crafted to
/// look like Bob's fields in scontrol's output. Slurm refuses the first, the plugin the
/// directives, the daemon's reader the forgery: Bob's job runs once to exactly its own steps
/// and the daemon keeps Bob's job as Bob's.
fn a_user_cannot_act_on_another_users_job(bed: &mut Testbed) {
    let alice = user(bed, ALICE);
    let bob = user(bed, BOB);
    // Alice's unmanaged job, whose comment she will use to forge lines of Bob's record.
    let forger = alice
        .sbatch(bed, &["-p", "cpu"], "#!/bin/sh\nsleep 300\n")
        .unwrap();
    // Bob's job waits held; the daemon starts only once every attack is in place.
    let steps = 4000;
    let b = bob
        .sbatch(
            bed,
            &["--gpus=1", "--job-name=bobs"],
            &emulate_script(steps, ""),
        )
        .unwrap();
    let bs = b.to_string();
    let forged_progress = "Comment=hadar-progress:v1 steps=999999 rate=999".to_string();
    for args in [
        vec!["update", &format!("JobId={bs}"), &forged_progress],
        vec!["release", &bs],
        vec!["hold", &bs],
        vec!["requeuehold", &bs],
        vec![
            "update",
            &format!("JobId={bs}"),
            "AdminComment=hadar:v1 gpus=4",
        ],
    ] {
        let out = alice.run(bed, "scontrol", &args, None);
        assert!(
            !out.status.success(),
            "scontrol {args:?} as alice succeeded on bob's job"
        );
    }
    let out = alice.run(bed, "scancel", &[&bs], None);
    assert!(!out.status.success() || field(bed, b, "JobState") != "CANCELLED");
    // No directive names another job.
    let e = alice
        .sbatch(
            bed,
            &["--gpus=1"],
            &format!("#!/bin/sh\n#HADAR job={bs}\ntrue\n"),
        )
        .expect_err("a directive naming a job was accepted");
    assert!(e.contains("unknown directive"), "{e}");
    // A name and a comment that spell Bob's fields on scontrol's first lines.
    let forged_name = format!("x JobId={bs} UserId={BOB}({}) JobState=COMPLETED", bob.uid);
    let a = alice
        .sbatch(
            bed,
            &[
                "--gpus=1",
                &format!("--job-name={forged_name}"),
                &format!("--comment=hadar-progress:v1 steps={steps} rate=50"),
            ],
            &emulate_script(200, ""),
        )
        .unwrap();
    // A comment with line breaks (Slurm stores them) that imitates a whole record of Bob's
    // job: his id, her uid, completed, another request.
    let forged_record = format!(
        "Comment=x\n\nJobId={bs} JobName=bobs\n   UserId={ALICE}({uid}) GroupId={ALICE}({uid}) MCS_label=N/A\n   Priority=0 Nice=0 Account=(null) QOS=normal\n   JobState=COMPLETED Reason=None Dependency=(null)\n   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n   AdminComment=hadar:v1 gpus=4 steps=5\n   Comment=hadar-progress:v1 steps={steps} rate=9\n\nJobId={PHANTOM} JobName=phantom\n   UserId={ALICE}({uid}) GroupId={ALICE}({uid}) MCS_label=N/A\n   Priority=0 Nice=0 Account=(null) QOS=normal\n   JobState=PENDING Reason=JobHeldUser Dependency=(null)\n   Partition=gpu AllocNode:Sid=localhost:1\n   AdminComment=hadar:v1 gpus=16 steps=5",
        uid = alice.uid
    );
    let out = alice.run(
        bed,
        "scontrol",
        &["update", &format!("JobId={forger}"), &forged_record],
        None,
    );
    assert!(out.status.success(), "alice could not set her own comment");
    let shown = bed
        .client("scontrol", &["show", "job", &forger.to_string()])
        .unwrap();
    assert!(
        shown.contains(&format!("\nJobId={bs} JobName=bobs")),
        "Slurm did not keep the line breaks: {shown}"
    );
    let serve = Serve::start(bed, "cross");
    assert_eq!(wait_done(bed, b, 180), "COMPLETED", "{}", bob.output(b));
    assert_eq!(wait_done(bed, a, 180), "COMPLETED", "{}", alice.output(a));
    let out = bob.output(b);
    assert!(out.contains(&format!("completed {steps} steps")), "{out}");
    wait_until("the daemon notes that bob's job left the queue", 30, || {
        explain(&serve, b)["job"]["phase"].as_str() == Some("finished")
    });
    let job = &explain(&serve, b)["job"];
    assert_eq!(job["name"].as_str(), Some("bobs"));
    // Scheduled and not dropped, though Alice's comment forged a second record of it.
    assert_eq!(job["final_state"].as_str(), Some("completed"), "{job}");
    assert_eq!(job["starts"].as_u64(), Some(1), "{job}");
    assert!(
        job["steps_done"].as_f64().unwrap() <= steps as f64,
        "bob's progress was forged: {job}"
    );
    assert_eq!(field(bed, b, "Restarts"), "0");
    // Alice's forging job is hers alone: read as hers, never as Bob's.
    assert!(field(bed, forger, "UserId").starts_with(ALICE));
    // The phantom job her comment imitated (an id Slurm does not have) was never managed.
    let log = daemon_log(bed);
    assert!(
        !log.contains(&format!("new managed job job={PHANTOM}")),
        "the daemon took a phantom job for real"
    );
    let release = hadar_slurm_testbed::slurm_release()
        .and_then(|r| hadar_slurm::SlurmRelease::parse(&r))
        .expect("the release under test");
    match release.read_form() {
        // Read as text, the forged lines look like records: the daemon must notice them.
        hadar_slurm::ReadForm::Text => assert!(
            log.contains(&format!("job={PHANTOM}")),
            "the phantom was not noticed"
        ),
        // Read as JSON, the comment is one string: there is no phantom to notice, and the
        // forger's job keeps its whole comment.
        hadar_slurm::ReadForm::Json => {
            assert!(!log.contains(&format!("job={PHANTOM}")), "{log}");
            let forger_job = hadar_slurm::Slurm::new(hadar_slurm::SlurmConfig {
                conf: Some(bed.path("etc/slurm.conf")),
                ..Default::default()
            })
            .job(u64::from(forger))
            .unwrap()
            .expect("the forger's job");
            assert!(
                forger_job
                    .comment
                    .as_deref()
                    .is_some_and(|c| c.contains("JobId=")),
                "{forger_job:?}"
            );
        }
    }
}

/// A managed job's owner releases it with `scontrol release` (the plugin had stripped its
/// GPUs and held it): the daemon notices that it left hold without being released by
/// hadar, logs it, and holds it again (an admin hold its owner cannot release); one that
/// Slurm started before the daemon's round is requeued held. Neither runs outside the plan.
fn a_job_released_by_its_owner_is_held_again(bed: &mut Testbed) {
    let alice = user(bed, ALICE);
    // Every GPU is taken by jobs Slurm runs on its own (`#HADAR off`), so hadar keeps
    // Alice's job waiting; a begin time in the future keeps Slurm from starting it once
    // released.
    let fillers: Vec<u32> = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|node| {
            let sub = bed.sbatch(
                &["-w", node, "--gres=gpu:4", "--job-name=filler"],
                Some("#!/bin/sh\n#HADAR off\nsleep 600\n"),
            );
            assert!(sub.ok, "filler on {node}: {}", sub.stderr);
            sub.job_id.unwrap()
        })
        .collect();
    for id in &fillers {
        bed.wait_job(*id, &["RUNNING"], Duration::from_secs(30))
            .expect("the filler runs");
    }
    let serve = Serve::start(bed, "release");
    let j = alice
        .sbatch(
            bed,
            &["--gpus=1", "--begin=now+3600"],
            &emulate_script(100, ""),
        )
        .unwrap();
    wait_until("the daemon sees the job", 30, || {
        daemon_log(bed).contains(&format!("job={j}"))
    });
    let js = j.to_string();
    let out = alice.run(bed, "scontrol", &["release", &js], None);
    let released = out.status.success();
    if released {
        wait_until("the daemon holds the released job again", 30, || {
            field(bed, j, "Reason") == "JobHeldAdmin"
        });
        assert!(
            daemon_log(bed).contains("left hold without hadar releasing it"),
            "{}",
            tail(&daemon_log(bed))
        );
        let again = alice.run(bed, "scontrol", &["release", &js], None);
        assert!(!again.status.success(), "the owner released an admin hold");
    } else {
        // Slurm itself refused: the plugin's hold is not the owner's to release.
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("denied"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(field(bed, j, "JobState"), "PENDING");
    drop(serve);

    // Started by Slurm before the daemon looked: the daemon is down while the owner
    // releases; when it starts it finds the job running without GPUs and requeues it held.
    let k = alice
        .sbatch(
            bed,
            &["--gpus=1"],
            "#!/bin/sh\n#HADAR steps=100\nsleep 300\n",
        )
        .unwrap();
    let ks = k.to_string();
    let out = alice.run(bed, "scontrol", &["release", &ks], None);
    if out.status.success() {
        bed.wait_job(k, &["RUNNING"], Duration::from_secs(30))
            .expect("Slurm starts the released job");
        let _serve = Serve::start(bed, "release-running");
        let deadline = Instant::now() + Duration::from_secs(40);
        // Held again: pending at priority 0 (Slurm says `job_requeued_in_held_state`).
        while !(field(bed, k, "JobState") == "PENDING" && field(bed, k, "Priority") == "0") {
            assert!(
                Instant::now() < deadline,
                "the daemon did not requeue the job held within 40 s: {}\n{}",
                bed.job(k).map(|j| j.0).unwrap_or_default(),
                tail(&daemon_log(bed))
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        assert_eq!(field(bed, k, "Restarts"), "1");
        assert!(daemon_log(bed).contains("left hold without hadar releasing it"));
    } else {
        assert_eq!(field(bed, k, "JobState"), "PENDING");
    }
}

/// Averaging and the fork runner run inside the job, as its owner, so paths a user gives
/// reach only what that user may read and write: Alice's job cannot read Bob's private
/// checkpoint nor write into Bob's folder, though the daemon that scheduled it runs as root.
fn averaging_and_user_paths_run_as_the_jobs_owner(bed: &mut Testbed) {
    let alice = user(bed, ALICE);
    let bob = user(bed, BOB);
    let _serve = Serve::start(bed, "paths");
    // Bob's checkpoint: a valid one-tensor safetensors file, readable only by Bob.
    let json = br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    let mut ckpt = (json.len() as u64).to_le_bytes().to_vec();
    ckpt.extend_from_slice(json);
    ckpt.extend_from_slice(&1.0f32.to_le_bytes());
    let bobs = bob.dir.join("ckpt.safetensors");
    std::fs::write(&bobs, &ckpt).unwrap();
    std::os::unix::fs::chown(&bobs, Some(bob.uid), Some(bob.gid)).unwrap();
    std::fs::set_permissions(&bobs, std::fs::Permissions::from_mode(0o600)).unwrap();
    let alices = alice.dir.join("mine.safetensors");
    std::fs::write(&alices, &ckpt).unwrap();
    std::os::unix::fs::chown(&alices, Some(alice.uid), Some(alice.gid)).unwrap();
    let hadar = env!("CARGO_BIN_EXE_hadar");
    let script = format!(
        "#!/bin/sh\n#HADAR steps=10\n\
         {hadar} average {bobs}:1 {alices}:1 --out {a}/stolen.safetensors; echo \"read-bob=$?\"\n\
         {hadar} average {alices}:1 {alices}:1 --out {b}/planted.safetensors; echo \"write-bob=$?\"\n\
         {hadar} average {alices}:1 {alices}:1 --out {a}/own.safetensors; echo \"own=$?\"\n",
        bobs = bobs.display(),
        alices = alices.display(),
        a = alice.dir.display(),
        b = bob.dir.display(),
    );
    let id = alice.sbatch(bed, &["--gpus=1"], &script).unwrap();
    assert_eq!(wait_done(bed, id, 120), "COMPLETED", "{}", alice.output(id));
    let out = alice.output(id);
    assert!(
        out.contains("own=0"),
        "averaging her own files failed: {out}"
    );
    assert!(
        !out.contains("read-bob=0"),
        "alice read bob's checkpoint: {out}"
    );
    assert!(
        !out.contains("write-bob=0"),
        "alice wrote into bob's folder: {out}"
    );
    assert!(out.contains("Permission denied"), "{out}");
    assert!(!alice.dir.join("stolen.safetensors").exists());
    assert!(!bob.dir.join("planted.safetensors").exists());
}
