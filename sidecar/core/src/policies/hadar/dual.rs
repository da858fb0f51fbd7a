//! The dual subroutine: for one job, the gang placement over the free (node, type) slots
//! that maximises utility minus price.
//!
//! A gang job runs at its slowest worker's pace, so its rate is fixed by the slowest type
//! it uses (the bottleneck). The search enumerates the bottleneck `b` from the fastest type
//! down, allows only types at least as fast as `b`, and finds the cheapest `N` slots among
//! them:
//!
//! * Each node's marginal prices rise with every GPU taken (exponential prices), so the
//!   cheapest `k` slots on one node are its `k` cheapest marginals merged over the allowed
//!   types, and the node's cost `g(k)` is convex.
//! * Without a binding node limit the cheapest `N` slots overall are the `N` smallest
//!   marginals in the cluster. Nodes in one price class are interchangeable, so this greedy
//!   works per class: `O(classes x types)` per job, not per node.
//! * When the greedy answer spreads over more nodes than the job may use, a dynamic
//!   programme over nodes picks at most `M` nodes and a count on each: `dp[m][n]` is the
//!   cheapest way to place `n` workers on `m` nodes. Only `min(M, class size)` nodes of each
//!   class can matter, which keeps it small.
//!
//! Any placement whose bottleneck is `b` costs at least as much as the cheapest one over
//! the types at least as fast as `b`, and earns no more utility, so taking the best over
//! all `b` gives the payoff-maximising placement exactly.

use crate::cluster::{GpuType, NodeId};
use crate::market::JobUtility;
use crate::market::prices::{NodeClass, PriceBook};
use crate::placement::{Part, Placement};
use crate::plan::WaitReason;
use crate::throughput::ThroughputProfile;

impl DualJob<'_> {
    /// The most nodes a placement over `types` may span: the largest of their limits.
    pub(super) fn limit_on(&self, types: &[GpuType]) -> u32 {
        types
            .iter()
            .filter_map(|t| self.max_nodes_by_type.get(t.index()).copied())
            .max()
            .unwrap_or(self.max_nodes)
            .min(self.max_nodes)
    }
}

/// One job as the dual subroutine sees it.
#[derive(Clone, Debug)]
pub struct DualJob<'a> {
    /// Workers: all are placed, or none.
    pub workers: u32,
    /// Steps/s with all workers on each type (`X[type][N]`), 0 where it cannot run.
    pub rates: &'a [f64],
    /// The job's throughput where its rates depend on the nodes a gang spans (`None`:
    /// spreading costs nothing). A placement over more nodes is then worth its slower
    /// rate, and the search weighs packing tighter at a higher price against it.
    pub spread: Option<&'a ThroughputProfile>,
    /// The job's utility.
    pub utility: &'a JobUtility,
    /// The placement it ran on last round, offered as a candidate that needs no restart
    /// (only when stickiness is on).
    pub previous: Option<&'a Placement>,
    /// The most nodes its placement may span.
    pub max_nodes: u32,
    /// The most nodes of each type it may span (at most `max_nodes`).
    pub max_nodes_by_type: &'a [u32],
    /// A placement over several nodes takes the same number of GPUs on each (one Slurm
    /// request per job).
    pub uniform: bool,
    /// Whether one placement may mix GPU types (otherwise all workers share one type).
    pub mixed_types: bool,
}

/// The best placement found for a job, with its economics.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    /// Where it would run.
    pub placement: Placement,
    /// Its steps/s there: the slowest used type's rate.
    pub rate: f64,
    /// Its utility there (restart-discounted when it would move).
    pub utility: f64,
    /// What the placement costs at current prices.
    pub price: f64,
}

impl Offer {
    /// Utility minus price.
    pub fn payoff(&self) -> f64 {
        self.utility - self.price
    }
}

/// What the dual subroutine found for a job.
#[derive(Clone, Debug, PartialEq)]
pub enum DualOutcome {
    /// The chosen placement (its payoff may be negative).
    Offer(Offer),
    /// No feasible placement, and why.
    NoPlacement(WaitReason),
}

/// A gang placement's rate: the slowest used type's `X[type][N]`, 0 when a used type is
/// unusable or the GPU count is not `workers`.
pub fn gang_rate(rates: &[f64], workers: u32, placement: &Placement) -> f64 {
    if placement.is_empty() || placement.gpus() != workers {
        return 0.0;
    }
    let mut rate = f64::INFINITY;
    for p in placement.parts() {
        rate = rate.min(rates.get(p.gpu_type.index()).copied().unwrap_or(0.0));
    }
    if rate.is_finite() && rate > 0.0 {
        rate
    } else {
        0.0
    }
}

