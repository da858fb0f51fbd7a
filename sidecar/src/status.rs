//! `hadar status` as text: the last round's GPUs aggregated per partition and GPU type (or,
//! with `--nodes`, per node), then the managed jobs; every table through [`Table`], whose
//! columns grow to the longest cell, so long GRES type names (`nvidia_a100-sxm4-80gb`) fit.

use crate::table::Table;
use hadar_store::{JobRow, NodeRow, RoundRow};
use std::collections::BTreeMap;

/// GPU counts of one group of nodes and types.
#[derive(Default)]
struct Use {
    nodes: u32,
    gpus: u32,
    usable: u32,
    busy: u32,
    planned: u32,
    /// Lowest and highest price per GPU on its nodes, when the round priced them.
    prices: Option<(f64, f64)>,
}

impl Use {
    fn add(&mut self, node: &NodeRow, gpu_type: &str, price: Option<f64>) {
        let count = node.gpus.get(gpu_type).copied().unwrap_or(0);
        self.nodes += 1;
        self.gpus += count;
        if node.unusable.is_none() {
            self.usable += count;
        }
        self.busy += node.busy.get(gpu_type).copied().unwrap_or(0);
        self.planned += node.planned.get(gpu_type).copied().unwrap_or(0);
        if let Some(p) = price {
            let (lo, hi) = self.prices.unwrap_or((p, p));
            self.prices = Some((lo.min(p), hi.max(p)));
        }
    }

    /// The cells after the group's names.
    fn cells(&self) -> Vec<String> {
        let util = if self.usable > 0 {
            100.0 * f64::from(self.planned) / f64::from(self.usable)
        } else {
            0.0
        };
        vec![
            self.nodes.to_string(),
            self.gpus.to_string(),
            self.usable.to_string(),
            self.busy.to_string(),
            self.planned.to_string(),
            format!("{util:.0}%"),
            price_text(self.prices),
        ]
    }
}

fn price_text(prices: Option<(f64, f64)>) -> String {
    match prices {
        None => "-".into(),
        Some((lo, hi)) if (hi - lo).abs() < 5e-5 => format!("{lo:.4}"),
        Some((lo, hi)) => format!("{lo:.4}-{hi:.4}"),
    }
}

/// The round's header, its GPU table and left-out nodes, then the jobs; `per_node` lists
/// each node instead of aggregating. `placement` gives a job's placement words.
pub fn render(
    round: Option<&RoundRow>,
    jobs: &[&JobRow],
    per_node: bool,
    placement: impl Fn(&JobRow) -> String,
) -> String {
    let mut out = match round {
        None => "no round has run yet\n".to_string(),
        Some(r) => round_text(r, per_node),
    };
    out.push('\n');
    out += &jobs_table(jobs, placement).render();
    out
}

fn round_text(r: &RoundRow, per_node: bool) -> String {
    let mut out = format!(
        "round {} at {:.1} s; policy {} decided in {:.2} ms; Slurm {}\n",
        r.round,
        r.started_s,
        r.policy,
        r.decision_ms,
        r.slurm_release.as_deref().unwrap_or("release unknown")
    );
    if let Some((l, u)) = r.price_bounds {
        out += &format!("prices per GPU between L = {l:.4} and U = {u:.4}\n");
    }
    out.push('\n');
    out += &if r.nodes.is_empty() {
        per_type_table(r)
    } else if per_node {
        per_node_table(r)
    } else {
        per_partition_table(r)
    }
    .render();
    out += &left_out(r, per_node);
    out
}

const USE_COLUMNS: [&str; 7] = ["nodes", "GPUs", "usable", "busy", "planned", "use", "price"];

fn price_of(r: &RoundRow, node: &str, gpu_type: &str) -> Option<f64> {
    r.prices
        .iter()
        .find(|(n, t, _)| n == node && t == gpu_type)
        .map(|(_, _, p)| *p)
}

