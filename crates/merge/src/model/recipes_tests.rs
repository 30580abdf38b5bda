//! The per-module recipe choice on synthetic timings: two recipes of one made-up step, the
//! choice against brute force, under a quantization-error bound, and its steps.

use fp8_policy::{Execution, Recipe, RuleKey};

use super::LayoutModel;
use super::recipes::{MixedChoice, RecipeModels};
use super::tests::{CAL, SWEPT, Synth, dense, model};

use Recipe::{Blockwise, Tensorwise};

/// The dense synthetic step with FP8 GEMMs `gain` times cheaper per token than blockwise's
/// (a per-tensor recipe: cheaper casts, a faster GEMM).
fn faster(gain: f64) -> Synth {
    let mut s = dense(1.0);
    for g in &mut s.groups {
        g.gpu8.1 /= gain;
    }
    s
}

fn models() -> (LayoutModel, LayoutModel) {
    (
        model(&dense(1.0), &SWEPT, &CAL),
        model(&faster(1.3), &SWEPT, &CAL),
    )
}

fn pair<'a>(b: &'a LayoutModel, t: &'a LayoutModel) -> RecipeModels<'a> {
    RecipeModels {
        base: Blockwise,
        models: vec![(Blockwise, b), (Tensorwise, t)],
    }
}

fn any(_: &RuleKey, _: Recipe) -> bool {
    true
}

/// Every assignment of BF16/blockwise/tensorwise over the units, with its predicted wall, by
/// the formula written out: base all-BF16 plus each recipe's own change.
fn brute(
    m: &RecipeModels,
    e: Execution,
    t: u64,
    ok: &dyn Fn(usize, Option<Recipe>) -> bool,
) -> Vec<(Vec<Option<Recipe>>, f64)> {
    let b = m.models[0].1;
    let n = b.units.len();
    let opts = [None, Some(Blockwise), Some(Tensorwise)];
    let mut out = Vec::new();
    for code in 0..3usize.pow(n as u32) {
        let plan: Vec<Option<Recipe>> = (0..n)
            .map(|i| opts[code / 3usize.pow(i as u32) % 3])
            .collect();
        if !(0..n).all(|i| ok(i, plan[i])) {
            continue;
        }
        let tf = t as f64;
        let none = std::collections::BTreeSet::new();
        let mut w = b.fits[&e].predict(&none, tf).wall;
        for (r, lm) in &m.models {
            let on: std::collections::BTreeSet<&str> = (0..n)
                .filter(|&i| plan[i] == Some(*r))
                .flat_map(|i| lm.units[i].groups.iter().map(String::as_str))
                .collect();
            if !on.is_empty() {
                w += lm.fits[&e].predict(&on, tf).wall - lm.fits[&e].predict(&none, tf).wall;
            }
        }
        out.push((plan, w));
    }
    out
}

/// A unit may run `r` at `t` where `r`'s own threshold has been reached.
fn reached(m: &RecipeModels, i: usize, r: Option<Recipe>, t: u64) -> bool {
    let Some(r) = r else { return true };
    let lm = m.models.iter().find(|x| x.0 == r).map(|x| x.1);
    lm.and_then(|lm| lm.thresholds[&Execution::Eager][i].from)
        .is_some_and(|f| f <= t)
}

#[test]
fn the_mix_is_the_least_predicted_step_and_never_slower_than_either_recipe_alone() {
    let (b, t) = models();
    let m = pair(&b, &t);
    for tokens in [1024, 2048, 4096, 6144, 8192, 16384, 65536] {
        let c: MixedChoice = m.choose(Execution::Eager, tokens, 0.0, &any).unwrap();
        let all = brute(&m, Execution::Eager, tokens, &|i, r| {
            reached(&m, i, r, tokens)
        });
        let best = all.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
        assert!(
            (c.predicted - best).abs() < 1e-9 * best,
            "{tokens}: {} vs brute {best}",
            c.predicted
        );
        assert!(c.predicted <= c.best_single + 1e-9, "{tokens}");
    }
    // Where FP8 pays, the faster recipe's GEMMs are chosen.
    let big = m.choose(Execution::Eager, 16384, 0.005, &any).unwrap();
    assert!(big.recipes.contains(&Some(Tensorwise)), "{big:?}");
}

