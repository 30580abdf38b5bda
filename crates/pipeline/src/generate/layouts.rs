//! The layouts a gen-policy job makes: the ones asked for, or the defaults (the config's TP
//! first, then 1, 2, 4, 8 at the config's EP and ETP), those the model divides, and why the
//! others are left out.

use std::path::Path;

use fp8_engine::{ModelDesc, Parallel, inventory};

/// Default layouts: the config's TP (the layout it trains) first, then TP 1, 2, 4, 8 (those
/// that divide the model: a policy for any of them), crossed with the config's EP for
/// MoE models (1 when it names none, Megatron's default, as `explain` and the hooks read it); ETP is the config's, else each layout's TP, as Megatron
/// defaults it (and as `explain`, `check` and the trainer hooks resolve it), so the policy has
/// rules for the layout the trainer will run. The others are [`layouts_left_out`].
pub fn default_layouts(
    model: &ModelDesc,
    tps: Option<&[u32]>,
    eps: Option<&[u32]>,
    etps: Option<&[u32]>,
) -> Vec<Parallel> {
    candidate_layouts(model, tps, eps, etps)
        .into_iter()
        .filter(|p| divides(model, *p).is_ok())
        .collect()
}

/// The layouts asked for (or defaulted) that do not divide the model, each with why (a
/// multi-query model's one key/value group at TP 2): said, never dropped silently.
pub fn layouts_left_out(
    model: &ModelDesc,
    tps: Option<&[u32]>,
    eps: Option<&[u32]>,
    etps: Option<&[u32]>,
) -> Vec<String> {
    candidate_layouts(model, tps, eps, etps)
        .into_iter()
        .filter_map(|p| {
            divides(model, p)
                .err()
                .map(|e| format!("{} {p}: left out, {e}", model.name))
        })
        .collect()
}

/// Whether every component of `model` has an inventory at `p`.
fn divides(model: &ModelDesc, p: Parallel) -> Result<(), String> {
    for c in &model.components {
        inventory(c, p).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Every layout asked for, or the defaults, whether or not it divides the model.
fn candidate_layouts(
    model: &ModelDesc,
    tps: Option<&[u32]>,
    eps: Option<&[u32]>,
    etps: Option<&[u32]>,
) -> Vec<Parallel> {
    let moe = model.components.iter().any(|c| c.arch.moe.is_some());
    let rec_ep = model
        .components
        .iter()
        .find_map(|c| c.recommended.ep)
        .unwrap_or(1);
    let rec_tp = model.components.iter().find_map(|c| c.recommended.tp);
    let tps = tps.map_or_else(
        || {
            // The config's TP first (a time limit keeps it), then the others.
            let mut v: Vec<u32> = rec_tp.into_iter().collect();
            v.extend([1, 2, 4, 8].into_iter().filter(|t| Some(*t) != rec_tp));
            v
        },
        <[u32]>::to_vec,
    );
    let eps = eps.map_or_else(|| if moe { vec![rec_ep] } else { vec![1] }, <[u32]>::to_vec);
    let rec_etp = model.components.iter().find_map(|c| c.recommended.etp);
    let mut out = Vec::new();
    for &tp in &tps {
        let etps = etps.map_or_else(|| vec![rec_etp.unwrap_or(tp)], <[u32]>::to_vec);
        for &ep in &eps {
            for &etp in &etps {
                out.push(Parallel::new(tp, ep, etp, 1));
            }
        }
    }
    out
}

/// The error for a model no requested layout divides, with each layout's reason.
pub(crate) fn no_layout(config: &Path, left_out: &[String]) -> String {
    format!(
        "{}: no requested layout divides the model ({}); fix: layouts the model divides",
        config.display(),
        left_out.join("; ")
    )
}

/// Where the default layouts' TP came from, when the config named it (no `tps` given): said
/// before the work, with how to ask for others.
pub fn config_tp_note(model: &ModelDesc, tps: Option<&[u32]>) -> Option<String> {
    let tp = model
        .components
        .iter()
        .find_map(|c| c.recommended.tp)
        .filter(|_| tps.is_none())?;
    Some(format!(
        "{}: TP {tp} (the config's tensor_model_parallel_size) first, then the other TPs of \
         1, 2, 4, 8 that divide the model (give --tp {tp} for the config's layout alone)",
        model.name
    ))
}