/// `job`'s rate on `placement`: [`gang_rate`], slowed where its rates depend on the nodes
/// the placement spans by the ratio of its spread rate to its packed one on each type.
fn offer_rate(job: &DualJob<'_>, placement: &Placement) -> f64 {
    let packed = gang_rate(job.rates, job.workers, placement);
    let Some(profile) = job.spread.filter(|_| packed > 0.0) else {
        return packed;
    };
    let nodes = placement.nodes().len() as u32;
    placement
        .types()
        .into_iter()
        .map(|t| {
            let at = |n| profile.rate_across(t, job.workers, n).unwrap_or(0.0);
            let full = profile.rate(t, job.workers).unwrap_or(0.0);
            let share = if full > 0.0 { at(nodes) / full } else { 0.0 };
            job.rates[t.index()] * share
        })
        .fold(f64::INFINITY, f64::min)
}

/// Finds the payoff-maximising placement of `job` at the book's current prices; a running
/// job (with `previous` set) keeps its placement unless moving both pays more and earns
/// more utility after the restart.
pub fn best_offer(book: &PriceBook, job: &DualJob<'_>) -> DualOutcome {
    let usable = match usable_types(book, job) {
        Ok(usable) => usable,
        Err(reason) => return DualOutcome::NoPlacement(reason),
    };
    let keep = keep_offer(book, job);
    let best = best_move(book, job, &usable, keep.as_ref());
    // Stickiness: a running job moves only when its best move pays more and is worth more
    // after the restart, i.e. it runs faster enough to make up for the lost time. Prices
    // alone (a move to emptier nodes at the same speed) are no reason to restart, unless
    // keeping would not be admitted at all.
    let chosen = match (keep, best) {
        (Some(k), Some(m)) => {
            if m.payoff() > k.payoff() && (k.payoff() <= 0.0 || m.utility > k.utility) {
                Some(m)
            } else {
                Some(k)
            }
        }
        (k, m) => k.or(m),
    };
    match chosen {
        Some(o) => DualOutcome::Offer(o),
        None => DualOutcome::NoPlacement(WaitReason::DoesNotFit),
    }
}

/// The types `job` can run on, fastest first (ties by type), or why it cannot be placed at
/// all: no type it runs on, or too few free GPUs of those types.
fn usable_types(book: &PriceBook, job: &DualJob<'_>) -> Result<Vec<(usize, f64)>, WaitReason> {
    let n = job.workers;
    let mut usable: Vec<(usize, f64)> = job
        .rates
        .iter()
        .enumerate()
        .filter(|(_, r)| **r > 0.0)
        .map(|(t, r)| (t, *r))
        .collect();
    if usable.is_empty() || n == 0 {
        return Err(WaitReason::CannotRunAnywhere);
    }
    usable.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let free_usable: u32 = usable.iter().map(|(t, _)| book.free_of_type(*t)).sum();
    if free_usable < n {
        return Err(if book.free_total() >= n {
            WaitReason::NoThroughputOnFreeTypes
        } else {
            WaitReason::DoesNotFit
        });
    }
    Ok(usable)
}

/// A running job's offer to stay where it is, when its placement is still one it may have.
fn keep_offer(book: &PriceBook, job: &DualJob<'_>) -> Option<Offer> {
    let prev = job.previous?;
    let rate = offer_rate(job, prev);
    if rate > 0.0
        && prev.nodes().len() as u32 <= job.limit_on(&prev.types())
        && (!job.uniform || is_uniform(prev))
        && (job.mixed_types || prev.types().len() == 1)
        && let Some(price) = book.placement_cost(prev)
    {
        return Some(Offer {
            placement: prev.clone(),
            rate,
            utility: job.utility.at(rate, false),
            price,
        });
    }
    None
}

