//! The price book of one Hadar round: a price per (node, GPU type) that rises exponentially
//! with how much of that resource this round has already given out.
//!
//! For a resource with capacity `c` of which `u` GPUs are already given out, the next GPU
//! costs `p(u) = L * (U/L)^(u/c)`; taking `k` GPUs costs `p(u) + p(u+1) + ... + p(u+k-1)`.
//! An empty resource therefore sells its first GPU at `L`, and the price approaches `U` as
//! the resource fills. `U` and `L` come from the jobs' utilities (see
//! [`PriceBook::bounds_from_utilities`]), either one pair for every type (as in the paper)
//! or one pair per GPU type (see [`PriceBook::bounds_by_type`]), so that a fast type is
//! priced by what jobs gain on it and a job that would pace fast GPUs at a slow type's
//! speed pays for the fast GPUs it wastes.
//!
//! Besides usage, the book keeps nodes grouped into classes of identical state (same
//! capacity and usage for every type). Nodes of one class have identical prices, so the
//! dual subroutine works per class rather than per node: a 256-node cluster of four
//! single-type node models has at most `4 x 9` classes however busy it is.

use crate::cluster::{Cluster, GpuType, NodeId};
use crate::placement::Placement;
use std::collections::HashMap;

/// Why `U` and `L` could not be derived.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PriceBoundsError {
    /// No job had a positive, finite utility.
    #[error("no job has a positive finite utility per GPU-round")]
    NoUtilities,
}

/// The lower and upper price bounds `L` and `U` of a round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PriceBounds {
    /// `L`: the price of a GPU on an empty resource.
    pub low: f64,
    /// `U`: the price a full resource reaches.
    pub high: f64,
}

/// Nodes that share one state: the same capacity and usage for every GPU type.
#[derive(Clone, Debug)]
pub struct NodeClass {
    /// `(capacity, used)` per GPU type, indexed by [`GpuType::index`].
    pub key: Vec<(u32, u32)>,
    /// The nodes currently in this state.
    pub nodes: Vec<NodeId>,
}

impl NodeClass {
    /// Free GPUs of type `t` on each node of the class.
    pub fn free(&self, t: usize) -> u32 {
        let (cap, used) = self.key[t];
        cap - used
    }
}

/// Prices and usage of every (node, type) during one round's planning.
#[derive(Clone, Debug)]
pub struct PriceBook {
    types: usize,
    bounds: Vec<PriceBounds>,
    cap: Vec<u32>,
    used: Vec<u32>,
    free_by_type: Vec<u32>,
    /// `prefix[t][c][k]`: the cost of the first `k` GPUs of an empty resource of type `t`
    /// and capacity `c`.
    prefix: Vec<Vec<Vec<f64>>>,
    classes: Vec<NodeClass>,
    class_index: HashMap<Vec<(u32, u32)>, usize>,
    class_of: Vec<usize>,
    slot_in_class: Vec<usize>,
    /// GPUs of each type in the cluster.
    total_by_type: Vec<u32>,
    /// Exponent weight of the cluster-wide utilisation of a type (see
    /// [`PriceBook::with_type_pressure`]); 0 prices each (node, type) alone.
    type_pressure: f64,
    /// The current factor of each type's prices, kept up to date by charge and release.
    type_factors: Vec<f64>,
}

