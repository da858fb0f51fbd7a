//! Clusters, from a TOML file of explicit nodes or from a short form.
//!
//! Short form: `v100:16,p100:16,k80:16` with a GPUs-per-node count (`--gpus-per-node 4`
//! gives four V100 nodes, four P100 nodes and four K80 nodes).
//!
//! TOML form, one `[[node]]` table per node (or per group of identical nodes):
//!
//! ```toml
//! [[node]]
//! name = "n4"
//! gpus = { v100 = 2, k80 = 2 }   # a node may hold several types
//!
//! [[node]]
//! name = "a100"                  # with `count`, nodes are named a100-0, a100-1, ...
//! count = 8
//! gpus = { a100 = 8 }
//! ```

use crate::error::{FormatError, Location, line_of, read_file};
use hadar_core::{Cluster, Node};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use toml::Spanned;

/// Reads `--cluster`: a TOML file when `arg` names an existing file or ends in `.toml`,
/// otherwise the short form.
pub fn load_cluster(arg: &str, gpus_per_node: u32) -> Result<Cluster, FormatError> {
    let path = Path::new(arg);
    if arg.ends_with(".toml") || path.is_file() {
        let text = read_file(path)?;
        parse_cluster_toml(&text, &path.display().to_string())
    } else {
        parse_cluster_spec(arg, gpus_per_node)
    }
}

