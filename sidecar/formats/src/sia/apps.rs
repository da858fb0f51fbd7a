//! The vocabulary of Sia's benchmark: its applications (what its simulator fixes for each)
//! and its GPU clusters (which profile files describe them, and what hadar calls their GPUs).

/// One of Sia's applications, with the constants its simulator gives it
/// (`applications.py`, `simulator_config.py` of Sia's artifact).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct App {
    /// The name in workloads and the profile folder's name.
    pub name: &'static str,
    /// Epochs a job trains for: it completes when the last of them ends.
    pub epochs: usize,
    /// Seconds lost at every start on new GPUs (checkpoint, restore and launch).
    pub restart_s: f64,
    /// How much slower real runs were than the profiles: progress is divided by it.
    pub slowdown: f64,
}

/// Sia's applications that train data-parallel (its pipeline-parallel `gpt_pmp` is not
/// modelled: a workload naming it is refused as unknown).
pub const APPS: [App; 6] = [
    App {
        name: "bert",
        epochs: 2,
        restart_s: 120.0,
        slowdown: 1.2,
    },
    App {
        name: "cifar10",
        epochs: 100,
        restart_s: 50.0,
        slowdown: 1.8,
    },
    App {
        name: "deepspeech2",
        epochs: 80,
        restart_s: 25.0,
        slowdown: 1.2,
    },
    App {
        name: "imagenet",
        epochs: 90,
        restart_s: 250.0,
        slowdown: 1.2,
    },
    App {
        name: "ncf",
        epochs: 10,
        restart_s: 15.0,
        slowdown: 1.5,
    },
    App {
        name: "yolov3",
        epochs: 50,
        restart_s: 80.0,
        slowdown: 1.2,
    },
];

/// The application called `name`, if Sia's benchmark has it.
pub fn app(name: &str) -> Option<&'static App> {
    APPS.iter().find(|a| a.name == name)
}

/// One of the GPU clusters Sia profiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuKind {
    /// Sia's name for it: the suffix of its profile files (`placements-aws.csv`).
    pub sia_name: &'static str,
    /// The GPU type hadar names it by.
    pub gpu_type: &'static str,
    /// GPUs per node.
    pub gpus_per_node: u32,
}

/// Every cluster Sia profiled. `dgx-ext` and `dgx` are the same A100 nodes (the first with
/// more batch sizes profiled; Sia's default), so they share a type name: a cluster holds one
/// of them.
pub const KINDS: [GpuKind; 6] = [
    GpuKind {
        sia_name: "aws",
        gpu_type: "t4",
        gpus_per_node: 4,
    },
    GpuKind {
        sia_name: "rtx",
        gpu_type: "rtx2080ti",
        gpus_per_node: 8,
    },
    GpuKind {
        sia_name: "dgx-ext",
        gpu_type: "a100",
        gpus_per_node: 8,
    },
    GpuKind {
        sia_name: "dgx",
        gpu_type: "a100",
        gpus_per_node: 8,
    },
    GpuKind {
        sia_name: "azure",
        gpu_type: "v100",
        gpus_per_node: 8,
    },
    GpuKind {
        sia_name: "quad",
        gpu_type: "rtx6000",
        gpus_per_node: 4,
    },
];

/// The cluster Sia's experiments use (its `simulator_config.py`): 6 nodes of 4 T4, 3 of 8
/// RTX 2080 Ti and 2 of 8 A100, 64 GPUs.
pub const DEFAULT_CLUSTER: &str = "aws:6,rtx:3,dgx-ext:2";

/// The cluster called `sia_name`, if Sia profiled it.
pub fn kind(sia_name: &str) -> Option<&'static GpuKind> {
    KINDS.iter().find(|k| k.sia_name == sia_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_known() {
        for (i, a) in APPS.iter().enumerate() {
            assert!(APPS[i + 1..].iter().all(|b| b.name != a.name));
            assert_eq!(app(a.name), Some(a));
        }
        assert_eq!(app("gpt_pmp"), None);
        assert_eq!(kind("rtx").map(|k| k.gpu_type), Some("rtx2080ti"));
        assert_eq!(kind("h100"), None);
    }
}
