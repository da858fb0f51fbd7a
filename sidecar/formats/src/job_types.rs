//! Names of the throughput table's job types as users write them: a directive's `type=`, a
//! Slurm job name, `hadar emulate --job-type`. The table's `Model (batch size B)` is also
//! known by its short name `model-bB` (`ResNet-50 (batch size 64)` is `resnet50-b64`), and
//! plain `model` means its smallest batch size.

use crate::throughputs::ThroughputTable;

impl ThroughputTable {
    /// The table's job type a name means. Exact names match first; otherwise names are
    /// compared by their letters and digits only, lower-cased, against each job type and its
    /// short name ([`short_name`]); a bare model name means its smallest batch size. `None`
    /// when no job type matches.
    pub fn resolve_job_type(&self, name: &str) -> Option<&str> {
        if self.knows(name) {
            return self.job_types().find(|t| *t == name);
        }
        let want = squash(name);
        let mut by_model: Option<(u64, &str)> = None;
        for t in self.job_types() {
            let (model, batch) = split_batch(t);
            let short = match batch {
                Some(b) => format!("{}b{b}", squash(model)),
                None => squash(model),
            };
            if short == want || squash(t) == want {
                return Some(t);
            }
            if squash(model) == want {
                let b = batch.unwrap_or(0);
                if by_model.is_none_or(|(best, _)| b < best) {
                    by_model = Some((b, t));
                }
            }
        }
        by_model.map(|(_, t)| t)
    }
}

/// The short name of a table job type (`ResNet-50 (batch size 64)` -> `resnet50-b64`), which
/// [`ThroughputTable::resolve_job_type`] resolves back.
pub fn short_name(job_type: &str) -> String {
    let (model, batch) = split_batch(job_type);
    match batch {
        Some(b) => format!("{}-b{b}", squash(model)),
        None => squash(model),
    }
}

/// Letters and digits only, lower-cased.
fn squash(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// `Model (batch size B)` -> (`Model`, `Some(B)`); any other name -> (name, `None`).
fn split_batch(t: &str) -> (&str, Option<u64>) {
    if let Some(open) = t.find(" (batch size ")
        && let Some(b) = t[open + 13..]
            .strip_suffix(')')
            .and_then(|b| b.parse().ok())
    {
        return (&t[..open], Some(b));
    }
    (t, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_type_names_resolve() {
        let t = crate::embedded::throughputs().unwrap();
        let resolve = |n: &str| t.resolve_job_type(n);
        assert_eq!(
            resolve("ResNet-50 (batch size 64)"),
            Some("ResNet-50 (batch size 64)")
        );
        assert_eq!(resolve("resnet50-b64"), Some("ResNet-50 (batch size 64)"));
        assert_eq!(resolve("ResNet50_B64"), Some("ResNet-50 (batch size 64)"));
        assert_eq!(resolve("resnet50"), Some("ResNet-50 (batch size 16)"));
        assert_eq!(resolve("A3C"), Some("A3C"));
        assert_eq!(resolve("cyclegan"), Some("CycleGAN"));
        assert_eq!(resolve("nosuchmodel"), None);
        assert_eq!(resolve(""), None);
        for jt in t.job_types() {
            assert_eq!(resolve(&short_name(jt)), Some(jt), "{jt}");
        }
    }

    #[test]
    fn short_names_drop_punctuation_and_keep_the_batch() {
        assert_eq!(short_name("ResNet-50 (batch size 64)"), "resnet50-b64");
        assert_eq!(
            short_name("Transformer (batch size 128)"),
            "transformer-b128"
        );
        assert_eq!(short_name("A3C"), "a3c");
        // Not a batch size: kept as part of the name.
        assert_eq!(short_name("X (batch size many)"), "xbatchsizemany");
    }
}
