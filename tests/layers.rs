//! The layering ARCHITECTURE.md states, checked on the source tree (no broker runs):
//! imports inside a crate never go round a circle of more than two files, Kafka error
//! codes are defined only in `control/src/errors.rs`, and the crates stand in layers:
//! the control plane and the coordinators depend on nothing above them, so neither can
//! name a shard.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A crate's source files by module path (`a::b` for `src/a/b.rs` or `src/a/b/mod.rs`;
/// the root is the empty path), each with its text less its test module.
fn modules(src: &Path) -> BTreeMap<Vec<String>, (PathBuf, String)> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap();
            let mut module: Vec<String> =
                relative.iter().map(|part| part.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Test modules stand last in a file (clippy's items_after_test_module).
            let text = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            out.insert(module, (path, strip_comments(&text)));
        }
    }
    out
}

fn strip_comments(text: &str) -> String {
    text.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The module paths `text` (of module `here`) names: `crate::`, `super::` and `self::`
/// paths, and paths that start with one of its child modules; `use` groups expanded
/// one level.
fn named(here: &[String], text: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let parent: Vec<String> = here[..here.len().saturating_sub(1)].to_vec();
    let bytes = text.as_bytes();
    let ident = |at: usize| -> (String, usize) {
        let end =
            (at..bytes.len()).find(|&i| !(bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_')).unwrap_or(bytes.len());
        (text[at..end].to_string(), end)
    };
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts_word =
            at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':');
        if !starts_word || !(bytes[at].is_ascii_alphabetic() || bytes[at] == b'_') {
            at += 1;
            continue;
        }
        let (first, mut end) = ident(at);
        // `pub(crate)`, `&self` and the like name no path.
        if !text[end..].starts_with("::") {
            at = end;
            continue;
        }
        let mut path: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "super" => parent.clone(),
            "self" => here.to_vec(),
            name if children.contains(name) => {
                let mut base = here.to_vec();
                base.push(name.to_string());
                base
            }
            _ => {
                at = end;
                continue;
            }
        };
        let mut groups = Vec::new();
        while text[end..].starts_with("::") {
            end += 2;
            if text[end..].starts_with('{') {
                let close = text[end..].find('}').map_or(text.len(), |c| end + c);
                for entry in text[end + 1..close].split(',') {
                    let name: String =
                        entry.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        groups.push(name);
                    }
                }
                end = close;
                break;
            }
            if !(end < bytes.len() && (bytes[end].is_ascii_alphabetic() || bytes[end] == b'_')) {
                break;
            }
            let (next, after) = ident(end);
            path.push(next);
            end = after;
        }
        found.push(path.clone());
        for group in groups {
            let mut grouped = path.clone();
            grouped.push(group);
            found.push(grouped);
        }
        at = end.max(at + 1);
    }
    found
}

/// The import graph of the crate under `src`: file -> files it names.
fn graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let modules = modules(src);
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (module, (path, text)) in &modules {
        let children: BTreeSet<String> = modules
            .keys()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| m.last().unwrap().clone())
            .collect();
        let targets = edges.entry(path.clone()).or_default();
        let mut named_here = Vec::new();
        for (inner, text) in inline_modules(module, text) {
            named_here.extend(named(&inner, &text, &children));
        }
        for named in named_here {
            if let Some(target) = resolve(&modules, &named, 0) {
                // A file split off its module (`use super::*` in `log/roll.rs`) is
                // part of it: that arrow to its parent is not counted.
                let parent = modules.get(&module[..module.len().saturating_sub(1)]).map(|(p, _)| p);
                if &target != path && Some(&target) != parent {
                    targets.insert(target);
                }
            }
        }
    }
    edges
}

