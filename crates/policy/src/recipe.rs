//! FP8 recipes: which scaling scheme a policy's measurements used.
//!
//! Thresholds differ per recipe (per-tensor scaling has cheaper casts and a faster GEMM than
//! blockwise, current scaling pays an extra amax pass), so a trainer should use a policy made
//! for its own recipe. The names are Megatron's `--fp8-recipe` values; `current` is accepted as
//! the reference tool's name for `tensorwise` (`TE_LAYER_PERF_FP8_RECIPE=blockwise|delayed|current`).

use std::fmt;
use std::str::FromStr;

/// An FP8 recipe, named as Megatron's `--fp8-recipe` names it.
///
/// ```
/// use fp8_policy::Recipe;
///
/// assert_eq!("current".parse::<Recipe>()?, Recipe::Tensorwise);
/// assert_eq!(Recipe::Delayed.te_class(), "DelayedScaling");
/// assert!("fp4".parse::<Recipe>().is_err());
/// # Ok::<(), fp8_policy::UnknownRecipe>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Recipe {
    /// TE `Float8BlockScaling`: 1x128 activation/gradient blocks, 128x128 weight blocks.
    Blockwise,
    /// TE `Float8CurrentScaling`: one scale per tensor from this step's amax.
    Tensorwise,
    /// TE `DelayedScaling`: one scale per tensor from the amax history of earlier steps.
    Delayed,
    /// TE `MXFP8BlockScaling`: 1x32 blocks with E8M0 scales (Blackwell, sm_100 and newer).
    Mxfp8,
    /// TE `NVFP4BlockScaling`: FP4 (E2M1) values in 1x16 blocks with E4M3 scales under a
    /// per-tensor FP32 scale, weights in 16x16 blocks (Blackwell; Megatron's
    /// `fp4_quantization_recipe`, `--fp4-recipe`).
    Nvfp4,
}

impl Recipe {
    /// Every recipe, in the order `--help` lists them.
    pub const ALL: [Recipe; 5] = [
        Recipe::Blockwise,
        Recipe::Tensorwise,
        Recipe::Delayed,
        Recipe::Mxfp8,
        Recipe::Nvfp4,
    ];

    /// The canonical name (`blockwise`, `tensorwise`, `delayed`, `mxfp8`, `nvfp4`).
    pub const fn name(self) -> &'static str {
        match self {
            Recipe::Blockwise => "blockwise",
            Recipe::Tensorwise => "tensorwise",
            Recipe::Delayed => "delayed",
            Recipe::Mxfp8 => "mxfp8",
            Recipe::Nvfp4 => "nvfp4",
        }
    }

    /// The Transformer Engine recipe class.
    pub const fn te_class(self) -> &'static str {
        match self {
            Recipe::Blockwise => "Float8BlockScaling",
            Recipe::Tensorwise => "Float8CurrentScaling",
            Recipe::Delayed => "DelayedScaling",
            Recipe::Mxfp8 => "MXFP8BlockScaling",
            Recipe::Nvfp4 => "NVFP4BlockScaling",
        }
    }

    /// Runs on Blackwell (sm_100) and newer only: MXFP8 and NVFP4.
    pub const fn blackwell_only(self) -> bool {
        matches!(self, Recipe::Mxfp8 | Recipe::Nvfp4)
    }

    /// An FP4 recipe (Megatron's `fp4_quantization_recipe`), as opposed to an FP8 one.
    pub const fn is_fp4(self) -> bool {
        matches!(self, Recipe::Nvfp4)
    }

    /// One scale per tensor (tensorwise, delayed), as opposed to per block.
    pub const fn per_tensor(self) -> bool {
        matches!(self, Recipe::Tensorwise | Recipe::Delayed)
    }

    /// The recipe a provenance label names: its first word (`delayed fp8_format=hybrid ...`).
    pub fn from_label(label: &str) -> Option<Recipe> {
        label.split_whitespace().next()?.parse().ok()
    }
}

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A recipe name that is not one of [`Recipe::ALL`] (or `current`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownRecipe(String);

impl fmt::Display for UnknownRecipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown FP8 recipe `{}`: use blockwise, tensorwise (alias current), delayed, mxfp8 or nvfp4",
            self.0
        )
    }
}

impl std::error::Error for UnknownRecipe {}

impl FromStr for Recipe {
    type Err = UnknownRecipe;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "blockwise" => Ok(Recipe::Blockwise),
            "tensorwise" | "current" => Ok(Recipe::Tensorwise),
            "delayed" => Ok(Recipe::Delayed),
            "mxfp8" => Ok(Recipe::Mxfp8),
            "nvfp4" => Ok(Recipe::Nvfp4),
            _ => Err(UnknownRecipe(s.to_owned())),
        }
    }
}

/// FP8 formats, as Megatron's `--fp8-format` and TE's `Format` name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fp8Format {
    /// E4M3 everywhere.
    E4m3,
    /// E4M3 forward (activations, weights), E5M2 backward (gradients).
    Hybrid,
}

impl Fp8Format {
    /// `e4m3` or `hybrid`.
    pub const fn name(self) -> &'static str {
        match self {
            Fp8Format::E4m3 => "e4m3",
            Fp8Format::Hybrid => "hybrid",
        }
    }
}

impl FromStr for Fp8Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "e4m3" => Ok(Fp8Format::E4m3),
            "hybrid" => Ok(Fp8Format::Hybrid),
            _ => Err(format!(
                "unknown FP8 format `{s}`: use e4m3 or hybrid (E5M2 gradients)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_current_is_tensorwise() {
        for r in Recipe::ALL {
            assert_eq!(r.name().parse::<Recipe>(), Ok(r));
            assert_eq!(r.to_string().to_uppercase().parse::<Recipe>(), Ok(r));
        }
        assert_eq!("current".parse::<Recipe>(), Ok(Recipe::Tensorwise));
        let e = "hybrid".parse::<Recipe>().unwrap_err().to_string();
        assert!(e.contains("hybrid") && e.contains("alias current"), "{e}");
    }

    #[test]
    fn labels_name_their_recipe_by_the_first_word() {
        assert_eq!(
            Recipe::from_label("delayed fp8_format=hybrid amax_history_len=1024"),
            Some(Recipe::Delayed)
        );
        assert_eq!(Recipe::from_label("blockwise"), Some(Recipe::Blockwise));
        assert_eq!(Recipe::from_label(""), None);
        assert_eq!(Recipe::from_label("fp4 x"), None);
    }
}
