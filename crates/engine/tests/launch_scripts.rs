//! Megatron-LM launch scripts (`.sh`) as model configs: any bytes, and any mix of the shell forms
//! the reader knows, give a model or an error, never a panic; a Megatron config written as the
//! flags of a script (literal, through assigned names, through arithmetic, quoted with its
//! value) reads as the same model as its YAML form.

#![allow(clippy::unwrap_used)]

use fp8_engine::config::model_from_value;
use fp8_engine::load_model;
use proptest::prelude::*;
use serde_json::{Value, json};

fn load_script(text: &str) -> Result<fp8_engine::ModelDesc, String> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.sh");
    std::fs::write(&p, text).unwrap();
    load_model(&p).map_err(|e| e.to_string())
}

/// A well-formed Megatron config: dense or MoE, random sizes.
fn arb_megatron() -> impl Strategy<Value = Value> {
    (
        1u64..9,
        prop::sample::select(vec![4u64, 8, 16]),
        prop::sample::select(vec![32u64, 64, 128]),
        1u64..5,
        prop::option::of((prop::sample::select(vec![8u64, 16, 64]), 1u64..4, 0u64..3)),
        any::<bool>(),
    )
        .prop_map(|(layers, heads, head_dim, mult, moe, gqa)| {
            let hidden = heads * head_dim;
            let mut v = json!({"num_layers": layers, "hidden_size": hidden,
                "ffn_hidden_size": hidden * mult, "num_attention_heads": heads,
                "kv_channels": head_dim, "swiglu": true, "normalization": "RMSNorm",
                "seq_length": 1024 * mult, "tensor_model_parallel_size": 1});
            if gqa {
                v["group_query_attention"] = json!(true);
                v["num_query_groups"] = json!(heads / 2);
            }
            if let Some((experts, topk, dense)) = moe {
                v["num_experts"] = json!(experts);
                v["moe_ffn_hidden_size"] = json!(hidden);
                v["moe_router_topk"] = json!(topk);
                let dense = dense.min(layers);
                v["moe_layer_freq"] = json!(format!("([0]*{dense}+[1]*{})", layers - dense));
            }
            v
        })
}

/// How one flag is written in the script.
#[derive(Debug, Clone, Copy)]
enum Form {
    Literal,
    Assigned,
    Arithmetic,
    Quoted,
    Equals,
}

fn script(v: &Value, forms: &[Form]) -> String {
    let mut pre = String::from("#!/bin/bash\nset -e  # the model\n");
    let mut args = String::from("ARGS=(\n");
    for (i, (k, val)) in v.as_object().unwrap().iter().enumerate() {
        let flag = format!("--{}", k.replace('_', "-"));
        if val == &Value::Bool(true) {
            args.push_str(&format!("    {flag}   # a switch\n"));
            continue;
        }
        let text = match val {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let var = format!("V{i}");
        let line = match (forms[i % forms.len()], val.as_u64()) {
            (Form::Assigned, _) => {
                pre.push_str(&format!("export {var}=\"{text}\"\n"));
                format!("{flag} ${{{var}}}")
            }
            (Form::Arithmetic, Some(n)) => {
                pre.push_str(&format!("{var}={}\n", n + 3));
                format!("{flag} $(( ${var} - 3 ))")
            }
            (Form::Quoted, _) => format!("\"{flag} {text}\""),
            (Form::Equals, _) => format!("{flag}='{text}'"),
            _ => format!("{flag} \"{text}\" \\"),
        };
        args.push_str(&format!("    {line}\n"));
    }
    format!("{pre}{args})\ntorchrun pretrain_gpt.py ${{ARGS[@]}} --data-path $(ls data)\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_config_written_as_launch_flags_reads_as_the_same_model(
        v in arb_megatron(),
        forms in prop::collection::vec(
            prop::sample::select(vec![Form::Literal, Form::Assigned, Form::Arithmetic,
                                      Form::Quoted, Form::Equals]), 1..6),
    ) {
        let want = model_from_value(&v, std::path::Path::new("m.yaml"), "m", false)
            .map_err(|e| TestCaseError::fail(format!("{v}: {e}")))?;
        let text = script(&v, &forms);
        let got = load_script(&text).map_err(|e| TestCaseError::fail(format!("{text}\n{e}")))?;
        prop_assert_eq!(got.components, want.components, "{}", text);
    }

    #[test]
    fn script_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.sh");
        std::fs::write(&p, &bytes).unwrap();
        let _ = load_model(&p);
    }

    #[test]
    fn shell_forms_in_any_order_never_panic(
        parts in prop::collection::vec(prop::sample::select(vec![
            "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
            "--moe-layer-freq", "--swiglu", "--yaml-cfg", "--config-file", "--model-name",
            "--seq-length", "--decoder-seq-length", "--language-model-type", "--img-h",
            "--patch-dim", "--disable-vision-class-token", "pretrain_vlm.py", "m.sh", "configs/", " ", "\n", "\\\n", "\\", "'", "\"", "#", "(", ")",
            ";", "|", "&", "$", "$(", "$((", "))", "${", "}", ":-", "-", "+", "*", "/", "%",
            "=", "N", "N=", "export", "4096", "32", "0", "-1", "9223372036854775807", "[1]*4",
            "é", "\t",
        ]), 0..80),
    ) {
        let text: String = parts.concat();
        let _ = load_script(&text);
    }
}

