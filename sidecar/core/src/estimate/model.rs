//! The throughput model: a roofline-style step time from GPU and job traits.
//!
//! One training step on one worker takes
//!
//! ```text
//! step = overhead + max(compute, memory) + input
//! compute  = 3 x forward FLOPs x batch / (efficiency x peak)      forward + backward ~ 3x forward
//! memory   = params x 16 B / (0.7 x memory bandwidth)              weights, gradients, 2 optimiser states
//! input    = batch x input bytes / (0.7 x host link bandwidth)
//! overhead = step_overhead + layer_overhead x layers x slowdown    kernel launches, Python, sync
//! ```
//!
//! where `efficiency` is lower (times `pre_pascal_factor`) on generations before Pascal, and
//! `slowdown` (at least 1) is how much slower the GPU's achievable compute is than the
//! reference V100's: small kernels take longer on slower parts. With `n > 1` data-parallel
//! workers each step also all-reduces the gradients over the host link (ring all-reduce,
//! `2 (n-1)/n x params x 4 B`), and the job advances `n` worker-steps per step time, as in
//! Gavel's table (whose multi-worker rates are per-worker steps summed).
//!
//! The four [`ModelConstants`] are the only fitted figures; everything else comes from the
//! traits. The defaults were fitted to Gavel's single-worker table (see
//! [`crate::estimate::fit`]); `hadar estimate --evaluate` reports the leave-one-job-out error.

use super::gpu::GpuSpec;
use super::job::JobTraits;
use serde::{Deserialize, Serialize};

/// Forward plus backward compute, as a multiple of the forward pass.
const TRAINING_FLOPS_FACTOR: f64 = 3.0;
/// Bytes of memory traffic per parameter and step: read weights, write gradients, read and
/// write two optimiser states (FP32).
const BYTES_PER_PARAM_PER_STEP: f64 = 16.0;
/// Fraction of a link's nominal bandwidth that bulk transfers reach.
const TRANSFER_EFFICIENCY: f64 = 0.7;
/// Bytes per gradient element in the all-reduce.
const GRADIENT_BYTES: f64 = 4.0;
/// Parameters' memory for training: weights, gradients and two optimiser states, FP32.
const TRAINING_BYTES_PER_PARAM: f64 = 16.0;
/// The reference GPU's FP32 peak (V100), TFLOPS, against which small-kernel slowdown is measured.
const REFERENCE_FP32_TFLOPS: f64 = 15.7;

/// The fitted constants of the model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConstants {
    /// Fraction of peak FLOPS a training step's kernels reach (Pascal and later).
    pub efficiency: f64,
    /// Multiplier on `efficiency` for generations before Pascal.
    pub pre_pascal_factor: f64,
    /// Fixed seconds per step (framework, data loader hand-off, synchronisation).
    pub step_overhead_s: f64,
    /// Seconds per layer invocation per step on the reference GPU (kernel launches).
    pub layer_overhead_s: f64,
}

impl Default for ModelConstants {
    /// Fitted (by [`crate::estimate::fit::fit_constants`]) to all 78 single-worker entries of
    /// Gavel's measured table (26 job types x K80, P100, V100).
    fn default() -> Self {
        ModelConstants {
            efficiency: 0.7624,
            pre_pascal_factor: 0.5484,
            step_overhead_s: 0.009922,
            layer_overhead_s: 0.0004494,
        }
    }
}

impl ModelConstants {
    /// The constants as a vector of logarithms (the fitting space: all are positive).
    pub fn to_log(self) -> [f64; 4] {
        [
            self.efficiency.ln(),
            self.pre_pascal_factor.ln(),
            self.step_overhead_s.ln(),
            self.layer_overhead_s.ln(),
        ]
    }

    /// The constants from a vector of logarithms.
    pub fn from_log(v: [f64; 4]) -> Self {
        ModelConstants {
            efficiency: v[0].exp(),
            pre_pascal_factor: v[1].exp(),
            step_overhead_s: v[2].exp(),
            layer_overhead_s: v[3].exp(),
        }
    }
}

