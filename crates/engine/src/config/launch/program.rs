//! The Megatron-LM program a launch script runs, where its model is not `pretrain_gpt.py`'s.
//!
//! Multimodal training (LLaVA): `examples/multimodal/train.py` (it requires
//! `--language-model-type`) and `pretrain_vlm.py`. There `--seq-length` is the vision encoder's
//! sequence (Megatron overwrites it with the image's embeddings); the language model trains at
//! `--decoder-seq-length` (train.py), or at the text's `--dataloader-seq-length` (else
//! `--seq-length`) plus one image's embeddings (pretrain_vlm.py, a CLIP encoder). The language
//! model is planned at that sequence. Not planned: the vision encoder and its projection.
//! `te-precision-config`'s matchers hold the language model's GPTModel paths (its catch-all runs
//! the rest BF16); the hook would decide them by the language model's rules, so the notes point
//! at the native config.
//!
//! Refused, naming the program: MIMO training (`examples/mimo/train.py`: its model is its
//! `--model-provider`'s Python config), T5 (`pretrain_t5.py`: an encoder and a decoder with
//! cross-attention), Mamba and hybrid stacks (`pretrain_mamba.py`, `pretrain_hybrid.py`: Mamba
//! layers unless a pattern says otherwise). Read as GPTModel layers, each plan would be wrong.

use serde_json::Value;

use std::path::Path;

use super::super::error::ConfigError;
use super::super::fields::Fields;

/// Megatron-LM's defaults for the image (`--img-h`, `--img-w`, `--patch-dim`).
const IMG_H: u64 = 224;
const IMG_W: u64 = 224;
const PATCH_DIM: u64 = 16;

/// Which multimodal program a script runs, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    /// `examples/multimodal/train.py`: the language model at `--decoder-seq-length`.
    Train,
    /// `pretrain_vlm.py`: the text's sequence plus one image's embeddings.
    PretrainVlm,
}

/// The multimodal program a script runs, if any; the programs whose model is no GPTModel of the
/// script's flags refused (the module's list).
fn program(
    fields: &serde_json::Map<String, Value>,
    programs: &[String],
    script: &Path,
) -> Result<Option<Program>, ConfigError> {
    let named = |file: &str| {
        programs
            .iter()
            .any(|p| p == file || p.ends_with(&format!("/{file}")))
    };
    let stack = |program: &str, field: &str, what: &str, fix: &str| {
        ConfigError::field(
            script,
            field,
            format!(
                "the script runs {program}, which trains {what}, not planned: read as GPTModel \
                 layers its plan would be wrong"
            ),
            fix,
        )
    };
    if named("pretrain_t5.py") || fields.contains_key("encoder_num_layers") {
        return Err(stack(
            "pretrain_t5.py",
            "encoder_num_layers",
            "an encoder-decoder (T5: an encoder stack and a decoder stack with cross-attention)",
            "plan a decoder-only model (pretrain_gpt.py's); encoder-decoder models are not \
             supported",
        ));
    }
    if let Some(p) = ["pretrain_mamba.py", "pretrain_hybrid.py"]
        .into_iter()
        .find(|p| named(p))
    {
        return Err(stack(
            p,
            "hybrid_layer_pattern",
            "a Mamba or hybrid stack (Mamba layers unless its pattern says otherwise)",
            "plan a transformer model (attention and MLP in every layer); hybrid stacks are not \
             supported",
        ));
    }
    // Megatron's inference tools take `--model-provider gpt|hybrid|mamba` too: those are the
    // script's flags' model.
    let mimo_provider = fields
        .get("model_provider")
        .is_some_and(|p| !matches!(p.as_str(), Some("gpt" | "hybrid" | "mamba")));
    if named("mimo/train.py") || mimo_provider {
        let provider = fields.get("model_provider").map_or_else(
            || "its default".to_owned(),
            |p| format!("`{}`", p.as_str().unwrap_or("?")),
        );
        return Err(ConfigError::field(
            script,
            "model_provider",
            format!(
                "Megatron-LM's MIMO training (examples/mimo/train.py) builds its model from the \
                 model provider {provider}'s Python config, not from the script's flags"
            ),
            "write the language model as a Megatron YAML or a config.json (its layers, widths, \
             sequence and layout) and give that",
        ));
    }
    Ok(if named("pretrain_vlm.py") {
        Some(Program::PretrainVlm)
    } else if named("multimodal/train.py") || fields.contains_key("language_model_type") {
        Some(Program::Train)
    } else {
        None
    })
}

