//! `gen-policy` and `bench` measure the recipe the model config trains with (its `fp8_recipe`,
//! a launch script's `--fp8-recipe`) unless `--recipe` says otherwise: a policy made for
//! another recipe than the trainer's would have `check` warn at once.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, root};

use std::path::Path;
use std::process::{Command, Output};

/// `fixtures/models/llama3_2_1b.yaml` training with `recipe`, as `name` in `dir`.
fn config(dir: &Path, name: &str, recipe: &str) -> String {
    let text = std::fs::read_to_string(root().join("fixtures/models/llama3_2_1b.yaml")).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("{text}\nfp8_recipe: {recipe}\n")).unwrap();
    path.to_str().unwrap().to_owned()
}

fn generate(dir: &Path, models: &[&str], extra: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fp8sel"));
    c.current_dir(root())
        .args(["gen-policy", "--tp", "1", "--backend", "model"]);
    for m in models {
        c.args(["--model", m]);
    }
    c.arg("--out").arg(dir.join("out")).args(extra);
    c.output().unwrap()
}

fn recipe_of(policy: &Path) -> String {
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(policy).unwrap()).unwrap();
    p["provenance"]["recipe"][0].as_str().unwrap().to_owned()
}

#[test]
fn gen_policy_measures_the_recipe_the_config_trains_with_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let m = config(dir.path(), "tw.yaml", "tensorwise");
    let o = generate(dir.path(), &[&m], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("recipe tensorwise") && err(&o).contains("the one the config trains with"),
        "{}",
        err(&o)
    );
    assert!(recipe_of(&dir.path().join("out/llama3_2_1b.json")).starts_with("tensorwise"));
    // --recipe says otherwise.
    let o = generate(dir.path(), &[&m], &["--recipe", "blockwise"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        !err(&o).contains("the one the config trains with"),
        "{}",
        err(&o)
    );
    assert!(recipe_of(&dir.path().join("out/llama3_2_1b.json")).starts_with("blockwise"));
}

#[test]
fn configs_that_train_with_different_recipes_are_refused_and_one_it_cannot_read_named() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        config(dir.path(), "a.yaml", "tensorwise"),
        config(dir.path(), "b.yaml", "blockwise"),
    );
    let o = generate(dir.path(), &[&a, &b], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("different FP8 recipes") && err(&o).contains("fix:"),
        "{}",
        err(&o)
    );
    assert!(!dir.path().join("out").exists());
    // One --recipe for both measures both.
    let o = generate(dir.path(), &[&a, &b], &["--recipe", "tensorwise"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let bad = config(dir.path(), "c.yaml", "fp7");
    let o = generate(dir.path(), &[&bad], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("c.yaml") && err(&o).contains("fp7"),
        "{}",
        err(&o)
    );
}

#[test]
fn bench_measures_the_configs_recipe_too() {
    let dir = tempfile::tempdir().unwrap();
    let m = config(dir.path(), "tw.yaml", "tensorwise");
    let report = dir.path().join("r.json");
    let bench = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
            .current_dir(root())
            .args(["bench", "--backend", "model", "--quiet", "--model", &m])
            .args(["--shape-sweep", "1024x1", "--report"])
            .arg(&report)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        r["provenance"]["recipe"].as_str().unwrap().to_owned()
    };
    assert!(bench(&[]).starts_with("tensorwise"));
    assert!(bench(&["--recipe", "blockwise"]).starts_with("blockwise"));
}

#[test]
fn a_recipe_error_says_the_recipe_came_from_the_config() {
    // MXFP8 is Blackwell's: the H200 cost model cannot estimate it, and the error says the
    // config chose it.
    let dir = tempfile::tempdir().unwrap();
    let m = config(dir.path(), "mx.yaml", "mxfp8");
    let o = generate(dir.path(), &[&m], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("Blackwell")
            && err(&o).contains("the recipe the model config trains with"),
        "{}",
        err(&o)
    );
}

