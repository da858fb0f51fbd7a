//! The cluster's GPU inventory, read from the `NodeName=` lines of `slurm.conf`.
//!
//! The plugin runs inside slurmctld and cannot query slurmctld itself (that would deadlock on
//! the locks it is called under), and node records are internal structures no package
//! describes. The node definitions in `slurm.conf` are what slurmctld builds those records
//! from, so the plugin reads the same lines: node names (hostlist expressions such as
//! `n[1-4]`) and their `Gres=gpu:TYPE:N` entries, with `NodeName=DEFAULT` lines applying to
//! the lines after them, and `Include` files followed.

use std::collections::BTreeMap;

/// The GPUs of one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeGpus {
    /// The node's name.
    pub name: String,
    /// GPUs per type name.
    pub typed: BTreeMap<String, u32>,
    /// GPUs declared without a type (`Gres=gpu:4`).
    pub untyped: u32,
}

impl NodeGpus {
    /// GPUs on this node usable by a request limited to `allowed` types (`None`: any type).
    pub fn usable(&self, allowed: Option<&[String]>) -> u64 {
        match allowed {
            None => {
                self.typed.values().map(|&n| u64::from(n)).sum::<u64>() + u64::from(self.untyped)
            }
            Some(types) => types
                .iter()
                .map(|t| u64::from(self.typed.get(t).copied().unwrap_or(0)))
                .sum(),
        }
    }
}

/// All nodes of the cluster with their GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    /// The nodes, in the order slurm.conf defines them.
    pub nodes: Vec<NodeGpus>,
    /// The partitions and their nodes, in the order slurm.conf defines them.
    pub partitions: Vec<Partition>,
}

/// A partition (`PartitionName=` line) and the nodes it spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The partition's name.
    pub name: String,
    /// Its nodes.
    pub nodes: PartitionNodes,
}

/// The nodes of a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionNodes {
    /// `Nodes=ALL`: every node of the cluster.
    All,
    /// The named nodes.
    Names(Vec<String>),
}

/// The most nodes one inventory may hold; a larger hostlist is surely a typo.
pub const MAX_NODES: usize = 100_000;

/// Why slurm.conf could not be read as an inventory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    /// A hostlist expression that does not parse.
    #[error("{file}:{line}: malformed node name list `{text}`")]
    Hostlist {
        /// File.
        file: String,
        /// 1-based line.
        line: usize,
        /// The expression.
        text: String,
    },
    /// A `Gres=` entry whose count does not parse.
    #[error("{file}:{line}: malformed GPU count in `Gres={text}`")]
    Gres {
        /// File.
        file: String,
        /// 1-based line.
        line: usize,
        /// The entry.
        text: String,
    },
    /// Too many nodes.
    #[error("{file}:{line}: more than {MAX_NODES} nodes")]
    TooManyNodes {
        /// File.
        file: String,
        /// 1-based line.
        line: usize,
    },
    /// An `Include` that could not be read.
    #[error("{file}:{line}: cannot read included file `{path}`: {reason}")]
    Include {
        /// File.
        file: String,
        /// 1-based line.
        line: usize,
        /// The included path.
        path: String,
        /// Why.
        reason: String,
    },
    /// Includes nested too deeply (a loop).
    #[error("{file}: Include nested more than 8 deep")]
    IncludeDepth {
        /// File.
        file: String,
    },
}

impl Inventory {
    /// Reads an inventory from slurm.conf text. `read_include` fetches an `Include`d file's
    /// text by the path written in the file (it resolves relative paths as it sees fit).
    pub fn from_slurm_conf(
        file: &str,
        text: &str,
        read_include: &mut dyn FnMut(&str) -> Result<String, String>,
    ) -> Result<Inventory, InventoryError> {
        let mut inv = Inventory::default();
        let mut defaults = Defaults::default();
        inv.read(file, text, read_include, &mut defaults, 0)?;
        Ok(inv)
    }

