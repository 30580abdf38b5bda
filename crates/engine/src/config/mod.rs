//! Model config readers: Megatron/LoongForge YAML (with Hydra defaults, VLM form), Megatron-LM
//! and LoongForge launch scripts, and HuggingFace `config.json`, into one [`ModelDesc`].

mod error;
mod fields;
mod hf;
pub(crate) mod hydra;
mod interp;
mod launch;
mod linear_attention;
mod megatron;

use std::path::Path;

use serde_json::Value;

pub use error::ConfigError;

/// Largest config file we read. Real configs are a few KiB; the limit holds while reading, so
/// `/dev/zero` or a runaway file costs at most this much memory.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// How configs are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// The directory Hydra `defaults` may reach (the search path, tried after the naming file's
    /// own directory), and that `/`-rooted entries resolve against. `None`: the nearest ancestor
    /// of the config named `configs` (LoongForge's search path), else the checkout's root (the
    /// nearest ancestor holding `.git`), else the config's own directory.
    pub config_root: Option<std::path::PathBuf>,
}

impl LoadOptions {
    /// Options with `config_root` set.
    pub fn with_config_root(root: impl Into<std::path::PathBuf>) -> Self {
        LoadOptions {
            config_root: Some(root.into()),
        }
    }
}

use crate::model::{ModelDesc, Role};
use fields::Fields;

/// Reads a model config. `.json` files are HuggingFace configs (a `config.json` is named after
/// its checkout's directory; a directory is read as its `config.json`); `.sh` files are
/// Megatron-LM launch scripts, read by the flags they pass (`config::launch`); anything else is read as Megatron/LoongForge YAML with its
/// `defaults` resolved relative to the file and then the search path, never reaching outside it
/// (see [`LoadOptions`]).
pub fn load_model(path: impl AsRef<Path>) -> Result<ModelDesc, ConfigError> {
    load_model_with(path, &LoadOptions::default())
}

/// [`load_model`] with options.
pub fn load_model_with(
    path: impl AsRef<Path>,
    opt: &LoadOptions,
) -> Result<ModelDesc, ConfigError> {
    // A HuggingFace checkout's directory is its config.json, as `from_pretrained` reads it.
    let in_dir;
    let path = match path.as_ref() {
        d if d.is_dir() => {
            in_dir = d.join("config.json");
            in_dir.as_path()
        }
        p => p,
    };
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let is_script = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("sh") || e.eq_ignore_ascii_case("bash"));
    let mut notes = Vec::new();
    let root = if is_script {
        match launch::load(path, opt)? {
            launch::Read::Fields(v, said) => {
                notes.extend(said);
                v
            }
            launch::Read::Model(desc) => return Ok(desc),
        }
    } else if is_json {
        let text = fp8_io::read_to_string_limited(path, MAX_CONFIG_BYTES)?;
        serde_json::from_str::<Value>(&text).map_err(|e| ConfigError::Syntax {
            file: path.into(),
            format: "JSON",
            message: e.to_string(),
        })?
    } else {
        yaml_tree(path, opt, &mut notes)?
    };
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_owned());
    let name = if is_json && stem == "config" {
        hf_name(path, &root)
    } else if is_script {
        let (name, said) = launch::script_name(path);
        notes.extend(said);
        name
    } else {
        stem
    };
    let mut desc = model_from_value(&root, path, &name, is_json)?;
    desc.notes = notes;
    Ok(desc)
}