/// Parses the short form `type:count,type:count,...` with `gpus_per_node` GPUs per node.
pub fn parse_cluster_spec(spec: &str, gpus_per_node: u32) -> Result<Cluster, FormatError> {
    let at = || Location::of("--cluster");
    if gpus_per_node == 0 {
        return Err(FormatError::invalid(
            Location::of("--gpus-per-node"),
            "must be at least 1",
        ));
    }
    let mut counts: Vec<(String, u32)> = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, count) = item.split_once(':').ok_or_else(|| {
            FormatError::invalid(
                at(),
                format!("`{item}` should be TYPE:COUNT, e.g. v100:16 (or a path to a TOML file)"),
            )
        })?;
        let name = name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(FormatError::invalid(
                at(),
                format!("`{name}` is not a GPU type name (letters, digits, - and _)"),
            ));
        }
        let count: u32 = count.trim().parse().map_err(|_| {
            FormatError::invalid(
                at(),
                format!(
                    "the count of `{name}` must be a whole number, found `{}`",
                    count.trim()
                ),
            )
        })?;
        if count > 1_000_000 {
            // As in the TOML form: a typo such as v100:4000000000 would otherwise build a
            // billion nodes before anything could say it is wrong.
            return Err(FormatError::invalid(
                at(),
                format!("the count of `{name}` must be between 0 and 1000000, found {count}"),
            ));
        }
        if counts.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return Err(FormatError::invalid(
                at(),
                format!("GPU type `{name}` is given twice"),
            ));
        }
        counts.push((name.to_ascii_lowercase(), count));
    }
    if counts.is_empty() {
        return Err(FormatError::invalid(
            at(),
            "no GPU types given; expected e.g. v100:16,p100:16",
        ));
    }
    Cluster::from_type_counts(&counts, gpus_per_node)
        .map_err(|e| FormatError::invalid(at(), format!("{e}: `{spec}`")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    #[serde(default)]
    node: Vec<Spanned<NodeEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    name: Spanned<String>,
    gpus: Spanned<BTreeMap<String, Spanned<i64>>>,
    count: Option<Spanned<i64>>,
}

/// Parses the TOML form; `origin` names the file in errors.
pub fn parse_cluster_toml(text: &str, origin: &str) -> Result<Cluster, FormatError> {
    let at = |pos: usize, field: &str| Location::of(origin).line(line_of(text, pos)).field(field);
    let file: ClusterFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
        FormatError::invalid(
            Location::of(origin).line(line),
            e.message().trim().to_string(),
        )
    })?;
    if file.node.is_empty() {
        return Err(FormatError::invalid(
            Location::of(origin),
            "no [[node]] tables: the cluster has no nodes",
        ));
    }
    let mut type_names: Vec<String> = Vec::new();
    for n in &file.node {
        for t in n.get_ref().gpus.get_ref().keys() {
            let t = t.to_ascii_lowercase();
            if !type_names.contains(&t) {
                type_names.push(t);
            }
        }
    }
    let mut nodes = Vec::new();
    for entry in &file.node {
        let n = entry.get_ref();
        let name = n.name.get_ref().trim();
        if name.is_empty() {
            return Err(FormatError::invalid(
                at(n.name.span().start, "name"),
                "a node name cannot be empty",
            ));
        }
        let mut gpus = vec![0u32; type_names.len()];
        for (t, count) in n.gpus.get_ref() {
            let c = *count.get_ref();
            if !(0..=1_000_000).contains(&c) {
                return Err(FormatError::invalid(
                    at(count.span().start, &format!("gpus.{t}")),
                    format!("a GPU count must be between 0 and 1000000, found {c}"),
                ));
            }
            let i = type_names
                .iter()
                .position(|x| x.eq_ignore_ascii_case(t))
                .unwrap_or(0);
            gpus[i] += c as u32;
        }
        let count = match &n.count {
            None => None,
            Some(c) if (1..=100_000).contains(c.get_ref()) => Some(*c.get_ref() as usize),
            Some(c) => {
                return Err(FormatError::invalid(
                    at(c.span().start, "count"),
                    format!("count must be between 1 and 100000, found {}", c.get_ref()),
                ));
            }
        };
        match count {
            None => nodes.push((
                entry.span().start,
                Node {
                    name: name.to_string(),
                    gpus,
                },
            )),
            Some(k) => {
                for i in 0..k {
                    nodes.push((
                        entry.span().start,
                        Node {
                            name: format!("{name}-{i}"),
                            gpus: gpus.clone(),
                        },
                    ));
                }
            }
        }
    }
    let first_pos = nodes.first().map(|(p, _)| *p).unwrap_or(0);
    let mut seen = std::collections::HashSet::new();
    for (pos, n) in &nodes {
        if !seen.insert(n.name.clone()) {
            return Err(FormatError::invalid(
                at(*pos, "name"),
                format!("node name `{}` is used twice", n.name),
            ));
        }
    }
    Cluster::new(type_names, nodes.into_iter().map(|(_, n)| n).collect()).map_err(|e| {
        FormatError::invalid(
            Location::of(origin).line(line_of(text, first_pos)),
            e.to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_core::{GpuType, NodeId};

    #[test]
    fn short_form() {
        let c = parse_cluster_spec("v100:16,p100:16,k80:16", 4).unwrap();
        assert_eq!(c.nodes().len(), 12);
        assert_eq!(c.total_gpus(), 48);
        assert_eq!(c.type_names(), &["v100", "p100", "k80"]);
    }

    #[test]
    fn short_form_errors() {
        let e = |s: &str| parse_cluster_spec(s, 1).unwrap_err().to_string();
        assert_eq!(e("v100:0"), "--cluster: the cluster has no GPUs: `v100:0`");
        assert!(e("v100").contains("should be TYPE:COUNT"));
        assert!(e("v100:x").contains("must be a whole number, found `x`"));
        assert!(e("v100:1,V100:2").contains("given twice"));
        assert!(e("v100:4000000000").contains("between 0 and 1000000"));
        assert_eq!(
            parse_cluster_spec("v100:1", 0).unwrap_err().to_string(),
            "--gpus-per-node: must be at least 1"
        );
    }

    #[test]
    fn toml_form_with_mixed_node_and_count() {
        let text = "[[node]]\nname = \"n4\"\ngpus = { v100 = 2, k80 = 2 }\n\n[[node]]\nname = \"a\"\ncount = 2\ngpus = { a100 = 8 }\n";
        let c = parse_cluster_toml(text, "c.toml").unwrap();
        assert_eq!(c.nodes().len(), 3);
        assert_eq!(c.node(NodeId(2)).name, "a-1");
        let k80 = c.type_by_name("k80").unwrap();
        assert_eq!(c.capacity(NodeId(0), k80), 2);
        assert_eq!(c.total_of_type(c.type_by_name("a100").unwrap()), 16);
        assert_eq!(c.total_of_type(GpuType(0)) + c.total_of_type(GpuType(1)), 4);
    }

    #[test]
    fn toml_errors_name_line_and_field() {
        let e = parse_cluster_toml("[[node]]\nname = \"n1\"\ngpus = { v100 = -3 }\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "c.toml:3: field `gpus.v100`: a GPU count must be between 0 and 1000000, found -3"
        );
        let e = parse_cluster_toml("[[node]]\nname = \"n1\"\ngpu = { v100 = 3 }\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml:3: unknown field `gpu`"), "{e}");
        let e = parse_cluster_toml("[[node]]\nname = \"n1\"\ngpus = { v100 = 0 }\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "c.toml:1: the cluster has no GPUs");
        let e = parse_cluster_toml("[[node]]\nname = \"n1\"\ngpus = { v100 = 1 }\n[[node]]\nname = \"n1\"\ngpus = { v100 = 1 }\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.toml:4: field `name`: node name `n1` is used twice"),
            "{e}"
        );
    }
}