    /// Reads the lines of one file (the top one or an `Include`d one) into the inventory,
    /// `depth` counting the includes that led here.
    fn read(
        &mut self,
        file: &str,
        text: &str,
        read_include: &mut dyn FnMut(&str) -> Result<String, String>,
        defaults: &mut Defaults,
        depth: usize,
    ) -> Result<(), InventoryError> {
        if depth > 8 {
            return Err(InventoryError::IncludeDepth {
                file: file.to_string(),
            });
        }
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if first.eq_ignore_ascii_case("include") {
                let path = words.collect::<Vec<_>>().join(" ");
                let included = read_include(&path).map_err(|reason| InventoryError::Include {
                    file: file.to_string(),
                    line: line_no,
                    path: crate::excerpt(&path),
                    reason: crate::excerpt_of(&reason, 200),
                })?;
                self.read(&path, &included, read_include, defaults, depth + 1)?;
                continue;
            }
            let pairs: Vec<(String, &str)> = line
                .split_whitespace()
                .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_ascii_lowercase(), v)))
                .collect();
            if let Some((_, name)) = pairs.first().filter(|(k, _)| k == "partitionname") {
                self.read_partition_line(file, line_no, name, &pairs, defaults)?;
                continue;
            }
            if let Some((_, names)) = pairs.first().filter(|(k, _)| k == "nodename") {
                self.read_node_line(file, line_no, names, &pairs, defaults)?;
            }
        }
        Ok(())
    }

    /// Reads one `PartitionName=` line (its `key=value` `pairs`): a `DEFAULT` line sets the
    /// nodes of later partitions that name none, any other defines (or redefines) `name`.
    fn read_partition_line(
        &mut self,
        file: &str,
        line_no: usize,
        name: &str,
        pairs: &[(String, &str)],
        defaults: &mut Defaults,
    ) -> Result<(), InventoryError> {
        let nodes = pairs
            .iter()
            .find(|(k, _)| k == "nodes")
            .map(|(_, v)| v.to_string());
        if name.eq_ignore_ascii_case("default") {
            if nodes.is_some() {
                defaults.partition_nodes = nodes;
            }
            return Ok(());
        }
        let nodes = match nodes.or_else(|| defaults.partition_nodes.clone()) {
            Some(n) if n.eq_ignore_ascii_case("all") => PartitionNodes::All,
            Some(n) => PartitionNodes::Names(expand_hostlist(&n, MAX_NODES).map_err(|_| {
                InventoryError::Hostlist {
                    file: file.to_string(),
                    line: line_no,
                    text: crate::excerpt(&n),
                }
            })?),
            None => PartitionNodes::Names(Vec::new()),
        };
        self.partitions.retain(|p| p.name != *name);
        self.partitions.push(Partition {
            name: name.to_string(),
            nodes,
        });
        Ok(())
    }

    /// Reads one `NodeName=` line (its `key=value` `pairs`): a `DEFAULT` line sets the GRES
    /// of later nodes that declare none, any other defines the nodes `names` expands to, a
    /// node already defined being replaced in place.
    fn read_node_line(
        &mut self,
        file: &str,
        line_no: usize,
        names: &str,
        pairs: &[(String, &str)],
        defaults: &mut Defaults,
    ) -> Result<(), InventoryError> {
        let gres = pairs
            .iter()
            .find(|(k, _)| k == "gres")
            .map(|(_, v)| v.to_string());
        if names.eq_ignore_ascii_case("default") {
            if gres.is_some() {
                defaults.gres = gres;
            }
            return Ok(());
        }
        let gres = gres.or_else(|| defaults.gres.clone());
        let (typed, untyped) = parse_node_gres(gres.as_deref().unwrap_or("")).map_err(|text| {
            InventoryError::Gres {
                file: file.to_string(),
                line: line_no,
                text: crate::excerpt(&text),
            }
        })?;
        let expanded =
            expand_hostlist(names, MAX_NODES - self.nodes.len()).map_err(|e| match e {
                HostlistError::Malformed => InventoryError::Hostlist {
                    file: file.to_string(),
                    line: line_no,
                    text: crate::excerpt(names),
                },
                HostlistError::TooMany => InventoryError::TooManyNodes {
                    file: file.to_string(),
                    line: line_no,
                },
            })?;
        for name in expanded {
            let node = NodeGpus {
                name: name.clone(),
                typed: typed.clone(),
                untyped,
            };
            match defaults.node_index.get(&name) {
                Some(&i) => self.nodes[i] = node,
                None => {
                    defaults.node_index.insert(name, self.nodes.len());
                    self.nodes.push(node);
                }
            }
        }
        Ok(())
    }

    /// The nodes a job submitted to `partitions` may use: the union of their nodes, or every
    /// node if the list is empty or names a partition slurm.conf does not define (then the
    /// controller itself will refuse or resolve it; the plugin does not second-guess it).
    pub fn nodes_in(&self, partitions: &[&str]) -> Vec<&NodeGpus> {
        let mut names: Vec<&str> = Vec::new();
        for wanted in partitions {
            match self
                .partitions
                .iter()
                .find(|p| p.name == *wanted)
                .map(|p| &p.nodes)
            {
                None | Some(PartitionNodes::All) => return self.nodes.iter().collect(),
                Some(PartitionNodes::Names(n)) => names.extend(n.iter().map(String::as_str)),
            }
        }
        if partitions.is_empty() {
            return self.nodes.iter().collect();
        }
        self.nodes
            .iter()
            .filter(|n| names.contains(&n.name.as_str()))
            .collect()
    }

    /// The GPU type names present on at least one node, sorted.
    pub fn type_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|n| n.typed.keys().cloned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Whether any node has GPUs of type `t`.
    pub fn has_type(&self, t: &str) -> bool {
        self.nodes
            .iter()
            .any(|n| n.typed.get(t).is_some_and(|&c| c > 0))
    }
}