/// One row per (partition, GPU type): a node in two partitions counts in both.
fn per_partition_table(r: &RoundRow) -> Table {
    let mut groups: BTreeMap<(String, String), Use> = BTreeMap::new();
    for node in &r.nodes {
        let parts = if node.partitions.is_empty() {
            vec!["-".to_string()]
        } else {
            node.partitions.clone()
        };
        for p in parts {
            for t in node.gpus.keys() {
                let price = price_of(r, &node.name, t);
                groups
                    .entry((p.clone(), t.clone()))
                    .or_default()
                    .add(node, t, price);
            }
        }
    }
    let mut t = Table::new(&[&["partition", "GPU type"][..], &USE_COLUMNS[..]].concat());
    for ((p, ty), u) in groups {
        t.row([vec![p, ty], u.cells()].concat());
    }
    t
}

/// One row per (node, GPU type).
fn per_node_table(r: &RoundRow) -> Table {
    let mut t = Table::new(&[
        "node",
        "partitions",
        "GPU type",
        "GPUs",
        "busy",
        "planned",
        "price",
        "state",
    ]);
    for node in &r.nodes {
        for (ty, count) in &node.gpus {
            let get = |m: &BTreeMap<String, u32>| m.get(ty).copied().unwrap_or(0).to_string();
            let price = price_of(r, &node.name, ty).map(|p| (p, p));
            t.row(vec![
                node.name.clone(),
                node.partitions.join(","),
                ty.clone(),
                count.to_string(),
                get(&node.busy),
                get(&node.planned),
                price_text(price),
                node.unusable.clone().unwrap_or_else(|| "usable".into()),
            ]);
        }
    }
    t
}

/// One row per GPU type, for rounds recorded before nodes were kept.
fn per_type_table(r: &RoundRow) -> Table {
    let mut t = Table::new(&["GPU type", "usable", "busy", "planned", "use"]);
    for (ty, cap) in &r.capacity {
        let planned = r.planned_use.get(ty).copied().unwrap_or(0);
        let util = if *cap > 0 {
            100.0 * f64::from(planned) / f64::from(*cap)
        } else {
            0.0
        };
        t.row(vec![
            ty.clone(),
            cap.to_string(),
            r.busy.get(ty).copied().unwrap_or(0).to_string(),
            planned.to_string(),
            format!("{util:.0}%"),
        ]);
    }
    t
}

/// Nodes left out: counted by state (named one by one with `--nodes`, where the table shows
/// them already).
fn left_out(r: &RoundRow, per_node: bool) -> String {
    if r.unusable_nodes.is_empty() || (per_node && !r.nodes.is_empty()) {
        return String::new();
    }
    let mut by_state: BTreeMap<&str, u32> = BTreeMap::new();
    for (_, state) in &r.unusable_nodes {
        *by_state.entry(state).or_default() += 1;
    }
    let states: Vec<String> = by_state.iter().map(|(s, n)| format!("{n} {s}")).collect();
    format!(
        "left out: {} node(s) ({}); --nodes names them\n",
        r.unusable_nodes.len(),
        states.join(", ")
    )
}

fn jobs_table(jobs: &[&JobRow], placement: impl Fn(&JobRow) -> String) -> Table {
    let mut t = Table::new(&[
        "job",
        "name",
        "phase",
        "workers",
        "steps",
        "rate",
        "placement",
    ]);
    for j in jobs {
        t.row(vec![
            // An array element by its array name (`12_3`), as squeue shows it.
            match &j.array_task {
                Some(task) => format!("{task} ({})", j.id),
                None => j.id.to_string(),
            },
            // A job name is its owner's text: control characters (terminal escapes) are
            // shown escaped, never sent to the administrator's terminal.
            hadar_request::excerpt_of(&j.name, 24),
            j.phase.as_str().to_string(),
            j.workers.to_string(),
            format!("{:.0}/{:.0}", j.steps_done, j.total_steps),
            j.last_rate
                .map(|r| format!("{r:.3}"))
                .unwrap_or_else(|| "-".into()),
            placement(j),
        ]);
    }
    t
}
