//! The engine's source layout holds what its folders' docs say: each folder
//! (`src/<folder>/mod.rs`) names in a `May use:` line the folders and root
//! modules its production code may reach through `crate::`, and the modules
//! of the crate (folders and root files, `lib.rs` aside) import each other
//! without a cycle. `lib.rs` is the hub every module may use (the `Engine` and
//! the crate's public types); so are the leaves, root modules that use no
//! other module (ids, units, errors: the crate's vocabulary, which cannot
//! close a cycle); test modules may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module of the crate: a folder under `src/` or a root file other than `lib.rs`.
type Node = String;

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The crate's modules, and the source files of each.
fn nodes() -> BTreeMap<Node, Vec<PathBuf>> {
    let mut nodes = BTreeMap::new();
    for entry in fs::read_dir(source_dir()).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let test_only = test_only_modules(&path.join("mod.rs"));
            let files = fs::read_dir(&path)
                .expect("a folder is readable")
                .map(|e| e.expect("a directory entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "rs"))
                .filter(|p| !test_only.contains(&*p.file_stem().unwrap().to_string_lossy()))
                .collect();
            nodes.insert(name, files);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" {
            nodes.insert(name, vec![path]);
        }
    }
    nodes
}

/// Modules a folder declares under `#[cfg(test)]`: compiled for tests only.
fn test_only_modules(mod_rs: &Path) -> BTreeSet<String> {
    let text = fs::read_to_string(mod_rs).expect("a folder has a mod.rs");
    let lines: Vec<&str> = text.lines().collect();
    let mut found = BTreeSet::new();
    for pair in lines.windows(2) {
        if pair[0].trim() == "#[cfg(test)]" {
            if let Some(name) = pair[1].trim().trim_end_matches(';').rsplit("mod ").next() {
                found.insert(name.to_string());
            }
        }
    }
    found
}

/// The production part of a source file: without its comments and without the
/// inline test module (`#[cfg(test)]`, maybe more attributes, then `mod`).
fn production_text(path: &Path) -> String {
    let text = fs::read_to_string(path).expect("a source file is readable");
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            let mut rest = lines.clone();
            while rest
                .peek()
                .is_some_and(|l| l.trim_start().starts_with("#["))
            {
                rest.next();
            }
            if rest
                .peek()
                .is_some_and(|l| l.trim_start().starts_with("mod "))
            {
                break;
            }
        }
        let code = line.split("//").next().unwrap_or("");
        kept.push_str(code);
        kept.push('\n');
    }
    kept
}

/// The modules a text reaches through `crate::<name>`, with one place each.
fn references(text: &str, nodes: &BTreeMap<Node, Vec<PathBuf>>) -> BTreeSet<Node> {
    text.match_indices("crate::")
        .filter(|(at, _)| !text[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(at, _)| {
            text[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| nodes.contains_key(name))
        .collect()
}

/// The `May use:` line of a folder's docs: the modules named in it.
fn declared_uses(folder: &str) -> BTreeSet<Node> {
    let mod_rs = source_dir().join(folder).join("mod.rs");
    let text = fs::read_to_string(&mod_rs).expect("a folder has a mod.rs");
    assert!(
        text.starts_with("//!"),
        "{folder}/mod.rs must begin with docs saying what the folder owns"
    );
    let docs: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    let start = docs
        .iter()
        .position(|l| l.starts_with("May use:"))
        .unwrap_or_else(|| panic!("{folder}/mod.rs has no `May use:` line"));
    let paragraph = docs[start..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    paragraph
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn edges() -> BTreeMap<Node, BTreeSet<Node>> {
    let nodes = nodes();
    let mut edges = BTreeMap::new();
    for (node, files) in &nodes {
        let mut used = BTreeSet::new();
        for file in files {
            used.extend(references(&production_text(file), &nodes));
        }
        used.remove(node);
        edges.insert(node.clone(), used);
    }
    edges
}

/// A cycle of the graph, if it has one (depth-first search).
fn find_cycle(edges: &BTreeMap<Node, BTreeSet<Node>>) -> Option<Vec<Node>> {
    fn visit(
        node: &Node,
        edges: &BTreeMap<Node, BTreeSet<Node>>,
        done: &mut BTreeSet<Node>,
        path: &mut Vec<Node>,
    ) -> Option<Vec<Node>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut done, &mut Vec::new()))
}

#[test]
fn each_folder_uses_only_what_its_docs_allow() {
    let edges = edges();
    let folders: Vec<&Node> = edges
        .keys()
        .filter(|n| source_dir().join(n).is_dir())
        .collect();
    assert!(
        folders.len() >= 8,
        "the engine is organised in folders: {folders:?}"
    );
    let leaves: BTreeSet<Node> = edges
        .iter()
        .filter(|(node, uses)| uses.is_empty() && !source_dir().join(node).is_dir())
        .map(|(node, _)| node.clone())
        .collect();
    assert!(leaves.contains("ids"), "ids.rs is a leaf: {leaves:?}");
    for folder in folders {
        let declared = declared_uses(folder);
        let undeclared: Vec<&Node> = edges[folder]
            .difference(&declared)
            .filter(|node| !leaves.contains(*node))
            .collect();
        assert!(
            undeclared.is_empty(),
            "{folder}/ uses {undeclared:?}, which its mod.rs's `May use:` line does not name"
        );
    }
}

#[test]
fn no_import_cycle_between_modules() {
    let edges = edges();
    assert!(edges.len() > 10, "modules found: {:?}", edges.keys());
    if let Some(cycle) = find_cycle(&edges) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut edges: BTreeMap<Node, BTreeSet<Node>> = BTreeMap::new();
    edges.insert("a".into(), ["b".to_string()].into());
    edges.insert("b".into(), ["c".to_string()].into());
    edges.insert("c".into(), ["a".to_string()].into());
    let cycle = find_cycle(&edges).expect("a -> b -> c -> a is a cycle");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
    edges.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&edges), None);
}

#[test]
fn references_skip_comments_and_test_modules() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.rs");
    fs::write(
        &file,
        "use crate::meta::schema;\n// crate::reclaim in a comment\nfn f() {}\n\
         #[cfg(test)]\n#[allow(dead_code)]\nmod tests {\n    use crate::versions;\n}\n",
    )
    .unwrap();
    let nodes: BTreeMap<Node, Vec<PathBuf>> = ["meta", "reclaim", "versions"]
        .into_iter()
        .map(|n| (n.to_string(), Vec::new()))
        .collect();
    let found = references(&production_text(&file), &nodes);
    assert_eq!(found, ["meta".to_string()].into());
}
