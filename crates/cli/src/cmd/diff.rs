//! `fp8sel diff A B`

use std::collections::BTreeMap;
use std::path::PathBuf;

use fp8_policy::{Policy, RuleKey, Threshold, Thresholds};
use serde_json::json;

use crate::error::{CliError, CliResult};

/// Show where two policies decide differently.
///
/// Two runs of gen-policy for one model (another day, another machine, another recipe) agree
/// only within their noise: this lists each rule key whose eager (`min_tokens`) or graphed
/// (`min_tokens_graphed`) threshold differs, with both sides and their ratio, then a count on
/// stdout. Exit 0 where the files decide alike, 1 where any rule differs, 2 for a bad file, as
/// `diff` does. Provenance, summaries and measured speedups are not compared.
///
/// Examples:
///   fp8sel diff policies/llama3_2_1b.json my-policies/llama3_2_1b.json
///   fp8sel diff first/qwen2_5_72b.json again/qwen2_5_72b.json --json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// The first policy JSON.
    pub a: PathBuf,
    /// The second policy JSON.
    pub b: PathBuf,
    /// Print one JSON object: {"same", "a", "b", "rules_a", "rules_b", "differ": [{"key",
    /// "eager": [A, B], "graphed": [A, B]}], "only_a": [key], "only_b": [key]} ("never" as null).
    #[arg(long)]
    pub json: bool,
}

/// A rule's (eager, graphed) thresholds; a rule without its own graphed one uses the eager one.
type Pair = (Threshold, Threshold);

/// A rule's pair of thresholds.
fn both(t: Thresholds) -> Pair {
    (t.eager, t.graphed.unwrap_or(t.eager))
}

/// Every key either side has, in key order, with each side's pair (`None`: no rule there).
fn sides(a: &Policy, b: &Policy) -> BTreeMap<RuleKey, (Option<Pair>, Option<Pair>)> {
    let mut map: BTreeMap<RuleKey, (Option<Pair>, Option<Pair>)> = BTreeMap::new();
    for (key, t) in a.rules() {
        map.entry(key).or_default().0 = Some(both(t));
    }
    for (key, t) in b.rules() {
        map.entry(key).or_default().1 = Some(both(t));
    }
    map
}

/// `A -> B` for one execution, with the ratio where both are counts.
fn moved(a: Threshold, b: Threshold) -> String {
    match (a, b) {
        (Threshold::From(x), Threshold::From(y)) if x > 0 => {
            format!("{a} -> {b} (x{:.2})", y as f64 / x as f64)
        }
        _ => format!("{a} -> {b}"),
    }
}

/// A threshold as JSON: the count, or null for "never".
fn number(t: Threshold) -> serde_json::Value {
    match t {
        Threshold::From(n) => json!(n),
        Threshold::Never => serde_json::Value::Null,
    }
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    let (pa, pb) = (Policy::load(&args.a)?, Policy::load(&args.b)?);
    let all = sides(&pa, &pb);
    let differ: Vec<(&RuleKey, Pair, Pair)> = all
        .iter()
        .filter_map(|(k, s)| match *s {
            (Some(x), Some(y)) if x != y => Some((k, x, y)),
            _ => None,
        })
        .collect();
    let only = |side: fn(&(Option<Pair>, Option<Pair>)) -> bool| -> Vec<String> {
        all.iter()
            .filter(|(_, s)| side(s))
            .map(|(k, _)| k.to_string())
            .collect()
    };
    let only_a = only(|s| s.1.is_none());
    let only_b = only(|s| s.0.is_none());
    let same = differ.is_empty() && only_a.is_empty() && only_b.is_empty();
    if args.json {
        let pair = |x: Threshold, y: Threshold| json!([number(x), number(y)]);
        let differ: Vec<_> = differ
            .iter()
            .map(|(k, (ea, ga), (eb, gb))| {
                json!({"key": k.to_string(), "eager": pair(*ea, *eb), "graphed": pair(*ga, *gb)})
            })
            .collect();
        let out = json!({
            "same": same, "a": args.a, "b": args.b, "rules_a": pa.rule_count(), "rules_b": pb.rule_count(),
            "differ": differ, "only_a": only_a, "only_b": only_b,
        });
        println!("{out}");
    } else {
        for (k, (ea, ga), (eb, gb)) in &differ {
            let mut parts = Vec::new();
            if ea != eb {
                parts.push(format!("eager {}", moved(*ea, *eb)));
            }
            if ga != gb {
                parts.push(format!("graphed {}", moved(*ga, *gb)));
            }
            println!("{k}: {}", parts.join(", "));
        }
        for (side, v) in [("A", &only_a), ("B", &only_b)] {
            for k in v.iter() {
                println!("{k}: only in {side}");
            }
        }
        println!(
            "{} rule(s) in A ({}), {} in B ({}): {} differ, {} only in A, {} only in B",
            pa.rule_count(),
            args.a.display(),
            pb.rule_count(),
            args.b.display(),
            differ.len(),
            only_a.len(),
            only_b.len()
        );
    }
    if same {
        Ok(())
    } else {
        // Exit 1 as `diff` does: the count line above says why, so no error line follows.
        Err(CliError {
            code: 1,
            message: String::new(),
        })
    }
}
