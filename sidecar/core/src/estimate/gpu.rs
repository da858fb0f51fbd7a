//! GPU traits: the datasheet figures the estimator needs, for one GPU as Slurm sees it.
//!
//! Figures are the vendor's public datasheet numbers (NVIDIA product datasheets and
//! architecture whitepapers): peak dense throughput without sparsity, memory size, memory
//! bandwidth, and the host link's one-direction bandwidth (PCIe 3.0 x16 = 15.75 GB/s,
//! 4.0 x16 = 31.5 GB/s, 5.0 x16 = 63 GB/s). A board holding two GPUs (the K80) is listed per
//! die, because Slurm's GRES counts each die as one GPU.
//!
//! To add a GPU, append a [`GpuSpec`] to [`builtin_gpus`] (or add one at run time with
//! [`GpuCatalog::add`]); names and aliases are matched case-insensitively.

use serde::{Deserialize, Serialize};

/// The GPU architecture generation. It matters to the estimator only through how well deep
/// learning kernels use the peak: generations before Pascal reach a smaller fraction of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Arch {
    /// Kepler (2012-2014), e.g. K80.
    Kepler,
    /// Maxwell (2014-2015).
    Maxwell,
    /// Pascal (2016), e.g. P100.
    Pascal,
    /// Volta (2017), e.g. V100.
    Volta,
    /// Turing (2018), e.g. T4.
    Turing,
    /// Ampere (2020), e.g. A100, A10.
    Ampere,
    /// Ada Lovelace (2022), e.g. L4, L40S.
    Ada,
    /// Hopper (2022), e.g. H100.
    Hopper,
}

impl Arch {
    /// True for generations before Pascal, whose libraries reach a lower fraction of peak.
    pub fn before_pascal(self) -> bool {
        self < Arch::Pascal
    }
}

/// One GPU model's traits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuSpec {
    /// Canonical name, lower case, as used in Slurm GRES types (`v100`).
    pub name: String,
    /// Other names for the same part (`a100-40gb`, `tesla-v100`), lower case.
    pub aliases: Vec<String>,
    /// Architecture generation.
    pub arch: Arch,
    /// Peak FP32 throughput, TFLOPS (non-tensor).
    pub fp32_tflops: f64,
    /// Peak FP16 throughput used by mixed precision, TFLOPS (tensor cores where present,
    /// dense; equal to FP32 on parts without fast FP16).
    pub fp16_tflops: f64,
    /// Memory size, GB.
    pub memory_gb: f64,
    /// Memory bandwidth, GB/s.
    pub memory_gbps: f64,
    /// Host link (PCIe) bandwidth, one direction, GB/s.
    pub host_link_gbps: f64,
}

impl GpuSpec {
    /// True when `name` is this GPU's name or one of its aliases (case-insensitive).
    pub fn answers_to(&self, name: &str) -> bool {
        let name = name.trim();
        self.name.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }

