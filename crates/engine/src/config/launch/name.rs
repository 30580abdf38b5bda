//! A launch script's model name, which names its policy file (`<name>.json`): the script's file
//! name, unless that names no model (`train.sh`, `run_pretrain.sh`, `pretrain_gpt_distributed.sh`):
//! then its folder's, as a HuggingFace checkout's `config.json` is named after its folder. Two
//! such scripts in two model folders so get two policies, not one overwritten.

use std::path::Path;

/// Words that say how a script runs, not what it trains.
const RUN_WORDS: &[&str] = &[
    "train",
    "training",
    "pretrain",
    "pretraining",
    "finetune",
    "fine",
    "tune",
    "tuning",
    "sft",
    "run",
    "launch",
    "launcher",
    "start",
    "main",
    "job",
    "submit",
    "gpt",
    "distributed",
    "dist",
    "multinode",
    "multi",
    "node",
    "nodes",
    "slurm",
    "torchrun",
    "script",
    "megatron",
    "lm",
    "model",
    "example",
    "demo",
    "test",
    "local",
];

/// Folder names that hold scripts of many models.
const SHARED_FOLDERS: &[&str] = &[
    "scripts", "script", "examples", "example", "bin", "tools", "launch", "jobs",
];

fn says_nothing(name: &str, also: &[&str]) -> bool {
    name.split(['_', '-', '.', ' '])
        .filter(|w| !w.is_empty())
        .all(|w| {
            let w = w.to_ascii_lowercase();
            RUN_WORDS.contains(&w.as_str())
                || also.contains(&w.as_str())
                || w.chars().all(|c| c.is_ascii_digit())
        })
}

/// The name and, where it is the folder's, a note that says so.
pub(crate) fn script_name(path: &Path) -> (String, Option<String>) {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_owned());
    if !says_nothing(&stem, &[]) {
        return (stem, None);
    }
    let folder = super::super::folder_name(path)
        .filter(|n| !n.starts_with('.') && !says_nothing(n, SHARED_FOLDERS));
    match folder {
        Some(f) => {
            let note = format!(
                "launch script: named {f} after its folder ({} names no model; the policy is \
                 {f}.json)",
                path.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            );
            (f, Some(note))
        }
        None => (stem, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_whose_file_names_no_model_is_named_after_its_folder() {
        let root = tempfile::tempdir().unwrap();
        let at = |rel: &str| {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "#!/bin/bash\n").unwrap();
            p
        };
        // The file names the model: kept.
        assert_eq!(
            script_name(&at("examples/pretrain_qwen2.5_72b.sh")).0,
            "pretrain_qwen2.5_72b"
        );
        assert_eq!(
            script_name(&at("Mistral-NeMo-12B/train_llama3_8b.sh")).0,
            "train_llama3_8b"
        );
        // It does not: the folder's name, said.
        for f in [
            "train.sh",
            "run_pretrain.sh",
            "pretrain_gpt_distributed.sh",
            "launch-2.sh",
        ] {
            let (name, note) = script_name(&at(&format!("Mistral-NeMo-12B/{f}")));
            assert_eq!(name, "Mistral-NeMo-12B", "{f}");
            assert!(note.unwrap().contains(f), "{f}");
        }
        // Nor does the folder (a folder of many models' scripts): the file's name, no note.
        assert_eq!(
            script_name(&at("scripts/train.sh")),
            ("train".to_owned(), None)
        );
        assert_eq!(
            script_name(&at("pretrain/run.sh")),
            ("run".to_owned(), None)
        );
    }
}