impl PriceBook {
    /// Derives `L` and `U` from the jobs' best utilities per GPU-round.
    ///
    /// `per_gpu` holds, for each job that can run, its utility at its fastest placement
    /// divided by its worker count. `U` is the largest of these, so a resource filled to
    /// capacity asks more per GPU than any job can pay; `L` is half the smallest, so every
    /// job can afford a placement on empty resources. Non-positive and non-finite values are
    /// ignored.
    pub fn bounds_from_utilities(
        per_gpu: impl IntoIterator<Item = f64>,
    ) -> Result<PriceBounds, PriceBoundsError> {
        let mut lo = f64::INFINITY;
        let mut hi = 0.0_f64;
        for v in per_gpu {
            if v.is_finite() && v > 0.0 {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        if !lo.is_finite() {
            return Err(PriceBoundsError::NoUtilities);
        }
        Ok(PriceBounds {
            low: lo / 2.0,
            high: hi,
        })
    }

    /// Per-type bounds from `(type, utility per GPU-round)` samples: for each type, `U` is
    /// the largest utility per GPU a job gets on it (all its workers on that type) and `L`
    /// half the smallest. A type without samples (no job can use it) gets `overall`.
    pub fn bounds_by_type(
        types: usize,
        samples: impl IntoIterator<Item = (usize, f64)>,
        overall: PriceBounds,
    ) -> Vec<PriceBounds> {
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); types];
        for (t, v) in samples {
            if let Some(list) = per.get_mut(t) {
                list.push(v);
            }
        }
        per.into_iter()
            .map(|vs| Self::bounds_from_utilities(vs).unwrap_or(overall))
            .collect()
    }

    /// A book with nothing given out yet; `bounds` holds one pair per GPU type (a shorter
    /// list is padded with its last pair).
    pub fn new(cluster: &Cluster, bounds: &[PriceBounds]) -> Self {
        let types = cluster.type_count();
        let mut cap = Vec::with_capacity(cluster.nodes().len() * types);
        for n in cluster.nodes() {
            cap.extend_from_slice(&n.gpus);
        }
        let used = vec![0; cap.len()];
        let free_by_type = cluster.gpus_by_type();
        let total_by_type = free_by_type.clone();
        let fallback = bounds.last().copied().unwrap_or(PriceBounds {
            low: 1.0,
            high: 2.0,
        });
        let bounds: Vec<PriceBounds> = (0..types)
            .map(|t| bounds.get(t).copied().unwrap_or(fallback))
            .collect();
        let mut prefix = Vec::with_capacity(types);
        for (t, b) in bounds.iter().enumerate() {
            let max_cap = cluster.max_per_node(crate::cluster::GpuType(t as u16)) as usize;
            let ratio = b.high / b.low;
            let mut by_cap = Vec::with_capacity(max_cap + 1);
            for c in 0..=max_cap {
                let mut p = Vec::with_capacity(c + 1);
                let mut sum = 0.0;
                p.push(0.0);
                for u in 0..c {
                    sum += b.low * ratio.powf(u as f64 / c as f64);
                    p.push(sum);
                }
                by_cap.push(p);
            }
            prefix.push(by_cap);
        }
        let mut book = PriceBook {
            types,
            bounds,
            cap,
            used,
            free_by_type,
            prefix,
            classes: Vec::new(),
            class_index: HashMap::new(),
            class_of: vec![0; cluster.nodes().len()],
            slot_in_class: vec![0; cluster.nodes().len()],
            type_factors: vec![1.0; total_by_type.len()],
            total_by_type,
            type_pressure: 0.0,
        };
        for n in cluster.node_ids() {
            let key = book.key_of(n);
            book.insert_into_class(n, key);
        }
        book
    }

    /// Adds a cluster-wide term to every price: each (node, type) price is multiplied by
    /// `(U/L)^(lambda * u_t / C_t)`, with `u_t` of the type's `C_t` GPUs given out so far.
    /// On clusters of one GPU per node the per-(node, type) price is flat (a node is free
    /// at `L` or full), so without this term every job takes the fastest free type; with
    /// it, a type grows dearer as it fills, and a job whose speedup on it is small turns
    /// to a cheaper type, leaving the fast one to a job that gains more there. An empty
    /// cluster still sells at `L` and a full resource still asks at least `U`.
    pub fn with_type_pressure(mut self, lambda: f64) -> Self {
        self.type_pressure = if lambda.is_finite() {
            lambda.max(0.0)
        } else {
            0.0
        };
        for t in 0..self.types {
            self.refresh_type_factor(t);
        }
        self
    }

