//! The leader's lease: daemons sharing one state database (a standby on another host) take
//! turns. One row holds the holder, its expiry (Unix seconds, by the holder's clock) and a
//! term that grows at every change of holder.
//!
//! Rules: the holder renews it at every round and before every action (each action's intent
//! is written in the same transaction that checks and extends the lease, so an action is
//! never taken under a lease that was lost); another daemon takes it only once it has been
//! expired for longer than the largest clock skew allowed between hosts. A leader that was
//! paused (a stopped VM, a long swap) wakes up to find, at its next intent, that its lease
//! expired or changed hands, and stops acting.

use serde::{Deserialize, Serialize};

/// The lease row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it (`host:pid`).
    pub holder: String,
    /// Until when, Unix seconds.
    pub expires_unix: f64,
    /// Grows by one whenever the holder changes.
    pub term: u64,
}

/// What asking for the lease gave.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseGrant {
    /// This daemon leads, under this (new or renewed) lease.
    Leading(Lease),
    /// Another daemon leads; this one stands by.
    Standby(Lease),
}

/// Decides the lease for `me` at `now` (pure): renewed for `ttl` seconds if `me` holds it or
/// nobody does; taken over (next term) if the holder's expired more than `skew` seconds ago;
/// otherwise left to its holder. `skew` is the largest difference allowed between two
/// hosts' clocks: the holder stops acting at its expiry by its own clock, which may be up to
/// `skew` behind ours.
pub fn decide(current: Option<&Lease>, me: &str, now: f64, ttl: f64, skew: f64) -> LeaseGrant {
    match current {
        None => LeaseGrant::Leading(Lease {
            holder: me.to_string(),
            expires_unix: now + ttl,
            term: 1,
        }),
        Some(l) if l.holder == me => {
            if now < l.expires_unix {
                LeaseGrant::Leading(Lease {
                    expires_unix: now + ttl,
                    ..l.clone()
                })
            } else {
                // Expired while we were away (paused): start over as a new term, as if
                // another daemon had held it meanwhile, but only after the same wait.
                take_over(l, me, now, ttl, skew)
            }
        }
        Some(l) => take_over(l, me, now, ttl, skew),
    }
}

fn take_over(l: &Lease, me: &str, now: f64, ttl: f64, skew: f64) -> LeaseGrant {
    if now > l.expires_unix + skew {
        LeaseGrant::Leading(Lease {
            holder: me.to_string(),
            expires_unix: now + ttl,
            term: l.term + 1,
        })
    } else {
        LeaseGrant::Standby(l.clone())
    }
}

/// The lease `me` leaves behind when it stops cleanly: expired since the epoch, so a daemon
/// started next (a restart, or the standby) takes it at once instead of waiting out the rest
/// of its time plus the skew. Same term: the next holder starts the next one. `None` when
/// `me` does not hold it (a lease another daemon took is not ours to end).
pub fn resign(current: Option<&Lease>, me: &str) -> Option<Lease> {
    current.filter(|l| l.holder == me).map(|l| Lease {
        expires_unix: 0.0,
        ..l.clone()
    })
}

/// The lease as `me` may treat it: one whose holder `died` (a process this host knows has
/// ended) counts as resigned ([`resign`]), so `me` takes it at once rather than waiting out
/// its time plus the skew; any other is left as it stands.
pub fn unless_holder_died(
    current: Option<&Lease>,
    me: &str,
    died: &dyn Fn(&str) -> bool,
) -> Option<Lease> {
    match current {
        Some(l) if l.holder != me && died(&l.holder) => resign(Some(l), &l.holder),
        other => other.cloned(),
    }
}

