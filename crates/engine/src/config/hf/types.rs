//! Which layout a HuggingFace `model_type` has: one table of the names this reader knows, and
//! the `architectures` classes that name them for a fork's own `model_type`.

use super::Family;
use crate::config::error::ConfigError;
use crate::config::fields::Fields;

/// What a `model_type` is: a language model of one family, or a VLM (its LLM under
/// `text_config` of that family, its ViT under `vision_config`); Qwen2-VL and Qwen2.5-VL keep
/// their LLM's fields at the top (`VlmTopText`), as their published configs do.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Text(Family),
    Vlm(Family),
    VlmTopText(Family),
    /// A VLM whose language model is any text family this reader knows, named by
    /// `text_config.model_type` (InternVL, LLaVA: the wrapper names no family of its own).
    VlmByText,
}

/// Every `model_type` this reader knows, with its kind (one table: the lookup and the error's
/// list of names both read it). Qwen3.5's `qwen3_5_text` is a dense language model with Gated
/// DeltaNet and gated attention like Qwen3-Next (`config::linear_attention` finds them).
const MODEL_TYPES: &[(&str, Kind)] = &[
    ("llama", Kind::Text(Family::Dense)),
    ("mistral", Kind::Text(Family::Dense)),
    ("ministral", Kind::Text(Family::Dense)),
    ("qwen2", Kind::Text(Family::Dense)),
    ("qwen3", Kind::Text(Family::Dense)),
    ("olmo2", Kind::Text(Family::Dense)),
    ("olmo3", Kind::Text(Family::Dense)),
    ("granite", Kind::Text(Family::Dense)),
    ("internlm2", Kind::Text(Family::Dense)),
    ("internlm3", Kind::Text(Family::Dense)),
    ("phi3", Kind::Text(Family::Dense)),
    ("glm", Kind::Text(Family::Dense)),
    ("glm4", Kind::Text(Family::Dense)),
    ("gemma", Kind::Text(Family::Dense)),
    ("gemma2", Kind::Text(Family::Dense)),
    ("gemma3_text", Kind::Text(Family::Dense)),
    ("smollm3", Kind::Text(Family::Dense)),
    ("seed_oss", Kind::Text(Family::Dense)),
    ("exaone4", Kind::Text(Family::Dense)),
    ("helium", Kind::Text(Family::Dense)),
    ("ernie4_5", Kind::Text(Family::Dense)),
    ("hunyuan_v1_dense", Kind::Text(Family::Dense)),
    ("baichuan", Kind::Text(Family::Dense)),
    ("minicpm", Kind::Text(Family::Dense)),
    ("glm4v_text", Kind::Text(Family::Dense)),
    ("qwen3_vl_text", Kind::Text(Family::Dense)),
    ("qwen3_5_text", Kind::Text(Family::Dense)),
    ("nemotron", Kind::Text(Family::Ungated)),
    ("starcoder2", Kind::Text(Family::Ungated)),
    ("gpt_neox", Kind::Text(Family::Ungated)),
    ("phi", Kind::Text(Family::Ungated)),
    ("gpt2", Kind::Text(Family::Gpt2)),
    ("chatglm", Kind::Text(Family::ChatGlm)),
    ("falcon", Kind::Text(Family::Falcon)),
    ("gpt_bigcode", Kind::Text(Family::Gpt2)),
    ("cohere", Kind::Text(Family::GatedLayerNorm)),
    ("cohere2", Kind::Text(Family::GatedLayerNorm)),
    ("stablelm", Kind::Text(Family::GatedLayerNorm)),
    ("olmo", Kind::Text(Family::GatedLayerNorm)),
    ("qwen2_moe", Kind::Text(Family::QwenMoe)),
    ("qwen3_moe", Kind::Text(Family::QwenMoe)),
    ("qwen3_5_moe_text", Kind::Text(Family::QwenMoe)),
    ("qwen3_vl_moe_text", Kind::Text(Family::QwenMoe)),
    ("qwen3_next", Kind::Text(Family::QwenNext)),
    ("mixtral", Kind::Text(Family::Mixtral)),
    ("granitemoe", Kind::Text(Family::Mixtral)),
    ("granitemoeshared", Kind::Text(Family::Mixtral)),
    ("phimoe", Kind::Text(Family::Mixtral)),
    ("gpt_oss", Kind::Text(Family::Mixtral)),
    ("minimax_m2", Kind::Text(Family::Mixtral)),
    ("olmoe", Kind::Text(Family::Olmoe)),
    ("deepseek", Kind::Text(Family::DeepSeekMoe)),
    ("glm4_moe", Kind::Text(Family::DeepSeekMoe)),
    ("dots1", Kind::Text(Family::DeepSeekMoe)),
    ("glm4v_moe_text", Kind::Text(Family::DeepSeekMoe)),
    ("ernie4_5_moe", Kind::Text(Family::Ernie)),
    ("deepseek_v2", Kind::Text(Family::DeepSeek)),
    ("deepseek_v3", Kind::Text(Family::DeepSeek)),
    ("deepseek_v32", Kind::Text(Family::DeepSeek)),
    ("llama4_text", Kind::Text(Family::Llama4)),
    ("llama4", Kind::Vlm(Family::Llama4)),
    ("qwen3_vl_moe", Kind::Vlm(Family::QwenMoe)),
    ("qwen3_5_moe", Kind::Vlm(Family::QwenMoe)),
    ("qwen3_vl", Kind::Vlm(Family::Dense)),
    ("qwen3_5", Kind::Vlm(Family::Dense)),
    ("gemma3", Kind::Vlm(Family::Dense)),
    ("mistral3", Kind::Vlm(Family::Dense)),
    ("qwen2_vl", Kind::VlmTopText(Family::Dense)),
    ("qwen2_5_vl", Kind::VlmTopText(Family::Dense)),
    ("internvl", Kind::VlmByText),
    ("llava", Kind::VlmByText),
    ("llava_next", Kind::VlmByText),
    ("llava_onevision", Kind::VlmByText),
    ("glm4v", Kind::VlmByText),
    ("glm4v_moe", Kind::VlmByText),
    ("paligemma", Kind::VlmByText),
    ("idefics3", Kind::VlmByText),
    ("smolvlm", Kind::VlmByText),
    ("aya_vision", Kind::VlmByText),
    ("internvl_chat", Kind::VlmByText),
];

