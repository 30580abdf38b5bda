//! YAML loading with Hydra `defaults` resolved, as LoongForge configs use them.
//!
//! Supported entries: `_self_`; `path` (merged at the root); `path@pkg.sub` (merged under
//! `pkg.sub`); and `{group: option}` / `{group@pkg: option}` (the file `group/option.yaml`).
//! A relative entry resolves against the directory of the file that names it, then against the
//! search path, as Hydra does; `/`-rooted ones (Hydra's "from the config root") against the
//! search path only. The search path is the config root: `--config-root` when given, else the
//! nearest ancestor directory named `configs` (LoongForge's `hydra.searchpath: file://configs/`,
//! where its VLM configs reach `../../models/image_encoder/...`), else the checkout's root (the
//! nearest ancestor holding `.git`), else the config's own directory. `.yaml` is appended when the
//! path has no extension. Own content merges where `_self_` stands, or last when it is absent
//! (Hydra 1.1+).
//!
//! Hostile trees are bounded: each file is read and resolved once (a file listed many times is
//! merged from the cache, so fan-out costs no more reads), the whole load includes at most
//! [`MAX_INCLUDES`] entries, chains are at most [`MAX_DEPTH`] deep, brackets nest at most
//! [`MAX_NESTING`] deep (checked before the YAML parser walks them), and no entry reaches a file
//! outside the config root.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::MAX_CONFIG_BYTES;
use super::error::ConfigError;

/// Longest chain of nested `defaults`.
pub const MAX_DEPTH: usize = 16;
/// Most `defaults` entries one load may follow, all files together. Real configs use a handful.
pub const MAX_INCLUDES: usize = 256;
/// Deepest nesting of flow brackets (`[` / `{`) in one file. Real configs nest two or three.
pub const MAX_NESTING: usize = 64;

/// The config root when none is given: the nearest ancestor of the config's directory named
/// `configs`, else the nearest holding `.git`, else the directory itself.
pub(crate) fn default_root(config: &Path) -> PathBuf {
    let dir = config
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let Ok(abs) = dir.canonicalize() else {
        return dir;
    };
    let named = abs
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "configs"));
    let checkout = || abs.ancestors().find(|a| a.join(".git").exists());
    named
        .or_else(checkout)
        .map_or(abs.clone(), Path::to_path_buf)
}

/// Loads a YAML file and everything its `defaults` list pulls in, merged. `root` bounds what
/// entries may reach (default: the file's directory).
pub(crate) fn load(path: &Path, root: Option<&Path>) -> Result<Value, ConfigError> {
    let root_dir = match root {
        Some(r) => r.to_path_buf(),
        None => default_root(path),
    };
    let root = root_dir.canonicalize().map_err(|e| {
        field_err(
            path,
            "(config root)",
            format!("cannot open the config root {}: {e}", root_dir.display()),
            "pass an existing directory as --config-root",
        )
    })?;
    let mut loader = Loader {
        root,
        cache: HashMap::new(),
        stack: Vec::new(),
        includes: 0,
    };
    loader.load(path)
}

struct Loader {
    /// Canonical config root: no entry may reach outside it.
    root: PathBuf,
    /// Each file's resolved content, by canonical path: a file is read and resolved once.
    cache: HashMap<PathBuf, Value>,
    /// The chain being resolved, for cycles and depth.
    stack: Vec<PathBuf>,
    /// Entries followed so far.
    includes: usize,
}

fn read_yaml(path: &Path) -> Result<Value, ConfigError> {
    let text = fp8_io::read_to_string_limited(path, MAX_CONFIG_BYTES)?;
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    check_nesting(&text, path)?;
    serde_yaml_ng::from_str::<Value>(&text).map_err(|e| ConfigError::Syntax {
        file: path.into(),
        format: "YAML",
        message: e.to_string(),
    })
}

/// Refuses flow brackets nested deeper than [`MAX_NESTING`] in one linear pass: the YAML parser
/// takes time quadratic in the depth before its own recursion limit stops it (seconds for a few
/// hundred KiB of `[`). Quoted strings and comments are skipped.
fn check_nesting(text: &str, path: &Path) -> Result<(), ConfigError> {
    let mut depth = 0usize;
    let mut line = 1usize;
    let mut quote: Option<char> = None;
    let mut comment = false;
    let mut prev = ' ';
    for c in text.chars() {
        if c == '\n' {
            line += 1;
            comment = false;
        } else if comment {
            // Skipped to the end of the line.
        } else if let Some(q) = quote {
            if c == q && !(q == '"' && prev == '\\') {
                quote = None;
            }
        } else {
            match c {
                '#' if prev.is_whitespace() => comment = true,
                '"' | '\'' if !prev.is_alphanumeric() => quote = Some(c),
                '[' | '{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(field_err(
                            path,
                            "(structure)",
                            format!(
                                "brackets nest more than {MAX_NESTING} levels deep at line {line}"
                            ),
                            "a model config nests a few levels; point at the right file",
                        ));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        prev = c;
    }
    Ok(())
}

fn field_err(file: &Path, field: &str, problem: String, fix: &str) -> ConfigError {
    ConfigError::Field {
        file: file.into(),
        field: field.to_owned(),
        problem,
        fix: fix.to_owned(),
    }
}

