//! The fork pass's pure parts.
use super::*;
use proptest::prelude::*;

#[test]
fn forked_profiles_offer_every_copy_size_up_to_the_workers() {
    let table = hadar_formats::embedded::throughputs().unwrap();
    let spec = JobSpec {
        restart_s: None,
        workers: 4,
        steps: Some(10),
        job_type: Some("resnet18-b64".into()),
        hints: vec![],
        gpu_types: None,
        fork: true,
        model: None,
        outer: None,
    };
    let types = vec!["v100".to_string(), "k80".to_string()];
    let priors = Priors {
        default_rate_per_gpu: 1.0,
        throughput_scale: 1.0,
    };
    let p = fork_profile(&spec, &types, &[], &table, &priors);
    for g in [1, 2, 4] {
        assert_eq!(
            p.rate(hadar_core::GpuType(1), g),
            spec::table_rate(&table, "ResNet-18 (batch size 64)", "k80", g),
            "{g} GPUs"
        );
    }
    assert_eq!(p.rate(hadar_core::GpuType(0), 3), None);
}

#[test]
fn budgets_follow_rates_and_add_up() {
    assert_eq!(split_budget(100, &[3.0, 1.0]), vec![75, 25]);
    assert_eq!(split_budget(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
    assert_eq!(split_budget(5, &[0.0, 0.0]), vec![3, 2]);
    assert_eq!(split_budget(0, &[2.0]), vec![0]);
    assert!(split_budget(7, &[]).is_empty());
}

#[test]
fn the_comment_is_one_word_with_the_progress() {
    let mut fj = ForkJob::new(9, 1000.0);
    fj.steps_done = 805.0;
    let c = comment(&fj, None);
    assert_eq!(
        c,
        "hadar-fork:v1;state=active;round=0;copies=0;steps=805/1000;pct=80"
    );
    assert!(!c.contains(' '));
    fj.state = ForkState::Done;
    assert!(comment(&fj, None).contains("state=done"));
}

fn test_in_job() -> InJob<'static> {
    InJob {
        hadar_bin: Path::new("/usr/bin/hadar"),
        job_dir: Path::new("/sp/1"),
        user_script: "#!/bin/sh\n#HADAR fork=yes\n#SBATCH --gres=gpu:1\n",
        plan: "{}",
    }
}

/// A round of job 1 with two copies, on n1's V100s and n3's K80s, the second carrying the
/// previous round's inner optimizer state, starting from a path with a quote in it.
fn two_copy_round() -> ForkRound {
    let copy = |node: &str, t: &str, k: usize| ForkCopy {
        node: node.into(),
        gpu_type: t.into(),
        gpus: 2,
        budget: 40,
        checkpoint: format!("/sp/1/round-0/copy-{k}.safetensors"),
        result: format!("/sp/1/round-0/copy-{k}.json"),
        steps: None,
        ok: None,
        exit_code: None,
        weight: None,
        seconds: None,
        inner_state_from: (k == 1).then(|| "/sp/1/round-0/copy-1.safetensors.inner".into()),
    };
    ForkRound {
        job: 1,
        round: 0,
        state: RoundState::Submitting,
        copy_job: None,
        copy_job_name: "hadar-fork-1-r0".into(),
        copies: vec![copy("n1", "v100", 0), copy("n3", "k80", 1)],
        start_from: Some("/sp/it's.safetensors".into()),
        consolidated: "/sp/1/consolidated-0.safetensors".into(),
        deadline_unix: 1234,
        started_s: 0.0,
        ended_s: None,
        steps: 0.0,
        message: None,
        outer: None,
        copy_seconds: None,
    }
}

#[test]
fn the_copy_script_has_one_component_per_copy_and_quotes_paths() {
    let round = two_copy_round();
    let s = copy_script(
        &round,
        Path::new("/r/hadar-fork-run"),
        Path::new("/sp/1/job.sh"),
        7,
        " --partition=gpu",
        Path::new("/sp/1/round-0"),
        &test_in_job(),
    );
    assert_eq!(s.matches("#SBATCH hetjob").count(), 1, "{s}");
    assert!(
        s.contains("--nodelist=n1 --gres=gpu:v100:2 --partition=gpu"),
        "{s}"
    );
    assert!(s.contains("--nodelist=n3 --gres=gpu:k80:2"), "{s}");
    assert!(s.contains("#HADAR off"));
    // The user's script rides along as base64: none of its directives reach sbatch or
    // the plugin; the copy job makes the user's folder, refusing one not its user's, and
    // averages after its copies, reporting in its own Comment.
    assert!(
        !s.contains("#HADAR fork") && !s.contains("--gres=gpu:1\n"),
        "{s}"
    );
    assert!(s.contains(&crate::fork_consolidate::base64(
        test_in_job().user_script.as_bytes()
    )));
    assert!(s.contains("[ ! -O '/sp/1' ]"), "{s}");
    assert!(s.contains("--output=/dev/null"), "{s}");
    assert!(
        s.contains("wait\nreport=$('/usr/bin/hadar' fork-consolidate round.json)"),
        "{s}"
    );
    assert!(
        s.contains("scontrol update JobId=\"$SLURM_JOB_ID\" Comment=\"$1\""),
        "{s}"
    );
    assert!(s.contains("srun --het-group=1 --ntasks=1 env HADAR_GPU_TYPE='k80' HADAR_GPUS=2 '/r/hadar-fork-run' --index 1 --copies 2 --round 0"), "{s}");
    assert!(s.contains("--start-from '/sp/it'\\''s.safetensors'"), "{s}");
    // Copy 1 gets the inner optimizer state of the previous round's copy 1; copy 0 none.
    assert!(
        s.contains("--start-from '/sp/it'\\''s.safetensors' --inner-state-from '/sp/1/round-0/copy-1.safetensors.inner' --step-budget 40"),
        "{s}"
    );
    assert_eq!(s.matches("--inner-state-from").count(), 1, "{s}");
    assert!(
        s.contains("--step-budget 40 --deadline 1234 --steps-done 7 -- '/sp/1/job.sh' &"),
        "{s}"
    );
    let single = ForkRound {
        copies: vec![round.copies[0].clone()],
        ..round
    };
    let s = copy_script(
        &single,
        Path::new("/r/run"),
        Path::new("/sp/1/job.sh"),
        0,
        "",
        Path::new("/d"),
        &test_in_job(),
    );
    assert!(!s.contains("hetjob") && !s.contains("--het-group"), "{s}");
    assert!(
        s.contains(
            "srun --ntasks=1 env HADAR_GPU_TYPE='v100' HADAR_GPUS=2 '/r/run' --index 0 --copies 1"
        ),
        "{s}"
    );
}

#[test]
fn copies_carry_the_jobs_partition_accounting_and_per_gpu_cpus_and_memory() {
    let text = "JobId=5 JobName=a\n   Priority=0 Account=proj QOS=high JobState=PENDING Reason=JobHeldAdmin\n   TimeLimit=1-02:00:00 TimeMin=N/A\n   Partition=gpu\n   NumNodes=1 NumCPUs=8 NumTasks=1 CPUs/Task=1\n   MinCPUsNode=8 MinMemoryNode=4G MinTmpDiskNode=0\n";
    let j = hadar_slurm::job::parse_jobs(text).0.remove(0);
    assert_eq!(
        copy_options(Some(&j), 2),
        " --partition=gpu --account=proj --qos=high --time=1560 --cpus-per-gpu=4 --mem-per-gpu=2048M"
    );
    assert_eq!(copy_options(None, 2), "");
}

#[test]
fn the_outer_step_reads_the_last_velocity_and_writes_a_new_one() {
    let dir = Path::new("/sp/9");
    let nesterov = Outer::Nesterov {
        lr: 1.0,
        momentum: 0.5,
    };
    let mut fj = ForkJob::new(9, 100.0);
    // No start checkpoint yet (round 0) or the plain mean: no outer step.
    assert_eq!(outer_step(nesterov, &fj, dir, 0), None);
    fj.checkpoint = Some("/sp/9/consolidated-0.safetensors".into());
    assert_eq!(outer_step(Outer::Mean, &fj, dir, 1), None);
    let first = outer_step(nesterov, &fj, dir, 1).unwrap();
    assert_eq!(first.momentum_from, None);
    assert_eq!(
        first.momentum_out.as_deref(),
        Some("/sp/9/momentum-1.safetensors")
    );
    fj.momentum = first.momentum_out.clone();
    let second = outer_step(nesterov, &fj, dir, 2).unwrap();
    assert_eq!(
        second.momentum_from.as_deref(),
        Some("/sp/9/momentum-1.safetensors")
    );
    assert_eq!(
        second.momentum_out.as_deref(),
        Some("/sp/9/momentum-2.safetensors")
    );
    // No momentum: no velocity to keep.
    let plain = Outer::Nesterov {
        lr: 0.7,
        momentum: 0.0,
    };
    assert_eq!(outer_step(plain, &fj, dir, 2).unwrap().momentum_out, None);

    // The averaging command: a first velocity is explicitly zero (an earlier attempt's
    // file must not count), later ones name the previous round's file.
    let round = |outer: Option<OuterStep>| ForkRound {
        job: 9,
        round: 2,
        state: RoundState::Running,
        copy_job: None,
        copy_job_name: "hadar-fork-9-r2".into(),
        copies: vec![],
        start_from: fj.checkpoint.clone(),
        consolidated: "/sp/9/consolidated-2.safetensors".into(),
        deadline_unix: 0,
        started_s: 0.0,
        ended_s: None,
        steps: 0.0,
        message: None,
        outer,
        copy_seconds: None,
    };
    assert!(outer_args(&round(None)).is_empty());
    let a = outer_args(&round(Some(first))).join(" ");
    assert_eq!(
        a,
        "--outer nesterov --start /sp/9/consolidated-0.safetensors --outer-lr 1 --outer-momentum 0.5 --momentum-state /sp/9/momentum-1.safetensors --momentum-zero"
    );
    let a = outer_args(&round(Some(second))).join(" ");
    assert!(
        a.ends_with("--momentum-state /sp/9/momentum-2.safetensors --momentum-from /sp/9/momentum-1.safetensors"),
        "{a}"
    );
}

proptest! {
    #[test]
    fn budgets_always_add_up_to_the_total(total in 0u64..1_000_000, rates in prop::collection::vec(0.0f64..100.0, 1..8)) {
        let b = split_budget(total, &rates);
        prop_assert_eq!(b.len(), rates.len());
        prop_assert_eq!(b.iter().sum::<u64>(), total);
    }
}
