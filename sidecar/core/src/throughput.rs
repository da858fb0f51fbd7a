//! How fast a job trains: steps per second of the whole job on each GPU type, for each
//! worker count that was measured (or estimated).
//!
//! A missing entry, or a rate of zero, means the job cannot run that way: the model does
//! not fit, the type was never measured, or the job's owner excluded it. Policies must treat
//! both the same.

use crate::cluster::GpuType;
use serde::{Deserialize, Serialize};

/// Steps/s of a job on one GPU type, by number of workers (all of that type), and where a
/// table measured it, by the number of nodes the workers span.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RateCurve {
    /// `(workers, steps_per_second)`, sorted by workers, rates strictly positive: the rate
    /// with the workers packed onto as few nodes as they fit.
    points: Vec<(u32, f64)>,
    /// `(workers, nodes, steps_per_second)`, sorted: the rate with the workers spread over
    /// that many nodes, where it was measured (a gang that synchronises across more nodes
    /// steps slower). Empty: spreading costs nothing, as in Gavel's tables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    spread: Vec<(u32, u32, f64)>,
}

impl RateCurve {
    /// Builds a curve from measured points; zero, negative and non-finite rates are dropped
    /// (the job cannot run that way), and later duplicates of a worker count win.
    pub fn new(points: impl IntoIterator<Item = (u32, f64)>) -> Self {
        let mut pts: Vec<(u32, f64)> = Vec::new();
        for (n, r) in points {
            pts.retain(|(m, _)| *m != n);
            if n > 0 && r.is_finite() && r > 0.0 {
                pts.push((n, r));
            }
        }
        pts.sort_by_key(|(n, _)| *n);
        RateCurve {
            points: pts,
            spread: Vec::new(),
        }
    }

    /// The same curve with rates by the nodes the workers span, `(workers, nodes, rate)`;
    /// zero, negative and non-finite rates are dropped (the job cannot run so), and later
    /// duplicates win.
    pub fn with_spread(mut self, points: impl IntoIterator<Item = (u32, u32, f64)>) -> Self {
        let mut pts: Vec<(u32, u32, f64)> = Vec::new();
        for (w, n, r) in points {
            pts.retain(|(v, m, _)| (*v, *m) != (w, n));
            if w > 0 && n > 0 && r.is_finite() && r > 0.0 {
                pts.push((w, n, r));
            }
        }
        pts.sort_by_key(|(w, n, _)| (*w, *n));
        self.spread = pts;
        self
    }

    /// The rate with `workers` workers over `nodes` nodes: the rate measured at that many
    /// nodes; where it was measured at other node counts only, at the fewest measured
    /// nodes above `nodes` (else the most below), so that spreading never looks cheaper
    /// than it was measured; where no spread was measured, the packed rate ([`Self::at`]).
    pub fn at_nodes(&self, workers: u32, nodes: u32) -> Option<f64> {
        let mut listed = self.spread.iter().filter(|(w, _, _)| *w == workers);
        let Some(first) = listed.next() else {
            return self.at(workers);
        };
        let mut below = first;
        for p in std::iter::once(first).chain(listed) {
            if p.1 >= nodes {
                return Some(p.2);
            }
            below = p;
        }
        Some(below.2)
    }

    /// True when rates by nodes spanned were measured.
    pub fn has_spread(&self) -> bool {
        !self.spread.is_empty()
    }

    /// The rate with exactly `workers` workers, if known and positive.
    pub fn at(&self, workers: u32) -> Option<f64> {
        self.points
            .iter()
            .find(|(n, _)| *n == workers)
            .map(|(_, r)| *r)
    }

    /// The measured points.
    pub fn points(&self) -> &[(u32, f64)] {
        &self.points
    }

    /// True when the job cannot run on this type at all.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// A job's throughput on every GPU type of a cluster, indexed by [`GpuType::index`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThroughputProfile {
    per_type: Vec<RateCurve>,
}

