//! Model config readers: Megatron/LoongForge YAML (with Hydra defaults, VLM form) and
//! HuggingFace `config.json`, into one [`ModelDesc`].

mod error;
mod fields;
mod hf;
pub(crate) mod hydra;
mod megatron;

use std::path::Path;

use serde_json::Value;

pub use error::ConfigError;

use crate::model::{ModelDesc, Role};
use fields::Fields;

/// Reads a model config. `.json` files are HuggingFace configs; anything else is read as
/// Megatron/LoongForge YAML with its `defaults` resolved relative to the file.
pub fn load_model(path: impl AsRef<Path>) -> Result<ModelDesc, ConfigError> {
    let path = path.as_ref();
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let root = if is_json {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            file: path.into(),
            source,
        })?;
        serde_json::from_str::<Value>(&text).map_err(|e| ConfigError::Syntax {
            file: path.into(),
            format: "JSON",
            message: e.to_string(),
        })?
    } else {
        hydra::load(path)?
    };
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_owned());
    model_from_value(&root, path, &stem, is_json)
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
    let components = if hf || top.has("model_type") && top.has("architectures") {
        hf::components(top)?
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
    Ok(ModelDesc { name, components })
}