/// The best-paying placement over the `usable` types, searched bottleneck by bottleneck from
/// the fastest, stopping when no slower one can beat the best found or `keep`.
fn best_move(
    book: &PriceBook,
    job: &DualJob<'_>,
    usable: &[(usize, f64)],
    keep: Option<&Offer>,
) -> Option<Offer> {
    let n = job.workers;
    let mut best: Option<Offer> = None;
    // A move is chosen only if it pays more than keeping (see `best_offer`), so keeping's
    // payoff is the bar from the start.
    let bar = |best: &Option<Offer>| {
        let k = keep.map_or(f64::NEG_INFINITY, Offer::payoff);
        best.as_ref().map_or(k, |b| b.payoff().max(k))
    };
    let moved = job.previous.is_some();
    let floor = book.lowest_price() * n as f64;
    let mut allowed = vec![false; book.type_count()];
    let mut free_allowed = 0;
    let mut i = 0;
    while i < usable.len() {
        // Types of equal speed join the allowed set together.
        let rate_b = usable[i].1;
        if !job.mixed_types {
            allowed.iter_mut().for_each(|a| *a = false);
            free_allowed = 0;
        }
        while i < usable.len() && usable[i].1 == rate_b {
            allowed[usable[i].0] = true;
            free_allowed += book.free_of_type(usable[i].0);
            i += 1;
        }
        if free_allowed < n {
            continue;
        }
        // Any placement with this bottleneck earns at most u(rate_b) and costs at least
        // N * L; slower bottlenecks earn less, so nothing further can win.
        if job.utility.at(rate_b, moved) - floor <= bar(&best) {
            break;
        }
        for (placement, price) in candidates(book, job, &allowed) {
            let rate = offer_rate(job, &placement);
            let is_move = job.previous.is_some_and(|p| *p != placement);
            let utility = job.utility.at(rate, is_move);
            if rate > 0.0 && best.as_ref().is_none_or(|b| utility - price > b.payoff()) {
                best = Some(Offer {
                    placement,
                    rate,
                    utility,
                    price,
                });
            }
        }
    }
    best
}

/// The placements worth pricing for `job` over the `allowed` types: the cheapest within
/// its node limit; where spreading slows it, also the cheapest within each tighter limit
/// (a tighter one may pay for its higher price with a faster rate). With uniform gangs,
/// those of them one Slurm request can give; where that leaves none, or spreading slows
/// the job, also the cheapest uniform one over each node count that divides its workers.
fn candidates(book: &PriceBook, job: &DualJob<'_>, allowed: &[bool]) -> Vec<(Placement, f64)> {
    let n = job.workers;
    let allowed_types: Vec<GpuType> = (0..allowed.len())
        .filter(|&t| allowed[t])
        .map(|t| GpuType(t as u16))
        .collect();
    let max_nodes = job.limit_on(&allowed_types);
    let limits = match job.spread {
        Some(_) => 1..=max_nodes,
        None => max_nodes..=max_nodes,
    };
    let mut out = Vec::new();
    let mut spans_seen: Option<u32> = None;
    for limit in limits {
        let Some((placement, price)) = cheapest_within_limits(book, job, allowed, limit) else {
            continue;
        };
        let spans = placement.nodes().len() as u32;
        if spans_seen != Some(spans) {
            spans_seen = Some(spans);
            out.push((placement, price));
        }
    }
    if !job.uniform {
        return out;
    }
    out.retain(|(p, _)| is_uniform(p));
    if out.is_empty() || job.spread.is_some() {
        out.extend(cheapest_slots(book, allowed, n, 1));
        for m in (2..=max_nodes.min(n)).filter(|m| n % m == 0) {
            let within: Vec<bool> = (0..allowed.len())
                .map(|t| allowed[t] && job.max_nodes_by_type.get(t).is_none_or(|l| m <= *l))
                .collect();
            out.extend(cheapest_uniform(book, &within, n / m, m, job.mixed_types));
        }
        if job.spread.is_none() {
            let best = out.into_iter().min_by(|a, b| a.1.total_cmp(&b.1));
            return best.into_iter().collect();
        }
    }
    out
}

/// The cheapest slots on at most `limit` nodes whose span is also within the limit of the
/// types they use: where a placement over several allowed types lands on types of a
/// tighter limit alone, the search is repeated under that limit.
fn cheapest_within_limits(
    book: &PriceBook,
    job: &DualJob<'_>,
    allowed: &[bool],
    mut limit: u32,
) -> Option<(Placement, f64)> {
    loop {
        let (placement, price) = cheapest_slots(book, allowed, job.workers, limit)?;
        let own = job.limit_on(&placement.types());
        if placement.nodes().len() as u32 <= own {
            return Some((placement, price));
        }
        if own >= limit {
            return None;
        }
        limit = own;
    }
}

/// Whether a placement gives the same number of GPUs on each of its nodes (or uses one
/// node): what one Slurm request per job can give.
pub fn is_uniform(placement: &Placement) -> bool {
    let nodes = placement.nodes();
    let on = |n| -> u32 {
        placement
            .parts()
            .iter()
            .filter(|p| p.node == n)
            .map(|p| p.gpus)
            .sum()
    };
    nodes.windows(2).all(|w| on(w[0]) == on(w[1]))
}