/// A step's time split into the model's terms, seconds (for explaining an estimate).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepTime {
    /// Fixed and per-layer overhead.
    pub overhead_s: f64,
    /// Arithmetic at the achievable FLOPS.
    pub compute_s: f64,
    /// Parameter and optimiser traffic at the achievable memory bandwidth.
    pub memory_s: f64,
    /// Input transfer over the host link.
    pub input_s: f64,
    /// Gradient all-reduce (zero for one worker).
    pub allreduce_s: f64,
}

impl StepTime {
    /// The whole step: compute and memory overlap, the rest adds up.
    pub fn total_s(&self) -> f64 {
        self.overhead_s + self.compute_s.max(self.memory_s) + self.input_s + self.allreduce_s
    }
}

/// True when the job's parameters, gradients and optimiser state fit in the GPU's memory
/// (activations are not counted: the traits do not give them).
pub fn fits_in_memory(job: &JobTraits, gpu: &GpuSpec) -> bool {
    job.params * TRAINING_BYTES_PER_PARAM <= gpu.memory_gb * 1e9
}

/// The model's step time of one worker among `workers`.
pub fn step_time(job: &JobTraits, gpu: &GpuSpec, workers: u32, k: &ModelConstants) -> StepTime {
    let efficiency = k.efficiency
        * if gpu.arch.before_pascal() {
            k.pre_pascal_factor
        } else {
            1.0
        };
    let batch = f64::from(job.batch_size);
    let achievable = efficiency * gpu.peak_flops(job.mixed_precision);
    let compute_s =
        TRAINING_FLOPS_FACTOR * job.forward_gflops_per_sample * 1e9 * batch / achievable;
    let memory_s =
        job.params * BYTES_PER_PARAM_PER_STEP / (TRANSFER_EFFICIENCY * gpu.memory_gbps * 1e9);
    let link = TRANSFER_EFFICIENCY * gpu.host_link_gbps * 1e9;
    let input_s = batch * job.input_bytes_per_sample / link;
    // Small kernels run no faster than on the reference, but slower on slower parts.
    let slowdown = (REFERENCE_FP32_TFLOPS * k.efficiency / (gpu.fp32_tflops * efficiency)).max(1.0);
    let overhead_s =
        k.step_overhead_s + k.layer_overhead_s * f64::from(job.layers_per_step) * slowdown;
    let n = f64::from(workers.max(1));
    let allreduce_s = if workers > 1 {
        2.0 * (n - 1.0) / n * job.params * GRADIENT_BYTES / link
    } else {
        0.0
    };
    StepTime {
        overhead_s,
        compute_s,
        memory_s,
        input_s,
        allreduce_s,
    }
}

