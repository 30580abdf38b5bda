//! The per-module recipe choice from per-module timings, on synthetic outcomes: the faster
//! recipe wins, ties go to the base, a recipe over the error bound never runs, and the refusals.

use std::path::Path;

use fp8_policy::{DenseKind, Execution, ModuleKind, Recipe, RecipeFrom, RuleKey};

use crate::module_recipes::{RecipeMerge, choose_steps, module_recipe_plan};
use crate::numerics::{NumericsBound, parse_numerics};
use crate::{GroupKey, Merged, ParKey, RuleOutcome};

use Recipe::{Blockwise, Mxfp8, Tensorwise};

const COUNTS: [u64; 4] = [1024, 2048, 4096, 8192];

fn key(ub: &str) -> GroupKey {
    GroupKey {
        component: "llm".into(),
        kind: ModuleKind::Row,
        ub_name: Some(ub.into()),
        par: ParKey::Tp(1),
    }
}

/// A key's outcome: its speedups at [`COUNTS`] and the rule a 1.02 bar gives them.
fn outcome(ub: &str, speeds: [f64; 4]) -> RuleOutcome {
    let mut start = COUNTS.len();
    while start > 0 && speeds[start - 1] >= 1.02 {
        start -= 1;
    }
    RuleOutcome {
        key: key(ub),
        rule: (start < COUNTS.len()).then(|| (COUNTS[start], speeds[start])),
        counts: COUNTS.to_vec(),
        speeds: speeds.to_vec(),
    }
}

fn from(t: u64, r: Option<Recipe>) -> RecipeFrom {
    RecipeFrom { from: t, recipe: r }
}

#[test]
fn the_faster_recipe_wins_each_count_and_ties_go_to_the_base() {
    let block = outcome("fc2", [0.8, 0.95, 1.10, 1.30]);
    // Pays a count earlier and is 10% faster: it runs from 2048 on.
    let tensor = outcome("fc2", [0.9, 1.05, 1.21, 1.43]);
    let steps = choose_steps(
        Blockwise,
        &[(Blockwise, &block), (Tensorwise, &tensor)],
        0.02,
    );
    assert_eq!(steps, vec![from(2048, Some(Tensorwise))]);
    // 1% faster: a tie once the base pays, so the base from 4096.
    let close = outcome("fc2", [0.9, 1.05, 1.11, 1.31]);
    let steps = choose_steps(
        Blockwise,
        &[(Blockwise, &block), (Tensorwise, &close)],
        0.02,
    );
    assert_eq!(
        steps,
        vec![from(2048, Some(Tensorwise)), from(4096, Some(Blockwise))]
    );
    // Neither pays: no step, the key stays BF16.
    let slow = outcome("fc2", [0.8, 0.9, 0.95, 1.0]);
    assert!(choose_steps(Blockwise, &[(Blockwise, &slow), (Tensorwise, &slow)], 0.02).is_empty());
}

fn merged(outcomes: Vec<RuleOutcome>) -> Merged {
    Merged {
        policies: Default::default(),
        outcomes,
        warnings: Vec::new(),
    }
}

fn bound(recipe: &str, errors: &[(&str, f64)]) -> NumericsBound {
    let modules: Vec<String> = errors
        .iter()
        .map(|(ub, e)| {
            format!(
                r#"{{"component": "llm", "name": "decoder.layers.x.{ub}", "key": {{"kind": "row", "ub_name": "{ub}", "tp": 1}},
                 "operands": {{"input": {{"rel_rms": {e}}}}}}}"#
            )
        })
        .collect();
    let text = format!(
        r#"{{"format": "fp8sel-numerics", "version": 1, "recipe": "{recipe}", "modules": [{}]}}"#,
        modules.join(",")
    );
    NumericsBound {
        report: parse_numerics(&text, Path::new("n.json")).unwrap(),
        max_quant_error: 0.05,
    }
}

#[test]
fn a_plan_gives_each_key_the_fastest_recipe_within_the_bound() {
    let base = merged(vec![
        outcome("fc2", [0.8, 0.95, 1.10, 1.30]),
        outcome("proj", [0.8, 0.95, 1.10, 1.30]),
    ]);
    let mx = merged(vec![
        outcome("fc2", [0.9, 1.05, 1.21, 1.43]),
        outcome("proj", [0.9, 1.05, 1.21, 1.43]),
    ]);
    let merges = |e| {
        vec![
            RecipeMerge {
                recipe: Blockwise,
                execution: e,
                merged: &base,
            },
            RecipeMerge {
                recipe: Mxfp8,
                execution: e,
                merged: &mx,
            },
        ]
    };
    let mut all = merges(Execution::Eager);
    all.extend(merges(Execution::Graphed));
    // proj's error under mxfp8 is over the bound: proj runs the base only.
    let bounds = [
        bound("blockwise", &[("fc2", 0.03), ("proj", 0.03)]),
        bound("mxfp8", &[("fc2", 0.03), ("proj", 0.09)]),
    ];
    let plan = module_recipe_plan(Blockwise, &all, "llm", &bounds, 0.02).unwrap();
    plan.validate().unwrap();
    let rk = |ub: &str| RuleKey::Dense {
        kind: DenseKind::Row,
        ub_name: ub.into(),
        tp: 1,
    };
    let fc2 = plan.key(&rk("fc2")).unwrap();
    assert_eq!(fc2.at(2048, Execution::Eager), Some(Mxfp8));
    assert_eq!(fc2.at(100_000, Execution::Graphed), Some(Mxfp8));
    let proj = plan.key(&rk("proj")).unwrap();
    assert_eq!(proj.at(2048, Execution::Eager), None);
    assert_eq!(proj.at(4096, Execution::Eager), Some(Blockwise));
    assert_eq!(plan.max_quant_error, Some(0.05));

    // Refused: a recipe with no numerics report, a report of another model, one recipe only.
    let e = module_recipe_plan(Blockwise, &all, "llm", &bounds[..1], 0.02).unwrap_err();
    assert!(e.to_string().contains("no numerics report of mxfp8"), "{e}");
    let other = [bounds[0].clone(), bound("mxfp8", &[("fc2", 0.03)])];
    let e = module_recipe_plan(Blockwise, &all, "llm", &other, 0.02).unwrap_err();
    assert!(e.to_string().contains("another model"), "{e}");
    let e = module_recipe_plan(Blockwise, &all[..1], "llm", &bounds, 0.02).unwrap_err();
    assert!(e.to_string().contains("two recipes or more"), "{e}");
    let e = module_recipe_plan(Tensorwise, &all, "llm", &bounds, 0.02).unwrap_err();
    assert!(e.to_string().contains("base recipe tensorwise"), "{e}");
}
