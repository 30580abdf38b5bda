//! `{{step_model_order: INPUTS...}}`: the held-out steps of each committed layout (fitted afresh
//! by today's tool, as `{{step_model}}` fits them) by where the layout's check timed their count
//! (the order of the check document's rows), MoE and dense apart: whether a check's first counts
//! ran slower than the model. A count a recheck timed again is left out (its rows are the
//! recheck's), so are counts off the 128-token grain (today's check never times them). Beside
//! them, the check's own rows by the same places: how many got faster round by round (their
//! last three rounds' median more than 3% under their first three's), a slow start the rounds'
//! median does not hide (what `adaptive_fp8.bench.settle` answers).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use fp8_report::step_inputs::read_step_inputs;
use serde_json::Value;

use fp8_merge::model::curve::median;

use super::step_model::{INPUTS, held_out};

/// The places of a count in its check's order, as the table groups them (first, last, name).
const PLACES: [(usize, usize, &str); 3] = [
    (1, 3, "1st-3rd"),
    (4, 6, "4th-6th"),
    (7, usize::MAX, "7th on"),
];

/// Under this GPU over host time (the model's) a step counts as host-bound in the last column.
const HOST_BOUND: f64 = 1.5;

/// `(moe, place)`: each held-out step's (signed error, host-bound).
type Placed = std::collections::BTreeMap<(bool, usize), Vec<(f64, bool)>>;

/// `(moe, place)`: the check's own rows there, how many of them sped up round by round, and how
/// many slowed down (as many as sped up where rounds only scatter).
type Sped = std::collections::BTreeMap<(bool, usize), (usize, usize, usize)>;

/// A row sped up (slowed down) where its last three rounds' median is this much under (over) its
/// first three's.
const SPED_UP: f64 = 0.03;

/// The place (an index of [`PLACES`]) of the `i`-th count (from 0) of a check's order.
fn place_of(i: usize) -> Option<usize> {
    PLACES
        .iter()
        .position(|(lo, hi, _)| (*lo..=*hi).contains(&(i + 1)))
}

/// How a row's rounds moved: `Some(-1)` faster (its last three rounds' median more than
/// [`SPED_UP`] under its first three's), `Some(1)` slower (as much over), `Some(0)` neither;
/// `None` for a row of fewer than six rounds.
fn drift(wall: &[f64]) -> Option<i8> {
    let n = wall.len();
    (n >= 6).then(|| {
        let (early, late) = (median(&wall[..3]), median(&wall[n - 3..]));
        if late < (1.0 - SPED_UP) * early {
            -1
        } else if late > (1.0 + SPED_UP) * early {
            1
        } else {
            0
        }
    })
}

/// The table over `docs` (each an inputs file and today's refit of it).
pub(super) fn by_order(root: &Path, docs: &[(String, Value)]) -> Result<String, String> {
    let mut placed = Placed::new();
    let mut sped = Sped::new();
    for (file, v) in docs {
        let Some(base) = file.strip_suffix(INPUTS) else {
            return Err(format!(
                "{file}: step_model_order reads a layout's committed `*{INPUTS}`"
            ));
        };
        let read = |end: &str| read_step_inputs(&root.join(format!("{base}{end}")));
        let inputs = read(INPUTS).map_err(|e| e.to_string())?;
        let check = read("_check_step.json").map_err(|e| e.to_string())?;
        // Every re-timing round's counts (round 1 on; the rounds are consecutive files).
        let again: BTreeSet<(String, u64)> = (1..fp8_report::step_inputs::MAX_CHECK_ROUNDS)
            .map_while(|r| {
                read(&format!(
                    "_{}_step.json",
                    fp8_report::step_inputs::check_round_word(r)
                ))
                .ok()
            })
            .flat_map(|d| d.step_times)
            .map(|s| (s.execution.to_string(), s.tokens))
            .collect();
        let mut order: Vec<(String, u64)> = Vec::new();
        for s in &check.step_times {
            let k = (s.execution.to_string(), s.tokens);
            if !order.contains(&k) {
                order.push(k);
            }
        }
        let moe = inputs
            .groups
            .iter()
            .any(|g| g.group.starts_with("experts."));
        // The check's own rows: not the inputs' rounds it reused, a plan that is another mode
        // (the same rounds) once.
        let mut seen: Vec<&[f64]> = inputs.step_times.iter().map(|s| &s.wall_ms[..]).collect();
        for s in &check.step_times {
            let k = (s.execution.to_string(), s.tokens);
            let i = order.iter().position(|o| *o == k).unwrap_or(usize::MAX);
            if seen.contains(&&s.wall_ms[..]) {
                continue;
            }
            seen.push(&s.wall_ms);
            if let (Some(place), Some(d)) = (place_of(i), drift(&s.wall_ms)) {
                let e = sped.entry((moe, place)).or_default();
                *e = (e.0 + 1, e.1 + usize::from(d < 0), e.2 + usize::from(d > 0));
            }
        }
        let layouts = v["provenance"]["step"]["model"].as_array();
        for r in layouts.into_iter().flatten().flat_map(held_out) {
            let k = (
                r["execution"].as_str().unwrap_or_default().to_owned(),
                r["tokens"].as_u64().unwrap_or(0),
            );
            let Some(i) = order.iter().position(|o| *o == k) else {
                continue;
            };
            if k.1 % 128 != 0 || again.contains(&k) {
                continue;
            }
            let (Some(place), Some(e)) = (place_of(i), r["error"].as_f64()) else {
                continue;
            };
            let gpu = r["predicted_gpu_ms"].as_f64().unwrap_or(f64::INFINITY);
            let host = r["predicted_host_ms"].as_f64().unwrap_or(0.0);
            placed
                .entry((moe, place))
                .or_default()
                .push((e, gpu < HOST_BOUND * host));
        }
    }
    Ok(table(&placed, &sped))
}