/// Estimated steps/s of the whole job with `workers` data-parallel workers on `gpu`
/// (worker-steps summed, as Gavel counts them); `None` when the job does not fit.
pub fn estimate_rate(
    job: &JobTraits,
    gpu: &GpuSpec,
    workers: u32,
    k: &ModelConstants,
) -> Option<f64> {
    if workers == 0 || !fits_in_memory(job, gpu) {
        return None;
    }
    let t = step_time(job, gpu, workers, k).total_s();
    (t.is_finite() && t > 0.0).then(|| f64::from(workers) / t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::gpu::gpu_spec;
    use crate::estimate::job::gavel_job;

    fn spec(name: &str) -> GpuSpec {
        gpu_spec(name).unwrap()
    }

    #[test]
    fn more_flops_never_slows_a_compute_bound_job() {
        let job = gavel_job("CycleGAN").unwrap();
        let k = ModelConstants::default();
        let mut gpu = spec("v100");
        let mut last = 0.0;
        for tflops in [5.0, 10.0, 15.7, 30.0, 60.0, 120.0] {
            gpu.fp32_tflops = tflops;
            let r = estimate_rate(&job, &gpu, 1, &k).unwrap();
            assert!(r >= last, "{tflops} TFLOPS gave {r} < {last}");
            last = r;
        }
        let t = step_time(&job, &spec("v100"), 1, &k);
        assert!(
            t.compute_s > t.memory_s && t.compute_s > t.overhead_s,
            "CycleGAN should be compute-bound: {t:?}"
        );
    }

    #[test]
    fn faster_datasheet_means_faster_estimate_for_big_models() {
        let job = gavel_job("ResNet-50 (batch size 128)").unwrap();
        let k = ModelConstants::default();
        let r = |g: &str| estimate_rate(&job, &spec(g), 1, &k).unwrap();
        assert!(
            r("k80") < r("p100")
                && r("p100") < r("v100")
                && r("v100") < r("a100")
                && r("a100") < r("h100")
        );
    }

    #[test]
    fn small_batches_are_overhead_bound() {
        let job = gavel_job("LM (batch size 5)").unwrap();
        let t = step_time(&job, &spec("v100"), 1, &ModelConstants::default());
        assert!(t.overhead_s > t.compute_s, "{t:?}");
    }

    #[test]
    fn more_workers_add_allreduce_but_more_total_steps() {
        let job = gavel_job("ResNet-18 (batch size 128)").unwrap();
        let k = ModelConstants::default();
        let g = spec("v100");
        let one = estimate_rate(&job, &g, 1, &k).unwrap();
        let four = estimate_rate(&job, &g, 4, &k).unwrap();
        assert!(four > one && four < 4.0 * one, "one {one} four {four}");
        assert!(step_time(&job, &g, 4, &k).allreduce_s > 0.0);
    }

    #[test]
    fn a_model_too_big_for_memory_cannot_run() {
        let mut job = gavel_job("ResNet-50 (batch size 16)").unwrap();
        job.params = 2e9; // 32 GB of training state
        assert_eq!(
            estimate_rate(&job, &spec("v100"), 1, &ModelConstants::default()),
            None
        );
        assert!(estimate_rate(&job, &spec("h100"), 1, &ModelConstants::default()).is_some());
    }

    proptest::proptest! {
        /// Better hardware never makes any job slower: more FLOPS, memory bandwidth or host
        /// link bandwidth can only shorten a step.
        #[test]
        fn better_hardware_never_slows_a_job(
            params in 1e4f64..1e9,
            gflops in 1e-4f64..1e3,
            batch in 1u32..4096,
            input in 0f64..1e6,
            layers in 1u32..500,
            workers in proptest::sample::select(vec![1u32, 2, 4, 8]),
            gpu_index in 0usize..12,
            better in 1.0f64..10.0,
        ) {
            let job = JobTraits {
                name: "random".into(),
                params,
                forward_gflops_per_sample: gflops,
                batch_size: batch,
                input_bytes_per_sample: input,
                layers_per_step: layers,
                mixed_precision: false,
            };
            let k = ModelConstants::default();
            let gpus = crate::estimate::gpu::builtin_gpus();
            let base = gpus[gpu_index % gpus.len()].clone();
            let Some(r0) = estimate_rate(&job, &base, workers, &k) else { return Ok(()) };
            for improve in 0..3 {
                let mut g = base.clone();
                match improve {
                    0 => g.fp32_tflops *= better,
                    1 => g.memory_gbps *= better,
                    _ => g.host_link_gbps *= better,
                }
                let r = estimate_rate(&job, &g, workers, &k).unwrap();
                proptest::prop_assert!(r >= r0 * (1.0 - 1e-12), "improvement {improve} x{better}: {r} < {r0}");
            }
        }
    }

    #[test]
    fn constants_survive_log_round_trip() {
        let k = ModelConstants::default();
        let back = ModelConstants::from_log(k.to_log());
        assert!((back.efficiency - k.efficiency).abs() < 1e-12);
        assert!((back.layer_overhead_s - k.layer_overhead_s).abs() < 1e-15);
    }
}
