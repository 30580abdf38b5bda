//! `fp8sel gen-policy` with the step model where a layout's whole steps cannot run (the stand-in
//! worker's `FAKE_STEP_NO_FIT`: out of memory at every count at the TPs it names).

#![allow(clippy::unwrap_used)]

mod common;

use common::err;

#[test]
fn a_layout_whose_whole_steps_do_not_fit_is_named_and_gets_no_rules() {
    // Out of memory at every whole step, at every layout: refused, naming why and the fix.
    let dir = tempfile::tempdir().unwrap();
    let o = common::gen_with_stand_ins(
        dir.path(),
        &["--backend", "step", "--tp", "1"],
        &[("FAKE_STEP_NO_FIT", "1")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("no whole step ran at any count (8 failed)")
            && e.contains("do not fit this GPU")
            && e.contains("fix: a layout of more ranks"),
        "{e}"
    );
    assert!(!dir.path().join("llama3_2_1b.json").exists());
    // One layout of two does not fit: the other's rules are written, the first is named.
    let dir = tempfile::tempdir().unwrap();
    let o = common::gen_with_stand_ins(
        dir.path(),
        &["--backend", "step", "--tp", "1,2", "--execution", "eager"],
        &[("FAKE_STEP_NO_FIT", "1")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("tp1 ep1 etp1 cp1: not modelled, so no rules for this layout"),
        "{e}"
    );
    let p: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("llama3_2_1b.json")).unwrap(),
    )
    .unwrap();
    let tps: Vec<u64> = p["rules"]["layernorm_column"]["fc1"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tp"].as_u64().unwrap())
        .collect();
    assert_eq!(tps, [2], "{p}");
}
