//! The fork runner (`wrappers/hadar-fork-run`) and the example training program
//! (`wrappers/examples/digits_mlp.py`): the contract's environment reaches the program,
//! arguments pass through verbatim, failures and contract violations give the documented
//! exit statuses, and a few HadarE rounds of the real example (copies through the runner,
//! consolidation by `hadar average`) give a model that loads and beats chance by far.
//!
//! Needs python3 with the packages of wrappers/examples/requirements.txt
//! (tests/install-deps installs them).

use hadar_average::Checkpoint;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn runner(args: &[&str]) -> Output {
    Command::new(root().join("wrappers/hadar-fork-run"))
        .args(args)
        .output()
        .expect("run hadar-fork-run")
}

fn result(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("result file")).expect("result is JSON")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The runner's arguments for the only copy of round 0, writing `out` and `res`.
fn one_copy<'a>(out: &'a Path, res: &'a Path) -> Vec<&'a str> {
    vec![
        "--index",
        "0",
        "--copies",
        "1",
        "--round",
        "0",
        "--checkpoint-out",
        s(out),
        "--result",
        s(res),
    ]
}

/// A program that records its arguments and HADAR_* environment in its "checkpoint" and
/// reports the steps given in its first argument.
const RECORDER: &str = r#"
import json, os, sys
env = {k: v for k, v in os.environ.items() if k.startswith("HADAR_")}
open(os.environ["HADAR_CHECKPOINT_OUT"], "w").write(json.dumps({"argv": sys.argv[1:], "env": env}))
if sys.argv[1] != "none":
    open(os.environ["HADAR_STEPS_FILE"], "w").write(sys.argv[1] + "\n")
sys.exit(int(sys.argv[2]))
"#;

