//! torchrun/Slurm-style sharded sweeps, local multi-device sweeps, coverage checks and --resume,
//! on the CPU with the cost-model backend.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

mod common;

/// `fp8sel` with no launcher's rank variables but those a test sets.
fn fp8sel(args: &[&str], env: &[(&str, &str)]) -> Output {
    let unset = [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
    ];
    common::fp8sel_with(args, env, &unset)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const SWEEP: [&str; 9] = [
    "bench",
    "--backend",
    "model",
    "--quiet",
    "--model",
    "fixtures/models/deepseek_v3.yaml",
    "--tp",
    "8",
    "--ep=64",
];

fn points(path: &Path) -> Vec<serde_json::Value> {
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    r["points"].as_array().unwrap().clone()
}

#[test]
fn ranks_write_rank_files_that_merge_into_the_single_process_policy() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("ds.json");
    let r = report.to_str().unwrap();
    for (rank, launcher) in [(0, "torchrun"), (1, "slurm"), (2, "torchrun")] {
        let env: Vec<(&str, String)> = if launcher == "torchrun" {
            vec![
                ("RANK", rank.to_string()),
                ("WORLD_SIZE", "3".into()),
                ("LOCAL_RANK", rank.to_string()),
            ]
        } else {
            vec![
                ("SLURM_PROCID", rank.to_string()),
                ("SLURM_NTASKS", "3".into()),
                ("SLURM_LOCALID", rank.to_string()),
                ("SLURM_STEP_ID", "0".into()),
            ]
        };
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let o = fp8sel(&[&SWEEP[..], &["--report", r]].concat(), &env);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(dir.path().join(format!("ds.rank{rank}.json")).exists());
    }
    assert!(!report.exists(), "ranks write rank files only");
    let total: usize = (0..3)
        .map(|k| points(&dir.path().join(format!("ds.rank{k}.json"))).len())
        .sum();
    // The same sweep in one process.
    let single = dir.path().join("single.json");
    let o = fp8sel(
        &[&SWEEP[..], &["--report", single.to_str().unwrap()]].concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(points(&single).len(), total);
    // Merged policies are identical.
    let ranks: Vec<String> = (0..3)
        .map(|k| {
            dir.path()
                .join(format!("ds.rank{k}.json"))
                .display()
                .to_string()
        })
        .collect();
    let (pa, pb) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let o = fp8sel(
        &[
            &["merge-policy", "--reports"],
            &ranks.iter().map(String::as_str).collect::<Vec<_>>()[..],
            &["--output", pa.to_str().unwrap()],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = fp8sel(
        &[
            "merge-policy",
            "--reports",
            single.to_str().unwrap(),
            "--output",
            pb.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0));
    let rules = |p: &Path| {
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(p).unwrap()).unwrap()["rules"].clone()
    };
    assert_eq!(rules(&pa), rules(&pb));
    // A missing shard is named.
    let o = fp8sel(
        &[
            "merge-policy",
            "--reports",
            &ranks[0],
            &ranks[2],
            "--output",
            pa.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("rank(s) 1 are missing"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn local_devices_shard_into_one_report() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one.json"), dir.path().join("two.json"));
    assert!(
        fp8sel(
            &[&SWEEP[..], &["--report", one.to_str().unwrap()]].concat(),
            &[]
        )
        .status
        .success()
    );
    let o = fp8sel(
        &[
            &SWEEP[..],
            &["--devices", "0,1,2", "--report", two.to_str().unwrap()],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        points(&one),
        points(&two),
        "same points, same order, whatever the device count"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&two).unwrap()).unwrap();
    assert_eq!(r["provenance"]["devices"], serde_json::json!([0, 1, 2]));
    let o = fp8sel(
        &[
            &SWEEP[..],
            &["--devices", "0,x", "--report", two.to_str().unwrap()],
        ]
        .concat(),
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn resume_measures_only_the_missing_points() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let r = report.to_str().unwrap();
    let env = [("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")];
    assert!(
        fp8sel(&[&SWEEP[..], &["--report", r]].concat(), &env)
            .status
            .success()
    );
    let rank_file = dir.path().join("r.rank1.json");
    // Pretend the device died halfway: its remaining points are reported skipped.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rank_file).unwrap()).unwrap();
    let n = v["points"].as_array().unwrap().len();
    // Plant a value in a finished point: --resume must keep it, not measure the point again.
    let planted = serde_json::json!({"median": 123.456, "p10": 100.0, "p90": 150.0});
    v["points"][0]["bf16"]["total_ms"] = planted.clone();
    for p in v["points"].as_array_mut().unwrap().iter_mut().skip(n / 2) {
        p["status"] = "skipped".into();
        p["reason"] = "device 1 failed: lost".into();
        p.as_object_mut().unwrap().remove("bf16");
        p.as_object_mut().unwrap().remove("fp8");
        p.as_object_mut().unwrap().remove("speedup");
    }
    std::fs::write(&rank_file, serde_json::to_string(&v).unwrap()).unwrap();
    // Merging now warns that points are missing (they are not silently dropped).
    let env0 = [("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")];
    assert!(
        fp8sel(&[&SWEEP[..], &["--report", r]].concat(), &env0)
            .status
            .success()
    );
    let rank0 = dir.path().join("r.rank0.json");
    let o = fp8sel(
        &[
            "merge-policy",
            "--reports",
            rank0.to_str().unwrap(),
            rank_file.to_str().unwrap(),
            "--output",
            dir.path().join("p.json").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("device 1 failed"),
        "{}",
        text(&o.stderr)
    );
    // Without --quiet, so the resume note is printed.
    let loud: Vec<&str> = SWEEP.iter().copied().filter(|a| *a != "--quiet").collect();
    let o = fp8sel(&[&loud[..], &["--report", r, "--resume"]].concat(), &env);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!("--resume: {} point(s) already measured", n / 2)),
        "{}",
        text(&o.stderr)
    );
    let after = points(&rank_file);
    assert_eq!(after.len(), n);
    assert!(after.iter().all(|p| p["status"] == "ok"));
    assert_eq!(
        after[0]["bf16"]["total_ms"], planted,
        "--resume re-measured a finished point"
    );
    // The skipped half was measured again: real numbers, not the planted one.
    assert!(after[n - 1]["bf16"]["total_ms"]["median"].as_f64().unwrap() > 0.0);
}