/// Sets `seq_length` to the language model's sequence where the script trains Megatron-LM's
/// multimodal model; says how, and what is not planned. Nothing for any other script.
pub(super) fn as_read(
    v: &mut Value,
    programs: &[String],
    script: &Path,
) -> Result<Vec<String>, ConfigError> {
    let Some(m) = v.as_object_mut() else {
        return Ok(Vec::new());
    };
    let Some(prog) = program(m, programs, script)? else {
        return Ok(Vec::new());
    };
    let f = Fields {
        file: script,
        prefix: "",
        map: m,
    };
    let ((seq, how), vision) = match prog {
        Program::Train => (
            train_sequence(f)?,
            f.opt_str(&["vision_model_type"])?
                .unwrap_or("clip")
                .to_owned(),
        ),
        Program::PretrainVlm => (vlm_sequence(f)?, "clip".to_owned()),
    };
    m.insert("seq_length".to_owned(), Value::from(seq));
    m.remove("encoder_seq_length");
    Ok(vec![
        format!("launch script: {how}"),
        format!(
            "launch script: the vision encoder ({vision}) and its projection are not planned: \
             `fp8sel te-precision-config` holds the language model's GPTModel paths and runs \
             them BF16 by its catch-all (the hook would decide them by the language model's \
             rules: launch this model with the native config)"
        ),
    ])
}

/// A positive integer field, if given.
fn positive(f: Fields<'_>, key: &'static str) -> Result<Option<u64>, ConfigError> {
    match f.opt_u64(&[key]) {
        Ok(Some(n)) if n > 0 => Ok(Some(n)),
        Ok(None) => Ok(None),
        _ => Err(f.err(
            key,
            format!("`{}` is not a positive integer", f.map[key]),
            "write the value as Megatron-LM takes it",
        )),
    }
}

/// `examples/multimodal/train.py`: `--decoder-seq-length`, and how it was read.
fn train_sequence(f: Fields<'_>) -> Result<(u64, String), ConfigError> {
    let seq = positive(f, "decoder_seq_length")?.ok_or_else(|| {
        f.err(
            "decoder_seq_length",
            "Megatron-LM's multimodal model (examples/multimodal) runs its language model at \
             --decoder-seq-length (its --seq-length is the vision encoder's), and the script \
             passes none",
            "pass --decoder-seq-length, the language model's sequence, as the trainer requires",
        )
    })?;
    let lm = f.opt_str(&["language_model_type"])?.unwrap_or("(none)");
    let vision_seq = positive(f, "seq_length")?.map_or(String::new(), |s| {
        format!(" (--seq-length {s} is the vision encoder's)")
    });
    Ok((
        seq,
        format!(
            "Megatron-LM's multimodal model (examples/multimodal, --language-model-type {lm}): \
             the language model planned at --decoder-seq-length {seq}{vision_seq}; its widths as \
             the script's flags give them (examples/multimodal/config.py sets the MLP by the \
             language model type: check them with `fp8sel explain`)"
        ),
    ))
}

