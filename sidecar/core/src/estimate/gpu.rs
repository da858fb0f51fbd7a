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

    /// Makes `alias` another name of the spec `model` finds, taking it from any other spec
    /// (a site's word wins over the built-in one); no-op when `model` finds none.
    pub fn add_alias(&mut self, model: &str, alias: &str) {
        let Some(target) = self.lookup(model).map(|s| s.name.clone()) else {
            return;
        };
        let alias = alias.trim().to_ascii_lowercase();
        if target == alias {
            return;
        }
        self.specs.retain(|s| s.name != alias);
        for s in &mut self.specs {
            s.aliases.retain(|a| *a != alias);
            if s.name == target {
                s.aliases.push(alias.clone());
            }
        }
    }

    /// The spec answering to `name` (canonical name or alias, any case). A name Slurm's
    /// `AutoDetect=nvml` writes into gres.conf (`nvidia_a100-sxm4-80gb`,
    /// `tesla_v100-sxm2-16gb`, `nvidia_h100_80gb_hbm3`) or a site's own spelling
    /// (`V100M32`, `a100_80g`) is also found: `_` reads as `-`, a leading `nvidia-`, `tesla-`
    /// or `geforce-` is dropped; a name that states a memory size (`80gb`, `80g`, `m32`) finds
    /// the one model of that family with that memory ([`SiteName`]), preferring the form
    /// factor it names (`pcie`) and `None` when that leaves no single model; otherwise trailing
    /// `-parts` are dropped one at a time until a name or alias matches
    /// (`h100-nvl` -> `h100`).
    pub fn lookup(&self, name: &str) -> Option<&GpuSpec> {
        let exact = |n: &str| self.specs.iter().find(|s| s.answers_to(n));
        if let Some(s) = exact(name) {
            return Some(s);
        }
        let n = normalise(name);
        if let Some(s) = exact(&n) {
            return Some(s);
        }
        let parsed = SiteName::parse(&n);
        if let Some(memory_gb) = parsed.memory_gb {
            return self.by_family(&parsed.family, memory_gb, parsed.pcie);
        }
        let mut candidate = n.as_str();
        loop {
            if let Some(s) = exact(candidate) {
                return Some(s);
            }
            candidate = &candidate[..candidate.rfind('-')?];
        }
    }

    /// The one spec of `family` (its name's first `-part`) with `memory_gb`, narrowed to
    /// PCIe or not parts when that leaves any; `None` when none or several remain.
    fn by_family(&self, family: &str, memory_gb: u32, pcie: bool) -> Option<&GpuSpec> {
        let same: Vec<&GpuSpec> = self
            .specs
            .iter()
            .filter(|s| family_of(&s.name) == family)
            .filter(|s| (s.memory_gb - f64::from(memory_gb)).abs() < 0.5)
            .collect();
        let form: Vec<&GpuSpec> = same
            .iter()
            .copied()
            .filter(|s| s.name.contains("pcie") == pcie)
            .collect();
        match (form.as_slice(), same.as_slice()) {
            ([one], _) | ([], [one]) => Some(one),
            _ => None,
        }
    }

    /// All specs, in table order.
    pub fn specs(&self) -> &[GpuSpec] {
        &self.specs
    }
}

/// A GRES type name as lower case with `-` between parts and no vendor prefix:
/// `NVIDIA_A100-SXM4-80GB` -> `a100-sxm4-80gb`.
fn normalise(name: &str) -> String {
    let mut n = name.trim().to_ascii_lowercase().replace('_', "-");
    while let Some(rest) = ["nvidia-", "tesla-", "geforce-"]
        .iter()
        .find_map(|p| n.strip_prefix(p))
    {
        n = rest.to_string();
    }
    n
}

/// A spec name's family: its first `-part` (`v100-32gb` -> `v100`).
fn family_of(name: &str) -> &str {
    name.split('-').next().unwrap_or(name)
}

/// What a normalised GRES type name says: the model family, the memory size if stated
/// (`a100-80gb`, `a100-80g`, `v100m32`, `v100-m32`), and whether it names a PCIe card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteName {
    /// The first part without a memory suffix (`v100m32` -> `v100`).
    pub family: String,
    /// Memory in GB, when the name states it.
    pub memory_gb: Option<u32>,
    /// True when a part starts with `pcie`.
    pub pcie: bool,
}

impl SiteName {
    /// Reads a normalised name (see [`GpuCatalog::lookup`]).
    pub fn parse(normalised: &str) -> SiteName {
        let mut parts = normalised.split('-');
        let first = parts.next().unwrap_or_default();
        let (family, mut memory_gb) = match split_memory_suffix(first) {
            Some((family, gb)) => (family.to_string(), Some(gb)),
            None => (first.to_string(), None),
        };
        let mut pcie = false;
        for part in parts {
            pcie |= part.starts_with("pcie");
            memory_gb = memory_gb.or_else(|| memory_part(part));
        }
        SiteName {
            family,
            memory_gb,
            pcie,
        }
    }
}

