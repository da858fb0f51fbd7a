//! `hadar status` on a recorded state database of a 40-node cluster: GPUs aggregated per
//! partition and GPU type by default, per node with `--nodes`, long GRES type names intact;
//! checked against counts from the fixture and against golden files.
//!
//! To regenerate the golden files after an intended change, run the tests with
//! `HADAR_UPDATE_GOLDEN=1` and review the diff.

#[path = "support/golden.rs"]
mod golden;

use golden::check_golden;
use hadar_store::{JobRow, NodeRow, Phase, RoundRow, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const A100: &str = "nvidia_a100-sxm4-80gb";

/// Node `i` (1..=40): its partitions, GPU type and count. n001-n020: 4 V100 in gpu;
/// n021-n036: 8 A100 in gpu and a100; n037-n040: 4 K80 in old.
fn layout(i: u32) -> (Vec<&'static str>, &'static str, u32) {
    match i {
        1..=20 => (vec!["gpu"], "v100", 4),
        21..=36 => (vec!["a100", "gpu"], A100, 8),
        _ => (vec!["old"], "k80", 4),
    }
}

fn node(i: u32) -> NodeRow {
    let (parts, ty, n) = layout(i);
    let mut gpus = BTreeMap::new();
    gpus.insert(ty.to_string(), n);
    let mut row = NodeRow {
        name: format!("n{i:03}"),
        partitions: parts.iter().map(|p| p.to_string()).collect(),
        unusable: (i == 40).then(|| "down".to_string()),
        gpus,
        ..NodeRow::default()
    };
    if i % 4 == 0 && i != 40 {
        row.busy.insert(ty.to_string(), n / 2);
    }
    if i == 21 {
        row.planned.insert(ty.to_string(), 8);
    }
    row
}

fn state(dir: &Path) -> PathBuf {
    let path = dir.join("state.db");
    let mut store = Store::open(&path).unwrap();
    let nodes: Vec<NodeRow> = (1..=40).map(node).collect();
    let round = RoundRow {
        round: 12,
        started_s: 4320.0,
        decision_ms: 1.25,
        policy: "hadar".into(),
        slurm_release: Some("26.05.3".into()),
        unusable_nodes: vec![("n040".into(), "down".into())],
        price_bounds: Some((0.01, 2.5)),
        prices: nodes
            .iter()
            .filter(|n| n.unusable.is_none())
            .map(|n| {
                let (ty, _) = n.gpus.iter().next().unwrap();
                let p = if n.name == "n021" { 0.5 } else { 0.01 };
                (n.name.clone(), ty.clone(), p)
            })
            .collect(),
        nodes,
        ..RoundRow::default()
    };
    let mut running = JobRow::new(
        7,
        "resnet-long-training-run".into(),
        "hadar:v1 gpus=8".into(),
        8,
        1000.0,
        10.0,
    );
    running.phase = Phase::Running;
    running.placement = Some(vec![("n021".into(), vec![(A100.into(), 8)])]);
    running.steps_done = 250.0;
    running.last_rate = Some(1.5);
    let waiting = JobRow::new(8, "lm".into(), "hadar:v1 gpus=2".into(), 2, 500.0, 20.0);
    store
        .write(|w| {
            w.put_job(&running)?;
            w.put_job(&waiting)?;
            w.put_round(&round, &[])
        })
        .unwrap();
    path
}

fn status(state: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(["status", "--state"])
        .arg(state)
        .args(extra)
        .output()
        .expect("run hadar status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The cells of the row whose first cells are `first`.
fn row<'a>(out: &'a str, first: &[&str]) -> Vec<&'a str> {
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.starts_with(first))
        .unwrap_or_else(|| panic!("no row {first:?} in\n{out}"))
}

#[test]
fn status_aggregates_per_partition_and_gpu_type() {
    let dir = tempfile::tempdir().unwrap();
    let out = status(&state(dir.path()), &[]);
    // One row per (partition, type) the fixture has, not one per node.
    let mut groups: BTreeMap<(&str, &str), (u32, u32, u32)> = BTreeMap::new();
    for i in 1..=40 {
        let (parts, ty, n) = layout(i);
        for p in parts {
            let g = groups.entry((p, ty)).or_default();
            g.0 += 1;
            g.1 += n;
            g.2 += if i == 40 { 0 } else { n };
        }
    }
    for ((p, ty), (nodes, gpus, usable)) in &groups {
        let cells = row(&out, &[p, ty]);
        assert_eq!(
            cells[2..5],
            [nodes.to_string(), gpus.to_string(), usable.to_string()],
            "{p}/{ty}"
        );
    }
    assert_eq!(
        row(&out, &["a100", A100])[8],
        "0.0100-0.5000",
        "price range over its nodes"
    );
    assert!(out.contains("left out: 1 node(s) (1 down)"), "{out}");
    assert!(
        !out.contains("n001"),
        "no node is listed by default:\n{out}"
    );
    let job = out.lines().find(|l| l.starts_with("7 ")).unwrap();
    assert!(job.ends_with("n021 (8 x nvidia_a100-sxm4-80gb)"), "{job}");
    check_golden("status_partitions.txt", &out);
}

#[test]
fn status_nodes_lists_every_node_and_type() {
    let dir = tempfile::tempdir().unwrap();
    let out = status(&state(dir.path()), &["--nodes"]);
    for i in 1..=40 {
        let (parts, ty, n) = layout(i);
        let cells = row(&out, &[&format!("n{i:03}")]);
        assert_eq!(
            cells[1..4],
            [parts.join(","), ty.to_string(), n.to_string()],
            "n{i:03}"
        );
    }
    assert_eq!(row(&out, &["n040"]).last(), Some(&"down"));
    // The long type name fits: the GPU counts (right-aligned) end under the header's "GPUs"
    // on the rows with the longest and a short type name alike.
    let header = out.lines().find(|l| l.starts_with("node")).unwrap();
    let end = header.find("GPUs").unwrap() + "GPUs".len();
    for (node, count) in [("n021", "8"), ("n001", "4")] {
        let line = out.lines().find(|l| l.starts_with(node)).unwrap();
        assert_eq!(
            &line[end - 1..end + 1],
            format!("{count} "),
            "{header}\n{line}"
        );
    }
    check_golden("status_nodes.txt", &out);
}
