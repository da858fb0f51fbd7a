//! Kept rounds, for `hadar replay`: each round's snapshot and recorded decision (one JSON
//! text, opaque here; the daemon writes and reads it), and the inputs it was decided with
//! besides the snapshot, stored once per distinct content under a digest the caller gives.
//! They are pruned with the rounds ([`crate::Store::prune`]).

use crate::{Store, StoreError, Writer};
use rusqlite::{OptionalExtension, params};

/// One kept round as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptRound {
    /// The round.
    pub round: u64,
    /// When it started, seconds since the store's epoch.
    pub started_s: f64,
    /// The digest of its inputs.
    pub digest: String,
    /// Its inputs (the text stored under the digest).
    pub inputs: String,
    /// Its snapshot and decision.
    pub data: String,
}

impl Writer<'_> {
    /// Keeps round `round`'s snapshot and decision (`data`), decided with `inputs` (stored
    /// once under `digest`; a digest already stored is not written again).
    pub fn put_round_snapshot(
        &mut self,
        round: u64,
        started_s: f64,
        digest: &str,
        inputs: &str,
        data: &str,
    ) -> Result<(), StoreError> {
        self.tx
            .execute(
                "INSERT OR IGNORE INTO round_inputs(digest, data) VALUES (?1, ?2)",
                params![digest, inputs],
            )
            .map_err(self.err())?;
        self.tx
            .execute(
                "INSERT INTO round_snapshots(round, started_s, inputs, data) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(round) DO UPDATE SET started_s = excluded.started_s,
                 inputs = excluded.inputs, data = excluded.data",
                params![round as i64, started_s, digest, data],
            )
            .map(|_| ())
            .map_err(self.err())
    }
}

impl Store {
    /// Round `round` as kept, if it is.
    pub fn kept_round(&self, round: u64) -> Result<Option<KeptRound>, StoreError> {
        self.conn
            .query_row(
                "SELECT s.round, s.started_s, s.inputs, i.data, s.data
                 FROM round_snapshots s JOIN round_inputs i ON i.digest = s.inputs
                 WHERE s.round = ?1",
                params![round as i64],
                |r| {
                    Ok(KeptRound {
                        round: r.get::<_, i64>(0)? as u64,
                        started_s: r.get(1)?,
                        digest: r.get(2)?,
                        inputs: r.get(3)?,
                        data: r.get(4)?,
                    })
                },
            )
            .optional()
            .map_err(self.err())
    }

    /// The numbers of the kept rounds, in order.
    pub fn kept_rounds(&self) -> Result<Vec<u64>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT round FROM round_snapshots ORDER BY round")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| r.get::<_, i64>(0).map(|n| n as u64))
            .map_err(self.err())?;
        rows.collect::<Result<_, _>>().map_err(self.err())
    }

    /// The numbers of the recorded rounds (`rounds`), first and last, if any.
    pub fn recorded_rounds(&self) -> Result<Option<(u64, u64)>, StoreError> {
        self.conn
            .query_row("SELECT MIN(round), MAX(round) FROM rounds", [], |r| {
                Ok(r.get::<_, Option<i64>>(0)?
                    .zip(r.get::<_, Option<i64>>(1)?)
                    .map(|(a, b)| (a as u64, b as u64)))
            })
            .map_err(self.err())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Horizon, Store};

    #[test]
    fn a_kept_round_reads_back_and_its_inputs_are_stored_once() {
        let mut s = Store::in_memory().unwrap();
        s.write(|w| {
            w.put_round_snapshot(1, 10.0, "d1", "{\"config\":1}", "{\"round\":1}")?;
            w.put_round_snapshot(2, 20.0, "d1", "{\"config\":1}", "{\"round\":2}")?;
            w.put_round_snapshot(3, 30.0, "d2", "{\"config\":2}", "{\"round\":3}")
        })
        .unwrap();
        let k = s.kept_round(2).unwrap().unwrap();
        assert_eq!(
            (k.round, k.started_s, k.digest.as_str(), k.inputs.as_str()),
            (2, 20.0, "d1", "{\"config\":1}")
        );
        assert_eq!(k.data, "{\"round\":2}");
        assert_eq!(s.kept_round(3).unwrap().unwrap().inputs, "{\"config\":2}");
        assert!(s.kept_round(4).unwrap().is_none());
        assert_eq!(s.kept_rounds().unwrap(), vec![1, 2, 3]);
        let inputs: i64 = s
            .conn
            .query_row("SELECT count(*) FROM round_inputs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(inputs, 2, "one row per distinct digest");
    }

    #[test]
    fn kept_rounds_are_pruned_with_the_rounds_and_unused_inputs_go() {
        let mut s = Store::in_memory().unwrap();
        s.write(|w| {
            for r in 1..=10u64 {
                let digest = if r <= 4 { "old" } else { "new" };
                w.put_round_snapshot(r, r as f64 * 10.0, digest, digest, "{}")?;
            }
            Ok(())
        })
        .unwrap();
        // keep_rounds: rounds up to 5 go; keep_snapshot_rounds: snapshots up to 6.
        let p = s
            .prune(Horizon {
                before_s: 0.0,
                through_round: 5,
                snapshots_through_round: 6,
            })
            .unwrap();
        assert_eq!(p.snapshots, 6);
        assert_eq!(s.kept_rounds().unwrap(), vec![7, 8, 9, 10]);
        let digests: Vec<String> = s
            .conn
            .prepare("SELECT digest FROM round_inputs")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(digests, vec!["new".to_string()], "inputs no round uses go");
        // keep_days: rounds started before 95 s go, but the last round stays.
        s.prune(Horizon {
            before_s: 1e9,
            through_round: 0,
            snapshots_through_round: 0,
        })
        .unwrap();
        assert_eq!(s.kept_rounds().unwrap(), vec![10], "the last round stays");
        assert!(s.kept_round(10).unwrap().is_some());
    }
}
