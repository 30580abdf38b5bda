//! The launch-script reader on scripts as users write them.

use super::*;
use serde_json::json;

fn read(text: &str) -> Result<(Value, Vec<String>), ConfigError> {
    fields(text, Path::new("train.sh")).map(|s| (s.fields, s.notes))
}

#[test]
fn the_flags_of_a_launch_script_are_its_fields() {
    let (v, notes) = read(
        r#"#!/bin/bash
# Llama-3-8B
TP=2
export SEQ=${SEQ_LEN:-4096}
GPT_MODEL_ARGS=(
--num-layers 32   # the depth
--hidden-size=4096
--ffn-hidden-size "14336" \
--num-attention-heads 32 --group-query-attention --num-query-groups 8
--swiglu
--normalization RMSNorm
--moe-layer-freq '([0]*3+[1]*29)'
)
torchrun $DISTRIBUTED_ARGS pretrain_gpt.py ${GPT_MODEL_ARGS[@]} \
--tensor-model-parallel-size $TP --seq-length ${SEQ} --data-path $(cat paths.txt) --use-mcore-models
"#,
    )
    .unwrap();
    let want = serde_json::json!({"num_layers": 32, "hidden_size": 4096,
        "ffn_hidden_size": 14336, "num_attention_heads": 32, "group_query_attention": true,
        "num_query_groups": 8, "swiglu": true, "normalization": "RMSNorm",
        "moe_layer_freq": "([0]*3+[1]*29)", "tensor_model_parallel_size": 2,
        "seq_length": 4096, "data_path": "$(cat paths.txt)", "use_mcore_models": true});
    assert_eq!(v, want);
    assert_eq!(notes.len(), 1);
    assert!(
        notes[0].contains("$SEQ_LEN") && notes[0].contains("4096"),
        "{notes:?}"
    );
}

#[test]
fn what_a_read_field_takes_inside_a_branch_is_said_and_other_branches_are_not() {
    let (v, notes) = read(
        "if [[ $SIZE == 8b ]]; then\n  L=32\nelse\n  L=80\nfi\nX=1\n\
         if true; then ARGS+=(--fp8-recipe blockwise --log-interval 1); fi\n\
         --num-layers $L --hidden-size 4096",
    )
    .unwrap();
    assert_eq!(
        (&v["num_layers"], &v["fp8_recipe"]),
        (&json!(80), &json!("blockwise"))
    );
    let said = notes.join("\n");
    assert!(
        said.contains("L is assigned inside") && said.contains("--fp8-recipe is passed inside"),
        "{said}"
    );
    assert!(
        !said.contains("log-interval") && !said.contains("X is"),
        "{said}"
    );
    assert_eq!(notes.len(), 2, "{notes:?}");
}

#[test]
fn a_field_the_engine_reads_with_a_value_it_cannot_evaluate_is_refused_naming_the_flag() {
    for script in [
        "--num-layers $NUM_LAYERS",
        "--hidden-size $(python -c 'print(4096)')",
        "--seq-length ${SEQ:-$DEFAULT}",
        "X=$1\n--num-attention-heads $X",
    ] {
        let e = read(script).unwrap_err().to_string();
        assert!(
            e.contains("train.sh") && e.contains("does not evaluate"),
            "{script}: {e}"
        );
    }
}

#[test]
fn single_quotes_keep_dollars_and_a_switch_never_takes_the_next_word() {
    let (v, _) = read("--swiglu '$x' --normalization '$y'").unwrap();
    assert_eq!(v["swiglu"], true);
    assert_eq!(v["normalization"], "$y");
    let (v, _) = read("A=1\nA=2\n--num-layers $A --num-layers=${A}0").unwrap();
    assert_eq!(v["num_layers"], 20);
}

#[test]
fn arithmetic_and_flags_quoted_with_their_values_read_as_bash_runs_them() {
    // `**` is not among the operators: refused, naming the flag.
    let e = read("N=16\n--hidden-size $(( (N + 2) * 2 ** 1 ))").unwrap_err();
    assert!(e.to_string().contains("hidden_size"), "{e}");
    let (v, _) = read(
        "N=16\nM=$(($N-1))\nARGS=(\"--seq-length 2048\" \"--fp8-format hybrid\")\n\
         --moe-layer-freq \"([0]+[1]*$M)\" --hidden-size $(( (N + 2) * -${N} / 4 % 7 ))",
    )
    .unwrap();
    assert_eq!(v["moe_layer_freq"], "([0]+[1]*15)");
    assert_eq!(v["seq_length"], 2048);
    assert_eq!(v["fp8_format"], "hybrid");
    assert_eq!(v["hidden_size"], (18 * -16 / 4) % 7);
    for bad in [
        "$((1/0))",
        "$((9223372036854775807+1))",
        "$((((((1))))\")",
        "$((x))",
    ] {
        assert!(read(&format!("--num-layers {bad}")).is_err(), "{bad}");
    }
    let deep = format!("--num-layers $(({}1{}))", "(".repeat(200), ")".repeat(200));
    assert!(read(&deep).is_err());
}

#[test]
fn flags_held_in_a_string_are_read_as_bash_splits_it_where_it_is_used() {
    let (v, notes) = read(
        "L=${LAYERS:-27}\nMODEL_ARGS=\" \\\n    --num-layers $L \\\n    --moe-layer-freq ([0]+[1]*26) \\\n    --quick-geglu \\\n    --hidden-size 2048\"\ntorchrun pretrain_gpt.py ${MODEL_ARGS}\n",
    )
    .unwrap();
    assert_eq!(v["num_layers"], 27);
    assert_eq!(v["moe_layer_freq"], "([0]+[1]*26)");
    assert_eq!(
        (&v["quick_geglu"], &v["hidden_size"]),
        (&json!(true), &json!(2048))
    );
    // The default the string took reaches the fields read from it.
    assert!(notes.iter().any(|n| n.contains("$LAYERS")), "{notes:?}");
}

#[test]
fn a_default_may_name_other_variables() {
    let (v, notes) = read(
        "ROOT=${ROOT:-\"/workspace/LF\"}\nCFG=${CFG:-${ROOT}/configs/m.yaml}\nN=${N:-${1:-4}}\n--config-file $CFG --num-layers $N",
    )
    .unwrap();
    assert_eq!(v["config_file"], "/workspace/LF/configs/m.yaml");
    assert_eq!(v["num_layers"], 4);
    assert!(notes.iter().any(|n| n.contains("$1")), "{notes:?}");
}
