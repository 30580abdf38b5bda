//! OmegaConf interpolation in LoongForge/Hydra configs: `${hidden_size}`, `${model.foundation.x}`,
//! `${.sibling}`, and the resolvers those configs use: `${moe_freq:"[0]*3+[1]*58"}` (Megatron's
//! `moe_layer_freq` expression, kept as the expression the engine parses),
//! `${oc.env:NAME,default}` and `${act:gelu}` (LoongForge's activation resolver: the engine reads
//! only the name). LoongForge's other resolvers (`${loss_func:...}`, `${position_func:...}`)
//! build Python objects on fields the engine never reads; they are kept as written and named once
//! in a note ([`unevaluated_resolvers`]).
//!
//! A string that is one interpolation takes the referenced value with its type; interpolations
//! inside a longer string are spliced in as text. References are resolved against the merged
//! tree, at most [`MAX_DEPTH`] deep (a cycle is an error naming the field).

use std::path::Path;

use serde_json::Value;

use super::error::ConfigError;

/// Longest chain of interpolations that refer to interpolations.
pub const MAX_DEPTH: usize = 16;

/// Resolves every interpolation in `root`, in place. Like OmegaConf, which resolves a value only
/// when it is read, an interpolation that cannot be resolved is an error only in a field the
/// engine reads (`is_read(key)`); elsewhere (`convert_file: ${oc.env:UNSET}/...`) it is left as
/// written.
pub(crate) fn resolve_all(
    root: &mut Value,
    file: &Path,
    is_read: &dyn Fn(&str) -> bool,
) -> Result<(), ConfigError> {
    let snapshot = root.clone();
    walk(root, &snapshot, &mut Vec::new(), file, is_read)
}

/// The resolvers of the interpolations left in `root` after [`resolve_all`] that fp8sel does
/// not evaluate (on fields it does not read), each once, sorted.
pub(crate) fn unevaluated_resolvers(root: &Value) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    collect(root, &mut out);
    out.into_iter().collect()
}

fn collect(v: &Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::Object(m) => m.values().for_each(|c| collect(c, out)),
        Value::Array(a) => a.iter().for_each(|c| collect(c, out)),
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(i) = rest.find("${") {
                rest = &rest[i + 2..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '.'))
                    .collect();
                if rest[name.len()..].starts_with(':')
                    && !matches!(name.as_str(), "moe_freq" | "act" | "oc.env")
                {
                    out.insert(name);
                }
            }
        }
        _ => {}
    }
}

fn walk(
    v: &mut Value,
    root: &Value,
    path: &mut Vec<String>,
    file: &Path,
    is_read: &dyn Fn(&str) -> bool,
) -> Result<(), ConfigError> {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                path.push(k.clone());
                walk(child, root, path, file, is_read)?;
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter_mut().enumerate() {
                path.push(i.to_string());
                walk(child, root, path, file, is_read)?;
                path.pop();
            }
        }
        Value::String(s) if s.contains("${") => match resolve_str(s, root, path, file, 0) {
            Ok(r) => *v = r,
            Err(e) if path.last().is_some_and(|k| is_read(k)) => return Err(e),
            Err(_) => {}
        },
        _ => {}
    }
    Ok(())
}

fn err(file: &Path, path: &[String], problem: String, fix: &str) -> ConfigError {
    ConfigError::Field {
        file: file.into(),
        field: path.join("."),
        problem,
        fix: fix.to_owned(),
    }
}

/// The value of string `s` found at `path`, every interpolation resolved.
fn resolve_str(
    s: &str,
    root: &Value,
    path: &[String],
    file: &Path,
    depth: usize,
) -> Result<Value, ConfigError> {
    if depth > MAX_DEPTH {
        return Err(err(
            file,
            path,
            format!("interpolation `{s}` is circular or more than {MAX_DEPTH} deep"),
            "make the interpolations refer to plain values",
        ));
    }
    let mut parts: Vec<Value> = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        text.push_str(&rest[..start]);
        let body_start = start + 2;
        let end = matching_brace(&rest[body_start..]).ok_or_else(|| {
            err(
                file,
                path,
                format!("unclosed interpolation in `{s}`"),
                "close every `${` with `}`",
            )
        })?;
        let body = &rest[body_start..body_start + end];
        let value = resolve_one(body, root, path, file, depth)?;
        if !text.is_empty() {
            parts.push(Value::String(std::mem::take(&mut text)));
        }
        parts.push(value);
        rest = &rest[body_start + end + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Value::String(text));
    }
    Ok(match parts.len() {
        1 => parts.pop().unwrap_or(Value::Null),
        _ => Value::String(
            parts
                .iter()
                .map(|p| match p {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
        ),
    })
}

/// Index of the `}` that closes an interpolation body (nested `${...}` and quotes allowed).
fn matching_brace(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{') => depth += 1,
            (None, '}') if depth == 0 => return Some(i),
            (None, '}') => depth -= 1,
            _ => {}
        }
    }
    None
}