    /// The cluster-wide factor of type `t`'s prices (1 without type pressure).
    fn type_factor(&self, t: usize) -> f64 {
        self.type_factors[t]
    }

    fn refresh_type_factor(&mut self, t: usize) {
        self.type_factors[t] = if self.type_pressure <= 0.0 {
            1.0
        } else {
            let total = self.total_by_type[t].max(1) as f64;
            let used = total - self.free_by_type[t] as f64;
            let b = self.bounds[t];
            (b.high / b.low).powf(self.type_pressure * used / total)
        };
    }

    /// `L` and `U` of each type.
    pub fn bounds(&self) -> &[PriceBounds] {
        &self.bounds
    }

    /// The smallest `L` of any type: no GPU costs less.
    pub fn lowest_price(&self) -> f64 {
        self.bounds
            .iter()
            .map(|b| b.low)
            .fold(f64::INFINITY, f64::min)
    }

    /// Number of GPU types.
    pub fn type_count(&self) -> usize {
        self.types
    }

    /// The price of the next GPU of type `t` on a resource of capacity `cap` with `used`
    /// given out: `L * (U/L)^(used/cap)` with type `t`'s bounds.
    pub fn unit_price(&self, t: usize, cap: u32, used: u32) -> f64 {
        let b = self.bounds[t];
        if used >= cap {
            return b.high * self.type_factor(t);
        }
        let p = &self.prefix[t][cap as usize];
        (p[used as usize + 1] - p[used as usize]) * self.type_factor(t)
    }

    /// The cost of `k` more GPUs of type `t` on a resource of capacity `cap` with `used`
    /// given out, `None` when fewer than `k` are free.
    pub fn cost_at(&self, t: usize, cap: u32, used: u32, k: u32) -> Option<f64> {
        if used + k > cap {
            return None;
        }
        let p = &self.prefix[t][cap as usize];
        Some((p[(used + k) as usize] - p[used as usize]) * self.type_factor(t))
    }

    /// GPUs of type `t` on node `n` given out so far this round.
    pub fn used(&self, n: NodeId, t: GpuType) -> u32 {
        self.used[n.index() * self.types + t.index()]
    }

    /// Free GPUs of type `t` on node `n`.
    pub fn free(&self, n: NodeId, t: GpuType) -> u32 {
        let i = n.index() * self.types + t.index();
        self.cap[i] - self.used[i]
    }

    /// Free GPUs of type `t` in the cluster.
    pub fn free_of_type(&self, t: usize) -> u32 {
        self.free_by_type[t]
    }

    /// Free GPUs of all types.
    pub fn free_total(&self) -> u32 {
        self.free_by_type.iter().sum()
    }

    /// The price of the next GPU of type `t` on node `n`.
    pub fn next_price(&self, n: NodeId, t: GpuType) -> f64 {
        let i = n.index() * self.types + t.index();
        self.unit_price(t.index(), self.cap[i], self.used[i])
    }

    /// What a placement would cost now; `None` when it does not fit (or names a node or
    /// type the cluster does not have).
    pub fn placement_cost(&self, placement: &Placement) -> Option<f64> {
        let mut total = 0.0;
        for p in placement.parts() {
            if p.node.index() >= self.class_of.len() || p.gpu_type.index() >= self.types {
                return None;
            }
            let i = p.node.index() * self.types + p.gpu_type.index();
            total += self.cost_at(p.gpu_type.index(), self.cap[i], self.used[i], p.gpus)?;
        }
        Some(total)
    }

    /// True when every part of the placement is free.
    pub fn fits(&self, placement: &Placement) -> bool {
        self.placement_cost(placement).is_some()
    }

