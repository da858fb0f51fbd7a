//! A site's own GPU type names: the `[gpu_types]` table of hadar.toml, which maps a GRES type
//! name the built-in table cannot place (an internal code, a spelling the name rules of
//! [`GpuCatalog::lookup`] do not cover) to a known model, to a speed relative to one, or to
//! its own datasheet figures; and the catalog those entries make.
//!
//! ```toml
//! [gpu_types]
//! gx7 = "v100-32gb"                              # another name for a known model
//! gx9 = { model = "a100", speed = 1.3 }           # 1.3 times an A100
//! zq1 = { fp32_tflops = 40, fp16_tflops = 300, memory_gb = 48, memory_gbps = 1200 }
//! ```

use super::gpu::{Arch, GpuCatalog, GpuSpec};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// One `[gpu_types]` entry: a model name (`"v100"`), or a table with `model` and `speed`, or
/// with the datasheet figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteGpu {
    /// A model the catalog knows (any spelling [`GpuCatalog::lookup`] finds).
    pub model: Option<String>,
    /// Speed relative to `model`: its FLOPS and memory bandwidth are multiplied by this.
    pub speed: Option<f64>,
    /// Peak FP32 TFLOPS (an undescribed GPU).
    pub fp32_tflops: Option<f64>,
    /// Peak FP16 (tensor, dense) TFLOPS; default: `fp32_tflops`.
    pub fp16_tflops: Option<f64>,
    /// Memory, GB.
    pub memory_gb: Option<f64>,
    /// Memory bandwidth, GB/s.
    pub memory_gbps: Option<f64>,
    /// Host link bandwidth, one direction, GB/s; default: PCIe 4.0 x16 (31.5).
    pub host_link_gbps: Option<f64>,
    /// Architecture generation; default: Ampere.
    pub arch: Option<Arch>,
}

/// Reads `"MODEL"` or a table (the table's unknown keys are refused by name).
pub fn deserialize_entry<'de, D: Deserializer<'de>>(d: D) -> Result<SiteGpu, D::Error> {
    struct Entry;
    impl<'de> Visitor<'de> for Entry {
        type Value = SiteGpu;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a known model's name or a table (model, speed, fp32_tflops, ...)")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<SiteGpu, E> {
            Ok(SiteGpu {
                model: Some(v.to_string()),
                ..SiteGpu::default()
            })
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SiteGpu, A::Error> {
            SiteGpu::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(Entry)
}

/// How a site entry rates its type.
#[derive(Clone, Debug, PartialEq)]
pub enum SiteGpuKind {
    /// Another name for a known model: rated as that model (and its measured column).
    Alias(String),
    /// A known model times a speed factor.
    Relative(String, f64),
    /// Its own datasheet figures.
    Described,
}

/// Why a `[gpu_types]` entry cannot be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SiteGpuError {
    /// `model` names no GPU the catalog knows.
    #[error("model \"{model}\" is not a GPU hadar knows (known: {known})")]
    UnknownModel {
        /// The name given.
        model: String,
        /// The catalog's names.
        known: String,
    },
    /// Both a model and datasheet figures.
    #[error(
        "give either model (and speed) or the datasheet figures (fp32_tflops, memory_gb, memory_gbps), not both"
    )]
    Mixed,
    /// A described GPU lacks a figure.
    #[error("a GPU without model needs {0}")]
    Missing(&'static str),
    /// A figure that must be a positive number is not.
    #[error("{key} = {value} must be a positive number")]
    NotPositive {
        /// The key.
        key: &'static str,
        /// Its value.
        value: f64,
    },
}

impl SiteGpu {
    /// How this entry rates its type (assuming it is valid; see [`Self::to_spec`]).
    pub fn kind(&self) -> SiteGpuKind {
        match (&self.model, self.speed) {
            (Some(m), None) => SiteGpuKind::Alias(m.clone()),
            (Some(m), Some(s)) => SiteGpuKind::Relative(m.clone(), s),
            (None, _) => SiteGpuKind::Described,
        }
    }

    /// The spec of type `name` by this entry, `base` giving the known models.
    pub fn to_spec(&self, name: &str, base: &GpuCatalog) -> Result<GpuSpec, SiteGpuError> {
        self.check_positive()?;
        let figures = [self.fp32_tflops, self.fp16_tflops, self.memory_gbps]
            .iter()
            .any(Option::is_some)
            || self.host_link_gbps.is_some()
            || self.arch.is_some();
        match &self.model {
            Some(_) if figures => Err(SiteGpuError::Mixed),
            Some(model) => {
                let known = base
                    .lookup(model)
                    .ok_or_else(|| SiteGpuError::UnknownModel {
                        model: model.clone(),
                        known: base
                            .specs()
                            .iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })?;
                let speed = self.speed.unwrap_or(1.0);
                Ok(GpuSpec {
                    name: name.to_ascii_lowercase(),
                    aliases: Vec::new(),
                    fp32_tflops: known.fp32_tflops * speed,
                    fp16_tflops: known.fp16_tflops * speed,
                    memory_gbps: known.memory_gbps * speed,
                    memory_gb: self.memory_gb.unwrap_or(known.memory_gb),
                    ..known.clone()
                })
            }
            None if self.speed.is_some() => {
                Err(SiteGpuError::Missing("model (speed is relative to it)"))
            }
            None => {
                let fp32 = self
                    .fp32_tflops
                    .ok_or(SiteGpuError::Missing("fp32_tflops"))?;
                Ok(GpuSpec {
                    name: name.to_ascii_lowercase(),
                    aliases: Vec::new(),
                    arch: self.arch.unwrap_or(Arch::Ampere),
                    fp32_tflops: fp32,
                    fp16_tflops: self.fp16_tflops.unwrap_or(fp32),
                    memory_gb: self.memory_gb.ok_or(SiteGpuError::Missing("memory_gb"))?,
                    memory_gbps: self
                        .memory_gbps
                        .ok_or(SiteGpuError::Missing("memory_gbps"))?,
                    host_link_gbps: self.host_link_gbps.unwrap_or(31.5),
                })
            }
        }
    }