/// `NodeName=DEFAULT` and `PartitionName=DEFAULT` settings that apply to later lines.
#[derive(Default)]
struct Defaults {
    gres: Option<String>,
    partition_nodes: Option<String>,
    /// Where each node name already read sits in `Inventory::nodes`: a later definition of
    /// the same name replaces it in place, found without a scan (a slurm.conf of 100,000
    /// nodes took seconds to read with a scan per node).
    node_index: std::collections::HashMap<String, usize>,
}

/// Parses a node's `Gres=` value into typed and untyped GPU counts (other GRES are skipped).
fn parse_node_gres(value: &str) -> Result<(BTreeMap<String, u32>, u32), String> {
    let mut typed = BTreeMap::new();
    let mut untyped = 0u32;
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        // Drop a socket binding such as `gpu:v100:2(S:0-1)`.
        let entry_core = entry.split('(').next().unwrap_or(entry);
        let Some(rest) = entry_core.strip_prefix("gpu:") else {
            continue;
        };
        let (gpu_type, count) = match rest.rsplit_once(':') {
            Some((t, n)) => (Some(t), n),
            None => (None, rest),
        };
        let count = parse_gres_count(count).ok_or_else(|| entry.to_string())?;
        match gpu_type {
            Some(t) => {
                let slot = typed.entry(t.to_string()).or_insert(0u32);
                *slot = slot.saturating_add(count);
            }
            None => untyped = untyped.saturating_add(count),
        }
    }
    Ok((typed, untyped))
}

/// A GRES count as slurm.conf allows it: decimal with an optional k/m/g multiplier.
fn parse_gres_count(s: &str) -> Option<u32> {
    let (digits, mult) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1024u64),
        Some((i, 'm' | 'M')) => (&s[..i], 1024 * 1024),
        Some((i, 'g' | 'G')) => (&s[..i], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    if digits.is_empty() || digits.len() > 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    u32::try_from(n.checked_mul(mult)?).ok()
}

/// Why a hostlist could not be expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostlistError {
    /// It does not parse.
    Malformed,
    /// It names more hosts than allowed.
    TooMany,
}

/// Expands a Slurm hostlist expression (`n[1-3,07],gpu[01-02]x`) into names, at most `limit`.
pub fn expand_hostlist(expr: &str, limit: usize) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for item in split_top_level(expr)? {
        if item.is_empty() {
            return Err(HostlistError::Malformed);
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    names.iter_mut().for_each(|n| n.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let close = rest[open..].find(']').ok_or(HostlistError::Malformed)? + open;
                    let prefix = &rest[..open];
                    let suffixes = expand_ranges(&rest[open + 1..close], limit)?;
                    if names.len().saturating_mul(suffixes.len()) > limit {
                        return Err(HostlistError::TooMany);
                    }
                    names = names
                        .iter()
                        .flat_map(|n| suffixes.iter().map(move |s| format!("{n}{prefix}{s}")))
                        .collect();
                    rest = &rest[close + 1..];
                }
            }
        }
        if out.len() + names.len() > limit {
            return Err(HostlistError::TooMany);
        }
        out.extend(names);
    }
    Ok(out)
}

/// Splits at commas that are not inside brackets.
fn split_top_level(expr: &str) -> Result<Vec<&str>, HostlistError> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(HostlistError::Malformed);
        }
    }
    if depth != 0 {
        return Err(HostlistError::Malformed);
    }
    parts.push(&expr[start..]);
    Ok(parts)
}

