//! The recipe a sweep measures, with its options: the FP8 format (E4M3, or TE's HYBRID with E5M2
//! gradients) and, for delayed scaling, the amax history. Pure; tested on the CPU.

use std::fmt;
use std::str::FromStr;

pub use fp8_policy::{Fp8Format, Recipe};

/// How delayed scaling turns the amax history into the next scale (TE's `amax_compute_algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AmaxAlgo {
    /// The maximum over the whole history.
    Max,
    /// The latest amax only.
    MostRecent,
}

impl AmaxAlgo {
    /// `max` or `most_recent`.
    pub const fn name(self) -> &'static str {
        match self {
            AmaxAlgo::Max => "max",
            AmaxAlgo::MostRecent => "most_recent",
        }
    }
}

impl FromStr for AmaxAlgo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "max" => Ok(AmaxAlgo::Max),
            "most_recent" => Ok(AmaxAlgo::MostRecent),
            _ => Err(format!(
                "unknown amax compute algorithm `{s}`: use max or most_recent"
            )),
        }
    }
}

/// Longest amax history the update kernel holds (it stages one tensor's history in shared
/// memory).
pub const MAX_AMAX_HISTORY: u32 = 4096;
/// TE's `DelayedScaling` default history length.
pub const DEFAULT_AMAX_HISTORY: u32 = 1024;

/// A recipe with its options, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecipeOptions {
    recipe: Recipe,
    format: Fp8Format,
    history_len: u32,
    algo: AmaxAlgo,
}

impl Default for RecipeOptions {
    fn default() -> Self {
        RecipeOptions::blockwise()
    }
}

impl RecipeOptions {
    /// TE's `Float8BlockScaling` (E4M3).
    pub const fn blockwise() -> Self {
        RecipeOptions {
            recipe: Recipe::Blockwise,
            format: Fp8Format::E4m3,
            history_len: 1,
            algo: AmaxAlgo::MostRecent,
        }
    }

    /// The recipe with its defaults, overridden by what was given:
    /// - tensorwise: E4M3 (HYBRID on request);
    /// - delayed: HYBRID, a 1024-step history, `max` (TE's `DelayedScaling` defaults);
    /// - blockwise and mxfp8: E4M3 only (TE 2.20.2 also trains them in HYBRID; fp8sel does not
    ///   measure that yet).
    ///
    /// The history options belong to delayed scaling only; giving them for another recipe is an
    /// error rather than silently ignored.
    pub fn new(
        recipe: Recipe,
        format: Option<Fp8Format>,
        history_len: Option<u32>,
        algo: Option<AmaxAlgo>,
    ) -> Result<Self, String> {
        let delayed = recipe == Recipe::Delayed;
        if !delayed && (history_len.is_some() || algo.is_some()) {
            return Err(format!(
                "--amax-history-len / --amax-compute-algo belong to the delayed recipe; the {recipe} recipe keeps no amax history (drop them, or use --recipe delayed)"
            ));
        }
        let format = match (recipe, format) {
            (Recipe::Blockwise | Recipe::Mxfp8 | Recipe::Nvfp4, Some(Fp8Format::Hybrid)) => {
                return Err(format!(
                    "--fp8-format hybrid: fp8sel measures TE's {} in E4M3 only (use --fp8-format e4m3, or the tensorwise or delayed recipe)",
                    recipe.te_class()
                ));
            }
            (_, Some(f)) => f,
            (Recipe::Delayed, None) => Fp8Format::Hybrid,
            (_, None) => Fp8Format::E4m3,
        };
        let history_len = history_len.unwrap_or(if delayed { DEFAULT_AMAX_HISTORY } else { 1 });
        if !(1..=MAX_AMAX_HISTORY).contains(&history_len) {
            return Err(format!(
                "--amax-history-len {history_len}: use 1 to {MAX_AMAX_HISTORY}"
            ));
        }
        Ok(RecipeOptions {
            recipe,
            format,
            history_len,
            algo: algo.unwrap_or(if delayed {
                AmaxAlgo::Max
            } else {
                AmaxAlgo::MostRecent
            }),
        })
    }

    /// The recipe.
    pub const fn recipe(&self) -> Recipe {
        self.recipe
    }
    /// The FP8 format.
    pub const fn format(&self) -> Fp8Format {
        self.format
    }
    /// Amax history length (delayed; 1 otherwise).
    pub const fn history_len(&self) -> u32 {
        self.history_len
    }
    /// Amax compute algorithm (delayed).
    pub const fn algo(&self) -> AmaxAlgo {
        self.algo
    }
    /// Gradients are E5M2.
    pub const fn grad_e5m2(&self) -> bool {
        matches!(self.format, Fp8Format::Hybrid)
    }

    /// The provenance label: the recipe's name, then its options (`delayed fp8_format=hybrid
    /// amax_history_len=1024 amax_compute_algo=max`). Reports whose labels differ measure
    /// different things and do not merge; [`Recipe::from_label`] reads the recipe back.
    pub fn label(&self) -> String {
        match self.recipe {
            Recipe::Tensorwise => format!("tensorwise fp8_format={}", self.format.name()),
            Recipe::Delayed => format!(
                "delayed fp8_format={} amax_history_len={} amax_compute_algo={}",
                self.format.name(),
                self.history_len,
                self.algo.name()
            ),
            r => r.name().to_owned(),
        }
    }
}

