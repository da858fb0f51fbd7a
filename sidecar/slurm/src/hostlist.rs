//! Slurm's compressed host lists: `n[1-3,7],gpu[01-02],login`.

/// A host list that could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed host list `{0}`")]
pub struct HostlistError(pub String);

/// The most names one list may expand to; guards against `n[1-999999999]`.
const MAX_HOSTS: usize = 100_000;

/// Expands a host list into names, in order. `(null)` and the empty string give no names.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let bad = || HostlistError(list.to_string());
    let list = list.trim();
    if list.is_empty() || list == "(null)" {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut items = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(bad());
        }
    }
    if depth != 0 {
        return Err(bad());
    }
    items.push(&list[start..]);
    for item in items {
        if item.is_empty() {
            return Err(bad());
        }
        match item.find('[') {
            None => out.push(item.to_string()),
            Some(open) => {
                let close = item.rfind(']').ok_or_else(bad)?;
                let (prefix, inner, suffix) =
                    (&item[..open], &item[open + 1..close], &item[close + 1..]);
                for range in inner.split(',') {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    if lo.is_empty()
                        || !lo.bytes().all(|b| b.is_ascii_digit())
                        || !hi.bytes().all(|b| b.is_ascii_digit())
                        || hi.is_empty()
                    {
                        return Err(bad());
                    }
                    let width = lo.len();
                    let a: u64 = lo.parse().map_err(|_| bad())?;
                    let b: u64 = hi.parse().map_err(|_| bad())?;
                    if b < a || (b - a) as usize + out.len() >= MAX_HOSTS {
                        return Err(bad());
                    }
                    for n in a..=b {
                        out.push(format!("{prefix}{n:0width$}{suffix}"));
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_ranges_lists_and_padding() {
        assert_eq!(expand("n[1-3]").unwrap(), ["n1", "n2", "n3"]);
        assert_eq!(
            expand("n[1,3-4],login").unwrap(),
            ["n1", "n3", "n4", "login"]
        );
        assert_eq!(expand("gpu[08-10]").unwrap(), ["gpu08", "gpu09", "gpu10"]);
        assert_eq!(expand("n4").unwrap(), ["n4"]);
        assert!(expand("(null)").unwrap().is_empty());
    }

    #[test]
    fn refuses_malformed_lists() {
        for bad in ["n[1-", "n[3-1]", "n[a]", "n]1[", ",", "n[1-999999999]"] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }
}
