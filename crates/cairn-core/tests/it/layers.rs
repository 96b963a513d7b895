//! The engine's modules import each other one way only (docs/design.md,
//! "Layers"): no import cycle among the top-level modules of cairn-core
//! (a folder such as `alloc/` or `tx/` is one module), nor among the
//! modules inside each folder (its `mod.rs` is the folder itself, whose
//! items its modules may use, as every module may use `lib.rs`). Read from
//! the sources: every `crate::NAME` path outside comments and test modules
//! is an import of module NAME; inside folder F, every `super::NAME` and
//! `crate::F::NAME` path one of module F::NAME.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module name → (imported module → the first file that imports it).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a source file without comments and without its test modules
/// (`#[cfg(test)]` followed by `mod`, which close the files that have them).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t == "#[cfg(test)]" && lines.peek().is_some_and(|n| n.trim_start().starts_with("mod ")) {
            break;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The names that follow `crate::` in `code`, also inside `crate::{a, b::c}`.
fn imported(code: &str) -> BTreeSet<String> {
    imported_after(code, "crate::")
}

/// The names that follow `prefix` in `code`, also inside `prefix{a, b::c}`.
fn imported_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        if rest[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            rest = &rest[i + prefix.len()..];
            continue;
        }
        let after = &rest[i + prefix.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                names.insert(name);
            }
        } else {
            names.insert(after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
        rest = after;
    }
    names
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .filter(|m| m != "lib")
        .collect();
    let mut g = Graph::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let name = rel.file_name().unwrap().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") || rel == Path::new("lib.rs") {
            continue;
        }
        let module = rel.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_string();
        let uses = g.entry(module.clone()).or_default();
        for m in imported(&code(&std::fs::read_to_string(&f).unwrap())) {
            if m != module && modules.contains(&m) {
                uses.entry(m).or_insert_with(|| rel.display().to_string());
            }
        }
    }
    g
}

/// A cycle of `g` as the modules around it, if there is one.
fn cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(g: &Graph, m: &str, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            return Some(path[i..].to_vec());
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in g.get(m).into_iter().flat_map(|u| u.keys()) {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys().find_map(|m| visit(g, m, &mut Vec::new(), &mut done))
}

#[test]
fn the_engine_has_no_import_cycle() {
    let g = graph();
    assert!(g.len() > 20, "the module graph was not read: {g:?}");
    if let Some(c) = cycle(&g) {
        let how: Vec<String> =
            c.iter().zip(c.iter().cycle().skip(1)).map(|(a, b)| format!("  {a} -> {b} (in {})", g[a][b])).collect();
        panic!("an import cycle among cairn-core's modules:\n{}", how.join("\n"));
    }
}

/// For each folder of `src`, the graph of its modules (its files and
/// subfolders, but `mod.rs`).
fn folder_graphs() -> BTreeMap<String, Graph> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let dir = e.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let folder = dir.file_name().unwrap().to_string_lossy().into_owned();
        let modules: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .filter(|m| m != "mod" && m != "tests" && !m.ends_with("_tests"))
            .collect();
        let mut g = Graph::new();
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for f in files {
            let rel = f.strip_prefix(&dir).unwrap();
            let module = rel.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_string();
            if !modules.contains(&module) {
                continue;
            }
            let text = code(&std::fs::read_to_string(&f).unwrap());
            let mut names = imported_after(&text, "super::");
            names.extend(imported_after(&text, &format!("crate::{folder}::")));
            let uses = g.entry(module.clone()).or_default();
            for m in names {
                if m != module && modules.contains(&m) {
                    uses.entry(m).or_insert_with(|| format!("{folder}/{}", rel.display()));
                }
            }
        }
        out.insert(folder, g);
    }
    out
}

#[test]
fn no_folder_has_an_import_cycle_among_its_modules() {
    let graphs = folder_graphs();
    assert!(graphs.contains_key("tx") && graphs["tx"].len() >= 3, "the folders were not read: {graphs:?}");
    for (folder, g) in &graphs {
        if let Some(c) = cycle(g) {
            let how: Vec<String> =
                c.iter().zip(c.iter().cycle().skip(1)).map(|(a, b)| format!("  {a} -> {b} (in {})", g[a][b])).collect();
            panic!("an import cycle among the modules of {folder}/:\n{}", how.join("\n"));
        }
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g = Graph::new();
    g.entry("fs".into()).or_default().insert("stats".into(), "fs.rs".into());
    g.entry("stats".into()).or_default().insert("journal".into(), "stats.rs".into());
    assert_eq!(cycle(&g), None);
    g.entry("journal".into()).or_default().insert("fs".into(), "journal/log.rs".into());
    assert_eq!(cycle(&g).map(|c| c.len()), Some(3));
    let text = "use crate::{buffer::Buf, meta};\n// crate::fs\nfn f() { crate::alloc::x() }\n#[cfg(test)]\nmod tests { use crate::tx; }\n";
    let names = imported(&code(text));
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["alloc", "buffer", "meta"]);
    let inner =
        "use super::gate::Entry;\nuse super::{manager, handle::Tx};\nfn f() { crate::tx::cil::x(); a::super::z() }\n";
    let mut names = imported_after(&code(inner), "super::");
    names.extend(imported_after(&code(inner), "crate::tx::"));
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["cil", "gate", "handle", "manager"]);
}
