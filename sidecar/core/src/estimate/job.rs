//! Job traits: what the estimator needs to know about a training job, and the traits of the
//! job types in Gavel's measured table.
//!
//! The Gavel figures come from the model definitions Gavel ran (its `workloads/pytorch`
//! folder: kuangliu's CIFAR ResNet-18, torchvision's ResNet-50, the
//! attention-is-all-you-need Transformer with d_model 512 and 6+6 layers, PyTorch's
//! word-language-model LSTM with 200 units, Recoder's autoencoder with one hidden layer of
//! 200, ikostrikov's A3C, and the CycleGAN reference ResNet-9-block generator) and the papers
//! that introduced them. Where a figure depends on the data (sentence lengths, vocabulary,
//! the number of users), it is an estimate and says so.

use serde::{Deserialize, Serialize};

/// The traits of one training job (per worker, for data-parallel jobs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobTraits {
    /// The job type's name, e.g. `ResNet-18 (batch size 32)`.
    pub name: String,
    /// Trainable parameters.
    pub params: f64,
    /// Forward-pass compute for one sample, GFLOPs (a multiply-add counts as 2 FLOPs).
    pub forward_gflops_per_sample: f64,
    /// Samples per step and worker.
    pub batch_size: u32,
    /// Bytes moved from host to GPU per sample (the input tensors as the loader sends them).
    pub input_bytes_per_sample: f64,
    /// Layer invocations (convolution, linear, normalisation, recurrent, embedding) in one
    /// step's forward computation: a proxy for the kernels launched per step, whose fixed
    /// cost dominates small batches.
    pub layers_per_step: u32,
    /// Trains in mixed precision (FP16 tensor throughput instead of FP32).
    pub mixed_precision: bool,
}

/// Why a set of job traits was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraitsError {
    /// A numeric trait is not a finite positive number (or, for input bytes, negative).
    #[error("job traits `{job}`: {field} must be a finite positive number, got {value}")]
    NotPositive {
        /// The job type.
        job: String,
        /// The field at fault.
        field: &'static str,
        /// The value given.
        value: f64,
    },
}

impl JobTraits {
    /// Checks that every figure is usable (positive and finite; input bytes may be zero).
    pub fn validate(&self) -> Result<(), TraitsError> {
        let bad = |field: &'static str, value: f64| TraitsError::NotPositive {
            job: self.name.clone(),
            field,
            value,
        };
        for (field, value) in [
            ("params", self.params),
            ("forward_gflops_per_sample", self.forward_gflops_per_sample),
            ("batch_size", f64::from(self.batch_size)),
            ("layers_per_step", f64::from(self.layers_per_step)),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(bad(field, value));
            }
        }
        if !(self.input_bytes_per_sample.is_finite() && self.input_bytes_per_sample >= 0.0) {
            return Err(bad("input_bytes_per_sample", self.input_bytes_per_sample));
        }
        Ok(())
    }
}

/// The per-model part of a Gavel job type (everything but the batch size).
struct GavelModel {
    base: &'static str,
    params: f64,
    forward_gflops_per_sample: f64,
    input_bytes_per_sample: f64,
    layers_per_step: u32,
    batch_sizes: &'static [u32],
}

