//! `{{standing: FILE}}` in a written section: the end-to-end step runs read against today's
//! policies (`python scripts/upkeep/standing.py` writes FILE; a test keeps it current). Every
//! figure is the run's own; this only picks the rows and lays them out.

use std::fmt::Write as _;

use serde_json::Value;

/// The counts, the misses today's files still make, and the rows whose groups no mode timed.
pub fn table(doc: &Value) -> String {
    let rows: Vec<&Value> = doc["rows"].as_array().into_iter().flatten().collect();
    let timed: Vec<&Value> = rows
        .iter()
        .copied()
        .filter(|r| !r["timed_as"].is_null())
        .collect();
    let misses: Vec<&Value> = timed
        .iter()
        .copied()
        .filter(|r| r["miss"] == true)
        .collect();
    let target = doc["target_vs_min"].as_f64().unwrap_or(f64::NAN);
    let mut s = format!(
        "{} rows of shipped models; today's FP8 groups timed in {} of them; {} miss (slower than \
         BF16 beyond the band, or over {target:.2} x the fastest of BF16, all-FP8 and the oracle, \
         by medians):\n\n",
        rows.len(),
        timed.len(),
        misses.len()
    );
    s.push_str(
        "| layout | run | execution | tokens | today's FP8 groups | timed as | weights | / BF16 (p10-p90) | verdict | / fastest |\n|---|---|---|---:|---|---|---|---|---|---:|\n",
    );
    for r in &misses {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {:.3} ({:.3}-{:.3}) | {} | {:.3} |",
            text(r, "layout"),
            text(r, "run"),
            text(r, "execution"),
            r["tokens"].as_u64().unwrap_or(0),
            groups(r),
            text(r, "timed_as"),
            weights(r),
            num(r, "vs_bf16_median"),
            num(r, "vs_bf16_p10"),
            num(r, "vs_bf16_p90"),
            text(r, "verdict"),
            num(r, "vs_min"),
        );
    }
    let untimed: Vec<String> = rows
        .iter()
        .filter(|r| r["timed_as"].is_null())
        .map(|r| {
            format!(
                "{} {} {} ({}, run {})",
                text(r, "execution"),
                r["tokens"].as_u64().unwrap_or(0),
                groups(r),
                text(r, "scenario"),
                text(r, "run")
            )
        })
        .collect();
    if !untimed.is_empty() {
        let _ = write!(
            s,
            "\nNot timed (no mode of the run ran today's groups): {}.\n",
            untimed.join("; ")
        );
    }
    s
}

/// How the row's FP8 modules held their weights: FP8 (a run before the worker held BF16 ones,
/// as today's files are made) or BF16.
fn weights(r: &Value) -> &'static str {
    match r["fp8_weights"].as_bool() {
        Some(false) => "BF16",
        _ => "FP8",
    }
}

fn text<'a>(r: &'a Value, k: &str) -> &'a str {
    r[k].as_str().unwrap_or("-")
}

fn num(r: &Value, k: &str) -> f64 {
    r[k].as_f64().unwrap_or(f64::NAN)
}

fn groups(r: &Value) -> String {
    let g: Vec<&str> = r["fp8_groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if g.is_empty() {
        "- (BF16)".to_owned()
    } else {
        g.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_misses_are_tabled_and_untimed_rows_are_listed() {
        let doc = serde_json::json!({"target_vs_min": 1.01, "rows": [
            {"layout": "Q, TP 8", "scenario": "Q", "run": "ab", "execution": "graphed", "tokens": 1024,
             "fp8_groups": ["fc1", "fc2"], "timed_as": "policy:q.json", "vs_bf16_median": 1.094,
             "vs_bf16_p10": 1.084, "vs_bf16_p90": 1.1, "verdict": "slower", "vs_min": 1.094, "miss": true},
            {"layout": "Q, TP 8", "scenario": "Q", "run": "ac", "execution": "graphed", "tokens": 2048,
             "fp8_groups": ["fc1"], "timed_as": "policy:q.json", "fp8_weights": false, "vs_bf16_median": 1.02,
             "vs_bf16_p10": 1.01, "vs_bf16_p90": 1.03, "verdict": "slower", "vs_min": 1.02, "miss": true},
            {"layout": "Q, TP 8", "scenario": "Q", "run": "ab", "execution": "eager", "tokens": 1024,
             "fp8_groups": [], "timed_as": "bf16", "vs_bf16_median": 1.0, "verdict": "-", "vs_min": 1.0, "miss": false},
            {"layout": "Q, TP 8", "scenario": "Q", "run": "sb4", "execution": "eager", "tokens": 8192,
             "fp8_groups": ["fc1"], "timed_as": null}
        ]});
        let t = table(&doc);
        assert!(
            t.starts_with(
                "4 rows of shipped models; today's FP8 groups timed in 3 of them; 2 miss"
            ),
            "{t}"
        );
        // A row without the field predates it: its FP8 modules held FP8 weights.
        assert!(t.contains("| Q, TP 8 | ab | graphed | 1024 | fc1, fc2 | policy:q.json | FP8 | 1.094 (1.084-1.100) | slower | 1.094 |"), "{t}");
        assert!(t.contains("| Q, TP 8 | ac | graphed | 2048 | fc1 | policy:q.json | BF16 | 1.020 (1.010-1.030) | slower | 1.020 |"), "{t}");
        assert!(!t.contains("| eager | 1024 |"), "{t}");
        assert!(
            t.contains(
                "Not timed (no mode of the run ran today's groups): eager 8192 fc1 (Q, run sb4)."
            ),
            "{t}"
        );
    }
}