fn table(placed: &Placed, sped: &Sped) -> String {
    let mut s = String::from(
        "| steps | place in the check's order | held-out steps | median error | within 3% | host-bound (GPU / host under 1.5): steps, median error | check rows faster / slower round by round (last 3 rounds > 3% under / over the first 3) |\n|---|---|---:|---:|---:|---:|---:|\n",
    );
    for moe in [true, false] {
        for (i, (_, _, name)) in PLACES.iter().enumerate() {
            let Some(got) = placed.get(&(moe, i)) else {
                continue;
            };
            let e: Vec<f64> = got.iter().map(|x| x.0).collect();
            let hb: Vec<f64> = got.iter().filter(|x| x.1).map(|x| x.0).collect();
            let within = e.iter().filter(|x| x.abs() <= 0.03).count();
            let host = if hb.is_empty() {
                "0".to_owned()
            } else {
                format!("{}, {:+.1}%", hb.len(), 100.0 * median(&hb))
            };
            let (rows, up, down) = sped.get(&(moe, i)).copied().unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {name} | {} | {:+.1}% | {within} of {} | {host} | {up} / {down} of {rows} |",
                if moe { "MoE" } else { "dense" },
                e.len(),
                100.0 * median(&e),
                e.len()
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_place_gets_its_steps_medians_and_host_bound_share() {
        let mut placed = Placed::new();
        placed.insert((true, 0), vec![(-0.10, true), (-0.06, false)]);
        placed.insert((false, 2), vec![(0.01, false)]);
        let sped = Sped::from([((true, 0), (4, 3, 1))]);
        let t = table(&placed, &sped);
        assert!(
            t.contains("| MoE | 1st-3rd | 2 | -8.0% | 0 of 2 | 1, -10.0% | 3 / 1 of 4 |"),
            "{t}"
        );
        assert!(
            t.contains("| dense | 7th on | 1 | +1.0% | 1 of 1 | 0 | 0 / 0 of 0 |"),
            "{t}"
        );
        assert!(!t.contains("4th-6th"), "{t}");
    }

    #[test]
    fn a_count_is_placed_where_its_check_timed_it_and_re_timed_counts_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::root();
        let real = |end: &str| -> Value {
            let f = root.join(format!(
                "reports/h200/step_model/llama3_2_1b_tp1_ep1_etp1{end}"
            ));
            serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap()
        };
        std::fs::write(
            dir.path().join(format!("x{INPUTS}")),
            real(INPUTS).to_string(),
        )
        .unwrap();
        // Timed in this order: 1280, 2048, 1536, 8192 (timed again), 4224, 4480, 5120, 6272.
        let check = real("_check_step.json");
        let row = check["step_times"][0].clone();
        // Each count's rounds its own; the first count's got faster round by round (12.8 -> 11.5
        // ms), 4224's slower.
        let doc = |counts: &[u64]| {
            let mut d = check.clone();
            d["step_times"] = counts
                .iter()
                .map(|&t| {
                    let mut r = row.clone();
                    let ms = t as f64 / 100.0;
                    let late = match t {
                        1280 => 0.9 * ms,
                        4224 => 1.1 * ms,
                        _ => ms,
                    };
                    r["execution"] = "eager".into();
                    r["tokens"] = t.into();
                    r["wall_ms"] = serde_json::json!([ms, ms, ms, ms, late, late, late]);
                    r
                })
                .collect();
            d.to_string()
        };
        let order = [1280, 2048, 1536, 8192, 4224, 4480, 5120, 6272];
        std::fs::write(dir.path().join("x_check_step.json"), doc(&order)).unwrap();
        std::fs::write(dir.path().join("x_recheck_step.json"), doc(&[8192])).unwrap();
        let r = |t: u64, e: f64, gpu: f64| serde_json::json!({"execution": "eager", "tokens": t, "error": e, "calibrated": false, "predicted_gpu_ms": gpu, "predicted_host_ms": 2.0});
        let mut cal = r(2048, -0.5, 1.0);
        cal["calibrated"] = true.into();
        // 4300: off the grain and not timed; 8192: timed again.
        let rows = vec![
            r(1280, -0.10, 1.0),
            cal,
            r(1536, -0.06, 4.0),
            r(8192, -0.9, 1.0),
            r(4224, 0.01, 4.0),
            r(4480, 0.0, 1.0),
            r(5120, 0.02, 1.0),
            r(6272, 0.05, 1.0),
            r(4300, 0.3, 1.0),
        ];
        let v = serde_json::json!({"provenance": {"step": {"model": [{"check": rows}]}}});
        let t = by_order(dir.path(), &[(format!("x{INPUTS}"), v)]).unwrap();
        // 1280 and 1536 are the 1st and 3rd; 4224 and 4480 the 5th and 6th; 5120 and 6272 later.
        for want in [
            "| dense | 1st-3rd | 2 | -8.0% | 0 of 2 | 1, -10.0% | 1 / 0 of 3 |",
            "| dense | 4th-6th | 2 | +0.5% | 2 of 2 | 1, +0.0% | 0 / 1 of 3 |",
            "| dense | 7th on | 2 | +3.5% | 1 of 2 | 2, +3.5% | 0 / 0 of 2 |",
        ] {
            assert!(t.contains(want), "{want}\n{t}");
        }
        assert!(!t.contains("MoE"), "{t}");
    }
}