/// `pretrain_vlm.py`: the text's sequence plus one image's embeddings, and how it was read.
fn vlm_sequence(f: Fields<'_>) -> Result<(u64, String), ConfigError> {
    let text = match positive(f, "dataloader_seq_length")? {
        Some(t) => t,
        None => positive(f, "seq_length")?.ok_or_else(|| {
            f.err(
                "seq_length",
                "pretrain_vlm.py trains the language model at the text's sequence plus the \
                 image's embeddings, and the script passes no --seq-length",
                "pass --seq-length (or --dataloader-seq-length), the text's sequence",
            )
        })?,
    };
    let patch = positive(f, "patch_dim")?.unwrap_or(PATCH_DIM);
    let h = positive(f, "img_h")?.unwrap_or(IMG_H);
    let w = positive(f, "img_w")?.unwrap_or(IMG_W);
    let class = u64::from(f.opt_bool(&["disable_vision_class_token"])? != Some(true));
    let too_many = || {
        f.err(
            "img_h",
            format!("{text} tokens of text and a {h}x{w} image are too many"),
            "write the run's image and sequence sizes",
        )
    };
    let image = (h / patch)
        .checked_mul(w / patch)
        .and_then(|n| n.checked_add(class))
        .ok_or_else(too_many)?;
    let seq = text.checked_add(image).ok_or_else(too_many)?;
    Ok((
        seq,
        format!(
            "pretrain_vlm.py: the language model planned at {seq} tokens, the text's {text} plus \
             one image's {image} embeddings ({h}x{w} in {patch}-pixel patches{}), before \
             Megatron pads it for TP and CP",
            if class == 1 { ", a class token" } else { "" }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::fields;
    use super::*;

    fn read(text: &str) -> Result<(Value, Vec<String>), ConfigError> {
        let s = fields(text, Path::new("run.sh"))?;
        let mut v = s.fields;
        let notes = as_read(&mut v, &s.programs, Path::new("run.sh"))?;
        Ok((v, notes))
    }

    #[test]
    fn train_py_plans_the_language_model_at_the_decoder_sequence() {
        let (v, notes) = read(
            "OPTIONS=\"--num-layers 32 --seq-length 576 --decoder-seq-length 1024 \
             --language-model-type=mistral_7b --img-h 336\"\n\
             torchrun --nproc_per_node 8 examples/multimodal/train.py ${OPTIONS}\n",
        )
        .unwrap();
        assert_eq!(v["seq_length"], 1024);
        let said = notes.join("\n");
        assert!(
            said.contains("--decoder-seq-length 1024")
                && said.contains("576 is the vision encoder's")
                && said.contains("vision encoder (clip)"),
            "{said}"
        );
    }

    #[test]
    fn train_py_without_a_decoder_sequence_is_refused_naming_the_flag() {
        let e = read("python examples/multimodal/train.py --num-layers 2 --seq-length 576")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("decoder_seq_length") && e.contains("pass --decoder-seq-length"),
            "{e}"
        );
        let e = read("python x.py --language-model-type qwen2.5_7B --decoder-seq-length 4k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a positive integer"), "{e}");
    }

    #[test]
    fn pretrain_vlm_adds_one_images_embeddings_to_the_text() {
        let (v, _) = read(
            "torchrun pretrain_vlm.py --num-layers 2 --seq-length 1024 --img-h 336 --img-w 336 \
             --patch-dim 14",
        )
        .unwrap();
        assert_eq!(v["seq_length"], 1024 + 24 * 24 + 1);
        let (v, notes) = read(
            "python ./pretrain_vlm.py --seq-length 576 --dataloader-seq-length 2048 \
             --disable-vision-class-token",
        )
        .unwrap();
        assert_eq!(v["seq_length"], 2048 + 14 * 14);
        assert!(notes[0].contains("one image's 196 embeddings"), "{notes:?}");
        let e = read("pretrain_vlm.py --seq-length 9 --img-h 9999999999999 --img-w 9999999999999 --patch-dim 1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("too many"), "{e}");
    }

    #[test]
    fn a_mimo_script_is_refused_naming_its_model_provider() {
        let e = read(
            "torchrun examples/mimo/train.py --model-provider llava_vlm --num-layers 32 \
             --hidden-size 4096 --encoder-seq-length 4096",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("field `model_provider`") && e.contains("`llava_vlm`'s Python config"),
            "{e}"
        );
    }

    #[test]
    fn t5_and_mamba_programs_are_refused_naming_what_they_train() {
        let t5 = read("torchrun pretrain_t5.py --encoder-num-layers 12 --hidden-size 768")
            .unwrap_err()
            .to_string();
        assert!(
            t5.contains("field `encoder_num_layers`") && t5.contains("encoder-decoder"),
            "{t5}"
        );
        let mamba = read("torchrun ../../pretrain_mamba.py --num-layers 56 --hidden-size 4096")
            .unwrap_err()
            .to_string();
        assert!(
            mamba.contains("pretrain_mamba.py") && mamba.contains("hybrid stacks are not"),
            "{mamba}"
        );
    }

    #[test]
    fn a_gpt_script_is_not_multimodal() {
        let (v, notes) =
            read("torchrun pretrain_gpt.py --seq-length 4096 --decoder-seq-length 9").unwrap();
        assert_eq!((v["seq_length"].as_u64(), notes.len()), (Some(4096), 0));
    }
}