/// The cheapest placement of `k` GPUs on each of `m` nodes, and its cost; `None` when no
/// `m` nodes have `k` free. Each node gives `k` GPUs of one allowed type; with `mixed`
/// the nodes may differ in type (one typeless Slurm request: the same count on every
/// node), else all take the same one. Nodes of one price class cost the same, so classes
/// are compared, not nodes.
fn cheapest_uniform(
    book: &PriceBook,
    allowed: &[bool],
    k: u32,
    m: u32,
    mixed: bool,
) -> Option<(Placement, f64)> {
    let types: Vec<usize> = (0..allowed.len()).filter(|&t| allowed[t]).collect();
    let sets: Vec<Vec<usize>> = if mixed {
        vec![types]
    } else {
        types.into_iter().map(|t| vec![t]).collect()
    };
    let mut best: Option<(Placement, f64)> = None;
    for set in sets {
        // Per class, its cheapest type in the set with `k` free.
        let mut offers: Vec<(f64, usize, &NodeClass)> = book
            .classes()
            .iter()
            .filter(|c| !c.nodes.is_empty())
            .filter_map(|c| {
                set.iter()
                    .filter(|&&t| c.free(t) >= k)
                    .filter_map(|&t| {
                        let (cap, used) = c.key[t];
                        Some((book.cost_at(t, cap, used, k)?, t))
                    })
                    .min_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|(cost, t)| (cost, t, c))
            })
            .collect();
        offers.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut parts = Vec::new();
        let mut cost = 0.0;
        for (price, t, class) in offers {
            for &node in class
                .nodes
                .iter()
                .take((m as usize).saturating_sub(parts.len()))
            {
                parts.push(Part {
                    node,
                    gpu_type: GpuType(t as u16),
                    gpus: k,
                });
                cost += price;
            }
        }
        if parts.len() == m as usize && best.as_ref().is_none_or(|b| cost < b.1) {
            best = Some((Placement::gang(parts), cost));
        }
    }
    best
}

/// A class's marginal prices over the allowed types, cheapest first, produced on demand.
struct ClassCursor<'c> {
    class: &'c NodeClass,
    nodes: u32,
    /// GPUs of each type already taken on every node of the class (for the levels taken
    /// by all of them).
    taken: Vec<u32>,
    /// The next level's type and price, if the class has a free allowed slot left.
    next: Option<(usize, f64)>,
    /// Levels taken by every node of the class.
    full_levels: u32,
}

impl<'c> ClassCursor<'c> {
    fn new(book: &PriceBook, class: &'c NodeClass, allowed: &[bool]) -> Self {
        let mut c = ClassCursor {
            class,
            nodes: class.nodes.len() as u32,
            taken: vec![0; allowed.len()],
            next: None,
            full_levels: 0,
        };
        c.next = c.peek(book, allowed);
        c
    }

    fn peek(&self, book: &PriceBook, allowed: &[bool]) -> Option<(usize, f64)> {
        let mut best: Option<(usize, f64)> = None;
        for (t, ok) in allowed.iter().enumerate() {
            if !ok {
                continue;
            }
            let (cap, used) = self.class.key[t];
            let used = used + self.taken[t];
            if used >= cap {
                continue;
            }
            let price = book.unit_price(t, cap, used);
            if best.is_none_or(|(_, p)| price < p) {
                best = Some((t, price));
            }
        }
        best
    }

    fn advance(&mut self, book: &PriceBook, allowed: &[bool]) {
        if let Some((t, _)) = self.next {
            self.taken[t] += 1;
            self.full_levels += 1;
        }
        self.next = self.peek(book, allowed);
    }
}