/// Whether `me` may act now under `current` (checked in the transaction of each intent): it
/// holds the lease and, by its own clock, the lease has not expired.
pub fn may_act(current: Option<&Lease>, me: &str, now: f64) -> bool {
    current.is_some_and(|l| l.holder == me && now < l.expires_unix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, expires: f64, term: u64) -> Lease {
        Lease {
            holder: holder.into(),
            expires_unix: expires,
            term,
        }
    }

    #[test]
    fn the_first_daemon_leads_and_renews() {
        let LeaseGrant::Leading(l) = decide(None, "a:1", 100.0, 10.0, 2.0) else {
            panic!("nobody holds it");
        };
        assert_eq!(l, lease("a:1", 110.0, 1));
        assert_eq!(
            decide(Some(&l), "a:1", 105.0, 10.0, 2.0),
            LeaseGrant::Leading(lease("a:1", 115.0, 1))
        );
    }

    #[test]
    fn a_standby_takes_over_only_after_expiry_plus_skew() {
        let l = lease("a:1", 110.0, 4);
        assert_eq!(
            decide(Some(&l), "b:2", 105.0, 10.0, 2.0),
            LeaseGrant::Standby(l.clone())
        );
        // Expired by our clock, but the holder's clock may be 2 s behind: still standing by.
        assert_eq!(
            decide(Some(&l), "b:2", 111.5, 10.0, 2.0),
            LeaseGrant::Standby(l.clone())
        );
        assert_eq!(
            decide(Some(&l), "b:2", 112.5, 10.0, 2.0),
            LeaseGrant::Leading(lease("b:2", 122.5, 5))
        );
    }

    #[test]
    fn a_resigned_lease_is_taken_at_once_and_only_the_holder_resigns() {
        let l = lease("a:1", 110.0, 4);
        assert_eq!(resign(Some(&l), "b:2"), None, "not b's to end");
        assert_eq!(resign(None, "a:1"), None);
        let left = resign(Some(&l), "a:1").unwrap();
        assert!(
            !may_act(Some(&left), "a:1", 100.0),
            "the resigned holder acts no more"
        );
        assert_eq!(
            decide(Some(&left), "b:2", 100.0, 10.0, 2.0),
            LeaseGrant::Leading(lease("b:2", 110.0, 5))
        );
    }

    #[test]
    fn a_dead_holders_lease_is_taken_at_once_and_a_live_ones_is_not() {
        let l = lease("a:1", 110.0, 4);
        let dead = |h: &str| h == "a:1";
        let seen = unless_holder_died(Some(&l), "b:2", &dead);
        assert_eq!(
            decide(seen.as_ref(), "b:2", 100.0, 10.0, 2.0),
            LeaseGrant::Leading(lease("b:2", 110.0, 5))
        );
        let alive = |_: &str| false;
        let seen = unless_holder_died(Some(&l), "b:2", &alive);
        assert_eq!(
            decide(seen.as_ref(), "b:2", 100.0, 10.0, 2.0),
            LeaseGrant::Standby(l.clone())
        );
        // Our own lease is never taken for a dead one's.
        assert_eq!(unless_holder_died(Some(&l), "a:1", &dead), Some(l));
        assert_eq!(unless_holder_died(None, "b:2", &dead), None);
    }

    #[test]
    fn a_paused_leader_stops_acting_and_must_wait_like_anyone() {
        let l = lease("a:1", 110.0, 4);
        assert!(may_act(Some(&l), "a:1", 109.9));
        assert!(!may_act(Some(&l), "a:1", 110.0), "expired by its own clock");
        assert!(!may_act(Some(&l), "b:2", 100.0), "not the holder");
        assert!(!may_act(None, "a:1", 100.0));
        // Woken after expiry, it cannot simply renew.
        assert_eq!(
            decide(Some(&l), "a:1", 111.0, 10.0, 2.0),
            LeaseGrant::Standby(l.clone())
        );
        // Once the standby took it, the old leader stands by.
        let taken = lease("b:2", 125.0, 5);
        assert_eq!(
            decide(Some(&taken), "a:1", 120.0, 10.0, 2.0),
            LeaseGrant::Standby(taken.clone())
        );
        assert!(!may_act(Some(&taken), "a:1", 120.0));
    }
}