#[test]
fn a_real_scripts_model_and_layout_come_from_its_flags() {
    let m = load_model(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/models/launch/pretrain_moe_16l.sh"),
    )
    .unwrap();
    assert_eq!(m.name, "pretrain_moe_16l");
    let c = &m.components[0];
    let moe = c.arch.moe.unwrap();
    assert_eq!(
        (
            c.arch.num_layers,
            moe.num_experts,
            moe.dense_layers,
            c.arch.mla.is_some()
        ),
        (16, 64, 1, true)
    );
    assert_eq!(
        (c.recommended.tp, c.recommended.ep, c.recommended.seq_length),
        (Some(2), Some(4), Some(4096))
    );
    // The default a read field took is said (the environment is not read), and the FP8 flags
    // of the script's FP8 branch (the format turns FP8 on, the recipe names it), read although
    // that branch is off.
    assert_eq!(m.notes.len(), 3, "{:?}", m.notes);
    assert!(m.notes[0].contains("$SEQ_LEN"), "{:?}", m.notes);
    for (note, flag) in m.notes[1..].iter().zip(["--fp8-format", "--fp8-recipe"]) {
        assert!(note.contains(&format!("{flag} is passed inside")), "{note}");
    }
    assert_eq!(c.fp8.recipe.as_deref(), Some("blockwise"));
}

#[test]
fn a_scripts_yaml_cfg_is_the_model_as_megatron_reads_it() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let want = load_model(root.join("fixtures/models/forms/megatron_yaml_cfg.yaml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("fixtures/models/forms/megatron_yaml_cfg.yaml"),
        dir.path().join("model.yaml"),
    )
    .unwrap();
    let script = dir.path().join("train.sh");
    // The flags beside it are not read: Megatron-LM reads the YAML in their place.
    std::fs::write(
        &script,
        "torchrun pretrain_gpt.py --num-layers 99 --yaml-cfg model.yaml\n",
    )
    .unwrap();
    let m = load_model(&script).unwrap();
    assert_eq!(m.components, want.components);
    assert_eq!(m.name, "train");
    assert!(m.notes[0].contains("--yaml-cfg"), "{:?}", m.notes);
    // A path the script computes, or one that is not there, is refused naming the flag.
    for (flag, problem) in [
        ("$CFG", "not a path"),
        ("absent.yaml", "no such file"),
        ("train.sh", "is a script"),
    ] {
        std::fs::write(
            &script,
            format!("torchrun pretrain_gpt.py --yaml-cfg {flag}\n"),
        )
        .unwrap();
        let e = load_model(&script).unwrap_err().to_string();
        assert!(e.contains("yaml_cfg") && e.contains(problem), "{flag}: {e}");
    }
}