/// A Megatron/LoongForge YAML's tree: Hydra defaults and interpolations resolved (those on
/// fields never read kept as written, with a note).
fn yaml_tree(
    path: &Path,
    opt: &LoadOptions,
    notes: &mut Vec<String>,
) -> Result<Value, ConfigError> {
    let mut v = hydra::load(path, opt.config_root.as_deref())?;
    interp::resolve_all(&mut v, path, &|k| megatron::is_read(k))?;
    let kept = interp::unevaluated_resolvers(&v);
    if !kept.is_empty() {
        notes.push(format!(
            "{}: resolvers fp8sel does not evaluate ({}) stand on fields it does not read; kept as written",
            path.display(),
            kept.iter().map(|r| format!("${{{r}:...}}")).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(v)
}

/// A HuggingFace checkout's model name (its `config.json` is named `config`): the checkout's
/// directory name, else the config's `_name_or_path` (its last component), else `model_type`.
fn hf_name(path: &Path, root: &Value) -> String {
    let from_dir = folder_name(path);
    let field = |k: &str| {
        root.get(k)
            .and_then(Value::as_str)
            .map(|s| {
                s.trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or(s)
                    .to_owned()
            })
            .filter(|s| !s.is_empty())
    };
    from_dir
        .filter(|n| !n.is_empty() && n != "/")
        .or_else(|| field("_name_or_path"))
        .or_else(|| field("model_type"))
        .unwrap_or_else(|| "model".to_owned())
}

/// The name of the folder that holds `path` (the working directory's for a bare file name).
pub(crate) fn folder_name(path: &Path) -> Option<String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    dir.canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// Builds a model description from an already-parsed config tree.
pub fn model_from_value(
    root: &Value,
    file: &Path,
    default_name: &str,
    hf: bool,
) -> Result<ModelDesc, ConfigError> {
    let map = root.as_object().ok_or_else(|| ConfigError::Field {
        file: file.into(),
        field: "(top level)".into(),
        problem: "expected a mapping".into(),
        fix: "a model config is a mapping of fields".into(),
    })?;
    let top = Fields {
        file,
        prefix: "",
        map,
    };
    let name = top
        .opt_str(&["name", "model_name"])?
        .map_or_else(|| default_name.to_owned(), str::to_owned);
    let flat;
    let components = if hf || top.has("model_type") && top.has("architectures") {
        hf::components(top)?
    } else if !top.has("num_layers") && top.map.get("language_model").is_some_and(Value::is_object)
    {
        // Megatron-LM's --yaml-cfg: `language_model:` and `model_parallel:` sections beside
        // top-level run settings (seq_length, micro_batch_size, ...).
        flat = flatten_yaml_cfg(map);
        vec![megatron::component(
            Fields {
                file,
                prefix: "",
                map: &flat,
            },
            Role::Llm,
        )?]
    } else if let Some(model) = top.sub("model", "model")? {
        let foundation = model.sub("foundation", "model.foundation")?;
        let encoder = model.sub("image_encoder", "model.image_encoder")?;
        if foundation.is_none() && encoder.is_none() {
            vec![megatron::component(model, Role::Llm)?]
        } else {
            let mut cs = Vec::new();
            if let Some(f) = foundation {
                cs.push(megatron::component(f, Role::Llm)?);
            }
            if let Some(e) = encoder {
                cs.push(megatron::component(e, Role::Vit)?);
            }
            cs
        }
    } else {
        vec![megatron::component(top, Role::Llm)?]
    };
    for c in &components {
        check_dims(c, file)?;
    }
    Ok(ModelDesc {
        name,
        components,
        notes: Vec::new(),
    })
}

/// Megatron-LM's nested `--yaml-cfg` as one mapping: the top level's scalar settings, then the
/// `language_model` and `model_parallel` sections (which win), as Megatron's yaml loader does.
fn flatten_yaml_cfg(map: &serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    let mut flat: serde_json::Map<String, Value> = map
        .iter()
        .filter(|(_, v)| !v.is_object())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for section in ["language_model", "model_parallel"] {
        if let Some(Value::Object(m)) = map.get(section) {
            flat.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    flat
}

/// DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5), as either reader finds it: MLA is planned,
/// the indexer is not.
pub(crate) const DSA_WARNING: &str = "attention variant dsa: the MLA projections are planned; \
     the lightning indexer's small projections are not in the inventory (in the trainer, a \
     module without a rule runs BF16)";

/// Largest dimension we accept (16M). Real models are far below it; the bound keeps every
/// product the inventory forms (two dimensions at most) inside 64 bits.
pub const MAX_DIM: u64 = 1 << 24;

fn check_dims(c: &crate::model::Component, file: &Path) -> Result<(), ConfigError> {
    let a = &c.arch;
    let mut dims = vec![
        ("num_layers", a.num_layers),
        ("hidden_size", a.hidden_size),
        ("ffn_hidden_size", a.ffn_hidden_size),
        ("num_attention_heads", a.num_attention_heads),
        ("num_query_groups", a.num_query_groups),
        ("kv_channels", a.head_dim),
    ];
    if let Some(m) = a.mla {
        dims.extend([
            ("q_lora_rank", m.q_lora_rank.unwrap_or(0)),
            ("kv_lora_rank", m.kv_lora_rank),
            ("qk_head_dim", m.qk_head_dim),
            ("qk_pos_emb_head_dim", m.qk_pos_emb_head_dim),
            ("v_head_dim", m.v_head_dim),
        ]);
    }
    if let Some(l) = a.linear_attention {
        dims.extend([
            ("linear_key_head_dim", l.key_head_dim),
            ("linear_value_head_dim", l.value_head_dim),
            ("linear_num_key_heads", l.num_key_heads),
            ("linear_num_value_heads", l.num_value_heads),
        ]);
    }
    if let Some(m) = a.moe {
        dims.extend([
            ("num_moe_experts", m.num_experts),
            ("moe_ffn_hidden_size", m.moe_ffn_hidden_size),
            ("moe_router_topk", m.router_topk),
            (
                "moe_shared_expert_intermediate_size",
                m.shared_expert_ffn_hidden_size.unwrap_or(0),
            ),
        ]);
    }
    if let Some(m) = a.moe
        && m.router_topk > m.num_experts
    {
        return Err(ConfigError::Field {
            file: file.into(),
            field: format!("{}.moe_router_topk", c.role),
            problem: format!(
                "{} is more than the {} experts",
                m.router_topk, m.num_experts
            ),
            fix: "a token is routed to at most num_experts experts; check both values".into(),
        });
    }
    match dims.into_iter().find(|(_, v)| *v > MAX_DIM) {
        Some((field, v)) => Err(ConfigError::Field {
            file: file.into(),
            field: format!("{}.{field}", c.role),
            problem: format!("{v} is larger than any model ({MAX_DIM} at most)"),
            fix: "check the value; dimensions are counts of features, heads or layers".into(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hf_config_is_named_after_its_checkout_then_its_fields() {
        let v: Value =
            serde_json::json!({"_name_or_path": "org/Some-Model-7B/", "model_type": "llama"});
        // No such directory: the name comes from `_name_or_path`'s last component.
        assert_eq!(
            hf_name(Path::new("/nonexistent-dir-for-test/config.json"), &v),
            "Some-Model-7B"
        );
        let v: Value = serde_json::json!({"model_type": "llama"});
        assert_eq!(
            hf_name(Path::new("/nonexistent-dir-for-test/config.json"), &v),
            "llama"
        );
        assert_eq!(
            hf_name(
                Path::new("/nonexistent-dir-for-test/config.json"),
                &Value::Null
            ),
            "model"
        );
        let dir = std::env::temp_dir();
        let name = dir.canonicalize().unwrap_or(dir.clone());
        let expect = name.file_name().map(|n| n.to_string_lossy().into_owned());
        assert_eq!(Some(hf_name(&dir.join("config.json"), &v)), expect);
    }
}