fn resolve_one(
    body: &str,
    root: &Value,
    path: &[String],
    file: &Path,
    depth: usize,
) -> Result<Value, ConfigError> {
    let body = body.trim();
    // A resolver call `name:args`; a key path never holds a colon.
    if let Some((name, args)) = body.split_once(':') {
        let args = unquote(args.trim());
        return match name.trim() {
            "moe_freq" | "act" => Ok(Value::String(args.to_owned())),
            "oc.env" => {
                let (var, default) = match args.split_once(',') {
                    Some((v, d)) => (v.trim(), Some(unquote(d.trim()))),
                    None => (args, None),
                };
                match (std::env::var(var), default) {
                    (Ok(v), _) => Ok(Value::String(v)),
                    (Err(_), Some(d)) => Ok(Value::String(d.to_owned())),
                    (Err(_), None) => Err(err(
                        file,
                        path,
                        format!("environment variable {var} is not set"),
                        "set it, or give a default: ${oc.env:NAME,default}",
                    )),
                }
            }
            other => Err(err(
                file,
                path,
                format!("resolver `{other}` is not supported (only moe_freq, act and oc.env are)"),
                "replace the interpolation by its value",
            )),
        };
    }
    let target = lookup(body, root, path).ok_or_else(|| {
        err(
            file,
            path,
            format!("interpolation `${{{body}}}` refers to a key that does not exist"),
            "fix the key path (absolute from the top of the merged config, or .sibling)",
        )
    })?;
    match target {
        Value::String(s) if s.contains("${") => {
            let at: Vec<String> = body
                .trim_start_matches('.')
                .split('.')
                .map(str::to_owned)
                .collect();
            resolve_str(s, root, &at, file, depth + 1)
        }
        other => Ok(other.clone()),
    }
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .or_else(|| s.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
        .unwrap_or(s)
}

/// `a.b.c` from the root, or `.sibling` (`..x` one level up) relative to the node at `path`.
fn lookup<'a>(key: &str, root: &'a Value, path: &[String]) -> Option<&'a Value> {
    let dots = key.chars().take_while(|c| *c == '.').count();
    let (mut node, rest) = if dots == 0 {
        (root, key)
    } else {
        // `path` ends with the field holding the interpolation; its container is one up.
        let up = path.len().checked_sub(dots)?;
        let mut n = root;
        for p in &path[..up] {
            n = step(n, p)?;
        }
        (n, &key[dots..])
    };
    for part in rest.split('.').filter(|p| !p.is_empty()) {
        node = step(node, part)?;
    }
    Some(node)
}

fn step<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => m.get(key),
        Value::Array(a) => a.get(key.parse::<usize>().ok()?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolved(v: Value) -> Result<Value, ConfigError> {
        let mut v = v;
        resolve_all(&mut v, Path::new("c.yaml"), &|_| true).map(|()| v)
    }

    #[test]
    fn unresolvable_fields_the_engine_does_not_read_are_left_alone() {
        let mut v = json!({"convert_file": "${oc.env:FP8SEL_SURELY_UNSET_VAR}/x.yaml", "n": "${a}", "a": 1});
        resolve_all(&mut v, Path::new("c.yaml"), &|k| k == "n").unwrap();
        assert_eq!(
            v["convert_file"],
            "${oc.env:FP8SEL_SURELY_UNSET_VAR}/x.yaml"
        );
        assert_eq!(v["n"], 1);
        let mut v = json!({"num_layers": "${oc.env:FP8SEL_SURELY_UNSET_VAR}"});
        assert!(resolve_all(&mut v, Path::new("c.yaml"), &|k| k == "num_layers").is_err());
    }

    #[test]
    fn references_keep_their_type_and_splice_into_text() {
        let v = resolved(json!({
            "hidden_size": 4096,
            "ffn_hidden_size": "${hidden_size}",
            "name": "m${hidden_size}x",
            "model": {"a": 2, "b": "${.a}", "c": "${model.b}"},
        }))
        .unwrap();
        assert_eq!(v["ffn_hidden_size"], 4096);
        assert_eq!(v["name"], "m4096x");
        assert_eq!(v["model"]["b"], 2);
        assert_eq!(v["model"]["c"], 2);
    }

    #[test]
    fn resolvers() {
        let v = resolved(json!({"moe_layer_freq": "${moe_freq:\"[0]*3+[1]*58\"}"})).unwrap();
        assert_eq!(v["moe_layer_freq"], "[0]*3+[1]*58");
        let v = resolved(json!({"x": "${oc.env:FP8SEL_SURELY_UNSET_VAR,7}"})).unwrap();
        assert_eq!(v["x"], "7");
        let e = resolved(json!({"x": "${now:%Y}"})).unwrap_err().to_string();
        assert!(
            e.contains("resolver `now`") && e.contains("field `x`"),
            "{e}"
        );
    }

    #[test]
    fn cycles_and_missing_keys_are_errors_naming_the_field() {
        let e = resolved(json!({"a": "${b}", "b": "${a}"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("circular"), "{e}");
        let e = resolved(json!({"m": {"x": "${nope.y}"}}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("field `m.x`") && e.contains("does not exist"),
            "{e}"
        );
        let e = resolved(json!({"x": "${a"})).unwrap_err().to_string();
        assert!(e.contains("unclosed"), "{e}");
    }
}