impl Loader {
    fn load(&mut self, path: &Path) -> Result<Value, ConfigError> {
        let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if self.stack.contains(&canon) || self.stack.len() >= MAX_DEPTH {
            return Err(field_err(
                path,
                "defaults",
                format!(
                    "circular or too deep defaults chain: {}",
                    chain(&self.stack, &canon)
                ),
                "remove the cycle from the defaults lists",
            ));
        }
        if let Some(v) = self.cache.get(&canon) {
            return Ok(v.clone());
        }
        self.stack.push(canon.clone());
        let mut own = match read_yaml(path)? {
            Value::Object(m) => m,
            other => {
                return Err(field_err(
                    path,
                    "(top level)",
                    format!("expected a mapping, found {}", kind(&other)),
                    "a model config is a YAML mapping",
                ));
            }
        };
        let defaults = own.remove("defaults");
        let mut acc = Value::Object(Map::new());
        let mut self_merged = false;
        if let Some(defaults) = defaults {
            let list = match defaults {
                Value::Array(a) => a,
                other => {
                    return Err(field_err(
                        path,
                        "defaults",
                        format!("expected a list, found {}", kind(&other)),
                        "write defaults as a YAML list",
                    ));
                }
            };
            let dir = path.parent().unwrap_or(Path::new("."));
            for (i, entry) in list.iter().enumerate() {
                let field = format!("defaults[{i}]");
                self.includes += 1;
                if self.includes > MAX_INCLUDES {
                    return Err(field_err(
                        path,
                        &field,
                        format!("more than {MAX_INCLUDES} defaults entries in one config tree"),
                        "flatten the defaults lists; real configs include a handful of files",
                    ));
                }
                let (target, package) = match entry {
                    Value::String(s) if s == "_self_" => {
                        merge(&mut acc, Value::Object(own.clone()));
                        self_merged = true;
                        continue;
                    }
                    Value::String(s) => split_package(s),
                    Value::Object(m) if m.len() == 1 => {
                        let (k, v) = m
                            .iter()
                            .next()
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .unwrap_or_default();
                        let Some(option) = v.as_str() else {
                            return Err(field_err(
                                path,
                                &field,
                                format!("group option must be a string, found {}", kind(&v)),
                                "write `- group: option`",
                            ));
                        };
                        if k.starts_with("override ") {
                            return Err(field_err(
                                path,
                                &field,
                                "`override` entries are not supported".into(),
                                "inline the override in this file",
                            ));
                        }
                        let (group, package) = split_package(&k);
                        (format!("{group}/{option}"), package)
                    }
                    other => {
                        return Err(field_err(
                            path,
                            &field,
                            format!("unsupported entry {other}"),
                            "use `path`, `path@package` or `group: option`",
                        ));
                    }
                };
                let file = self.resolve(path, dir, &field, &target)?;
                let loaded = self.load(&file)?;
                merge(&mut acc, place(loaded, package.as_deref()));
            }
        }
        if !self_merged {
            merge(&mut acc, Value::Object(own));
        }
        self.stack.pop();
        self.cache.insert(canon, acc.clone());
        Ok(acc)
    }

    /// The file a `defaults` entry names: relative to the naming file's directory, or to the config
    /// root for a `/`-rooted entry; `.yaml`/`.yml` appended when needed. It must lie under the root.
    fn resolve(
        &self,
        from: &Path,
        dir: &Path,
        field: &str,
        target: &str,
    ) -> Result<PathBuf, ConfigError> {
        let (bases, rel): (Vec<&Path>, &str) = match target.strip_prefix('/') {
            Some(rest) => (vec![self.root.as_path()], rest),
            None => (vec![dir, self.root.as_path()], target),
        };
        let candidates: Vec<PathBuf> = bases
            .iter()
            .flat_map(|base| {
                std::iter::once(base.join(rel)).chain(
                    ["yaml", "yml"]
                        .iter()
                        .map(move |ext| base.join(format!("{rel}.{ext}"))),
                )
            })
            .collect();
        let Some(found) = candidates.iter().find(|p| p.is_file()) else {
            let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
            let anchor = if target.starts_with('/') {
                format!("the config root {}", self.root.display())
            } else {
                format!("this file, then to the config root {}", self.root.display())
            };
            return Err(field_err(
                from,
                field,
                format!("cannot find `{target}` (looked for {})", looked.join(", ")),
                &format!("fix the path; it is relative to {anchor}"),
            ));
        };
        let canon = found.canonicalize().unwrap_or_else(|_| found.clone());
        if !canon.starts_with(&self.root) {
            return Err(field_err(
                from,
                field,
                format!(
                    "`{target}` is {}, outside the config root {}",
                    canon.display(),
                    self.root.display()
                ),
                "pass --config-root with a directory that holds every file the config includes",
            ));
        }
        Ok(found.clone())
    }
}

fn chain(stack: &[PathBuf], last: &Path) -> String {
    stack
        .iter()
        .map(|p| p.display().to_string())
        .chain(std::iter::once(last.display().to_string()))
        .collect::<Vec<_>>()
        .join(" -> ")
}

fn split_package(s: &str) -> (String, Option<String>) {
    let s = s.trim().trim_start_matches("optional ").trim();
    match s.split_once('@') {
        Some((p, pkg)) => (
            p.to_owned(),
            Some(pkg.to_owned()).filter(|p| !p.is_empty() && p != "_here_"),
        ),
        None => (s.to_owned(), None),
    }
}

fn place(v: Value, package: Option<&str>) -> Value {
    let Some(pkg) = package.filter(|p| *p != "_global_") else {
        return v;
    };
    pkg.rsplit('.').fold(v, |inner, key| {
        let mut m = Map::new();
        m.insert(key.to_owned(), inner);
        Value::Object(m)
    })
}

/// Deep merge: mappings merge key by key, anything else is replaced by `over`.
pub(crate) fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}
