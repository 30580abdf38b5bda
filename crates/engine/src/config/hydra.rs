//! YAML loading with Hydra `defaults` resolved, as LoongForge configs use them.
//!
//! Supported entries: `_self_`; `path` (merged at the root); `path@pkg.sub` (merged under
//! `pkg.sub`); and `{group: option}` / `{group@pkg: option}` (the file `group/option.yaml`).
//! Paths resolve relative to the file that names them; `.yaml` is appended when the path has no
//! extension. Own content merges where `_self_` stands, or last when it is absent (Hydra 1.1+).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::error::ConfigError;

const MAX_DEPTH: usize = 16;

/// Loads a YAML file and everything its `defaults` list pulls in, merged.
pub(crate) fn load(path: &Path) -> Result<Value, ConfigError> {
    load_inner(path, &mut Vec::new())
}

fn read_yaml(path: &Path) -> Result<Value, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        file: path.into(),
        source,
    })?;
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_yaml_ng::from_str::<Value>(&text).map_err(|e| ConfigError::Syntax {
        file: path.into(),
        format: "YAML",
        message: e.to_string(),
    })
}

fn field_err(file: &Path, field: &str, problem: String, fix: &str) -> ConfigError {
    ConfigError::Field {
        file: file.into(),
        field: field.to_owned(),
        problem,
        fix: fix.to_owned(),
    }
}

fn load_inner(path: &Path, stack: &mut Vec<PathBuf>) -> Result<Value, ConfigError> {
    let canon = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    if stack.contains(&canon) || stack.len() >= MAX_DEPTH {
        return Err(field_err(
            path,
            "defaults",
            format!(
                "circular or too deep defaults chain: {}",
                chain(stack, &canon)
            ),
            "remove the cycle from the defaults lists",
        ));
    }
    stack.push(canon);
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
            let file = resolve(dir, &target).ok_or_else(|| {
                field_err(
                    path,
                    &field,
                    format!(
                        "cannot find `{target}` (looked for {} and {}.yaml)",
                        dir.join(&target).display(),
                        dir.join(&target).display()
                    ),
                    "fix the path; it is relative to this file",
                )
            })?;
            let loaded = load_inner(&file, stack)?;
            merge(&mut acc, place(loaded, package.as_deref()));
        }
    }
    if !self_merged {
        merge(&mut acc, Value::Object(own));
    }
    stack.pop();
    Ok(acc)
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

fn resolve(dir: &Path, target: &str) -> Option<PathBuf> {
    let t = target.trim_start_matches('/');
    let base = dir.join(t);
    if base.is_file() {
        return Some(base);
    }
    ["yaml", "yml"]
        .iter()
        .map(|ext| dir.join(format!("{t}.{ext}")))
        .find(|p| p.is_file())
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