/// FP8 on without a recipe (a launch script's `--fp8-format hybrid` alone, as Megatron-LM's
/// `examples/llama/train_llama3_8b_h100_fp8.sh` trains, or a YAML's `fp8: e4m3`) trains
/// Megatron's default, delayed scaling: that is what gen-policy measures, and explain says why.
/// FP8 off (`fp8: null`, no flag) names no recipe: the default, blockwise.
#[test]
fn fp8_on_without_a_recipe_is_megatrons_default_delayed() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = std::fs::read_to_string(root().join("fixtures/models/llama3_2_1b.yaml")).unwrap();
    for (name, extra, want) in [
        ("on.yaml", "fp8: e4m3\n", "delayed"),
        ("on_fmt.yaml", "fp8_format: hybrid\n", "delayed"),
        ("off.yaml", "fp8: null\n", "blockwise"),
        ("none.yaml", "fp8: none\n", "blockwise"),
        (
            "given.yaml",
            "fp8: e4m3\nfp8_recipe: tensorwise\n",
            "tensorwise",
        ),
    ] {
        let m = dir.path().join(name);
        std::fs::write(&m, format!("{yaml}\n{extra}")).unwrap();
        let o = generate(dir.path(), &[m.to_str().unwrap()], &[]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", err(&o));
        let by_default = want == "delayed" && !extra.contains("fp8_recipe");
        assert_eq!(
            err(&o).contains("FP8 on without fp8_recipe, Megatron's default"),
            by_default,
            "{name}: {}",
            err(&o)
        );
        let policy = dir.path().join("out/llama3_2_1b.json");
        assert!(recipe_of(&policy).starts_with(want), "{name}");
        let explain = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
            .current_dir(root())
            .args(["explain", "--model", m.to_str().unwrap(), "--policy"])
            .arg(&policy)
            .args(["--seq-length", "4096"])
            .output()
            .unwrap();
        let said = err(&explain).contains("delayed (Megatron's default)");
        assert_eq!(said, by_default, "{name}: {}", err(&explain));
    }
    // A launch script: --fp8-format without --fp8-recipe.
    let script = dir.path().join("train.sh");
    std::fs::write(
        &script,
        "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 2048 --ffn-hidden-size 8192 \
         --num-attention-heads 32 --group-query-attention --num-query-groups 8 --swiglu \
         --normalization RMSNorm --seq-length 4096 --micro-batch-size 1 --bf16 --fp8-format hybrid\n",
    )
    .unwrap();
    let o = generate(dir.path(), &[script.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(recipe_of(&dir.path().join("out/train.json")).starts_with("delayed"));
}

/// The config's FP8 format (`fp8`, a launch script's `--fp8-format`) and delayed scaling's amax
/// options (`fp8_amax_history_len`, `fp8_amax_compute_algo`; Megatron's defaults, 1 and
/// most_recent, where it trains delayed without them) are what gen-policy measures, unless a
/// flag says otherwise; blockwise is measured E4M3 with a note; a value Megatron does not take is
/// refused naming the file and the field.
#[test]
fn the_configs_format_and_amax_options_are_measured() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = std::fs::read_to_string(root().join("fixtures/models/llama3_2_1b.yaml")).unwrap();
    let write = |name: &str, extra: &str| {
        let m = dir.path().join(name);
        std::fs::write(&m, format!("{yaml}\n{extra}")).unwrap();
        m.to_str().unwrap().to_owned()
    };
    for (name, extra, flags, want) in [
        (
            "tw.yaml",
            "fp8: hybrid\nfp8_recipe: tensorwise\n",
            &[][..],
            "tensorwise fp8_format=hybrid",
        ),
        (
            "tw_flag.yaml",
            "fp8: hybrid\nfp8_recipe: tensorwise\n",
            &["--fp8-format", "e4m3"][..],
            "tensorwise fp8_format=e4m3",
        ),
        (
            "dl_default.yaml",
            "fp8: e4m3\n",
            &[][..],
            "delayed fp8_format=e4m3 amax_history_len=1 amax_compute_algo=most_recent",
        ),
        (
            "dl_given.yaml",
            "fp8: hybrid\nfp8_recipe: delayed\nfp8_amax_history_len: 1024\nfp8_amax_compute_algo: max\n",
            &[][..],
            "delayed fp8_format=hybrid amax_history_len=1024 amax_compute_algo=max",
        ),
        (
            "dl_flag.yaml",
            "fp8: hybrid\nfp8_recipe: delayed\n",
            &["--amax-history-len", "16"][..],
            "delayed fp8_format=hybrid amax_history_len=16 amax_compute_algo=most_recent",
        ),
        (
            "bw.yaml",
            "fp8: hybrid\nfp8_recipe: blockwise\n",
            &[][..],
            "blockwise",
        ),
    ] {
        let m = write(name, extra);
        let o = generate(dir.path(), &[&m], flags);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", err(&o));
        assert_eq!(
            recipe_of(&dir.path().join("out/llama3_2_1b.json")),
            want,
            "{name}"
        );
        assert!(
            err(&o).contains(&format!("recipe {want}")),
            "{name}: {}",
            err(&o)
        );
        let noted = err(&o).contains("fp8 hybrid: blockwise is measured in E4M3");
        assert_eq!(noted, name == "bw.yaml", "{name}: {}", err(&o));
    }
    // A value Megatron does not take: the file and the field.
    for (extra, field) in [
        ("fp8: e5m2\nfp8_recipe: tensorwise\n", "fp8"),
        (
            "fp8: hybrid\nfp8_amax_history_len: 99999\n",
            "fp8_amax_history_len",
        ),
        (
            "fp8: hybrid\nfp8_amax_compute_algo: mean\n",
            "fp8_amax_compute_algo",
        ),
    ] {
        let m = write("bad.yaml", extra);
        let o = generate(dir.path(), &[&m], &[]);
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", err(&o));
        assert!(
            err(&o).contains("bad.yaml") && err(&o).contains(&format!("{field}:")),
            "{extra}: {}",
            err(&o)
        );
    }
    // Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh: its flags, in a launch script.
    let script = dir.path().join("train.sh");
    std::fs::write(
        &script,
        "torchrun pretrain_gpt.py --num-layers 4 --hidden-size 2048 --ffn-hidden-size 8192 \
         --num-attention-heads 32 --group-query-attention --num-query-groups 8 --swiglu \
         --normalization RMSNorm --seq-length 4096 --micro-batch-size 1 --bf16 --fp8-format hybrid \
         --fp8-amax-history-len 1024 --fp8-amax-compute-algo max\n",
    )
    .unwrap();
    let o = generate(dir.path(), &[script.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        recipe_of(&dir.path().join("out/train.json")),
        "delayed fp8_format=hybrid amax_history_len=1024 amax_compute_algo=max"
    );
}

/// te-precision-config writes the format the trainer runs: the config's hybrid for tensorwise,
/// and for blockwise too (TE 2.20.2 trains Float8BlockScaling in HYBRID, as Megatron builds it from
/// --fp8-format hybrid: on an H100, docs/device-logs/h100/config_options/), with a note that the
/// policy was measured in E4M3.
#[test]
fn te_precision_config_writes_the_configs_format() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = std::fs::read_to_string(root().join("fixtures/models/llama3_2_1b.yaml")).unwrap();
    for (recipe, written, noted) in [
        ("tensorwise", "hybrid", false),
        ("blockwise", "hybrid", true),
    ] {
        let m = dir.path().join(format!("{recipe}.yaml"));
        std::fs::write(&m, format!("{yaml}\nfp8: hybrid\nfp8_recipe: {recipe}\n")).unwrap();
        let policy = match recipe {
            "tensorwise" => "policies/tensorwise/qwen2_5_72b.json",
            _ => "policies/llama3_2_1b.json",
        };
        let o = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
            .current_dir(root())
            .args([
                "te-precision-config",
                "--model",
                m.to_str().unwrap(),
                "--policy",
                policy,
            ])
            .args(["--seq-length", "65536", "--allow-missing"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{recipe}: {}", err(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("fp8_format: {written}")),
            "{recipe}: {out}"
        );
        assert_eq!(
            err(&o).contains("fp8_format hybrid kept, as the trainer runs it")
                && err(&o).contains("measured in E4M3"),
            noted,
            "{recipe}: {}",
            err(&o)
        );
    }
}
