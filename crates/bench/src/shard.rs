//! Splitting a sweep over devices and processes, and putting it back together.
//!
//! Shards are balanced by estimated cost (the cost model's BF16 + FP8 step time), not by point
//! count: one Qwen2.5-72B FC1 point at 32k tokens costs as much as hundreds of small ones, and the
//! slowest device decides the wall time. Assignment is greedy longest-first, deterministic, and
//! the same in every process, so ranks launched by torchrun or Slurm agree on it without talking.

use std::path::{Path, PathBuf};

use crate::costmodel::profile;
use crate::cuda::MeasureOptions;
use crate::sweep::BenchPoint;

/// Estimated cost of a point (ms of device time for both precisions).
pub fn cost(p: &BenchPoint) -> f64 {
    match profile("h200") {
        Some(h) => {
            let (b, f) = h.estimate(p, &MeasureOptions::default());
            b.total_ms.median + f.total_ms.median
        }
        None => 6.0 * p.rows() as f64 * p.spec.in_features as f64 * p.spec.out_features as f64,
    }
}

/// Assigns point indices to `shards` shards, longest first onto the least-loaded shard. Each
/// shard's indices are returned in sweep order.
pub fn assign(points: &[BenchPoint], shards: usize) -> Vec<Vec<usize>> {
    let shards = shards.max(1);
    let mut order: Vec<(f64, fp8_report::PointId, usize)> = points
        .iter()
        .enumerate()
        .map(|(i, p)| (cost(p), p.id(), i))
        .collect();
    order.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut load = vec![0.0f64; shards];
    let mut out = vec![Vec::new(); shards];
    for (c, _, i) in order {
        let s = (0..shards)
            .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)))
            .unwrap_or(0);
        load[s] += c;
        out[s].push(i);
    }
    for v in &mut out {
        v.sort_unstable();
    }
    out
}

/// Estimated load of each shard.
pub fn loads(points: &[BenchPoint], shards: &[Vec<usize>]) -> Vec<f64> {
    shards
        .iter()
        .map(|s| s.iter().map(|&i| cost(&points[i])).sum())
        .collect()
}

/// A digest of the whole sweep (its point ids), shared by all shards of one sweep.
pub fn sweep_digest(points: &[BenchPoint]) -> String {
    let ids: Vec<fp8_report::PointId> = points.iter().map(BenchPoint::id).collect();
    fp8_report::sweep_digest(&ids)
}

/// This rank's share of the sweep: the indices it measures and the shard data its report
/// carries, so the merge can check that every rank delivered every point.
pub fn rank_share(points: &[BenchPoint], rank: &RankEnv) -> (Vec<usize>, fp8_report::Shard) {
    let mine = assign(points, rank.world).swap_remove(rank.rank.min(rank.world.max(1) - 1));
    let shard = fp8_report::Shard {
        rank: rank.rank,
        world_size: rank.world,
        launcher: rank.launcher.to_owned(),
        sweep_digest: sweep_digest(points),
        sweep_points: points.len(),
        point_ids: mine.iter().map(|&i| points[i].id()).collect(),
    };
    (mine, shard)
}

/// This process's place in a launch by torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`) or Slurm
/// (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankEnv {
    /// Global rank.
    pub rank: usize,
    /// Number of processes.
    pub world: usize,
    /// Rank on this node (the device to use).
    pub local: usize,
    /// Which launcher set it.
    pub launcher: &'static str,
}

impl RankEnv {
    /// Reads the launcher variables through `get` (so tests need not touch the environment).
    /// `Ok(None)` when none are set; an error when they are set but malformed.
    pub fn detect(get: impl Fn(&str) -> Option<String>) -> Result<Option<RankEnv>, String> {
        for (launcher, r, w, l) in [
            ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
            ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
        ] {
            let (Some(rank), Some(world)) = (get(r), get(w)) else {
                continue;
            };
            let num = |name: &str, v: &str| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("{name}={v:?} is not a whole number"))
            };
            let rank = num(r, &rank)?;
            let world = num(w, &world)?;
            let local = match get(l) {
                Some(v) => num(l, &v)?,
                None => rank,
            };
            if world == 0 || rank >= world {
                return Err(format!("{r}={rank} is not below {w}={world}"));
            }
            // Inside an sbatch allocation, the batch script itself sees SLURM_PROCID=0 and
            // SLURM_NTASKS=N although only it runs: it would measure 1/N of the sweep. srun
            // starts a job step (SLURM_STEP_ID); the batch script has none, or "batch".
            let step = get("SLURM_STEP_ID").or_else(|| get("SLURM_STEPID"));
            if launcher == "slurm"
                && world > 1
                && step
                    .as_deref()
                    .is_none_or(|s| s.trim() == "batch" || s.trim().is_empty())
            {
                return Err(format!(
                    "{w}={world} but this process was not started by srun (no job step): it \
                     would measure only 1/{world} of the sweep; fix: launch it with \
                     `srun fp8sel bench ...`, or unset SLURM_PROCID and SLURM_NTASKS to measure \
                     the whole sweep in this process"
                ));
            }
            return Ok(Some(RankEnv {
                rank,
                world,
                local,
                launcher,
            }));
        }
        Ok(None)
    }
}

/// `report.json` -> `report.rank3.json`.
pub fn rank_report_path(report: &Path, rank: usize) -> PathBuf {
    let stem = report
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    let ext = report
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_else(|| "json".into());
    report.with_file_name(format!("{stem}.rank{rank}.{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_env_detection() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_owned())
        };
        assert_eq!(RankEnv::detect(env(&[])), Ok(None));
        assert_eq!(
            RankEnv::detect(env(&[
                ("RANK", "3"),
                ("WORLD_SIZE", "8"),
                ("LOCAL_RANK", "1")
            ])),
            Ok(Some(RankEnv {
                rank: 3,
                world: 8,
                local: 1,
                launcher: "torchrun"
            }))
        );
        assert_eq!(
            RankEnv::detect(env(&[
                ("SLURM_PROCID", "5"),
                ("SLURM_NTASKS", "6"),
                ("SLURM_LOCALID", "1"),
                ("SLURM_STEP_ID", "0")
            ])),
            Ok(Some(RankEnv {
                rank: 5,
                world: 6,
                local: 1,
                launcher: "slurm"
            }))
        );
        assert!(RankEnv::detect(env(&[("RANK", "8"), ("WORLD_SIZE", "8")])).is_err());
        // An sbatch script without srun: refused, not 1/16 of the sweep.
        let batch = RankEnv::detect(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "16")]));
        assert!(batch.unwrap_err().contains("srun"));
        assert!(
            RankEnv::detect(env(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "16"),
                ("SLURM_STEP_ID", "batch")
            ]))
            .is_err()
        );
        // One task needs no srun.
        assert!(RankEnv::detect(env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")])).is_ok());
        assert!(RankEnv::detect(env(&[("RANK", "x"), ("WORLD_SIZE", "8")])).is_err());
        assert_eq!(
            RankEnv::detect(env(&[("RANK", "2"), ("WORLD_SIZE", "4")])).map(|r| r.map(|r| r.local)),
            Ok(Some(2))
        );
    }

    #[test]
    fn rank_paths() {
        assert_eq!(
            rank_report_path(Path::new("out/report_tp4.json"), 2),
            PathBuf::from("out/report_tp4.rank2.json")
        );
        assert_eq!(
            rank_report_path(Path::new("r"), 0),
            PathBuf::from("r.rank0.json")
        );
    }
}