#[test]
fn the_program_gets_the_contract_environment_and_its_arguments_verbatim() {
    let d = tempfile::tempdir().unwrap();
    let (out, res, start) = (
        d.path().join("copy.ckpt"),
        d.path().join("r.json"),
        d.path().join("start.ckpt"),
    );
    std::fs::write(&start, "x").unwrap();
    let hostile = ["$(touch pwned)", "a b", ";", "*", "'\""];
    let mut args = vec![
        "--index",
        "1",
        "--copies",
        "3",
        "--round",
        "2",
        "--start-from",
        s(&start),
        "--checkpoint-out",
        s(&out),
        "--result",
        s(&res),
        "--step-budget",
        "50",
        "--deadline",
        "4102444800",
        "--steps-done",
        "900",
        "--",
        "python3",
        "-c",
        RECORDER,
        "40",
        "0",
    ];
    args.extend(hostile);
    let o = Command::new(root().join("wrappers/hadar-fork-run"))
        .args(&args)
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = result(&res);
    assert_eq!(
        (
            r["fork_index"].as_u64(),
            r["copies"].as_u64(),
            r["round"].as_u64()
        ),
        (Some(1), Some(3), Some(2))
    );
    assert_eq!(
        (
            r["steps"].as_u64(),
            r["ok"].as_bool(),
            r["exit_code"].as_u64()
        ),
        (Some(40), Some(true), Some(0))
    );
    let seen: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let argv: Vec<&str> = seen["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&argv[2..], &hostile);
    assert!(
        !d.path().join("pwned").exists(),
        "an argument was interpreted by a shell"
    );
    let env = &seen["env"];
    assert_eq!(env["HADAR_FORK_INDEX"], "1");
    assert_eq!(env["HADAR_FORK_COPIES"], "3");
    assert_eq!(env["HADAR_ROUND"], "2");
    assert_eq!(env["HADAR_START_CHECKPOINT"], s(&start));
    assert_eq!(env["HADAR_CHECKPOINT_OUT"], s(&out));
    assert_eq!(env["HADAR_STEP_BUDGET"], "50");
    assert_eq!(env["HADAR_DEADLINE"], "4102444800");
    assert_eq!(env["HADAR_STEPS_DONE"], "900");
    assert_eq!(env["HADAR_STEPS_FILE"], format!("{}.steps", s(&res)));

    // Round 0: no start checkpoint, and none leaks in from the caller's environment.
    let o = Command::new(root().join("wrappers/hadar-fork-run"))
        .args(one_copy(&out, &res))
        .args(["--step-budget", "5"])
        .args(["--", "python3", "-c", RECORDER, "5", "0"])
        .env("HADAR_START_CHECKPOINT", "/stale")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let seen: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(
        seen["env"].get("HADAR_START_CHECKPOINT").is_none(),
        "{seen}"
    );
    assert!(seen["env"].get("HADAR_DEADLINE").is_none(), "{seen}");
}

/// The result carries the program's wall-clock time, from which the daemon learns the
/// copy's steps per second.
#[test]
fn the_result_carries_the_seconds_the_program_ran() {
    let d = tempfile::tempdir().unwrap();
    let (out, res) = (d.path().join("copy.ckpt"), d.path().join("r.json"));
    let mut args = one_copy(&out, &res);
    args.extend([
        "--",
        "sh",
        "-c",
        "sleep 0.4; echo 8 > \"$HADAR_STEPS_FILE\"; : > \"$HADAR_CHECKPOINT_OUT\"",
    ]);
    let o = runner(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = result(&res);
    let secs = r["seconds"].as_f64().expect("seconds is a number");
    assert!((0.4..60.0).contains(&secs), "{r}");
    assert_eq!(r["steps"].as_u64(), Some(8));
}

#[test]
fn failures_and_contract_violations_give_the_documented_statuses() {
    let d = tempfile::tempdir().unwrap();
    let (out, res) = (d.path().join("c"), d.path().join("r.json"));
    let base = [
        "--index",
        "0",
        "--copies",
        "2",
        "--round",
        "0",
        "--checkpoint-out",
        s(&out),
        "--result",
        s(&res),
        "--step-budget",
        "10",
        "--",
    ];
    let run = |program: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.extend_from_slice(program);
        runner(&a)
    };
    // The program fails: its status comes back, the result says so and counts no steps.
    let o = run(&["python3", "-c", RECORDER, "4", "3"]);
    assert_eq!(o.status.code(), Some(3));
    let r = result(&res);
    assert_eq!(
        (
            r["ok"].as_bool(),
            r["exit_code"].as_u64(),
            r["steps"].as_u64()
        ),
        (Some(false), Some(3), Some(0))
    );
    // Exit 0 without a step count, or above the budget: contract violations (65).
    for (steps, why) in [("none", "step count"), ("11", "budget"), ("1x", "integer")] {
        let o = run(&["python3", "-c", RECORDER, steps, "0"]);
        assert_eq!(o.status.code(), Some(65), "{steps}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(why),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(result(&res)["ok"], false);
    }
    // A checkpoint left by an earlier attempt is not taken for this run's.
    std::fs::write(&out, "old").unwrap();
    let o = run(&["sh", "-c", "echo 3 > \"$HADAR_STEPS_FILE\""]);
    assert_eq!(o.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no checkpoint"));
    // The runner's own usage errors: 64, nothing run, no result.
    std::fs::remove_file(&res).unwrap();
    for bad in [
        vec![
            "--index",
            "2",
            "--copies",
            "2",
            "--round",
            "0",
            "--checkpoint-out",
            "c",
            "--result",
            "r",
            "--",
            "true",
        ],
        vec![
            "--index",
            "0",
            "--copies",
            "2",
            "--round",
            "-1",
            "--checkpoint-out",
            "c",
            "--result",
            "r",
            "--",
            "true",
        ],
        vec![
            "--index",
            "0",
            "--copies",
            "2",
            "--round",
            "0",
            "--checkpoint-out",
            "c",
            "--result",
            "r",
            "--step-budget",
            "1e3",
            "--",
            "true",
        ],
        vec![
            "--index",
            "0",
            "--copies",
            "2",
            "--round",
            "0",
            "--checkpoint-out",
            "c",
            "--result",
            "r",
        ],
        vec![
            "--index",
            "0",
            "--copies",
            "2",
            "--round",
            "0",
            "--start-from",
            "/nonexistent",
            "--checkpoint-out",
            "c",
            "--result",
            "r",
            "--",
            "true",
        ],
    ] {
        let o = runner(&bad);
        assert_eq!(o.status.code(), Some(64), "{bad:?}");
    }
    assert!(!res.exists());
}

#[test]
fn a_terminated_runner_stops_its_program_and_reports_the_signal() {
    let d = tempfile::tempdir().unwrap();
    let (out, res, ready, term) = (
        d.path().join("c"),
        d.path().join("r.json"),
        d.path().join("ready"),
        d.path().join("got-term"),
    );
    // The program says it is ready, then waits for SIGTERM, notes it, and dies of it.
    let program = r#"
import os, signal, sys, time
def on_term(sig, frame):
    open(sys.argv[2], "w").write("yes")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
signal.signal(signal.SIGTERM, on_term)
open(sys.argv[1], "w").write("ready")
while True:
    time.sleep(0.05)
"#;
    let mut child = Command::new(root().join("wrappers/hadar-fork-run"))
        .args(one_copy(&out, &res))
        .args(["--step-budget", "1"])
        .args(["--", "python3", "-c", program, s(&ready), s(&term)])
        .spawn()
        .unwrap();
    // Wait for the program to be running (a synchronisation, not a timing assertion).
    while !ready.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the runner ended before its program was ready"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    assert_eq!(
        std::fs::read_to_string(&term).unwrap(),
        "yes",
        "the program did not get SIGTERM"
    );
    let r = result(&res);
    assert_eq!(
        (
            r["ok"].as_bool(),
            r["exit_code"].as_u64(),
            r["steps"].as_u64()
        ),
        (Some(false), Some(143), Some(0))
    );
}

fn tensor_f32(path: &Path, name: &str) -> Vec<f32> {
    let c = Checkpoint::open(path).unwrap();
    let t = c.header().tensor(name).unwrap().clone();
    c.data(&t)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn hadare_rounds_of_the_example_give_a_model_well_above_chance() {
    hadare_rounds("digits_mlp.py", false);
}

/// The PyTorch example through the hadar_fork helper: its inner AdamW state is saved beside
/// each copy's checkpoint and handed to the same copy index next round, and round 1 is
/// consolidated with the outer Nesterov step.
#[test]
fn hadare_rounds_of_the_pytorch_example_keep_inner_state_and_take_an_outer_step() {
    hadare_rounds("digits_torch.py", true);
}

/// Two rounds of two copies (60 and 30 steps) of an example program, consolidated by
/// `hadar average` (round 1 with `--outer nesterov` when `outer`); checks the steps, the
/// weights and the final model's held-out accuracy.
fn hadare_rounds(program: &str, outer: bool) {
    let d = tempfile::tempdir().unwrap();
    let train = root().join("wrappers/examples").join(program);
    let budgets = [60u64, 30];
    let mut merged: Option<PathBuf> = None;
    let velocity = d.path().join("velocity.safetensors");
    for round in 0..2 {
        let mut inputs = Vec::new();
        let mut copies = Vec::new();
        for (k, budget) in budgets.iter().enumerate() {
            let ckpt = d.path().join(format!("r{round}-c{k}.safetensors"));
            let res = d.path().join(format!("r{round}-c{k}.json"));
            let inner_from = d
                .path()
                .join(format!("r{}-c{k}.safetensors.inner", round.max(1) - 1));
            let (k_s, r_s, b_s) = (k.to_string(), round.to_string(), budget.to_string());
            let mut args = vec![
                "--index",
                &k_s,
                "--copies",
                "2",
                "--round",
                &r_s,
                "--checkpoint-out",
                s(&ckpt),
                "--result",
                s(&res),
                "--step-budget",
                &b_s,
            ];
            if let Some(m) = &merged {
                args.extend(["--start-from", s(m), "--inner-state-from", s(&inner_from)]);
            }
            args.extend(["--", "python3", s(&train), "train", "--seed", "3"]);
            let o = runner(&args);
            assert!(
                o.status.success(),
                "copy {k} round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let steps = result(&res)["steps"].as_u64().unwrap();
            assert_eq!(steps, *budget);
            if outer {
                // The helper kept the inner optimizer's state beside the checkpoint, and
                // round 1 read round 0's.
                assert!(ckpt.with_extension("safetensors.inner").is_file());
                let said = String::from_utf8_lossy(&o.stderr);
                assert_eq!(
                    round == 1,
                    said.contains("inner optimizer state from"),
                    "{said}"
                );
            }
            inputs.push(format!("{}:{steps}", s(&ckpt)));
            copies.push(ckpt);
        }
        let out = d.path().join(format!("merged-r{round}.safetensors"));
        let mut args = vec!["average", "--out", s(&out)];
        let nesterov = outer && merged.is_some();
        if nesterov {
            let start = merged.as_ref().unwrap();
            args.extend([
                "--outer",
                "nesterov",
                "--start",
                s(start),
                "--outer-lr",
                "1.5",
            ]);
            args.extend(["--outer-momentum", "0.5", "--momentum-state", s(&velocity)]);
        }
        args.extend(inputs.iter().map(String::as_str));
        let o = Command::new(env!("CARGO_BIN_EXE_hadar"))
            .args(&args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let name = if outer { "4.weight" } else { "output.weight" };
        let (a, b, m) = (
            tensor_f32(&copies[0], name),
            tensor_f32(&copies[1], name),
            tensor_f32(&out, name),
        );
        let start = merged.as_ref().map(|p| tensor_f32(p, name));
        for (i, ((x, y), z)) in a.iter().zip(&b).zip(&m).enumerate() {
            // The step-weighted mean of the copies' (2/3, 1/3); with the outer step from S
            // (no velocity before): S + 1.5 (0.5 delta + delta).
            let mean = (2.0 * *x as f64 + *y as f64) / 3.0;
            let want = match (&start, nesterov) {
                (Some(s0), true) => s0[i] as f64 + 1.5 * 1.5 * (mean - s0[i] as f64),
                _ => mean,
            };
            assert!(
                (*z as f64 - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{z} vs {want}"
            );
        }
        assert_eq!(velocity.is_file(), nesterov);
        merged = Some(out);
    }
    // The merged checkpoint loads in Python (safetensors' own loader) and classifies digits
    // far better than chance (10 classes: 0.1).
    let o = Command::new("python3")
        .arg(&train)
        .arg("evaluate")
        .arg(merged.unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let acc = v["accuracy"].as_f64().unwrap();
    assert_eq!(v["test_samples"], 540);
    assert!(acc > 0.5, "held-out accuracy {acc}");
}

/// Runs the fork runner in job mode (`hadar-fork-run -- PROGRAM`) inside a pretend Slurm job
/// whose `scontrol show job` prints `record`; returns the runner's output.
fn job_mode(dir: &Path, record: &str, extra_env: &[(&str, &str)], program: &[&str]) -> Output {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let scontrol = bin.join("scontrol");
    std::fs::write(
        &scontrol,
        format!("#!/bin/sh\ncat <<'EOF'\n{record}\nEOF\n"),
    )
    .unwrap();
    std::fs::set_permissions(&scontrol, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(root().join("wrappers/hadar-fork-run"));
    cmd.arg("--")
        .args(program)
        .env("PATH", path)
        .env("SLURM_JOB_ID", "5")
        .env("SLURM_SUBMIT_DIR", dir)
        .env_remove("HADAR_FORK_INDEX")
        .env_remove("HADAR_CHECKPOINT_OUT")
        .env_remove("HADAR_STEP_BUDGET");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd.output().expect("run hadar-fork-run")
}

/// A program that leaves a mark, writes a checkpoint and reports 7 steps.
const MARKING: &str = "touch \"$MARK\"; [ -z \"${HADAR_CHECKPOINT_OUT:-}\" ] || { echo x > \"$HADAR_CHECKPOINT_OUT\"; echo 7 > \"$HADAR_STEPS_FILE\"; }";

#[test]
fn job_mode_finishes_a_forked_job_by_its_comment_and_runs_nothing() {
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    let mark_env = [("MARK", s(&mark))];
    let done = "JobId=5 JobName=x\n   Comment=hadar-fork:v1;state=done;round=4;copies=0;steps=900/900;pct=100 ";
    let out = job_mode(d.path(), done, &mark_env, &["sh", "-c", MARKING]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("900/900 steps in 4 rounds"));
    assert!(
        !mark.exists(),
        "the program does not run again at the finish step"
    );
    let failed = done.replace("state=done", "state=failed");
    let out = job_mode(d.path(), &failed, &mark_env, &["sh", "-c", MARKING]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed"));
    let active = done.replace("state=done", "state=active");
    let out = job_mode(d.path(), &active, &mark_env, &["sh", "-c", MARKING]);
    assert_eq!(out.status.code(), Some(1), "released too early: {out:?}");
    assert!(!mark.exists());
}

#[test]
fn job_mode_inside_a_copy_runs_the_program_as_is() {
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    let out = job_mode(
        d.path(),
        "JobId=5 JobName=x",
        &[
            ("MARK", s(&mark)),
            ("HADAR_FORK_INDEX", "1"),
            ("HADAR_CHECKPOINT_OUT", s(&d.path().join("c"))),
            ("HADAR_STEPS_FILE", s(&d.path().join("steps"))),
        ],
        &["sh", "-c", &format!("{MARKING}; exit 4")],
    );
    assert_eq!(
        out.status.code(),
        Some(4),
        "the program's own status: {out:?}"
    );
    assert!(mark.exists());
}

#[test]
fn job_mode_without_forking_runs_one_copy_for_the_whole_job() {
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    let record =
        "JobId=5 JobName=x\n   AdminComment=hadar:v1 gpus=2 steps=7 fork=yes \n   Comment=(null)";
    let out = job_mode(
        d.path(),
        record,
        &[("MARK", s(&mark))],
        &["sh", "-c", MARKING],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r = result(&d.path().join("hadar-fork-5.json"));
    assert_eq!(
        (r["steps"].as_u64(), r["copies"].as_u64(), r["ok"].as_bool()),
        (Some(7), Some(1), Some(true))
    );
    assert!(d.path().join("hadar-fork-5.safetensors").exists());
    let out = job_mode(
        d.path(),
        "JobId=5 JobName=x",
        &[("MARK", s(&mark))],
        &["true"],
    );
    assert_eq!(out.status.code(), Some(64), "length unknown: {out:?}");
}
