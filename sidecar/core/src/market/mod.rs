//! The market Hadar and HadarE both plan a round in: jobs' utilities ([`utility`]: what a job
//! gains from running at a rate this round) and the price book ([`prices`]: a price per
//! (node, GPU type) that rises exponentially with use). A job takes GPUs when its utility
//! minus their price is positive.
//!
//! Shared by [`crate::policies::hadar`] (gang placements) and [`crate::policies::hadare`]
//! (forked copies), so that neither reaches into the other's module.

pub mod prices;
pub mod stats;
pub mod utility;

pub use prices::{PriceBook, PriceBounds, PriceBoundsError};
pub use stats::RoundStats;
pub use utility::{DEFAULT_CRITICALITY, JobUtility, Objective};