    /// Gives a placement out: its GPUs count as used from now on, raising their prices.
    /// The caller checks [`PriceBook::fits`] first; parts that do not fit are clamped.
    pub fn charge(&mut self, placement: &Placement) {
        let mut touched: Vec<NodeId> = Vec::new();
        for p in placement.parts() {
            let i = p.node.index() * self.types + p.gpu_type.index();
            let take = p.gpus.min(self.cap[i] - self.used[i]);
            self.used[i] += take;
            self.free_by_type[p.gpu_type.index()] -= take;
            self.refresh_type_factor(p.gpu_type.index());
            if touched.last() != Some(&p.node) {
                touched.push(p.node);
            }
        }
        for n in touched {
            self.remove_from_class(n);
            let key = self.key_of(n);
            self.insert_into_class(n, key);
        }
    }

    /// Takes a placement back: its GPUs count as free again, lowering their prices. Parts
    /// beyond what is in use are clamped.
    pub fn release(&mut self, placement: &Placement) {
        let mut touched: Vec<NodeId> = Vec::new();
        for p in placement.parts() {
            if p.node.index() >= self.class_of.len() || p.gpu_type.index() >= self.types {
                continue;
            }
            let i = p.node.index() * self.types + p.gpu_type.index();
            let back = p.gpus.min(self.used[i]);
            self.used[i] -= back;
            self.free_by_type[p.gpu_type.index()] += back;
            self.refresh_type_factor(p.gpu_type.index());
            if touched.last() != Some(&p.node) {
                touched.push(p.node);
            }
        }
        for n in touched {
            self.remove_from_class(n);
            let key = self.key_of(n);
            self.insert_into_class(n, key);
        }
    }

    /// The node classes (some may be empty after nodes moved out of them).
    pub fn classes(&self) -> &[NodeClass] {
        &self.classes
    }

    fn key_of(&self, n: NodeId) -> Vec<(u32, u32)> {
        let i = n.index() * self.types;
        (0..self.types)
            .map(|t| (self.cap[i + t], self.used[i + t]))
            .collect()
    }

    fn insert_into_class(&mut self, n: NodeId, key: Vec<(u32, u32)>) {
        let c = match self.class_index.get(&key) {
            Some(&c) => c,
            None => {
                self.classes.push(NodeClass {
                    key: key.clone(),
                    nodes: Vec::new(),
                });
                self.class_index.insert(key, self.classes.len() - 1);
                self.classes.len() - 1
            }
        };
        self.class_of[n.index()] = c;
        self.slot_in_class[n.index()] = self.classes[c].nodes.len();
        self.classes[c].nodes.push(n);
    }