#[test]
fn equal_recipes_keep_the_base_and_the_bound_keeps_a_recipe_out() {
    let b = model(&dense(1.0), &SWEPT, &CAL);
    let same = model(&dense(1.0), &SWEPT, &CAL);
    let m = pair(&b, &same);
    for tokens in [2048, 8192, 16384] {
        let c = m.choose(Execution::Eager, tokens, 0.005, &any).unwrap();
        assert!(
            c.recipes.iter().all(|r| *r != Some(Tensorwise)),
            "{tokens}: {c:?}"
        );
    }
    // fc1's tensorwise error is over the bound: never tensorwise, whatever its speed.
    let (b, t) = models();
    let m = pair(&b, &t);
    let fc1 = b
        .units
        .iter()
        .position(|u| u.key.to_string().contains("fc1"))
        .unwrap();
    let bound = |k: &RuleKey, r: Recipe| !(r == Tensorwise && k.to_string().contains("fc1"));
    for tokens in [4096, 16384, 65536] {
        let c = m.choose(Execution::Eager, tokens, 0.0, &bound).unwrap();
        assert_ne!(c.recipes[fc1], Some(Tensorwise), "{tokens}");
        let all = brute(&m, Execution::Eager, tokens, &|i, r| {
            reached(&m, i, r, tokens) && !(i == fc1 && r == Some(Tensorwise))
        });
        let best = all.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
        assert!((c.predicted - best).abs() < 1e-9 * best, "{tokens}");
    }
}

#[test]
fn each_keys_steps_give_the_choice_at_every_grid_count() {
    let (b, t) = models();
    let m = pair(&b, &t);
    let (keys, choices) = m.plan(0.005, &any);
    assert_eq!(keys.len(), b.units.len());
    let eager = &choices[&Execution::Eager];
    for (i, k) in keys.iter().enumerate() {
        for c in eager {
            assert_eq!(
                k.at(c.tokens, Execution::Eager),
                c.recipes[i],
                "{} at {}",
                k.key,
                c.tokens
            );
        }
        // Rising steps, and a valid plan.
        assert!(k.eager.windows(2).all(|w| w[0].from < w[1].from));
    }
    let plan = super::recipes::recipe_plan(Blockwise, Some(0.05), vec![keys]);
    assert_eq!(plan.validate(), Ok(()));
    assert!(plan.recipes().contains(&Tensorwise), "{plan:?}");
}

#[test]
fn above_the_sweep_a_key_fp8_at_the_top_keeps_its_recipe() {
    let at = |tokens: u64, recipes: Vec<Option<Recipe>>| MixedChoice {
        tokens,
        recipes,
        predicted: 1.0,
        best_single: 1.0,
    };
    let mut c = vec![
        at(2048, vec![None, None, Some(Blockwise)]),
        at(4096, vec![None, Some(Tensorwise), Some(Blockwise)]),
        at(
            8192,
            vec![Some(Tensorwise), Some(Blockwise), Some(Tensorwise)],
        ),
        at(16384, vec![Some(Blockwise), None, Some(Tensorwise)]),
    ];
    super::recipes::hold_above_the_sweep(&mut c, 4096);
    // Within the sweep, untouched.
    assert_eq!(c[0].recipes, vec![None, None, Some(Blockwise)]);
    assert_eq!(c[1].recipes, vec![None, Some(Tensorwise), Some(Blockwise)]);
    // Above it: the FP8 keys at the top keep their recipe, the BF16 one takes the choice.
    for above in &c[2..] {
        assert_eq!(above.recipes[1..], [Some(Tensorwise), Some(Blockwise)]);
    }
    assert_eq!(c[2].recipes[0], Some(Tensorwise));
    assert_eq!(c[3].recipes[0], Some(Blockwise));
    // A sweep below every choice holds nothing.
    let mut d = c.clone();
    super::recipes::hold_above_the_sweep(&mut d, 1024);
    assert_eq!(d, c);
}
