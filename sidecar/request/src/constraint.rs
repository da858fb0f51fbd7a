//! The `--constraint` (`-C`) expressions hadar reads itself: one feature name, or names
//! joined all by `&` (a node must have every one) or all by `|` (a node must have one).
//! A comma is `&`, as slurmctld reads it (`_feature_string2list`, job_scheduler.c).
//! The daemon offers such a job only the nodes whose features match.
//!
//! Everything else is left to Slurm, unread ([`Unread`]): node counts (`a*2`), matching
//! OR in brackets (`[a|b]`), parentheses, NOT (`!`), and `&` mixed with `|`. slurmctld's
//! own evaluators do not agree on how `&` and `|` bind when mixed (`_match_feature` in
//! node_scheduler.c reads left to right; `job_features_list2feature_sets` in
//! job_features.c binds `&` first), so hadar does not guess.

use std::collections::BTreeSet;

/// A constraint hadar reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constraint {
    /// A node must have every one of these features (one name is this with one element).
    All(Vec<String>),
    /// A node must have at least one of these features.
    Any(Vec<String>),
}

/// What makes a constraint one hadar does not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unread {
    /// `name*N`.
    #[error("a node count (`*`)")]
    NodeCount,
    /// `[a|b]`, `[a*2&b*4]`.
    #[error("brackets (matching OR or several counts)")]
    Brackets,
    /// `(a&b)|c`.
    #[error("parentheses")]
    Parentheses,
    /// `!a`.
    #[error("NOT (`!`)")]
    Not,
    /// `a&b|c`.
    #[error("`&` mixed with `|`")]
    MixedOperators,
    /// `a&&b`, `a|`, `&a`.
    #[error("an empty feature name")]
    EmptyName,
    /// Any other character outside a feature name.
    #[error("the character {0:?}")]
    Character(char),
}

/// Whether `c` may appear in a feature name as hadar reads one.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '=' | '+' | '/')
}

/// What a character outside a feature name (and not `&` or `|`) makes the constraint.
fn outside_name(c: char) -> Unread {
    match c {
        '*' => Unread::NodeCount,
        '[' | ']' => Unread::Brackets,
        '(' | ')' => Unread::Parentheses,
        '!' => Unread::Not,
        c => Unread::Character(c),
    }
}

/// Reads a `--constraint` expression (surrounding whitespace ignored), or says what in it
/// hadar leaves to Slurm.
pub fn parse(text: &str) -> Result<Constraint, Unread> {
    let text = text.trim().replace(',', "&");
    if let Some(c) = text
        .chars()
        .find(|c| !name_char(*c) && !matches!(c, '&' | '|'))
    {
        return Err(outside_name(c));
    }
    let (and, or) = (text.contains('&'), text.contains('|'));
    if and && or {
        return Err(Unread::MixedOperators);
    }
    let names: Vec<String> = text
        .split(if or { '|' } else { '&' })
        .map(str::to_string)
        .collect();
    if names.iter().any(String::is_empty) {
        return Err(Unread::EmptyName);
    }
    Ok(if or {
        Constraint::Any(names)
    } else {
        Constraint::All(names)
    })
}

impl Constraint {
    /// Whether a node with `features` satisfies it.
    pub fn matches(&self, features: &BTreeSet<String>) -> bool {
        match self {
            Constraint::All(names) => names.iter().all(|n| features.contains(n)),
            Constraint::Any(names) => names.iter().any(|n| features.contains(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn names_joined_by_one_operator_are_read() {
        assert_eq!(parse(" a100 "), Ok(Constraint::All(vec!["a100".into()])));
        let and = parse("a100&nvlink").unwrap();
        assert!(and.matches(&set(&["a100", "nvlink", "ib"])));
        assert!(!and.matches(&set(&["a100"])));
        let or = parse("a100|h100|v100").unwrap();
        assert!(or.matches(&set(&["v100"])));
        assert!(!or.matches(&set(&["k80"])));
        assert!(!or.matches(&set(&[])));
        assert!(parse("cpu_gen-2.1").is_ok());
        assert_eq!(
            parse("a,b"),
            parse("a&b"),
            "a comma is an AND, as in slurmctld"
        );
        assert_eq!(parse("a,b|c"), Err(Unread::MixedOperators));
    }

    #[test]
    fn what_hadar_does_not_read_is_named() {
        for (text, unread) in [
            ("a100*2", Unread::NodeCount),
            ("[rack1|rack2]", Unread::Brackets),
            ("(a&b)|c", Unread::Parentheses),
            ("!k80", Unread::Not),
            ("a&b|c", Unread::MixedOperators),
            ("a&&b", Unread::EmptyName),
            ("a|", Unread::EmptyName),
            ("", Unread::EmptyName),
            ("a|b*2", Unread::NodeCount),
            ("a&!b", Unread::Not),
            ("a b", Unread::Character(' ')),
        ] {
            assert_eq!(parse(text), Err(unread), "{text:?}");
        }
        assert_eq!(
            Unread::MixedOperators.to_string(),
            "`&` mixed with `|`",
            "the reason reads as a phrase in slurmctld's log"
        );
    }
}
