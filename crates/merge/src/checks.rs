//! What a merge refuses before it merges: reports of different devices, recipes, objectives or
//! models pooled by mistake (unless allowed), and sharded sweeps with a rank missing.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::error::MergeError;
use crate::options::MergeOptions;
use crate::sample::Loaded;

/// Refuses reports that disagree on what a policy must hold fixed (device, recipe, objective,
/// models of a component), unless `allow_mixed`.
pub(crate) fn check_mixed(inputs: &[Loaded], opt: &MergeOptions) -> Result<(), MergeError> {
    if opt.allow_mixed {
        return Ok(());
    }
    let mut first: [Option<(&str, &PathBuf)>; 2] = [None, None];
    let mut est: Option<(bool, &PathBuf)> = None;
    let mut recompute: Option<(bool, &PathBuf)> = None;
    // Per TP size: the first report timed with communication, and the first timed one rank alone.
    let (mut comm, mut local_tp): (BTreeMap<u32, &PathBuf>, BTreeMap<u32, &PathBuf>) =
        (BTreeMap::new(), BTreeMap::new());
    let mut seen_models: BTreeMap<&str, (&str, &PathBuf)> = BTreeMap::new();
    for l in inputs {
        for (i, (what, v)) in [
            ("device", l.origin.device.as_str()),
            ("recipe", l.origin.recipe.as_str()),
        ]
        .into_iter()
        .enumerate()
        {
            if v.is_empty() {
                continue; // the reference format does not say
            }
            match first[i] {
                None => first[i] = Some((v, &l.file)),
                Some((a, fa)) if a != v => {
                    return Err(MergeError::Mixed {
                        what,
                        a: a.to_owned(),
                        file_a: fa.clone(),
                        b: v.to_owned(),
                        file_b: l.file.clone(),
                    });
                }
                _ => {}
            }
        }
        for (component, models) in &l.origin.models {
            for m in models.iter().filter(|m| !m.is_empty()) {
                match seen_models.get(component.as_str()) {
                    None => {
                        seen_models.insert(component.as_str(), (m.as_str(), &l.file));
                    }
                    Some((a, fa)) if a != m => {
                        return Err(MergeError::Mixed {
                            what: "model",
                            a: (*a).to_owned(),
                            file_a: (*fa).clone(),
                            b: m.clone(),
                            file_b: l.file.clone(),
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        if let Some(rc) = l.origin.recompute {
            match recompute {
                None => recompute = Some((rc, &l.file)),
                Some((a, fa)) if a != rc => {
                    let word = |r: bool| {
                        if r {
                            "with recompute"
                        } else {
                            "without recompute"
                        }
                        .to_owned()
                    };
                    return Err(MergeError::Mixed {
                        what: "recompute",
                        a: word(a),
                        file_a: fa.clone(),
                        b: word(rc),
                        file_b: l.file.clone(),
                    });
                }
                Some(_) => {}
            }
        }
        // Two timings of one TP size would disagree about what a rule at that size means; a
        // te_tp report at TP 2 beside one-rank reports at TP 4 and 8 is fine (each TP size's
        // rules come from one kind of timing, and provenance names the sizes with communication).
        let own = if l.origin.tp_comm == Some(true) {
            &mut comm
        } else {
            &mut local_tp
        };
        for &t in &l.origin.tps {
            own.entry(t).or_insert(&l.file);
        }
        if let Some((&t, a)) = comm.iter().find(|(t, _)| local_tp.contains_key(t)) {
            return Err(MergeError::Mixed {
                what: "TP communication",
                a: format!("timed with TP communication at TP {t} (te_tp)"),
                file_a: (*a).clone(),
                b: format!("one rank alone at TP {t}"),
                file_b: local_tp[&t].clone(),
            });
        }
        match est {
            None => est = Some((l.origin.estimated, &l.file)),
            Some((a, fa)) if a != l.origin.estimated => {
                let word = |e: bool| if e { "estimated" } else { "measured" }.to_owned();
                return Err(MergeError::Mixed {
                    what: "estimated",
                    a: word(a),
                    file_a: fa.clone(),
                    b: word(l.origin.estimated),
                    file_b: l.file.clone(),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks that the shards of every sharded sweep are all present and complete.
pub(crate) fn check_shards(inputs: &[Loaded]) -> Result<(), MergeError> {
    let mut sweeps: BTreeMap<&str, (usize, BTreeMap<usize, &Loaded>)> = BTreeMap::new();
    for l in inputs {
        if let Some(s) = &l.shard {
            let e = sweeps
                .entry(s.digest.as_str())
                .or_insert((s.world, BTreeMap::new()));
            if e.0 != s.world {
                return Err(MergeError::Shards(format!(
                    "{}: world size {} but another shard of the sweep says {}",
                    l.file.display(),
                    s.world,
                    e.0
                )));
            }
            if let Some(prev) = e.1.insert(s.rank, l) {
                return Err(MergeError::Shards(format!(
                    "rank {} appears twice: {} and {}",
                    s.rank,
                    prev.file.display(),
                    l.file.display()
                )));
            }
            if !s.absent.is_empty() {
                return Err(MergeError::Shards(format!(
                    "{}: rank {} lacks {} of its points (first: {})",
                    l.file.display(),
                    s.rank,
                    s.absent.len(),
                    s.absent[0]
                )));
            }
        }
    }
    for (digest, (world, ranks)) in sweeps {
        let missing: Vec<String> = (0..world)
            .filter(|r| !ranks.contains_key(r))
            .map(|r| r.to_string())
            .collect();
        if !missing.is_empty() {
            let example = ranks
                .values()
                .next()
                .map(|l| l.file.display().to_string())
                .unwrap_or_default();
            return Err(MergeError::Shards(format!(
                "sweep {digest} (e.g. {example}) has {world} ranks but rank(s) {} are missing",
                missing.join(", ")
            )));
        }
    }
    Ok(())
}
