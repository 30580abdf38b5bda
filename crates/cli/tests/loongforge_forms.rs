//! The reference's config forms, as its users keep them (fixtures of our own in
//! `fixtures/models/loongforge/configs/models/`, laid out as LoongForge's `configs/models/` is):
//! `../../models/` defaults found through the `configs` search path with no flags, resolvers of
//! its own kept as written on fields the engine never reads (and an error on one it reads),
//! diagnostics on stderr and in `--json`, a HuggingFace checkout named after its directory (and
//! read from it), and nesting bounded before the parser walks it.

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, fp8sel, out};

const VL: &str = "fixtures/models/loongforge/configs/models/tiny_vl/tiny_vl.yaml";

#[test]
fn a_vlm_reaches_its_components_through_the_configs_search_path() {
    let o = fp8sel(&["explain", "--model", VL, "--seq-length", "2048"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let table = out(&o);
    // Both components, each planned on its own (the LLM's MoE from the `act`/`moe_freq` config).
    assert!(
        table.contains("decoder.layers.mlp.experts.linear_fc1"),
        "{table}"
    );
    assert!(
        table.contains("image_encoder.layers.mlp.linear_fc1"),
        "{table}"
    );
    assert!(
        table.contains("tokens (vit): 1024 (fp8_dynamic_num_tokens=1024)"),
        "{table}"
    );
    // The unevaluated resolvers are named once, on stderr, and nowhere in the table.
    let e = err(&o);
    assert_eq!(
        e.matches("resolvers fp8sel does not evaluate").count(),
        1,
        "{e}"
    );
    assert!(e.contains("${loss_func:...}, ${position_func:...}"), "{e}");
    assert!(
        !table.contains("note:") && !table.contains("warning:"),
        "{table}"
    );
    // --json carries them as `warnings`.
    let o = fp8sel(&["explain", "--model", VL, "--seq-length", "2048", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    let w: Vec<&str> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert!(
        w.iter()
            .any(|x| x.starts_with("note:") && x.contains("loss_func")),
        "{w:?}"
    );
    let comps: Vec<&str> = v["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["component"].as_str().unwrap())
        .collect();
    assert!(comps.contains(&"llm") && comps.contains(&"vit"));
}

#[test]
fn gen_policy_reads_it_too_and_says_so_on_stderr_and_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let o = fp8sel(&[
        "gen-policy",
        "--model",
        VL,
        "--backend",
        "model",
        "--tp",
        "1",
        "--out",
        d,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert!(
        v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("loss_func")),
        "{v}"
    );
    assert!(
        err(&o).contains("note: ") && err(&o).contains("position_func"),
        "{}",
        err(&o)
    );
    assert!(
        dir.path().join("tiny_vl.llm.json").is_file()
            && dir.path().join("tiny_vl.vit.json").is_file()
    );
}

#[test]
fn an_explicit_config_root_still_wins() {
    let own = "fixtures/models/loongforge/configs/models/tiny_vl";
    let o = fp8sel(&[
        "explain",
        "--model",
        VL,
        "--config-root",
        own,
        "--seq-length",
        "2048",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("outside the config root"), "{}", err(&o));
}

#[test]
fn an_unknown_resolver_on_a_read_field_is_an_error_naming_it() {
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/loongforge/configs/models/tiny_vl/tiny_vl_read_resolver.yaml",
        "--seq-length",
        "2048",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = err(&o);
    assert!(
        e.contains("field `model.foundation.hidden_size`") && e.contains("resolver `width`"),
        "{e}"
    );
    assert!(
        e.contains("fix: replace the interpolation by its value"),
        "{e}"
    );
}

#[test]
fn a_defaults_entry_above_the_search_path_is_refused_with_the_path_looked_at() {
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/loongforge/configs/models/outside_ref/outside.yaml",
        "--seq-length",
        "2048",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = err(&o);
    assert!(e.contains("fixtures/models/parts/qwen3_vit.yaml"), "{e}");
    assert!(
        e.contains("outside the config root") && e.contains("loongforge/configs"),
        "{e}"
    );
}

#[test]
fn a_huggingface_checkout_is_named_after_its_directory() {
    let cfg = "fixtures/models/hf/Tiny-Llama-1B/config.json";
    let o = fp8sel(&["explain", "--model", cfg, "--seq-length", "1024", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["model"], "Tiny-Llama-1B");
    let dir = tempfile::tempdir().unwrap();
    let o = fp8sel(&[
        "gen-policy",
        "--model",
        cfg,
        "--backend",
        "model",
        "--tp",
        "1",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(dir.path().join("Tiny-Llama-1B.json").is_file());
    assert!(!dir.path().join("config.json").exists());
    // The checkout's directory is read as its config.json, as `from_pretrained` reads it; a
    // directory without one names the file it looked for.
    let o = fp8sel(&[
        "explain",
        "--model",
        "fixtures/models/hf/Tiny-Llama-1B",
        "--seq-length",
        "1024",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let v: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    assert_eq!(v["model"], "Tiny-Llama-1B");
    let o = fp8sel(&["explain", "--model", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("config.json"), "{}", err(&o));
}

#[test]
fn deep_nesting_is_refused_before_the_parser_walks_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("nested.yaml");
    let depth = 100_000;
    std::fs::write(
        &f,
        format!("a: {}{}\n", "[".repeat(depth), "]".repeat(depth)),
    )
    .unwrap();
    let o = fp8sel(&[
        "explain",
        "--model",
        f.to_str().unwrap(),
        "--seq-length",
        "64",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("brackets nest more than 64 levels deep at line 1"),
        "{}",
        err(&o)
    );
    // Interpolations and quoted brackets are not nesting.
    let ok = dir.path().join("ok.yaml");
    std::fs::write(
        &ok,
        "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nname: \"[[[[\"\nffn_hidden_size: ${hidden_size}\n",
    )
    .unwrap();
    let o = fp8sel(&[
        "explain",
        "--model",
        ok.to_str().unwrap(),
        "--seq-length",
        "64",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
}
