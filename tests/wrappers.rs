//! The shell wrappers of `wrappers/`, run as a job's script would run them (no Slurm needed
//! for what is checked here; `tests/serve_slurm.rs` runs jobs on a real cluster).

use std::process::Command;

fn sh(script: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(script)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("SLURM_JOB_ID");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the progress helper with these arguments, each passed as one argument (no shell).
fn progress(args: &[&str], job: Option<&str>) -> (i32, String) {
    let mut c = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/wrappers/hadar-progress"
    ));
    c.args(args)
        .env_remove("SLURM_JOB_ID")
        .env("PATH", "/nonexistent");
    if let Some(j) = job {
        c.env("SLURM_JOB_ID", j);
    }
    let out = c.output().expect("run hadar-progress");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn progress_helper_refuses_anything_but_two_numbers_inside_a_job() {
    let bad: [&[&str]; 8] = [
        &[],
        &["1"],
        &["1", "2", "3"],
        &["x", "2"],
        &["1", "2;true"],
        &["1 2", "3"],
        &["1", "-2"],
        &["1.", "2..3"],
    ];
    for args in bad {
        let (code, err) = progress(args, Some("7"));
        assert_eq!(code, 2, "{args:?} should be refused: {err}");
    }
    let (code, err) = progress(&["10", "2.5"], None);
    assert_eq!(code, 2);
    assert!(err.contains("not inside a Slurm job"), "{err}");
    let (code, _) = progress(&["10", "2.5"], Some("7;x"));
    assert_eq!(code, 2);
    // Well-formed arguments get as far as running scontrol (absent from this PATH).
    let (code, _) = progress(&["10", "2.5"], Some("7"));
    assert_eq!(code, 127);
}

#[test]
fn checkpoint_helpers_save_resume_and_run_the_handler_on_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("ck");
    let script = format!(
        ". wrappers/hadar-checkpoint.sh
         echo start=$(hadar_resume_steps {ck})
         save() {{ hadar_save_checkpoint {ck} 1234; echo saved; exit 0; }}
         hadar_on_checkpoint save
         kill -USR1 $$
         sleep 5",
        ck = ck.display()
    );
    let (code, out, err) = sh(&script, &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("start=0") && out.contains("saved"), "{out}");
    let (_, out, _) = sh(
        &format!(
            ". wrappers/hadar-checkpoint.sh; hadar_resume_steps {}",
            ck.display()
        ),
        &[],
    );
    assert_eq!(out.trim(), "1234");
}
