//! A launch script whose model is in another file: Megatron-LM's `--yaml-cfg F` (read in place
//! of every flag), and LoongForge's `--config-file F` or `--model-name NAME` (the model's YAML,
//! the script's run settings over it and its model flags where the YAML has none, as
//! LoongForge's parser takes them; an error in a field the script gave names the YAML).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::super::error::ConfigError;
use super::super::megatron::{RUN_FIELDS, is_model_field, is_read};
use super::super::{LoadOptions, load_model_with, model_from_value, yaml_tree};
use super::registry;
use crate::model::ModelDesc;

/// What a script gives: its own flags as the model's fields, or the model of the file it names.
pub(crate) enum Read {
    Fields(Value, Vec<String>),
    Model(ModelDesc),
}

/// Reads the script at `path`.
pub(crate) fn load(path: &Path, opt: &LoadOptions) -> Result<Read, ConfigError> {
    let text = fp8_io::read_to_string_limited(path, super::super::MAX_CONFIG_BYTES)?;
    let super::Script {
        fields: v,
        notes: said,
        programs,
    } = super::fields(&text, path)?;
    let (name, named) = super::script_name(path);
    if let Some(cfg) = v.get("yaml_cfg") {
        let yaml = beside(cfg, path, "yaml_cfg")?;
        let mut desc = load_model_with(&yaml, opt)?;
        desc.name = name;
        desc.notes.splice(0..0, named);
        desc.notes.insert(
            0,
            format!(
                "launch script: the model is its --yaml-cfg {}, read in place of its flags (as \
                 Megatron-LM reads it)",
                yaml.display()
            ),
        );
        return Ok(Read::Model(desc));
    }
    let mut notes = Vec::new();
    let (yaml, how) = match (v.get("config_file"), v.get("model_name")) {
        (Some(cfg), _) => (beside(cfg, path, "config_file")?, "--config-file"),
        (None, Some(name)) => (registered(name, path, opt, &mut notes)?, "--model-name"),
        // No field of a model at all (a data-preprocessing script); with some, the Megatron
        // reader names what is missing, or refuses a hybrid stack by its pattern.
        (None, None)
            if !v
                .as_object()
                .is_some_and(|m| m.keys().any(|k| is_model_field(k))) =>
        {
            return Err(ConfigError::field(
                path,
                "num_layers",
                "the script passes no --num-layers, and names no model file (--yaml-cfg, \
                 --config-file, --model-name)"
                    .to_owned(),
                "give the launch script that trains the model, or the model's YAML or config.json",
            ));
        }
        (None, None) => {
            let mut v = v;
            let mut said = said;
            said.extend(as_megatron_lm_reads(&mut v));
            said.extend(super::program::as_read(&mut v, &programs, path)?);
            return Ok(Read::Fields(v, said));
        }
    };
    let mut tree = yaml_tree(&yaml, opt, &mut notes)?;
    merge(&mut tree, &v);
    let mut desc = model_from_value(&tree, &yaml, &name, false)?;
    notes.insert(
        0,
        format!(
            "launch script: the model is its {how}'s {}; the script's layout, sequence length and \
             FP8 settings over it, its model flags where the YAML has none (as LoongForge \
             reads them)",
            yaml.display()
        ),
    );
    notes.extend(named);
    notes.extend(said);
    desc.notes = notes;
    Ok(Read::Model(desc))
}

/// Megatron-LM's reading of its own flags where a config's fields read otherwise: the key/value
/// groups (`--num-query-groups`) count only with `--group-query-attention`, else every head has
/// its own (its `core_transformer_config_from_args`). Says what it set.
fn as_megatron_lm_reads(v: &mut Value) -> Option<String> {
    let m = v.as_object_mut()?;
    if m.contains_key("num_query_groups") && !m.contains_key("group_query_attention") {
        m.insert("group_query_attention".into(), Value::Bool(false));
        return Some(
            "--num-query-groups without --group-query-attention: Megatron-LM trains every head \
             with its own key/value (MHA), as read here; add --group-query-attention for the \
             groups"
                .to_owned(),
        );
    }
    None
}

