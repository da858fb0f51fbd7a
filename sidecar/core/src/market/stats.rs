//! A priced round's statistics: what the price book ranged over and how jobs were admitted.
//! Hadar fills them; the [`crate::Policy`] trait hands them on to whoever reports a round.

use super::prices::PriceBounds;

/// What happened in a round of a policy that prices GPUs (Hadar), for reports and tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundStats {
    /// `L` and `U` of the round over all types (`None` when no job could run).
    pub price_bounds: Option<PriceBounds>,
    /// `L` and `U` of each GPU type (all equal to `price_bounds` without per-type prices).
    pub type_price_bounds: Vec<PriceBounds>,
    /// Jobs admitted by the primal-dual test (payoff > 0).
    pub admitted: usize,
    /// Jobs placed by work conservation.
    pub filled: usize,
    /// Running jobs that kept their placement.
    pub kept: usize,
    /// Jobs the makespan guard found urgent (placed first, regardless of price).
    pub urgent: usize,
    /// Gangs placed after the urgent jobs because smaller jobs kept overtaking them
    /// (`policies::hadar::overdue`).
    pub overdue: usize,
    /// The makespan guard's fluid horizon of the remaining work, seconds from now.
    pub horizon_s: Option<f64>,
    /// Whether the tail plan (`policies::hadar::tail`) chose who runs this round.
    pub tail: bool,
    /// The round's objective: total utility of the placed jobs (`policies::hadar::round_objective`).
    pub objective: f64,
    /// In exact mode, whether the search proved its answer optimal.
    pub exact_proven: Option<bool>,
}