/// `80gb`, `80g` or `m32` as GB.
fn memory_part(part: &str) -> Option<u32> {
    let digits = part
        .strip_suffix("gb")
        .or_else(|| part.strip_suffix('g'))
        .or_else(|| part.strip_prefix('m'))?;
    all_digits(digits).then(|| digits.parse().ok())?
}

/// `v100m32` as (`v100`, 32): a model with a digit in it (`l40s`), then `m` and digits.
fn split_memory_suffix(part: &str) -> Option<(&str, u32)> {
    let at = part.rfind('m')?;
    let (model, gb) = (&part[..at], &part[at + 1..]);
    let model_has_digit = model.chars().any(|c| c.is_ascii_digit());
    (model_has_digit && all_digits(gb)).then(|| Some((model, gb.parse().ok()?)))?
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit())
}

impl GpuCatalog {
    /// The built-in catalog, built once and shared.
    pub fn shared_builtin() -> &'static GpuCatalog {
        static BUILTIN: std::sync::OnceLock<GpuCatalog> = std::sync::OnceLock::new();
        BUILTIN.get_or_init(GpuCatalog::builtin)
    }
}

/// Looks a GPU up in the built-in catalog (a site's `[gpu_types]` are in the catalog the
/// caller holds: [`GpuCatalog::lookup`]).
pub fn gpu_spec(name: &str) -> Option<GpuSpec> {
    GpuCatalog::shared_builtin().lookup(name).cloned()
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
        for unknown in [
            "nvidia_geforce_rtx_3090",
            "nvidia",
            "",
            "-",
            "a10g",
            "v100m48",
            "a100-48gb",
            "mi250",
        ] {
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

    #[test]
    fn names_differing_in_memory_or_form_factor_find_their_model() {
        for (gres, spec) in [
            ("V100M16", "v100"),
            ("V100M32", "v100-32gb"),
            ("v100-m32", "v100-32gb"),
            ("a100_80g", "a100-80gb"),
            ("A100-40G", "a100"),
            ("h100-sxm", "h100"),
            ("h100_pcie_80gb", "h100-pcie"),
            ("h100-80gb", "h100"),
            ("nvidia_a100-sxm4-80gb", "a100-80gb"),
            ("l40s-48gb", "l40s"),
            ("a10-24gb", "a10"),
            ("T4", "t4"),
            ("P100", "p100"),
        ] {
            assert_eq!(
                gpu_spec(gres).map(|s| s.name),
                Some(spec.to_string()),
                "{gres}"
            );
        }
    }

    #[test]
    fn site_names_are_read_into_family_memory_and_form() {
        let n = SiteName::parse("v100m32");
        assert_eq!(
            (n.family.as_str(), n.memory_gb, n.pcie),
            ("v100", Some(32), false)
        );
        let n = SiteName::parse("h100-pcie-80gb");
        assert_eq!(
            (n.family.as_str(), n.memory_gb, n.pcie),
            ("h100", Some(80), true)
        );
        let n = SiteName::parse("a10g");
        assert_eq!((n.family.as_str(), n.memory_gb), ("a10g", None));
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        /// A built-in spec's index, a vendor prefix, a case and a separator, as sites and
        /// NVML spell names.
        fn spelling() -> impl Strategy<Value = (usize, &'static str, bool, bool)> {
            (
                0..builtin_gpus().len(),
                prop::sample::select(vec!["", "nvidia_", "tesla-", "NVIDIA-", "nvidia_geforce_"]),
                any::<bool>(),
                any::<bool>(),
            )
        }

        proptest! {
            #[test]
            fn any_spelling_of_a_known_name_finds_that_model((i, prefix, upper, underscores) in spelling()) {
                let spec = &builtin_gpus()[i];
                let mut name = format!("{prefix}{}", spec.name);
                if upper { name = name.to_ascii_uppercase(); }
                if underscores { name = name.replace('-', "_"); }
                prop_assert_eq!(gpu_spec(&name).map(|s| s.name), Some(spec.name.clone()), "{}", name);
            }

            #[test]
            fn a_stated_memory_size_finds_a_model_of_that_family_and_memory(
                (i, prefix, upper, _) in spelling(),
                form in prop::sample::select(vec!["{f}-{m}gb", "{f}m{m}", "{f}_{m}g", "{f}-sxm-{m}gb"]),
            ) {
                let spec = &builtin_gpus()[i];
                let family = family_of(&spec.name);
                let memory = spec.memory_gb.round() as u32;
                let mut name = format!("{prefix}{}", form.replace("{f}", family).replace("{m}", &memory.to_string()));
                if upper { name = name.to_ascii_uppercase(); }
                let found = gpu_spec(&name);
                prop_assert!(found.is_some(), "{} found nothing", name);
                let found = found.unwrap();
                prop_assert_eq!(family_of(&found.name), family, "{}", name);
                prop_assert!((found.memory_gb - spec.memory_gb).abs() < 0.5, "{} -> {}", name, found.name);
            }
        }
    }
}