impl ThroughputProfile {
    /// Builds a profile from one curve per cluster GPU type.
    pub fn new(per_type: Vec<RateCurve>) -> Self {
        ThroughputProfile { per_type }
    }

    /// Steps/s of the whole job with `workers` workers all of type `t`; `None` when it
    /// cannot run that way.
    pub fn rate(&self, t: GpuType, workers: u32) -> Option<f64> {
        self.per_type.get(t.index()).and_then(|c| c.at(workers))
    }

    /// Steps/s with `workers` workers of type `t`, zero when the job cannot run that way.
    pub fn rate_or_zero(&self, t: GpuType, workers: u32) -> f64 {
        self.rate(t, workers).unwrap_or(0.0)
    }

    /// Steps/s with `workers` workers of type `t` over `nodes` nodes
    /// ([`RateCurve::at_nodes`]); `None` when it cannot run that way.
    pub fn rate_across(&self, t: GpuType, workers: u32, nodes: u32) -> Option<f64> {
        self.per_type
            .get(t.index())
            .and_then(|c| c.at_nodes(workers, nodes))
    }

    /// True when some type's rates depend on the nodes a gang spans.
    pub fn has_spread(&self) -> bool {
        self.per_type.iter().any(RateCurve::has_spread)
    }

    /// The curve for one type (empty when the type is unknown to this job).
    pub fn curve(&self, t: GpuType) -> &RateCurve {
        static EMPTY: RateCurve = RateCurve {
            points: Vec::new(),
            spread: Vec::new(),
        };
        self.per_type.get(t.index()).unwrap_or(&EMPTY)
    }

    /// Number of types this profile covers.
    pub fn type_count(&self) -> usize {
        self.per_type.len()
    }

    /// The fastest type for `workers` workers and its rate, ties broken by the lower index.
    pub fn fastest(&self, workers: u32) -> Option<(GpuType, f64)> {
        let mut best: Option<(GpuType, f64)> = None;
        for i in 0..self.per_type.len() {
            let t = GpuType(i as u16);
            if let Some(r) = self.rate(t, workers)
                && best.is_none_or(|(_, b)| r > b)
            {
                best = Some((t, r));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_negative_rates_mean_cannot_run() {
        let c = RateCurve::new([(1, 2.0), (2, 0.0), (4, -1.0), (8, f64::NAN)]);
        assert_eq!(c.at(1), Some(2.0));
        assert_eq!(c.at(2), None);
        assert_eq!(c.at(4), None);
        assert_eq!(c.at(8), None);
    }

    #[test]
    fn a_spread_gang_runs_at_its_measured_rate_and_never_faster_than_measured() {
        let c = RateCurve::new([(4, 10.0), (2, 6.0)]).with_spread([
            (4, 1, 10.0),
            (4, 2, 8.0),
            (4, 4, 5.0),
        ]);
        assert_eq!(c.at_nodes(4, 1), Some(10.0));
        assert_eq!(c.at_nodes(4, 2), Some(8.0));
        // Three nodes were not measured: the rate at four, the fewest measured above.
        assert_eq!(c.at_nodes(4, 3), Some(5.0));
        // Beyond the most measured: the most spread rate.
        assert_eq!(c.at_nodes(4, 6), Some(5.0));
        // No spread measured for two workers: the packed rate at any spread.
        assert_eq!(c.at_nodes(2, 2), Some(6.0));
        assert!(c.has_spread() && !RateCurve::new([(1, 1.0)]).has_spread());
    }

    #[test]
    fn fastest_picks_highest_rate() {
        let p = ThroughputProfile::new(vec![
            RateCurve::new([(1, 2.0)]),
            RateCurve::new([(1, 3.0)]),
            RateCurve::default(),
        ]);
        assert_eq!(p.fastest(1), Some((GpuType(1), 3.0)));
        assert_eq!(p.fastest(2), None);
    }
}