/// The script's fields that the engine reads, into the YAML's language model (`model.foundation`
/// of a VLM, else `model`, else the top): the run's settings always, a model field where the
/// YAML has none.
fn merge(tree: &mut Value, script: &Value) {
    let target = {
        let has = |t: &Value, k: &str| t.get(k).is_some_and(Value::is_object);
        if has(tree, "model") && has(&tree["model"], "foundation") {
            &mut tree["model"]["foundation"]
        } else if has(tree, "model") {
            &mut tree["model"]
        } else {
            tree
        }
    };
    let (Some(t), Some(s)) = (target.as_object_mut(), script.as_object()) else {
        return;
    };
    for (k, v) in s {
        if is_read(k) && (RUN_FIELDS.contains(&k.as_str()) || !t.contains_key(k)) {
            t.insert(k.clone(), v.clone());
        }
    }
}

/// The file a script's flag names: relative to the script's directory, else to the directory
/// fp8sel runs in (where a launch script is usually run from); never another script.
fn beside(value: &Value, script: &Path, field: &str) -> Result<PathBuf, ConfigError> {
    let flag = format!("--{}", field.replace('_', "-"));
    let name = value.as_str().unwrap_or_default();
    // A path into a checkout elsewhere (`${LOONGFORGE_PATH}/configs/models/x.yaml`, or the
    // script's default `/workspace/LoongForge/configs/...`): the same `configs/...` in the
    // checkout that holds the script.
    let in_checkout = name.rfind("configs/").and_then(|at| {
        let rel = Path::new(&name[at..]);
        script
            .canonicalize()
            .ok()?
            .ancestors()
            .map(|a| a.join(rel))
            .find(|p| p.is_file())
    });
    let given = Path::new(name);
    let near = script.parent().map(|d| d.join(given));
    let literal = !name.contains('$') && !name.is_empty();
    let found = [
        near.clone().filter(|_| literal),
        Some(given.to_path_buf()).filter(|_| literal),
        in_checkout,
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_file());
    if found.is_none() && !literal {
        return Err(ConfigError::field(
            script,
            field,
            format!("`{flag} {value}`: not a path fp8sel can evaluate"),
            "pass that YAML as the model, or write its path in the script",
        ));
    }
    match found {
        Some(p) if p.extension().is_some_and(|e| e == "sh" || e == "bash") => {
            Err(ConfigError::field(
                script,
                field,
                format!("`{flag} {name}` is a script"),
                "point it at the model's YAML",
            ))
        }
        Some(p) => Ok(p),
        None => Err(ConfigError::field(
            script,
            field,
            format!(
                "`{flag} {name}`: no such file beside the script ({}) or here",
                near.unwrap_or_default().display()
            ),
            "pass that YAML as the model, or run from the directory the script is run from",
        )),
    }
}

/// LoongForge's registered model `name`, in the checkout: the search path's parent (the
/// search path is LoongForge's `configs/`; or the search path, where it is the checkout), else
/// the nearest ancestor of the script that has `configs/models/`. Its registry
/// (`registry::REGISTRY_FILE`) names the YAML, as LoongForge resolves it; a checkout without
/// one (or of another form, noted) is searched by the name.
fn registered(
    name: &Value,
    script: &Path,
    opt: &LoadOptions,
    notes: &mut Vec<String>,
) -> Result<PathBuf, ConfigError> {
    let shown = name.as_str().unwrap_or_default();
    let checkout = match &opt.config_root {
        Some(r) if r.join("configs/models").is_dir() => Some(r.clone()),
        Some(r) => r.parent().map(Path::to_path_buf),
        None => script.canonicalize().ok().and_then(|s| {
            s.ancestors()
                .find(|a| a.join("configs/models").is_dir())
                .map(Path::to_path_buf)
        }),
    };
    if let Some(root) = &checkout {
        let file = root.join(registry::REGISTRY_FILE);
        if file.is_file() {
            let text = fp8_io::read_to_string_limited(&file, super::super::MAX_CONFIG_BYTES)?;
            match registry::entries(&text) {
                Some(entries) => return by_registry(&entries, shown, root, &file, script, notes),
                None => notes.push(format!(
                    "{}: no MODEL_CONFIG_REGISTRY dict of the known form; `--model-name {shown}` \
                     found by its file name instead",
                    file.display()
                )),
            }
        }
    }
    let roots: Vec<PathBuf> = match &opt.config_root {
        Some(r) => vec![r.join("models"), r.join("configs/models")],
        None => checkout
            .map(|c| c.join("configs/models"))
            .into_iter()
            .collect(),
    };
    by_file_name(shown, &roots, script)
}