fn kind_of(model_type: &str) -> Option<Kind> {
    MODEL_TYPES
        .iter()
        .find(|(t, _)| *t == model_type)
        .map(|(_, k)| *k)
}

/// The names of [`MODEL_TYPES`], for errors.
pub(super) fn supported() -> String {
    MODEL_TYPES
        .iter()
        .map(|(t, _)| *t)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `model_type` whose layout a HuggingFace `architectures` class has: how a config whose
/// own `model_type` is a fork's name (Kimi K2's `kimi_k2`, a `DeepseekV3ForCausalLM`) is read.
const ARCHITECTURES: &[(&str, &str)] = &[
    ("LlamaForCausalLM", "llama"),
    ("MistralForCausalLM", "mistral"),
    ("Qwen2ForCausalLM", "qwen2"),
    ("Qwen3ForCausalLM", "qwen3"),
    ("Olmo2ForCausalLM", "olmo2"),
    ("GraniteForCausalLM", "granite"),
    ("InternLM3ForCausalLM", "internlm3"),
    ("Phi3ForCausalLM", "phi3"),
    ("Glm4ForCausalLM", "glm4"),
    ("GlmForCausalLM", "glm"),
    ("MinistralForCausalLM", "ministral"),
    ("Olmo3ForCausalLM", "olmo3"),
    ("SmolLM3ForCausalLM", "smollm3"),
    ("SeedOssForCausalLM", "seed_oss"),
    ("Exaone4ForCausalLM", "exaone4"),
    ("HeliumForCausalLM", "helium"),
    ("Ernie4_5ForCausalLM", "ernie4_5"),
    ("HunYuanDenseV1ForCausalLM", "hunyuan_v1_dense"),
    ("Ernie4_5_MoeForCausalLM", "ernie4_5_moe"),
    ("InternLM2ForCausalLM", "internlm2"),
    ("BaichuanForCausalLM", "baichuan"),
    ("MiniCPMForCausalLM", "minicpm"),
    ("DeepseekForCausalLM", "deepseek"),
    ("StableLmForCausalLM", "stablelm"),
    ("OlmoForCausalLM", "olmo"),
    ("ChatGLMModel", "chatglm"),
    ("FalconForCausalLM", "falcon"),
    ("ChatGLMForConditionalGeneration", "chatglm"),
    ("NemotronForCausalLM", "nemotron"),
    ("Starcoder2ForCausalLM", "starcoder2"),
    ("GPTNeoXForCausalLM", "gpt_neox"),
    ("PhiForCausalLM", "phi"),
    ("GPT2LMHeadModel", "gpt2"),
    ("GPTBigCodeForCausalLM", "gpt_bigcode"),
    ("CohereForCausalLM", "cohere"),
    ("Cohere2ForCausalLM", "cohere2"),
    ("Dots1ForCausalLM", "dots1"),
    ("GraniteMoeSharedForCausalLM", "granitemoeshared"),
    ("GemmaForCausalLM", "gemma"),
    ("Gemma2ForCausalLM", "gemma2"),
    ("Gemma3ForCausalLM", "gemma3_text"),
    ("Qwen2MoeForCausalLM", "qwen2_moe"),
    ("Qwen3MoeForCausalLM", "qwen3_moe"),
    ("Qwen3NextForCausalLM", "qwen3_next"),
    ("MixtralForCausalLM", "mixtral"),
    ("GptOssForCausalLM", "gpt_oss"),
    ("GraniteMoeForCausalLM", "granitemoe"),
    ("PhiMoEForCausalLM", "phimoe"),
    ("OlmoeForCausalLM", "olmoe"),
    ("Glm4MoeForCausalLM", "glm4_moe"),
    ("DeepseekV2ForCausalLM", "deepseek_v2"),
    ("DeepseekV3ForCausalLM", "deepseek_v3"),
    ("DeepseekV32ForCausalLM", "deepseek_v32"),
    ("Qwen3VLForConditionalGeneration", "qwen3_vl"),
    ("Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe"),
    ("Gemma3ForConditionalGeneration", "gemma3"),
    ("Mistral3ForConditionalGeneration", "mistral3"),
    ("Llama4ForCausalLM", "llama4_text"),
    ("Llama4ForConditionalGeneration", "llama4"),
    ("Qwen2VLForConditionalGeneration", "qwen2_vl"),
    ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl"),
    ("MiniMaxM2ForCausalLM", "minimax_m2"),
    ("InternVLForConditionalGeneration", "internvl"),
    ("LlavaForConditionalGeneration", "llava"),
    ("LlavaNextForConditionalGeneration", "llava_next"),
    ("LlavaOnevisionForConditionalGeneration", "llava_onevision"),
    ("Glm4vForConditionalGeneration", "glm4v"),
    ("Glm4vMoeForConditionalGeneration", "glm4v_moe"),
    ("PaliGemmaForConditionalGeneration", "paligemma"),
    ("Idefics3ForConditionalGeneration", "idefics3"),
    ("SmolVLMForConditionalGeneration", "smolvlm"),
    ("AyaVisionForConditionalGeneration", "aya_vision"),
    ("InternVLChatModel", "internvl_chat"),
];

/// `model_type`'s kind, else the first `architectures` class that names one (with the note
/// that says so, for the plan's defaults), else the error that names both fields.
pub(super) fn kind(f: Fields<'_>, model_type: &str) -> Result<(Kind, Option<String>), ConfigError> {
    if let Some(k) = kind_of(model_type) {
        return Ok((k, None));
    }
    let classes: Vec<&str> = f
        .map
        .get("architectures")
        .and_then(|v| v.as_array())
        .map_or_else(Vec::new, |a| a.iter().filter_map(|c| c.as_str()).collect());
    let known = classes.iter().find_map(|c| {
        ARCHITECTURES
            .iter()
            .find(|(class, _)| class == c)
            .map(|(class, t)| (*class, *t))
    });
    match known {
        Some((class, t)) => Ok((
            kind_of(t).expect("every ARCHITECTURES entry names a known model_type"),
            Some(format!(
                "model_type `{model_type}` read as `{t}` by its architectures ({class})"
            )),
        )),
        None => Err(f.err(
            "model_type",
            format!(
                "unsupported model_type `{model_type}`{}",
                if classes.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (architectures {}: none of a known layout)",
                        classes.join(", ")
                    )
                }
            ),
            format!("use a Megatron YAML config, or one of {}", supported()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_architectures_class_names_a_model_type_this_reader_knows() {
        for (class, t) in ARCHITECTURES {
            assert!(kind_of(t).is_some(), "{class} -> {t}");
            assert!(
                supported().split(", ").any(|s| s == *t),
                "{t} not supported"
            );
        }
    }

    #[test]
    fn each_model_type_is_listed_once() {
        let mut seen = std::collections::BTreeSet::new();
        for (t, _) in MODEL_TYPES {
            assert!(seen.insert(*t), "{t} twice");
        }
    }
}