    fn remove_from_class(&mut self, n: NodeId) {
        let c = self.class_of[n.index()];
        let slot = self.slot_in_class[n.index()];
        let nodes = &mut self.classes[c].nodes;
        nodes.swap_remove(slot);
        if let Some(&moved) = nodes.get(slot) {
            self.slot_in_class[moved.index()] = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Part;

    fn book() -> PriceBook {
        let c = Cluster::from_type_counts(&[("v100".into(), 8), ("k80".into(), 4)], 4).unwrap();
        PriceBook::new(
            &c,
            &[
                PriceBounds {
                    low: 1.0,
                    high: 16.0,
                },
                PriceBounds {
                    low: 0.5,
                    high: 2.0,
                },
            ],
        )
    }

    #[test]
    fn type_pressure_raises_every_node_of_a_filling_type() {
        // Two v100 nodes of 4 and one k80 node: filling one v100 node makes the other,
        // still empty, v100 node dearer, but leaves the k80 node at its `L`.
        let mut plain = book();
        let mut pressed = book().with_type_pressure(1.0);
        assert_eq!(pressed.next_price(NodeId(1), GpuType(0)), 1.0);
        let full = Placement::gang([Part {
            node: NodeId(0),
            gpu_type: GpuType(0),
            gpus: 4,
        }]);
        plain.charge(&full);
        pressed.charge(&full);
        assert_eq!(plain.next_price(NodeId(1), GpuType(0)), 1.0);
        // Half of the 8 v100s are out: factor (16/1)^(1 * 4/8) = 4.
        assert!((pressed.next_price(NodeId(1), GpuType(0)) - 4.0).abs() < 1e-12);
        assert!(
            (pressed.cost_at(0, 4, 0, 2).unwrap() - 4.0 * plain.cost_at(0, 4, 0, 2).unwrap()).abs()
                < 1e-9
        );
        assert_eq!(pressed.next_price(NodeId(2), GpuType(1)), 0.5);
        // Releasing brings the price back.
        pressed.release(&full);
        assert_eq!(pressed.next_price(NodeId(1), GpuType(0)), 1.0);
    }

    #[test]
    fn per_type_bounds_fall_back_to_the_overall_pair() {
        let overall = PriceBounds {
            low: 1.0,
            high: 9.0,
        };
        let b = PriceBook::bounds_by_type(3, [(0, 4.0), (0, 8.0), (2, 2.0)], overall);
        assert_eq!(
            b,
            vec![
                PriceBounds {
                    low: 2.0,
                    high: 8.0
                },
                overall,
                PriceBounds {
                    low: 1.0,
                    high: 2.0
                }
            ]
        );
    }

    #[test]
    fn bounds_are_half_the_smallest_and_the_largest() {
        let b = PriceBook::bounds_from_utilities([4.0, 0.0, f64::NAN, 10.0]).unwrap();
        assert_eq!(
            b,
            PriceBounds {
                low: 2.0,
                high: 10.0
            }
        );
        assert_eq!(
            PriceBook::bounds_from_utilities([0.0]),
            Err(PriceBoundsError::NoUtilities)
        );
    }

    #[test]
    fn empty_costs_low_and_prices_follow_the_formula() {
        let b = book();
        assert_eq!(b.next_price(NodeId(0), GpuType(0)), 1.0);
        // Capacity 4, 2 used: 1 * 16^(2/4) = 4.
        assert!((b.unit_price(0, 4, 2) - 4.0).abs() < 1e-12);
        assert!((b.unit_price(0, 4, 4) - 16.0).abs() < 1e-12);
        // 3 GPUs from empty: 1 + 2 + 4.
        assert!((b.cost_at(0, 4, 0, 3).unwrap() - 7.0).abs() < 1e-12);
        assert_eq!(b.cost_at(0, 4, 3, 2), None);
        // The K80 node (type 1) has its own bounds: 0.5 * 4^(1/4) for its second GPU.
        assert_eq!(b.next_price(NodeId(2), GpuType(1)), 0.5);
        assert!((b.unit_price(1, 4, 1) - 0.5 * 4f64.powf(0.25)).abs() < 1e-12);
        assert_eq!(b.lowest_price(), 0.5);
    }

    #[test]
    fn charging_raises_prices_and_moves_classes() {
        let mut b = book();
        let p = Placement::gang([Part {
            node: NodeId(1),
            gpu_type: GpuType(0),
            gpus: 2,
        }]);
        assert!((b.placement_cost(&p).unwrap() - 3.0).abs() < 1e-12);
        b.charge(&p);
        assert!((b.next_price(NodeId(1), GpuType(0)) - 4.0).abs() < 1e-12);
        assert_eq!(b.free_of_type(0), 6);
        let live: usize = b.classes().iter().map(|c| c.nodes.len()).sum();
        assert_eq!(live, 3);
        let mut back = b.clone();
        back.release(&p);
        assert_eq!(back.next_price(NodeId(1), GpuType(0)), 1.0);
        assert_eq!(back.free_of_type(0), 8);
        let of_node1 = b
            .classes()
            .iter()
            .find(|c| c.nodes.contains(&NodeId(1)))
            .unwrap();
        assert_eq!(of_node1.key[0], (4, 2));
        assert_eq!(of_node1.nodes, vec![NodeId(1)]);
    }
}