/// `name` lower-cased in the registry's `entries` (of `file`, in the checkout `root`): the YAML
/// it names, which must be there.
fn by_registry(
    entries: &[registry::Entry],
    shown: &str,
    root: &Path,
    file: &Path,
    script: &Path,
    notes: &mut Vec<String>,
) -> Result<PathBuf, ConfigError> {
    let want = shown.to_lowercase();
    let Some(e) = entries.iter().find(|e| e.name == want) else {
        let near: Vec<&str> = entries
            .iter()
            .map(|e| e.name.as_str())
            .filter(|n| n.contains(&want) || want.contains(*n))
            .take(8)
            .collect();
        return Err(ConfigError::field(
            script,
            "model_name",
            format!(
                "`--model-name {shown}` is not registered in {} ({} names{})",
                file.display(),
                entries.len(),
                if near.is_empty() {
                    String::new()
                } else {
                    format!("; near it: {}", near.join(", "))
                }
            ),
            "use a registered name, register the model there as LoongForge needs, or pass its \
             YAML as the model",
        ));
    };
    let yaml = e.yaml(root);
    if !yaml.is_file() {
        return Err(ConfigError::field(
            script,
            "model_name",
            format!(
                "`--model-name {shown}` is registered in {} as {}, which is not there",
                file.display(),
                yaml.display()
            ),
            "fix the registry entry, or pass the model's YAML as the model",
        ));
    }
    notes.push(format!(
        "`--model-name {shown}`: {} by LoongForge's registry ({})",
        yaml.display(),
        file.display()
    ));
    Ok(yaml)
}

/// A registered name without a registry: `<name>.yaml` (lowercase, `-` and `.` as `_`) under
/// `roots` (the search path's `models/`, or the checkout's `configs/models/`), converters'
/// folders aside; exactly one, else refused naming where it looked.
fn by_file_name(shown: &str, roots: &[PathBuf], script: &Path) -> Result<PathBuf, ConfigError> {
    let stem = shown.to_lowercase().replace(['-', '.'], "_");
    let mut found = Vec::new();
    for r in roots.iter().filter(|r| r.is_dir()) {
        find(r, &|n| n == format!("{stem}.yaml"), 4, &mut found);
    }
    // A registered name with a size or variant the file names (`mimo` -> `mimo_7b.yaml`).
    if found.is_empty() {
        for r in roots.iter().filter(|r| r.is_dir()) {
            find(
                r,
                &|n| n.starts_with(&format!("{stem}_")) && n.ends_with(".yaml"),
                4,
                &mut found,
            );
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(ConfigError::field(
            script,
            "model_name",
            format!(
                "`--model-name {shown}`: {} file(s) named {stem}.yaml (or {stem}_*.yaml) under {}",
                found.len(),
                if roots.is_empty() {
                    "no configs/models/ above the script".to_owned()
                } else {
                    roots
                        .iter()
                        .map(|r| r.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            "pass that model's YAML as the model, or the search path (LoongForge's configs/) \
             to the command",
        )),
    }
}

/// Files whose name `file` accepts under `dir`, `depth` levels down at most, converters'
/// folders aside; a bounded walk (at most 4096 entries a folder).
fn find(dir: &Path, file: &dyn Fn(&str) -> bool, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten().take(4096) {
        let p = e.path();
        if p.is_dir() {
            if depth > 0 && p.file_name().is_some_and(|n| n != "ckpt_convert") {
                find(&p, file, depth - 1, out);
            }
        } else if p.file_name().is_some_and(|n| file(&n.to_string_lossy())) {
            out.push(p);
        }
    }
}