/// The cheapest `n` free slots over the allowed types on at most `max_nodes` nodes, and
/// their cost; `None` when no such placement exists.
pub fn cheapest_slots(
    book: &PriceBook,
    allowed: &[bool],
    n: u32,
    max_nodes: u32,
) -> Option<(Placement, f64)> {
    let mut cursors: Vec<ClassCursor<'_>> = book
        .classes()
        .iter()
        .filter(|c| !c.nodes.is_empty())
        .map(|c| ClassCursor::new(book, c, allowed))
        .filter(|c| c.next.is_some())
        .collect();
    let mut need = n;
    let mut cost = 0.0;
    // The partially taken last level: (cursor, nodes, type).
    let mut partial: Option<(usize, u32, usize)> = None;
    while need > 0 {
        let mut pick: Option<(usize, f64)> = None;
        for (k, c) in cursors.iter().enumerate() {
            if let Some((_, p)) = c.next
                && pick.is_none_or(|(_, q)| p < q)
            {
                pick = Some((k, p));
            }
        }
        let (k, price) = pick?;
        let c = &mut cursors[k];
        let (t, _) = c.next?;
        if need >= c.nodes {
            need -= c.nodes;
            cost += price * c.nodes as f64;
            c.advance(book, allowed);
        } else {
            cost += price * need as f64;
            partial = Some((k, need, t));
            need = 0;
        }
    }
    let nodes_used: u32 = cursors
        .iter()
        .enumerate()
        .map(|(k, c)| {
            if c.full_levels > 0 {
                c.nodes
            } else if partial.is_some_and(|(pk, _, _)| pk == k) {
                partial.map_or(0, |(_, m, _)| m)
            } else {
                0
            }
        })
        .sum();
    if nodes_used > max_nodes {
        return cheapest_slots_limited(book, allowed, n, max_nodes);
    }
    let mut parts = Vec::new();
    for (k, c) in cursors.iter().enumerate() {
        if c.full_levels == 0 && partial.is_none_or(|(pk, _, _)| pk != k) {
            continue;
        }
        for (j, node) in c.class.nodes.iter().enumerate() {
            for (t, taken) in c.taken.iter().enumerate() {
                if *taken > 0 {
                    parts.push(Part {
                        node: *node,
                        gpu_type: GpuType(t as u16),
                        gpus: *taken,
                    });
                }
            }
            if let Some((pk, m, t)) = partial
                && pk == k
                && (j as u32) < m
            {
                parts.push(Part {
                    node: *node,
                    gpu_type: GpuType(t as u16),
                    gpus: 1,
                });
            }
        }
    }
    Some((Placement::gang(parts), cost))
}

/// The node-limited case: a dynamic programme over nodes choosing at most `max_nodes` of
/// them and a worker count on each.
fn cheapest_slots_limited(
    book: &PriceBook,
    allowed: &[bool],
    n: u32,
    max_nodes: u32,
) -> Option<(Placement, f64)> {
    let m_max = max_nodes as usize;
    let n_max = n as usize;
    // Candidate nodes: up to `max_nodes` of each class, with their cost curves g(k) and the
    // type of each successive slot.
    struct Copy {
        node: NodeId,
        cost: Vec<f64>,
        slot_types: Vec<usize>,
    }
    let mut copies: Vec<Copy> = Vec::new();
    for class in book.classes().iter().filter(|c| !c.nodes.is_empty()) {
        let mut cursor = ClassCursor::new(book, class, allowed);
        let mut cost = vec![0.0];
        let mut slot_types = Vec::new();
        while let Some((t, p)) = cursor.next {
            if slot_types.len() >= n_max {
                break;
            }
            cost.push(cost[cost.len() - 1] + p);
            slot_types.push(t);
            cursor.advance(book, allowed);
        }
        if slot_types.is_empty() {
            continue;
        }
        for node in class.nodes.iter().take(m_max) {
            copies.push(Copy {
                node: *node,
                cost: cost.clone(),
                slot_types: slot_types.clone(),
            });
        }
    }
    let width = n_max + 1;
    let idx = |m: usize, k: usize| m * width + k;
    let mut dp = vec![f64::INFINITY; (m_max + 1) * width];
    dp[idx(0, 0)] = 0.0;
    // choice[c][m][k]: workers put on copy c to reach state (m, k) after it (0 = skipped).
    let mut choice: Vec<Vec<u32>> = Vec::with_capacity(copies.len());
    for copy in &copies {
        let mut ch = vec![0u32; (m_max + 1) * width];
        let kmax = copy.slot_types.len();
        for m in (0..m_max).rev() {
            for placed in (0..n_max).rev() {
                let base = dp[idx(m, placed)];
                if !base.is_finite() {
                    continue;
                }
                for k in 1..=kmax.min(n_max - placed) {
                    let v = base + copy.cost[k];
                    let to = idx(m + 1, placed + k);
                    if v < dp[to] {
                        dp[to] = v;
                        ch[to] = k as u32;
                    }
                }
            }
        }
        choice.push(ch);
    }
    let (mut m, cost) = (0..=m_max)
        .map(|m| (m, dp[idx(m, n_max)]))
        .filter(|(_, v)| v.is_finite())
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    let mut placed = n_max;
    let mut parts = Vec::new();
    for c in (0..copies.len()).rev() {
        if m == 0 {
            break;
        }
        let k = choice[c][idx(m, placed)] as usize;
        if k == 0 {
            continue;
        }
        for t in &copies[c].slot_types[..k] {
            parts.push(Part {
                node: copies[c].node,
                gpu_type: GpuType(*t as u16),
                gpus: 1,
            });
        }
        m -= 1;
        placed -= k;
    }
    Some((Placement::gang(parts), cost))
}