/// `text` of module `module` cut into its inline modules (`mod testing { ... }`, whose
/// `super` is `module`) and the rest.
fn inline_modules(module: &[String], text: &str) -> Vec<(Vec<String>, String)> {
    let mut rest = String::new();
    let mut inner = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find("mod ") {
        let start = at + found;
        let name: String = text[start + 4..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let open = start + 4 + name.len();
        if name.is_empty() || !text[open..].starts_with(" {") {
            rest.push_str(&text[at..open]);
            at = open;
            continue;
        }
        let mut depth = 0usize;
        let mut close = text.len();
        for (i, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest.push_str(&text[at..start]);
        let mut path = module.to_vec();
        path.push(name);
        inner.push((path, text[open..close].to_string()));
        at = close;
    }
    rest.push_str(&text[at..]);
    inner.push((module.to_vec(), rest));
    inner
}

/// The file that defines what `path` names: the longest prefix that is a module with a
/// file of its own, and, where the rest is an item that module only re-exports
/// (`pub use`), the file the re-export names.
fn resolve(modules: &BTreeMap<Vec<String>, (PathBuf, String)>, path: &[String], depth: usize) -> Option<PathBuf> {
    let n = (0..=path.len()).rev().find(|&n| modules.contains_key(&path[..n]))?;
    let (file, text) = &modules[&path[..n]];
    let Some(item) = path.get(n) else { return Some(file.clone()) };
    let defines = ["fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "macro_rules! ", "mod "]
        .iter()
        .any(|kind| text.contains(&format!("{kind}{item}")));
    if defines || depth > 8 {
        return Some(file.clone());
    }
    let module = &path[..n];
    let children: BTreeSet<String> = modules
        .keys()
        .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
        .map(|m| m.last().unwrap().clone())
        .collect();
    for line in text.split(';').filter(|l| l.trim_start().starts_with("pub use ") || l.contains("\npub use ")) {
        if !line.contains(item.as_str()) {
            continue;
        }
        let line = line.trim_start().trim_start_matches("pub use ");
        let line = if line.starts_with("crate::") || line.starts_with("super::") || line.starts_with("self::") {
            line.to_string()
        } else {
            format!("self::{line}")
        };
        for exported in named(module, &line, &children) {
            if exported.last() == Some(item) {
                return resolve(modules, &exported, depth + 1);
            }
        }
    }
    Some(file.clone())
}

/// Strongly connected components of more than one file (Tarjan).
fn circles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flatten() {
                if !self.edges.contains_key(next) {
                    continue;
                }
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.clone());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_import_circle_of_more_than_two_files() {
    for krate in ["engine/src", "replication/src", "control/src", "coordinator/src", "net/src", "src"] {
        let edges = graph(&root().join(krate));
        assert!(edges.len() > 5, "{krate}: {} files read", edges.len());
        let wide: Vec<_> = circles(&edges).into_iter().filter(|c| c.len() > 2).collect();
        assert!(wide.is_empty(), "{krate}: import circles of more than two files: {wide:#?}");
    }
}

// The check sees what it must: a circle of three files made up here is found.
#[test]
fn a_circle_of_three_files_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\n");
    write("a.rs", "use crate::b::B;\npub struct A;\n");
    write("b.rs", "use crate::c::{C, D};\npub struct B;\n");
    write("c.rs", "pub struct C;\npub struct D;\nfn f() { crate::a::A; }\n");
    write("d.rs", "use super::a::A;\n");
    write("e.rs", "pub struct E;\n");
    write("f.rs", "pub struct F;\n");
    let found = circles(&graph(dir.path()));
    let names: Vec<Vec<String>> = found
        .iter()
        .map(|c| c.iter().map(|p| p.file_name().unwrap().to_string_lossy().to_string()).collect())
        .collect();
    assert_eq!(names, vec![vec!["a.rs".to_string(), "b.rs".to_string(), "c.rs".to_string()]]);
}

// Kafka error codes are the control crate's (`errors.rs`): the engine and the
// replication layer answer with typed errors (`engine::Error`, `replication::Refusal`)
// that it maps, and no other crate defines one of the codes it names.
#[test]
fn kafka_error_codes_are_defined_only_in_control_errors() {
    let errors_path = root().join("control/src/errors.rs");
    let errors = std::fs::read_to_string(&errors_path).unwrap();
    let names: Vec<&str> = errors
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub const ")?.split(": i16").next())
        // NONE (0) names other things too (a compression codec).
        .filter(|name| *name != "NONE")
        .collect();
    assert!(names.len() > 40 && names.contains(&"NOT_LEADER_OR_FOLLOWER"), "{names:?}");
    for krate in ["engine/src", "replication/src", "control/src", "coordinator/src", "net/src", "src"] {
        for (_, (path, text)) in modules(&root().join(krate)) {
            if path == errors_path {
                continue;
            }
            for name in &names {
                let defined = text.contains(&format!("const {name}:"));
                assert!(!defined, "{} defines Kafka error code {name}", path.display());
            }
        }
    }
}

/// The workspace crates `krate`'s Cargo.toml depends on (normal dependencies).
fn skein_dependencies(krate: &str) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root().join(krate).join("Cargo.toml")).unwrap();
    let dependencies = manifest.split("[dependencies]").nth(1).unwrap_or("");
    let dependencies = dependencies.split("\n[").next().unwrap_or("");
    dependencies
        .lines()
        .filter_map(|line| line.trim().strip_prefix("skein-")?.split(['.', ' ', '=']).next())
        .map(str::to_string)
        .collect()
}

// The crates stand in layers, each depending only on those below it: engine,
// replication, control (the control plane), coordinator, net (the protocol layer).
// So the control plane sees a node only through `metadata::host::Host` and the
// coordinators see their shard only through `serve::Host`: neither can name one.
#[test]
fn crates_depend_only_on_crates_below_them() {
    let layers = ["engine", "replication", "control", "coordinator", "net"];
    for (at, krate) in layers.iter().enumerate() {
        let found = skein_dependencies(krate);
        let above: Vec<&String> = found.iter().filter(|d| !layers[..at].contains(&d.as_str())).collect();
        assert!(above.is_empty(), "{krate} depends on {above:?}, not below it");
    }
    assert_eq!(skein_dependencies("coordinator"), ["control", "engine", "replication"].map(String::from).into());
    for krate in ["control/src", "coordinator/src"] {
        for (_, (path, text)) in modules(&root().join(krate)) {
            assert!(!text.contains("skein_net"), "{} names the protocol layer", path.display());
        }
    }
}