/// Gavel's models. Provenance of each figure:
///
/// * ResNet-18 on CIFAR-10 (kuangliu's CIFAR variant): 11.17 M parameters, 0.556 G
///   multiply-adds per 32x32 image (1.11 GFLOPs); input one 3x32x32 FP32 tensor (12,288 B);
///   20 convolutions + 20 batch norms + 1 linear = 41 layers.
/// * ResNet-50 on ImageNet (He et al. 2016, torchvision): 25.56 M parameters, 4.09 G
///   multiply-adds per 224x224 image (8.18 GFLOPs); input 3x224x224 FP32 (602,112 B);
///   53 convolutions + 53 batch norms + 1 linear = 107 layers.
/// * Transformer on Multi30k (Vaswani et al. 2017, d_model 512, 6+6 layers, separate
///   embeddings): about 51.6 M parameters with the vocabularies Multi30k gives (an estimate:
///   about 5.4 k German and 4.6 k English words); forward about 1.9 GFLOPs per sentence pair
///   at an estimated 20 padded tokens per side (2 x non-embedding parameters x tokens);
///   input four int64 tensors of 20 tokens (640 B); 6 x 8 encoder + 6 x 13 decoder + 3
///   embedding/projection layers = 129.
/// * LM on WikiText-2 (PyTorch's word_language_model: 2-layer LSTM, 200 units, 33,278-word
///   vocabulary, 35-token sequences, untied): 13.99 M parameters; forward 2 x (0.64 M LSTM +
///   6.69 M decoder) x 35 tokens = 0.513 GFLOPs per sequence; input two int64 sequences
///   (560 B); embedding + 2 LSTM + decoder = 4 layers.
/// * Recommendation on ML-20M (Recoder's DynamicAutoencoder, one hidden layer of 200, item
///   based): inputs are vectors over the training users, an estimated 116,677 after the usual
///   held-out split, so 2 x 116,677 x 200 = 46.7 M parameters and 0.093 GFLOPs per sample if
///   computed densely (an estimate: Recoder samples the output); input a dense FP32 row
///   (466,708 B, an estimate of what its loader sends); 2 layers.
/// * A3C on Pong (ikostrikov's pytorch-a3c: 4 convolutions of 32 channels on 42x42 frames, an
///   LSTM cell of 256, two heads): about 0.6 M parameters, 4.4 MFLOPs per frame; a step is a
///   20-frame rollout, counted as batch 20, run as 20 sequential forward passes of 7 layers
///   (140 layer invocations); input one 42x42 FP32 frame (7,056 B) per sample.
/// * CycleGAN on monet2photo (Zhu et al. 2017; ResNet-9-block generators, 70x70 PatchGAN
///   discriminators, batch 1 at 256x256): 2 x 11.38 M + 2 x 2.77 M = 28.29 M parameters; a
///   step runs 6 generator passes (translation, cycle and identity terms, 56.8 G
///   multiply-adds each) and 6 discriminator passes (3.1 G each): 719 GFLOPs; input two
///   3x256x256 FP32 images (786,432 B); 6 x 47 + 6 x 8 = 330 layer invocations.
const GAVEL_MODELS: &[GavelModel] = &[
    GavelModel {
        base: "ResNet-18",
        params: 11.17e6,
        forward_gflops_per_sample: 1.11,
        input_bytes_per_sample: 12_288.0,
        layers_per_step: 41,
        batch_sizes: &[16, 32, 64, 128, 256],
    },
    GavelModel {
        base: "ResNet-50",
        params: 25.56e6,
        forward_gflops_per_sample: 8.18,
        input_bytes_per_sample: 602_112.0,
        layers_per_step: 107,
        batch_sizes: &[16, 32, 64, 128],
    },
    GavelModel {
        base: "Transformer",
        params: 51.6e6,
        forward_gflops_per_sample: 1.9,
        input_bytes_per_sample: 640.0,
        layers_per_step: 129,
        batch_sizes: &[16, 32, 64, 128, 256],
    },
    GavelModel {
        base: "LM",
        params: 13.99e6,
        forward_gflops_per_sample: 0.513,
        input_bytes_per_sample: 560.0,
        layers_per_step: 4,
        batch_sizes: &[5, 10, 20, 40, 80],
    },
    GavelModel {
        base: "Recommendation",
        params: 46.7e6,
        forward_gflops_per_sample: 0.0934,
        input_bytes_per_sample: 466_708.0,
        layers_per_step: 2,
        batch_sizes: &[512, 1024, 2048, 4096, 8192],
    },
    GavelModel {
        base: "A3C",
        params: 0.6e6,
        forward_gflops_per_sample: 0.0044,
        input_bytes_per_sample: 7_056.0,
        layers_per_step: 140,
        batch_sizes: &[20],
    },
    GavelModel {
        base: "CycleGAN",
        params: 28.29e6,
        forward_gflops_per_sample: 719.0,
        input_bytes_per_sample: 786_432.0,
        layers_per_step: 330,
        batch_sizes: &[1],
    },
];

/// Models whose Gavel job type name carries no batch size (`A3C`, `CycleGAN`).
fn named_without_batch(m: &GavelModel) -> bool {
    m.batch_sizes.len() == 1
}

/// The traits of all 26 job types in Gavel's table, named exactly as Gavel names them.
pub fn gavel_job_traits() -> Vec<JobTraits> {
    let mut out = Vec::new();
    for m in GAVEL_MODELS {
        for &b in m.batch_sizes {
            let name = if named_without_batch(m) {
                m.base.to_string()
            } else {
                format!("{} (batch size {b})", m.base)
            };
            out.push(JobTraits {
                name,
                params: m.params,
                forward_gflops_per_sample: m.forward_gflops_per_sample,
                batch_size: b,
                input_bytes_per_sample: m.input_bytes_per_sample,
                layers_per_step: m.layers_per_step,
                mixed_precision: false,
            });
        }
    }
    out
}

/// The traits of one Gavel job type by exact name (`ResNet-18 (batch size 32)`), if known.
pub fn gavel_job(name: &str) -> Option<JobTraits> {
    // Built once: the daemon estimates rates for every job on every round.
    static GAVEL: std::sync::OnceLock<Vec<JobTraits>> = std::sync::OnceLock::new();
    GAVEL
        .get_or_init(gavel_job_traits)
        .iter()
        .find(|j| j.name == name.trim())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gavel_table_has_its_26_job_types() {
        let all = gavel_job_traits();
        assert_eq!(all.len(), 26);
        for j in &all {
            j.validate().unwrap();
        }
        assert_eq!(
            gavel_job("ResNet-18 (batch size 32)").map(|j| j.batch_size),
            Some(32)
        );
        assert!(gavel_job("A3C").is_some());
        assert!(gavel_job("CycleGAN").is_some());
        assert!(gavel_job("ResNet-18 (batch size 33)").is_none());
    }

    #[test]
    fn bad_traits_are_refused_with_the_field() {
        let mut j = gavel_job("LM (batch size 5)").unwrap();
        j.params = f64::NAN;
        let e = j.validate().unwrap_err();
        assert!(e.to_string().contains("params"), "{e}");
        let mut j = gavel_job("LM (batch size 5)").unwrap();
        j.batch_size = 0;
        assert!(j.validate().unwrap_err().to_string().contains("batch_size"));
    }
}
