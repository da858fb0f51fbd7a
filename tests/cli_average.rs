//! `hadar average` through the real binary: weights from arguments and from a Job Tracker
//! record, exit codes and one-line errors for bad input, and the output left untouched when
//! an input is bad.

use hadar_average::Checkpoint;
use hadar_average::dtype::Dtype;
use hadar_average::write::{TensorData, write_safetensors};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn hadar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .output()
        .expect("run hadar")
}

fn checkpoint(dir: &Path, name: &str, values: &[f32]) -> PathBuf {
    let path = dir.join(name);
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let steps = 7i64.to_le_bytes();
    write_safetensors(
        &path,
        None,
        &[
            TensorData {
                name: "w",
                dtype: Dtype::F32,
                shape: vec![values.len() as u64],
                bytes: &bytes,
            },
            TensorData {
                name: "n",
                dtype: Dtype::I64,
                shape: vec![],
                bytes: &steps,
            },
        ],
    )
    .unwrap();
    path
}

fn values(path: &Path) -> Vec<f32> {
    let c = Checkpoint::open(path).unwrap();
    let t = c.header().tensor("w").unwrap().clone();
    c.data(&t)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn steps_given_as_arguments_weigh_the_copies() {
    let d = tempfile::tempdir().unwrap();
    let a = checkpoint(d.path(), "a.safetensors", &[10.0, 0.0]);
    let b = checkpoint(d.path(), "b.safetensors", &[0.0, 10.0]);
    let out = d.path().join("merged.safetensors");
    let o = hadar(&[
        "average",
        "--format",
        "json",
        "--out",
        s(&out),
        &format!("{}:1200", s(&a)),
        &format!("{}:800", s(&b)),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["inputs"][0]["weight"], 0.6);
    assert_eq!(v["tensors"], 2);
    assert_eq!(v["averaged"], 1);
    assert_eq!(values(&out), vec![6.0, 4.0]);
}

#[test]
fn steps_can_come_from_a_job_tracker_record() {
    let d = tempfile::tempdir().unwrap();
    let a = checkpoint(d.path(), "a.safetensors", &[4.0]);
    let b = checkpoint(d.path(), "b.safetensors", &[8.0]);
    let tracker = d.path().join("tracker.jsonl");
    let line = |round: u64, sa: f64, sb: f64, with_paths: bool| {
        let ck = |p: &Path| {
            if with_paths {
                format!(r#","checkpoint":"{}""#, s(p))
            } else {
                String::new()
            }
        };
        format!(
            r#"{{"round":{round},"job":4,"start_s":0,"end_s":360,"kind":"forked","copies":[{{"node":"v100-0","gpu_type":"v100","gpus":1,"steps":{sa}{}}},{{"node":"k80-0","gpu_type":"k80","gpus":1,"steps":{sb}{}}}],"aggregated_steps":{},"remaining_steps":0,"policy":"hadare"}}"#,
            ck(&a),
            ck(&b),
            sa + sb
        )
    };
    std::fs::write(
        &tracker,
        format!(
            "{}\n{}\n",
            line(0, 300.0, 100.0, false),
            line(1, 100.0, 300.0, true)
        ),
    )
    .unwrap();
    let out = d.path().join("m.safetensors");

    // Round 0: files given in copy order; weights 0.75 and 0.25.
    let o = hadar(&[
        "average",
        "--out",
        s(&out),
        "--weights-from",
        s(&tracker),
        "--job",
        "4",
        "--round",
        "0",
        s(&a),
        s(&b),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(values(&out), vec![5.0]);
    // Round 1: the record names the checkpoints.
    let o = hadar(&[
        "average",
        "--out",
        s(&out),
        "--weights-from",
        s(&tracker),
        "--round",
        "1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(values(&out), vec![7.0]);
    // Two records match, or the record has two copies but one file is given: refused.
    for args in [vec!["--job", "4"], vec!["--round", "0", s(&a)]] {
        let mut all = vec!["average", "--out", s(&out), "--weights-from", s(&tracker)];
        all.extend(args);
        let o = hadar(&all);
        assert_eq!(o.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&o.stderr).lines().count(),
            1,
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn bad_inputs_exit_2_with_one_line_and_leave_the_output_alone() {
    let d = tempfile::tempdir().unwrap();
    let a = checkpoint(d.path(), "a.safetensors", &[1.0, 2.0]);
    let short = checkpoint(d.path(), "short.safetensors", &[1.0]);
    let junk = d.path().join("junk.safetensors");
    std::fs::write(&junk, [0xffu8; 64]).unwrap();
    let out = d.path().join("m.safetensors");
    std::fs::write(&out, "round 3").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![format!("{}:1", s(&a)), format!("{}:1", s(&short))],
            "`w`",
        ),
        (
            vec![format!("{}:1", s(&a)), format!("{}:1", s(&junk))],
            "junk.safetensors",
        ),
        (
            vec![format!("{}:1", s(&a)), format!("{}:-1", s(&a))],
            "steps must be",
        ),
        (
            vec![format!("{}:1", s(&a)), s(&a).to_string()],
            "FILE:STEPS",
        ),
        (
            vec![
                format!("{}:1", s(&a)),
                format!("{}:1", s(&d.path().join("absent"))),
            ],
            "absent",
        ),
    ];
    for (inputs, expect) in cases {
        let mut args = vec!["average".to_string(), "--out".into(), s(&out).into()];
        args.extend(inputs);
        let o = Command::new(env!("CARGO_BIN_EXE_hadar"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(expect), "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), b"round 3");
    }
}

#[test]
fn outer_nesterov_steps_from_the_start_and_keeps_the_velocity() {
    let d = tempfile::tempdir().unwrap();
    let start = checkpoint(d.path(), "s.safetensors", &[1.0, 2.0]);
    let a = checkpoint(d.path(), "a.safetensors", &[3.0, 2.0]);
    let b = checkpoint(d.path(), "b.safetensors", &[1.0, 6.0]);
    let out = d.path().join("m.safetensors");
    let state = d.path().join("v.safetensors");
    let (a3, b1) = (format!("{}:3", s(&a)), format!("{}:1", s(&b)));
    let step = |extra: &[&str]| {
        let mut args = vec![
            "average",
            "--format",
            "json",
            "--out",
            s(&out),
            "--outer",
            "nesterov",
            "--start",
            s(&start),
            "--outer-lr",
            "0.5",
            "--outer-momentum",
            "0.5",
            "--momentum-state",
            s(&state),
        ];
        args.extend_from_slice(extra);
        args.extend([a3.as_str(), b1.as_str()]);
        hadar(&args)
    };
    // mean = (2.5, 3), delta = (1.5, 1); velocity = delta; M = S + 0.5 (0.5 v + delta).
    let o = step(&[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["outer"]["method"], "nesterov");
    assert_eq!(v["outer"]["momentum_from"], Value::Null);
    assert_eq!(values(&out), vec![1.0 + 0.5 * 2.25, 2.0 + 0.5 * 1.5]);
    // In place: the second run reads the first's velocity (1.5, 1): v = (2.25, 1.5).
    let o = step(&[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        values(&out),
        vec![
            1.0 + 0.5 * (0.5 * 2.25 + 1.5),
            2.0 + 0.5 * (0.5 * 1.5 + 1.0)
        ]
    );
    // --momentum-zero ignores the state the runs above left: back to the first result.
    let o = step(&["--momentum-zero"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(values(&out), vec![1.0 + 0.5 * 2.25, 2.0 + 0.5 * 1.5]);
    // Bad combinations: one line each, exit 2, naming the flag or file.
    let no_start = hadar(&[
        "average",
        "--out",
        s(&out),
        "--outer",
        "nesterov",
        &format!("{}:1", s(&a)),
    ]);
    let missing_from = step(&["--momentum-from", s(&d.path().join("nope"))]);
    let start_without_outer = hadar(&[
        "average",
        "--out",
        s(&out),
        "--start",
        s(&start),
        &format!("{}:1", s(&a)),
    ]);
    for (o, word) in [
        (no_start, "--start"),
        (missing_from, "nope"),
        (start_without_outer, "--outer nesterov"),
    ] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(word), "{err}");
    }
}