#[test]
fn a_loongforge_script_that_names_its_model_points_at_the_yaml() {
    let e =
        load_script("ARGS=(--model-name deepseek-v3 --seq-length 32768 --micro-batch-size 1)\n")
            .unwrap_err();
    assert!(
        e.contains("model_name") && e.contains("deepseek-v3") && e.contains("YAML"),
        "{e}"
    );
}

#[test]
fn a_loongforge_script_reads_its_registered_models_yaml_with_its_run_over_it() {
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/loongforge");
    let m = load_model(root.join("examples/tiny_llm/pretrain_tiny_moe.sh")).unwrap();
    let yaml = load_model(root.join("configs/models/tiny_llm/tiny_moe.yaml")).unwrap();
    let c = &m.components[0];
    // The model is the YAML's (its 6 layers, not the script's 99); the run is the script's, its
    // sequence length its argument's default, said.
    assert_eq!(c.arch, yaml.components[0].arch);
    assert_eq!(
        (
            c.recommended.seq_length,
            c.recommended.micro_batch_size,
            c.recommended.tp,
            c.recommended.ep
        ),
        (Some(2048), Some(2), Some(2), Some(4))
    );
    let said = m.notes.join("\n");
    assert!(
        said.contains("tiny_moe.yaml") && said.contains("$1"),
        "{said}"
    );
    assert!(said.contains("by LoongForge's registry"), "{said}");
    // --config-file through a variable the script does not set, into the checkout that holds it.
    let dir = tempfile::tempdir().unwrap();
    let copy = |rel: &str| {
        let to = dir.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join(rel), &to).unwrap();
    };
    copy("configs/models/tiny_llm/tiny_moe.yaml");
    let script = dir.path().join("examples/run.sh");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    let write = |text: &str| std::fs::write(&script, text).unwrap();
    write(
        "torchrun train.py --config-file \"${LOONGFORGE_PATH}/configs/models/tiny_llm/tiny_moe.yaml\" --seq-length 4096\n",
    );
    let m = load_model(&script).unwrap();
    assert_eq!(m.components[0].arch, yaml.components[0].arch);
    assert_eq!(m.components[0].recommended.seq_length, Some(4096));
    // A registered name by its variant (`tiny` -> `tiny_moe.yaml`); none, or several, refused.
    write("torchrun train.py --model-name tiny\n");
    assert_eq!(
        load_model(&script).unwrap().components[0].arch,
        yaml.components[0].arch
    );
    write("torchrun train.py --model-name absent-model\n");
    let e = load_model(&script).unwrap_err().to_string();
    assert!(
        e.contains("model_name") && e.contains("0 file(s) named absent_model.yaml"),
        "{e}"
    );
    // A script with no model at all says what it lacks.
    write("python tools/preprocess_data.py --input data.json --workers 8\n");
    let e = load_model(&script).unwrap_err().to_string();
    assert!(e.contains("passes no --num-layers"), "{e}");
}

#[test]
fn a_loongforge_model_name_is_what_the_checkouts_registry_names() {
    // A copy of the fixture checkout: its registry, one model's YAML, a script in examples/.
    let root =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/loongforge");
    let dir = tempfile::tempdir().unwrap();
    for rel in [
        "configs/models/tiny_llm/tiny_moe.yaml",
        "loongforge/utils/config_map.py",
    ] {
        let to = dir.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join(rel), &to).unwrap();
    }
    let yaml = load_model(root.join("configs/models/tiny_llm/tiny_moe.yaml")).unwrap();
    let script = dir.path().join("examples/run.sh");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    let run = |name: &str| {
        std::fs::write(&script, format!("torchrun train.py --model-name {name}\n")).unwrap();
        load_model(&script)
    };
    // A name that is no file's name, in any case, as LoongForge lower-cases it.
    let m = run("Tiny-MoE-2.0-A1B").unwrap();
    assert_eq!(m.components[0].arch, yaml.components[0].arch);
    // Not registered: refused, naming the registry and the names near it (not guessed from
    // the files: `tiny` would be tiny_moe.yaml by its name alone).
    let e = run("tiny").unwrap_err().to_string();
    assert!(
        e.contains("not registered in") && e.contains("config_map.py") && e.contains("tiny-moe"),
        "{e}"
    );
    // Registered to a file that is not there.
    let e = run("tiny-gone").unwrap_err().to_string();
    assert!(e.contains("not_there.yaml, which is not there"), "{e}");
    // A registry of another form: found by the file name, and said.
    let reg = dir.path().join("loongforge/utils/config_map.py");
    std::fs::write(&reg, "MODEL_CONFIG_REGISTRY = load_registry()\n").unwrap();
    let m = run("tiny-moe").unwrap();
    assert_eq!(m.components[0].arch, yaml.components[0].arch);
    assert!(
        m.notes
            .iter()
            .any(|n| n.contains("found by its file name instead")),
        "{:?}",
        m.notes
    );
}