/// Expands the inside of one bracket (`1-3,07`), keeping zero padding.
fn expand_ranges(inner: &str, limit: usize) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for part in inner.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(HostlistError::Malformed);
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| HostlistError::Malformed)?,
            hi.parse().map_err(|_| HostlistError::Malformed)?,
        );
        if a > b {
            return Err(HostlistError::Malformed);
        }
        if (b - a) as usize >= limit.saturating_sub(out.len()) {
            return Err(HostlistError::TooMany);
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TESTBED: &str = "\
ClusterName=testbed
GresTypes=gpu
NodeName=n1 NodeHostname=localhost Port=17001 CPUs=8 Gres=gpu:v100:4
NodeName=n2 NodeHostname=localhost Port=17002 CPUs=8 Gres=gpu:p100:4 # comment
NodeName=n3 NodeHostname=localhost Port=17003 CPUs=8 Gres=gpu:k80:4
NodeName=n4 NodeHostname=localhost Port=17004 CPUs=8 Gres=gpu:v100:2,gpu:k80:2
PartitionName=gpu Nodes=n[1-4] Default=YES
";

    fn no_include(_: &str) -> Result<String, String> {
        Err("no includes here".into())
    }

    #[test]
    fn reads_the_testbed() {
        let inv = Inventory::from_slurm_conf("slurm.conf", TESTBED, &mut no_include).unwrap();
        assert_eq!(inv.nodes.len(), 4);
        assert_eq!(inv.type_names(), vec!["k80", "p100", "v100"]);
        assert_eq!(inv.nodes[3].typed.get("v100"), Some(&2));
        assert_eq!(inv.nodes[3].typed.get("k80"), Some(&2));
        assert_eq!(inv.nodes[3].usable(None), 4);
        assert_eq!(inv.nodes[3].usable(Some(&["k80".to_string()])), 2);
    }

    #[test]
    fn defaults_ranges_and_includes() {
        let text = "NodeName=DEFAULT Gres=gpu:a100:8(S:0-1),mps:100\nNodeName=g[01-03] CPUs=4\nInclude more.conf\n";
        let mut include = |p: &str| {
            assert_eq!(p, "more.conf");
            Ok("NodeName=c1,c2 Gres=gpu:2\n".to_string())
        };
        let inv = Inventory::from_slurm_conf("x.conf", text, &mut include).unwrap();
        let names: Vec<_> = inv.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["g01", "g02", "g03", "c1", "c2"]);
        assert_eq!(inv.nodes[0].typed.get("a100"), Some(&8));
        assert_eq!(inv.nodes[4].untyped, 2);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e =
            Inventory::from_slurm_conf("s.conf", "\nNodeName=n[1-2 Gres=gpu:1\n", &mut no_include)
                .unwrap_err();
        assert_eq!(e.to_string(), "s.conf:2: malformed node name list `n[1-2`");
        let e =
            Inventory::from_slurm_conf("s.conf", "NodeName=n1 Gres=gpu:v100:x\n", &mut no_include)
                .unwrap_err();
        assert_eq!(
            e.to_string(),
            "s.conf:1: malformed GPU count in `Gres=gpu:v100:x`"
        );
        let e = Inventory::from_slurm_conf("s.conf", "NodeName=n[1-999999999]\n", &mut no_include)
            .unwrap_err();
        assert!(matches!(e, InventoryError::TooManyNodes { .. }));
    }

    #[test]
    fn partitions_restrict_the_usable_nodes() {
        let text = format!(
            "{TESTBED}PartitionName=old Nodes=n3\nPartitionName=DEFAULT Nodes=n[1-2]\nPartitionName=new\nPartitionName=any Nodes=ALL\n"
        );
        let inv = Inventory::from_slurm_conf("slurm.conf", &text, &mut no_include).unwrap();
        let names = |parts: &[&str]| {
            inv.nodes_in(parts)
                .iter()
                .map(|n| n.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&["old"]), ["n3"]);
        assert_eq!(names(&["new"]), ["n1", "n2"]);
        assert_eq!(names(&["old", "new"]), ["n1", "n2", "n3"]);
        assert_eq!(names(&["gpu"]), ["n1", "n2", "n3", "n4"]);
        assert_eq!(names(&["any"]).len(), 4);
        assert_eq!(
            names(&["undefined"]).len(),
            4,
            "unknown partitions are Slurm's to judge"
        );
    }

    #[test]
    fn hostlist_expansion() {
        assert_eq!(expand_hostlist("n[1-3]", 10).unwrap(), ["n1", "n2", "n3"]);
        assert_eq!(
            expand_hostlist("a[1-2]b[7,9]", 10).unwrap(),
            ["a1b7", "a1b9", "a2b7", "a2b9"]
        );
        assert_eq!(
            expand_hostlist("x,y[08-10]", 10).unwrap(),
            ["x", "y08", "y09", "y10"]
        );
        assert_eq!(expand_hostlist("n[3-1]", 10), Err(HostlistError::Malformed));
        assert_eq!(expand_hostlist("n[1-20]", 10), Err(HostlistError::TooMany));
    }

    proptest! {
        #[test]
        fn hostlist_never_panics(s in "[a-z0-9\\[\\],\\-]{0,30}") {
            if let Ok(names) = expand_hostlist(&s, 1000) {
                prop_assert!(names.len() <= 1000);
            }
        }

        #[test]
        fn slurm_conf_never_panics(s in "(NodeName=[a-z0-9\\[\\]\\-,]{0,10} Gres=[a-z0-9:,()]{0,16}\n|Include x\n|.{0,20}\n){0,5}") {
            let _ = Inventory::from_slurm_conf("f", &s, &mut |_: &str| Ok("NodeName=z Gres=gpu:1".to_string()));
        }
    }
}
