//! No module of a crate imports one that imports it back: the module graph of every crate,
//! from its `use crate::...` and `super::...` paths (test modules left out), has no circle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

mod common;
use common::{root, rust_files};

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `lib.rs` and `main.rs` are the root, `""`.
fn module_name(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The code outside `#[cfg(test)] mod tests { ... }` (by convention the file's last item).
fn non_test(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |i| &text[..i])
}

fn ident_path(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
        .collect::<String>()
        .trim_end_matches(':')
        .to_owned()
}

/// The paths after `prefix::`, with `prefix::{a::b, c}` groups split (nested groups are cut at
/// their first segment, which is all the graph needs).
fn paths_after(text: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices(prefix) {
        let before = text[..i].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident_path(item.trim()));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            out.push(ident_path(item.trim()));
        } else {
            out.push(ident_path(rest));
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The longest prefix of `path` that is a module.
fn resolve(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let names: BTreeMap<String, PathBuf> = files
        .into_iter()
        .map(|f| (module_name(src, &f), f))
        .collect();
    let modules: BTreeSet<String> = names.keys().cloned().collect();
    let mut g = BTreeMap::new();
    for (m, f) in &names {
        let text = fs::read_to_string(f).unwrap_or_default();
        let code = non_test(&text);
        let parent = m.rsplit_once("::").map_or("", |p| p.0);
        let mut edges = BTreeSet::new();
        for p in paths_after(code, "crate::") {
            edges.extend(resolve(&p, &modules));
        }
        for p in paths_after(code, "super::") {
            let full = if parent.is_empty() {
                p
            } else {
                format!("{parent}::{p}")
            };
            edges.extend(resolve(&full, &modules));
        }
        // A module's own children and ancestors are its parts and its home, not imports back.
        edges.retain(|e| e != m && !e.is_empty() && !m.starts_with(&format!("{e}::")));
        g.insert(m.clone(), edges);
    }
    g
}

/// Strongly connected components of more than one module, each sorted.
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    struct Tarjan<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        found: BTreeSet<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.found.insert(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        found: BTreeSet::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.found
}

#[test]
fn the_path_reader_sees_groups_and_the_finder_sees_a_circle() {
    assert_eq!(
        paths_after(
            "use crate::{a::B, c, d::{e, f}};\nlet x = crate::g::h();",
            "crate::"
        ),
        ["a::B", "c", "d", "g::h"]
    );
    assert!(paths_after("mycrate::x", "crate::").is_empty());
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), BTreeSet::from([v.to_owned()])))
        .collect();
    let want: BTreeSet<Vec<String>> = BTreeSet::from([vec!["a".into(), "b".into(), "c".into()]]);
    assert_eq!(circles(&g), want);
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root().join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.push(root().join("xtask"));
    dirs.sort();
    let mut edges = 0;
    let mut found = BTreeSet::new();
    for d in &dirs {
        let g = graph(&d.join("src"));
        edges += g.values().map(BTreeSet::len).sum::<usize>();
        let rel = d.strip_prefix(root()).unwrap_or(d).display().to_string();
        for c in circles(&g) {
            found.insert((rel.clone(), c));
        }
    }
    assert!(
        edges > 100,
        "only {edges} module edges read: the reader is broken"
    );
    assert!(
        found.is_empty(),
        "module circles {found:?}: open each by moving the shared type to a module of its own (as \
         fp8_engine::parallel, fp8_policy's rule_key, fp8_merge::sample, the bench's measure::ctx)"
    );
}