    /// Peak throughput in FLOPS for the chosen precision.
    pub fn peak_flops(&self, mixed_precision: bool) -> f64 {
        1e12 * if mixed_precision {
            self.fp16_tflops
        } else {
            self.fp32_tflops
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn spec(
    name: &str,
    aliases: &[&str],
    arch: Arch,
    fp32_tflops: f64,
    fp16_tflops: f64,
    memory_gb: f64,
    memory_gbps: f64,
    host_link_gbps: f64,
) -> GpuSpec {
    GpuSpec {
        name: name.to_string(),
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        arch,
        fp32_tflops,
        fp16_tflops,
        memory_gb,
        memory_gbps,
        host_link_gbps,
    }
}

/// PCIe 3.0 x16, GB/s per direction.
const PCIE3: f64 = 15.75;
/// PCIe 4.0 x16, GB/s per direction.
const PCIE4: f64 = 31.5;
/// PCIe 5.0 x16, GB/s per direction.
const PCIE5: f64 = 63.0;

/// The GPUs hadar knows out of the box (NVIDIA datasheet figures; see the module comment).
pub fn builtin_gpus() -> Vec<GpuSpec> {
    vec![
        // Tesla K80 datasheet: 8.73 TFLOPS FP32 with GPU Boost, 24 GB, 480 GB/s per board of
        // two GK210 dies; halved per die. No fast FP16 path.
        spec(
            "k80",
            &["tesla-k80", "gk210"],
            Arch::Kepler,
            4.365,
            4.365,
            12.0,
            240.0,
            PCIE3,
        ),
        // Tesla P100 PCIe 16 GB datasheet: 9.3 TFLOPS FP32, 18.7 FP16, 732 GB/s.
        spec(
            "p100",
            &["tesla-p100", "p100-pcie", "p100-16gb"],
            Arch::Pascal,
            9.3,
            18.7,
            16.0,
            732.0,
            PCIE3,
        ),
        // Tesla V100 SXM2 16 GB datasheet: 15.7 TFLOPS FP32, 125 tensor, 900 GB/s.
        spec(
            "v100",
            &["tesla-v100", "v100-sxm2", "v100-16gb"],
            Arch::Volta,
            15.7,
            125.0,
            16.0,
            900.0,
            PCIE3,
        ),
        // V100 32 GB variant (same compute).
        spec(
            "v100-32gb",
            &["v100-sxm2-32gb", "v100s"],
            Arch::Volta,
            15.7,
            125.0,
            32.0,
            900.0,
            PCIE3,
        ),
        // T4 datasheet: 8.1 TFLOPS FP32, 65 FP16 tensor, 16 GB, 320 GB/s.
        spec(
            "t4",
            &["tesla-t4"],
            Arch::Turing,
            8.1,
            65.0,
            16.0,
            320.0,
            PCIE3,
        ),
        // A10 datasheet: 31.2 TFLOPS FP32, 125 FP16 tensor (dense), 24 GB, 600 GB/s.
        spec(
            "a10",
            &["nvidia-a10"],
            Arch::Ampere,
            31.2,
            125.0,
            24.0,
            600.0,
            PCIE4,
        ),
        // A100 SXM4 40 GB datasheet: 19.5 TFLOPS FP32, 312 FP16 tensor (dense), 1,555 GB/s.
        spec(
            "a100",
            &["a100-40gb", "a100-sxm4-40gb", "a100-sxm4"],
            Arch::Ampere,
            19.5,
            312.0,
            40.0,
            1555.0,
            PCIE4,
        ),
        // A100 80 GB SXM4 datasheet: same compute, 2,039 GB/s.
        spec(
            "a100-80gb",
            &["a100-sxm4-80gb", "a100_80gb"],
            Arch::Ampere,
            19.5,
            312.0,
            80.0,
            2039.0,
            PCIE4,
        ),
        // L4 datasheet: 30.3 TFLOPS FP32, 121 FP16 tensor (dense; 242 with sparsity), 24 GB, 300 GB/s.
        spec(
            "l4",
            &["nvidia-l4"],
            Arch::Ada,
            30.3,
            121.0,
            24.0,
            300.0,
            PCIE4,
        ),
        // L40S datasheet: 91.6 TFLOPS FP32, 362 FP16 tensor (dense; 733 with sparsity), 48 GB, 864 GB/s.
        spec(
            "l40s",
            &["nvidia-l40s"],
            Arch::Ada,
            91.6,
            362.0,
            48.0,
            864.0,
            PCIE4,
        ),
        // H100 SXM5 datasheet: 67 TFLOPS FP32, 989 FP16 tensor (dense), 80 GB, 3,350 GB/s.
        spec(
            "h100",
            &["h100-sxm", "h100-sxm5", "h100-80gb"],
            Arch::Hopper,
            67.0,
            989.0,
            80.0,
            3350.0,
            PCIE5,
        ),
        // H100 PCIe datasheet: 51 TFLOPS FP32, 756 FP16 tensor (dense), 80 GB, 2,000 GB/s.
        spec(
            "h100-pcie",
            &["h100pcie"],
            Arch::Hopper,
            51.0,
            756.0,
            80.0,
            2000.0,
            PCIE5,
        ),
    ]
}

/// A set of GPU specs to look names up in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuCatalog {
    specs: Vec<GpuSpec>,
}

impl Default for GpuCatalog {
    fn default() -> Self {
        GpuCatalog::builtin()
    }
}

impl GpuCatalog {
    /// The built-in table ([`builtin_gpus`]).
    pub fn builtin() -> Self {
        GpuCatalog {
            specs: builtin_gpus(),
        }
    }

    /// Adds (or, when a spec already answers to its name, replaces) a GPU, so a site can
    /// describe a part the built-in table lacks.
    pub fn add(&mut self, spec: GpuSpec) {
        self.specs.retain(|s| !s.answers_to(&spec.name));
        self.specs.push(spec);
    }

    /// The spec answering to `name` (canonical name or alias, any case). A name Slurm's
    /// `AutoDetect=nvml` writes into gres.conf (`nvidia_a100-sxm4-80gb`,
    /// `tesla_v100-sxm2-16gb`, `nvidia_h100_80gb_hbm3`) is also found: `_` reads as `-`, a
    /// leading `nvidia-`, `tesla-` or `geforce-` is dropped, and then trailing `-parts` are
    /// dropped one at a time until a name or alias matches (`a100-80gb-pcie` -> `a100-80gb`).
    pub fn lookup(&self, name: &str) -> Option<&GpuSpec> {
        let exact = |n: &str| self.specs.iter().find(|s| s.answers_to(n));
        if let Some(s) = exact(name) {
            return Some(s);
        }
        let mut n = name.trim().to_ascii_lowercase().replace('_', "-");
        while let Some(rest) = ["nvidia-", "tesla-", "geforce-"]
            .iter()
            .find_map(|p| n.strip_prefix(p))
        {
            n = rest.to_string();
        }
        let mut candidate = n.as_str();
        loop {
            if let Some(s) = exact(candidate) {
                return Some(s);
            }
            candidate = &candidate[..candidate.rfind('-')?];
        }
    }

    /// All specs, in table order.
    pub fn specs(&self) -> &[GpuSpec] {
        &self.specs
    }
}

/// Looks a GPU up in the built-in table.
pub fn gpu_spec(name: &str) -> Option<GpuSpec> {
    // Built once: the daemon looks GPUs up for every job and type each round.
    static BUILTIN: std::sync::OnceLock<GpuCatalog> = std::sync::OnceLock::new();
    BUILTIN
        .get_or_init(GpuCatalog::builtin)
        .lookup(name)
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive_and_knows_aliases() {
        assert_eq!(gpu_spec("V100").map(|s| s.name), Some("v100".to_string()));
        assert_eq!(
            gpu_spec("A100-40GB").map(|s| s.name),
            Some("a100".to_string())
        );
        assert_eq!(gpu_spec(" h100 ").map(|s| s.name), Some("h100".to_string()));
        assert!(gpu_spec("rtx-9090").is_none());
    }

    #[test]
    fn names_from_nvml_autodetect_are_found() {
        for (gres, spec) in [
            ("nvidia_a100-sxm4-80gb", "a100-80gb"),
            ("nvidia_a100_80gb_pcie", "a100-80gb"),
            ("nvidia_a100-pcie-40gb", "a100"),
            ("tesla_v100-sxm2-16gb", "v100"),
            ("Tesla_V100-SXM2-32GB", "v100-32gb"),
            ("nvidia_h100_80gb_hbm3", "h100"),
            ("nvidia_l40s", "l40s"),
            ("tesla_t4", "t4"),
        ] {
            assert_eq!(
                gpu_spec(gres).map(|s| s.name),
                Some(spec.to_string()),
                "{gres}"
            );
        }
        for unknown in ["nvidia_geforce_rtx_3090", "nvidia", "", "-", "a10g"] {
            assert!(gpu_spec(unknown).is_none(), "{unknown}");
        }
    }

    #[test]
    fn required_gpus_are_present_with_sane_figures() {
        for name in [
            "k80", "p100", "v100", "t4", "a10", "a100", "l4", "l40s", "h100",
        ] {
            let s = gpu_spec(name).unwrap_or_else(|| panic!("{name} missing"));
            assert!(
                s.fp32_tflops > 1.0 && s.fp16_tflops >= s.fp32_tflops,
                "{name}"
            );
            assert!(
                s.memory_gb >= 12.0 && s.memory_gbps >= 240.0 && s.host_link_gbps >= 15.0,
                "{name}"
            );
        }
    }

    #[test]
    fn names_and_aliases_are_unique() {
        let specs = builtin_gpus();
        let mut all: Vec<String> = specs
            .iter()
            .flat_map(|s| std::iter::once(s.name.clone()).chain(s.aliases.clone()))
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn a_site_can_add_a_gpu() {
        let mut c = GpuCatalog::builtin();
        let mut custom = gpu_spec("a100").unwrap();
        custom.name = "a800".into();
        custom.aliases = vec!["a800-80gb".into()];
        c.add(custom);
        assert_eq!(c.lookup("A800-80GB").map(|s| s.name.as_str()), Some("a800"));
        assert_eq!(c.specs().len(), builtin_gpus().len() + 1);
    }
}