#[test]
fn query_groups_count_only_with_group_query_attention_as_megatron_lm_reads_them() {
    let base = "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 1024 \
                --num-attention-heads 16 --ffn-hidden-size 4096 --swiglu --seq-length 2048 \
                --num-query-groups 4";
    let m = load_script(&format!("{base}\n")).unwrap();
    assert_eq!(m.components[0].arch.num_query_groups, 16);
    assert!(
        m.notes
            .iter()
            .any(|n| n.contains("without --group-query-attention")),
        "{:?}",
        m.notes
    );
    let m = load_script(&format!("{base} --group-query-attention\n")).unwrap();
    assert_eq!(m.components[0].arch.num_query_groups, 4);
}

#[test]
fn a_flag_string_with_a_name_not_evaluated_keeps_its_other_flags() {
    // Megatron-LM's Mamba example: `options="... --save ${CHECKPOINT_DIR} --data-path ${DATA_PATH}"`
    // with DATA_PATH=$1: bash expands the rest; so does the reader, the unread flags' values
    // left unevaluated.
    let text = "DATA_PATH=$1\nNL=4\noptions=\" \\\n  --num-layers ${NL} --hidden-size 1024 \\\n  \
                --num-attention-heads 16 --data-path ${DATA_PATH} --seq-length 2048 \\\n  \
                --save ${CKPT}\"\ntorchrun pretrain_gpt.py ${options}\n";
    let m = load_script(text).unwrap();
    let a = &m.components[0].arch;
    assert_eq!((a.num_layers, a.hidden_size), (4, 1024));
    assert_eq!(m.components[0].recommended.seq_length, Some(2048));
    // A read field's value that needs it is refused, naming the flag.
    let e = load_script(&text.replace("--num-layers ${NL}", "--num-layers ${LAYERS}")).unwrap_err();
    assert!(
        e.contains("num_layers") && e.contains("does not evaluate"),
        "{e}"
    );
}

#[test]
fn megatron_multimodal_scripts_plan_the_language_model_at_its_own_sequence() {
    let llava = "OPTIONS=\"--num-layers 2 --hidden-size 4096 --num-attention-heads 32 \
                 --seq-length 576 --decoder-seq-length 1024 --micro-batch-size 2 \
                 --language-model-type=mistral_7b --disable-vision-class-token\"\n\
                 torchrun examples/multimodal/train.py ${OPTIONS}\n";
    let m = load_script(llava).unwrap();
    assert_eq!(m.components.len(), 1, "the vision encoder is not planned");
    let tokens = m
        .token_config(fp8_engine::Role::Llm, &Default::default(), 1)
        .unwrap();
    assert_eq!((tokens.seq_length, tokens.micro_batch_size), (1024, 2));
    assert!(
        m.notes.iter().any(|n| n.contains("vision encoder (clip)")),
        "{:?}",
        m.notes
    );
    let e = load_script(&llava.replace("--decoder-seq-length 1024", "")).unwrap_err();
    assert!(e.contains("decoder_seq_length"), "{e}");
}
