//! Decisions in words: why a job runs where it does, or why it waits.

use crate::spec::RateSource;
use hadar_core::WaitReason;
use hadar_store::NodeGpus;

/// A placement in words: `n4 (2 x v100, 2 x k80)` or `n1 (2 x v100) + n3 (1 x k80)`.
pub fn placement_words(p: &NodeGpus) -> String {
    p.iter()
        .map(|(node, gpus)| {
            let g: Vec<String> = gpus.iter().map(|(t, c)| format!("{c} x {t}")).collect();
            format!("{node} ({})", g.join(", "))
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The rates the policy used, in words: `v100 12.0 steps/s (Gavel's table for ...)`.
pub fn rates_words(origins: &[(String, Option<f64>, RateSource)]) -> String {
    let items: Vec<String> = origins
        .iter()
        .map(|(t, rate, src)| {
            let from = match src {
                RateSource::Learned { samples } => {
                    format!("learned from {samples} measurement(s) of this job")
                }
                RateSource::Hint => "from the job's throughput= hint".into(),
                RateSource::Table { job_type } => format!("Gavel's measurement for {job_type}"),
                RateSource::Estimated { job_type } => format!(
                    "estimated for {job_type} from its traits and this GPU's datasheet, calibrated on Gavel's measured types"
                ),
                RateSource::Model => {
                    "estimated from the job's model= traits and this GPU's datasheet".into()
                }
                RateSource::Default => "the default rate: nothing is known yet".into(),
                RateSource::NotRequested => "its gpu-types= leaves it out".into(),
                RateSource::CannotRun => {
                    "not known to run there: Gavel's measurements exclude it, or nothing is known of this GPU".into()
                }
                RateSource::Bound => {
                    "Slurm holds the started job to the types of its typed request".into()
                }
                RateSource::Kept => {
                    "not this round: it stays on the types it runs on or waits for".into()
                }
            };
            match rate {
                Some(r) => format!("{t} {r:.3} steps/s ({from})"),
                None => format!("{t}: no ({from})"),
            }
        })
        .collect();
    items.join("; ")
}

/// Why a job runs where it does.
pub fn runs(
    p: &NodeGpus,
    rate: f64,
    payoff: Option<f64>,
    kept: bool,
    mixed: bool,
    rates: &str,
) -> String {
    let mut s = format!("runs on {} at {rate:.3} steps/s", placement_words(p));
    if kept {
        s.push_str("; it keeps the placement it already had, since moving would cost a restart");
    } else {
        s.push_str("; this is the placement with the best utility minus GPU price Hadar found for it this round");
    }
    if let Some(v) = payoff {
        s.push_str(&format!(" (payoff {v:.3})"));
    }
    if mixed {
        s.push_str(
            "; its workers span several GPU types, so it runs at the pace of the slowest of them",
        );
    }
    s.push_str(&format!(". Throughput used: {rates}."));
    s
}

/// Why a job waits.
pub fn waits(reason: &WaitReason, rates: &str) -> String {
    let why = match reason {
        WaitReason::PriceAboveUtility { .. } => format!(
            "waits: {reason}; the GPUs it could use are wanted by jobs that gain more from them this round"
        ),
        WaitReason::DoesNotFit => {
            "waits: not enough free GPUs of a type it can use are left this round".to_string()
        }
        other => format!("waits: {other}"),
    };
    format!("{why}. Throughput used: {rates}.")
}

/// Why a job waits for one GPU type ([`hadar_core::passes::lookahead`]): `start_in` and `end_in` are seconds
/// from now in the look-ahead over the queue.
pub fn committed(gpu_type: &str, start_in: f64, end_in: f64, rates: &str) -> String {
    let when = if start_in.is_finite() && end_in.is_finite() {
        format!(
            "it would start there in about {:.0} s and end in about {:.0} s",
            start_in.max(0.0),
            end_in.max(0.0)
        )
    } else {
        "the jobs holding those GPUs report no rate yet, and every other type would still end later"
            .to_string()
    };
    format!(
        "waits for {gpu_type}: looking ahead over the queue, {when}, sooner than on any other type it could start on now or later (moving it once started would cost a checkpoint and a restart). Throughput used: {rates}."
    )
}

/// Why every job waits when no GPU is usable.
pub fn no_cluster(unusable: &[(String, String)]) -> String {
    let nodes: Vec<String> = unusable.iter().map(|(n, s)| format!("{n} {s}")).collect();
    format!(
        "waits: no usable GPU in the managed partitions (nodes: {})",
        nodes.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_name_nodes_types_and_reasons() {
        let p: NodeGpus = vec![("n4".into(), vec![("v100".into(), 2), ("k80".into(), 2)])];
        let origins = vec![
            (
                "v100".to_string(),
                Some(10.0),
                RateSource::Learned { samples: 2 },
            ),
            ("k80".to_string(), None, RateSource::NotRequested),
        ];
        let r = rates_words(&origins);
        assert_eq!(
            r,
            "v100 10.000 steps/s (learned from 2 measurement(s) of this job); k80: no (its gpu-types= leaves it out)"
        );
        let s = runs(&p, 3.5, Some(0.25), false, true, &r);
        assert!(
            s.starts_with("runs on n4 (2 x v100, 2 x k80) at 3.500 steps/s"),
            "{s}"
        );
        assert!(s.contains("slowest"), "{s}");
        let w = waits(
            &WaitReason::PriceAboveUtility {
                utility: 1.0,
                price: 2.0,
            },
            &r,
        );
        assert!(
            w.contains("costs 2.000, more than its utility 1.000"),
            "{w}"
        );
        let c = committed("v100", 12.4, 40.0, &r);
        assert!(
            c.starts_with("waits for v100: ")
                && c.contains("start there in about 12 s and end in about 40 s")
                && c.ends_with("(its gpu-types= leaves it out)."),
            "{c}"
        );
        let c = committed("v100", f64::INFINITY, f64::INFINITY, &r);
        assert!(c.contains("report no rate yet"), "{c}");
    }
}