    fn check_positive(&self) -> Result<(), SiteGpuError> {
        let figures = [
            ("speed", self.speed),
            ("fp32_tflops", self.fp32_tflops),
            ("fp16_tflops", self.fp16_tflops),
            ("memory_gb", self.memory_gb),
            ("memory_gbps", self.memory_gbps),
            ("host_link_gbps", self.host_link_gbps),
        ];
        match figures
            .into_iter()
            .find_map(|(key, v)| v.filter(|v| !(v.is_finite() && *v > 0.0)).map(|v| (key, v)))
        {
            Some((key, value)) => Err(SiteGpuError::NotPositive { key, value }),
            None => Ok(()),
        }
    }
}

impl GpuCatalog {
    /// The built-in catalog with a site's entries: a plain alias becomes another name of its
    /// model (so a throughput table's measured column for that model still applies); any
    /// other entry becomes a GPU of its own under the site's name. The first bad entry is
    /// returned with its name.
    pub fn with_site<'a>(
        entries: impl IntoIterator<Item = (&'a String, &'a SiteGpu)>,
    ) -> Result<GpuCatalog, (String, SiteGpuError)> {
        let base = GpuCatalog::builtin();
        let mut catalog = base.clone();
        for (name, entry) in entries {
            let spec = entry.to_spec(name, &base).map_err(|e| (name.clone(), e))?;
            match entry.kind() {
                SiteGpuKind::Alias(model) if entry.memory_gb.is_none() => {
                    catalog.add_alias(&model, name)
                }
                _ => catalog.add(spec),
            }
        }
        Ok(catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alias_answers_as_its_model() {
        let site = [(
            "gx7".to_string(),
            SiteGpu {
                model: Some("V100M32".into()),
                ..SiteGpu::default()
            },
        )];
        let c = GpuCatalog::with_site(site.iter().map(|(n, e)| (n, e))).unwrap();
        assert_eq!(c.lookup("GX7").map(|s| s.name.as_str()), Some("v100-32gb"));
        assert_eq!(c.specs().len(), GpuCatalog::builtin().specs().len());
    }

    #[test]
    fn a_relative_speed_scales_compute_and_bandwidth_of_the_model() {
        let e = SiteGpu {
            model: Some("a100".into()),
            speed: Some(1.5),
            ..SiteGpu::default()
        };
        let a100 = GpuCatalog::builtin().lookup("a100").unwrap().clone();
        let s = e.to_spec("Zq9", &GpuCatalog::builtin()).unwrap();
        assert_eq!(s.name, "zq9");
        assert_eq!(s.fp32_tflops, a100.fp32_tflops * 1.5);
        assert_eq!(s.fp16_tflops, a100.fp16_tflops * 1.5);
        assert_eq!(s.memory_gbps, a100.memory_gbps * 1.5);
        assert_eq!((s.memory_gb, s.arch), (a100.memory_gb, a100.arch));
        assert_eq!(e.kind(), SiteGpuKind::Relative("a100".into(), 1.5));
    }

    #[test]
    fn a_described_gpu_needs_its_figures() {
        let mut e = SiteGpu {
            fp32_tflops: Some(40.0),
            memory_gb: Some(48.0),
            ..SiteGpu::default()
        };
        let base = GpuCatalog::builtin();
        assert_eq!(
            e.to_spec("x", &base),
            Err(SiteGpuError::Missing("memory_gbps"))
        );
        e.memory_gbps = Some(1200.0);
        let s = e.to_spec("x", &base).unwrap();
        assert_eq!(
            (s.fp16_tflops, s.arch, s.host_link_gbps),
            (40.0, Arch::Ampere, 31.5)
        );
        e.model = Some("v100".into());
        assert_eq!(e.to_spec("x", &base), Err(SiteGpuError::Mixed));
    }

    #[test]
    fn bad_entries_are_named() {
        let base = GpuCatalog::builtin();
        let e = SiteGpu {
            model: Some("rtx9090".into()),
            ..SiteGpu::default()
        };
        let msg = e.to_spec("x", &base).unwrap_err().to_string();
        assert!(msg.contains("rtx9090") && msg.contains("v100"), "{msg}");
        let e = SiteGpu {
            model: Some("v100".into()),
            speed: Some(-1.0),
            ..SiteGpu::default()
        };
        assert_eq!(
            e.to_spec("x", &base),
            Err(SiteGpuError::NotPositive {
                key: "speed",
                value: -1.0
            })
        );
        let site = [("bad".to_string(), e)];
        let (name, _) = GpuCatalog::with_site(site.iter().map(|(n, e)| (n, e))).unwrap_err();
        assert_eq!(name, "bad");
    }
}
