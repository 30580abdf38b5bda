//! Files and functions a reader holds in one sitting: no Rust file in `crates/*/{src,tests}` or
//! `xtask/{src,tests}` over 600 lines (the CUDA kernels aside), no function over 120 lines outside
//! `#[cfg(test)] mod tests`. The Python package's gate (its tests and `scripts/` included) is
//! `crates/py/tests/test_tidy.py`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

mod common;
use common::{root, rust_files};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 120;

fn sources() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in fs::read_dir(root().join("crates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        rust_files(&e.path().join("src"), &mut files);
        rust_files(&e.path().join("tests"), &mut files);
    }
    rust_files(&root().join("xtask/src"), &mut files);
    rust_files(&root().join("xtask/tests"), &mut files);
    files.sort();
    files
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// A line's code: string and char literals and `//` comments blanked, so their braces do not
/// count.
fn code(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        match (in_str, c) {
            (true, '\\') => {
                chars.next();
            }
            (true, '"') => in_str = false,
            (true, _) => {}
            (false, '"') => in_str = true,
            (false, '/') if chars.peek() == Some(&'/') => break,
            (false, '\'') => {
                // A char literal ('{', '\n') or a lifetime ('a): skip the literal only.
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with("\\") {
                    chars.next();
                    chars.next();
                    chars.next();
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
            }
            (false, _) => out.push(c),
        }
    }
    out
}

/// The name of a function a line starts, if it does.
fn fn_name(line: &str) -> Option<String> {
    let t = line.trim_start();
    let t = t
        .strip_prefix("pub(crate) ")
        .or_else(|| t.strip_prefix("pub(super) "))
        .or_else(|| t.strip_prefix("pub "))
        .unwrap_or(t);
    let t = t.strip_prefix("const ").unwrap_or(t);
    let t = t.strip_prefix("unsafe ").unwrap_or(t);
    let t = t.strip_prefix("fn ")?;
    let name: String = t
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// `(name, lines)` of every function outside `#[cfg(test)] mod tests`, nested ones counted in
/// their parent.
fn functions(text: &str) -> Vec<(String, usize)> {
    let body = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |i| &text[..i]);
    let lines: Vec<String> = body.lines().map(code).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = fn_name(&lines[i]) else {
            i += 1;
            continue;
        };
        let (mut depth, mut opened, mut j) = (0i64, false, i);
        while j < lines.len() {
            for c in lines[j].chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if (opened && depth <= 0) || (!opened && lines[j].trim_end().ends_with(';')) {
                break;
            }
            j += 1;
        }
        if opened {
            out.push((name, j - i + 1));
        }
        i = j + 1;
    }
    out
}

#[test]
fn the_counter_sees_braces_in_code_only() {
    let text = "fn a() {\n    let s = \"{{\";\n    let c = '{';\n    // {\n}\nfn b<'x>(v: &'x str) -> &'x str {\n    v\n}\n";
    assert_eq!(functions(text), [("a".to_owned(), 5), ("b".to_owned(), 3)]);
    assert_eq!(functions("trait T {\n    fn f(&self);\n}\n"), []);
}

#[test]
fn files_and_functions_stay_short() {
    let mut long_files = BTreeSet::new();
    let mut long_fns = BTreeSet::new();
    let mut seen = 0;
    for f in sources() {
        let text = fs::read_to_string(&f).unwrap_or_default();
        let r = rel(&f);
        if text.lines().count() > MAX_FILE_LINES {
            long_files.insert(r.clone());
        }
        for (name, n) in functions(&text) {
            seen += 1;
            if n > MAX_FN_LINES {
                long_fns.insert((r.clone(), name));
            }
        }
    }
    assert!(
        seen > 500,
        "only {seen} functions read: the counter is broken"
    );
    assert!(
        long_files.is_empty(),
        "source files over {MAX_FILE_LINES} lines: {long_files:?}; split each by concern"
    );
    assert!(
        long_fns.is_empty(),
        "functions over {MAX_FN_LINES} lines: {long_fns:?}; split each into named steps"
    );
}