impl fmt::Display for RecipeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// Refuses a recipe the device (or cost-model profile) cannot run, before a sweep starts:
/// MXFP8 and NVFP4 need compute capability 10.0 (Blackwell), or the cost model's `b200` profile.
pub fn check_device(recipe: Recipe, device: &fp8_report::DeviceInfo) -> Result<(), String> {
    if !recipe.blackwell_only() {
        return Ok(());
    }
    if let Some(profile) = device.name.strip_prefix("model:") {
        return if profile == "b200" {
            Ok(())
        } else {
            Err(format!(
                "--recipe {recipe} runs on Blackwell only; the {profile} cost-model profile cannot estimate it: use --device-profile b200"
            ))
        };
    }
    let major: u32 = device
        .compute_capability
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major >= 10 {
        Ok(())
    } else {
        Err(format!(
            "--recipe {recipe} needs compute capability 10.0 or newer (Blackwell); {} is {}: measure on a B200, or estimate with --backend model --device-profile b200",
            device.name, device.compute_capability
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_te() {
        let d = RecipeOptions::new(Recipe::Delayed, None, None, None).unwrap();
        assert_eq!(
            d.label(),
            "delayed fp8_format=hybrid amax_history_len=1024 amax_compute_algo=max"
        );
        assert!(d.grad_e5m2());
        let t = RecipeOptions::new(Recipe::Tensorwise, None, None, None).unwrap();
        assert_eq!(t.label(), "tensorwise fp8_format=e4m3");
        assert!(!t.grad_e5m2());
        assert_eq!(
            RecipeOptions::new(Recipe::Blockwise, None, None, None).unwrap(),
            RecipeOptions::blockwise()
        );
        assert_eq!(RecipeOptions::blockwise().label(), "blockwise");
        for o in [d, t, RecipeOptions::blockwise()] {
            assert_eq!(Recipe::from_label(&o.label()), Some(o.recipe()));
        }
    }

    #[test]
    fn wrong_combinations_are_refused_with_the_fix() {
        let e =
            RecipeOptions::new(Recipe::Blockwise, Some(Fp8Format::Hybrid), None, None).unwrap_err();
        assert!(e.contains("E4M3 only"), "{e}");
        let e = RecipeOptions::new(Recipe::Tensorwise, None, Some(16), None).unwrap_err();
        assert!(e.contains("--recipe delayed"), "{e}");
        let e = RecipeOptions::new(Recipe::Delayed, None, Some(0), None).unwrap_err();
        assert!(e.contains("1 to 4096"), "{e}");
        assert!(RecipeOptions::new(Recipe::Delayed, None, Some(4097), None).is_err());
        let ok = RecipeOptions::new(
            Recipe::Delayed,
            Some(Fp8Format::E4m3),
            Some(16),
            Some(AmaxAlgo::MostRecent),
        )
        .unwrap();
        assert_eq!(
            ok.label(),
            "delayed fp8_format=e4m3 amax_history_len=16 amax_compute_algo=most_recent"
        );
    }

    #[test]
    fn option_names_parse() {
        assert_eq!("HYBRID".parse::<Fp8Format>(), Ok(Fp8Format::Hybrid));
        assert!("e5m2".parse::<Fp8Format>().is_err());
        assert_eq!("most-recent".parse::<AmaxAlgo>(), Ok(AmaxAlgo::MostRecent));
        assert!("mean".parse::<AmaxAlgo>().is_err());
    }

    #[test]
    fn mxfp8_and_nvfp4_need_blackwell_or_the_b200_profile() {
        let dev = |name: &str, cc: &str| fp8_report::DeviceInfo {
            name: name.into(),
            compute_capability: cc.into(),
            ..fp8_report::DeviceInfo::default()
        };
        assert!(check_device(Recipe::Mxfp8, &dev("NVIDIA B200", "10.0")).is_ok());
        assert!(check_device(Recipe::Mxfp8, &dev("model:b200", "")).is_ok());
        let e = check_device(Recipe::Mxfp8, &dev("NVIDIA H200", "9.0")).unwrap_err();
        assert!(
            e.contains("10.0") && e.contains("--device-profile b200"),
            "{e}"
        );
        assert!(check_device(Recipe::Mxfp8, &dev("model:h200", "")).is_err());
        assert!(check_device(Recipe::Delayed, &dev("NVIDIA H200", "9.0")).is_ok());
        assert!(check_device(Recipe::Nvfp4, &dev("model:b200", "")).is_ok());
        let e = check_device(Recipe::Nvfp4, &dev("NVIDIA H200", "9.0")).unwrap_err();
        assert!(e.contains("--recipe nvfp4"), "{e}");
        assert!(check_device(Recipe::Nvfp4, &dev("model:h100", "")).is_err());
    }
}
