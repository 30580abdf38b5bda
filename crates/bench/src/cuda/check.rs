//! Host-side correctness checks on sampled entries, in f64.
//!
//! A full FP64 reference of a 16k x 8k x 59k GEMM is hours of CPU; a random sample of output
//! entries, each recomputed exactly from the (dequantized) operands, catches every layout or
//! stride error we know of (they corrupt whole blocks) in milliseconds.

use cudarc::driver::{CudaStream, sys};

use crate::cuda::buffer::DevBuf;
use crate::error::BenchError;
use crate::layout::{blk128_scale_index, vec128_scale_index};

/// Decodes an E5M2 byte (the top byte of an IEEE half).
pub fn e5m2_to_f32(b: u8) -> f32 {
    half::f16::from_bits(u16::from(b) << 8).to_f32()
}

/// Decodes an FP8 byte in E4M3 or E5M2.
pub fn fp8_to_f32(b: u8, e5m2: bool) -> f32 {
    if e5m2 { e5m2_to_f32(b) } else { e4m3_to_f32(b) }
}

/// The per-tensor quantization factor TE computes from an amax: `fmax / amax`, rounded down to a
/// power of two with `pow2`; 1 for an amax of 0.
pub fn expected_tensor_scale(amax: f32, fmax: f32, pow2: bool) -> f32 {
    if amax.is_nan() || amax <= 0.0 || amax.is_infinite() {
        return 1.0;
    }
    let s = (fmax / amax).min(f32::MAX);
    if pow2 {
        f32::from_bits(s.to_bits() & 0xff80_0000)
    } else {
        s
    }
}

/// `len` FP8 values at `addr`, dequantized with one per-tensor `scale_inv`.
pub fn fp8_scalar(
    rd: &DeviceReader<'_>,
    addr: u64,
    len: u64,
    e5m2: bool,
    scale_inv: f32,
) -> Result<Vec<f64>, BenchError> {
    let mut raw = vec![0u8; len as usize];
    rd.raw(addr, &mut raw)?;
    Ok(raw
        .into_iter()
        .map(|b| f64::from(fp8_to_f32(b, e5m2)) * f64::from(scale_inv))
        .collect())
}

/// Decodes an E4M3 byte.
pub fn e4m3_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((b >> 3) & 0x0f) as i32;
    let man = (b & 0x07) as f32;
    if exp == 0x0f && (b & 0x07) == 0x07 {
        return f32::NAN;
    }
    if exp == 0 {
        sign * man / 8.0 * 2f32.powi(-6)
    } else {
        sign * (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    }
}

/// The dequantization scale the kernels compute for a block with absolute maximum `amax`.
pub fn expected_scale(amax: f32, pow2: bool) -> f32 {
    if amax.is_nan() || amax <= 0.0 || amax.is_infinite() {
        return 1.0;
    }
    let s = amax / 448.0;
    if pow2 {
        2f32.powi(s.log2().ceil() as i32)
    } else {
        s
    }
}

fn bf16_to_f32(bits: u16) -> f32 {
    half::bf16::from_bits(bits).to_f32()
}

/// Reads of device memory for the checks, each verified to lie inside one of the point's live
/// allocations before it is issued: a wrong offset in a check is an internal error, never a read
/// of someone else's memory.
pub struct DeviceReader<'a> {
    stream: &'a CudaStream,
    /// `[start, end)` byte ranges of the allocations reads may touch.
    ranges: Vec<(u64, u64)>,
}

impl<'a> DeviceReader<'a> {
    /// A reader over `bufs`, all live for `'a`.
    pub fn new(stream: &'a CudaStream, bufs: impl IntoIterator<Item = &'a DevBuf>) -> Self {
        DeviceReader {
            stream,
            ranges: bufs
                .into_iter()
                .map(|b| (b.ptr(), b.ptr() + b.bytes()))
                .collect(),
        }
    }

    /// Checks that `[addr, addr + bytes)` lies inside one allocation.
    fn check(&self, addr: u64, bytes: u64) -> Result<(), BenchError> {
        let end = addr.checked_add(bytes);
        match end {
            Some(end) if self.ranges.iter().any(|&(s, e)| s <= addr && end <= e) => Ok(()),
            _ => Err(BenchError::Internal(format!(
                "check read of {bytes} bytes at {addr:#x} is outside the point's buffers"
            ))),
        }
    }

    /// Reads `len` contiguous bf16 values at `addr`.
    pub fn bf16(&self, addr: u64, len: u64) -> Result<Vec<f32>, BenchError> {
        let mut host = vec![0u16; len as usize];
        self.raw(addr, &mut host)?;
        Ok(host.into_iter().map(bf16_to_f32).collect())
    }

    /// [`DeviceReader::bf16`], widened to f64 for the host references.
    pub fn bf16_f64(&self, addr: u64, len: u64) -> Result<Vec<f64>, BenchError> {
        Ok(self.bf16(addr, len)?.into_iter().map(f64::from).collect())
    }

    /// [`DeviceReader::bf16_column`], widened to f64 for the host references.
    pub fn bf16_column_f64(
        &self,
        base: u64,
        cols: u64,
        col: u64,
        row0: u64,
        len: u64,
    ) -> Result<Vec<f64>, BenchError> {
        Ok(self
            .bf16_column(base, cols, col, row0, len)?
            .into_iter()
            .map(f64::from)
            .collect())
    }

    /// Reads raw values at `addr`.
    pub fn raw<T: bytemuck::Pod>(&self, addr: u64, out: &mut [T]) -> Result<(), BenchError> {
        self.check(addr, std::mem::size_of_val(out) as u64)?;
        // SAFETY: the range was checked to lie inside a live allocation just above.
        unsafe { read_raw(self.stream, addr, out) }
    }

    /// Reads `len` bf16 values of a row-major matrix's column `col` (`cols` columns) from row
    /// `row0`.
    pub fn bf16_column(
        &self,
        base: u64,
        cols: u64,
        col: u64,
        row0: u64,
        len: u64,
    ) -> Result<Vec<f32>, BenchError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        if col >= cols {
            return Err(BenchError::Internal(format!("column {col} of {cols}")));
        }
        let first = base + (row0 * cols + col) * 2;
        let span = ((len - 1) * cols + 1) * 2;
        self.check(first, span)?;
        // SAFETY: the first and the last element read were checked to lie inside one live
        // allocation; every element in between lies between them.
        unsafe { read_bf16_column(self.stream, base, cols, col, row0, len) }
    }
}

/// Reads `len` bf16 values of a row-major matrix's column `col` (`cols` columns) from row `row0`.
///
/// # Safety
/// The `len` elements at `base + ((row0 + i) * cols + col) * 2` must lie inside a live device
/// allocation of the stream's context.
unsafe fn read_bf16_column(
    stream: &CudaStream,
    base: u64,
    cols: u64,
    col: u64,
    row0: u64,
    len: u64,
) -> Result<Vec<f32>, BenchError> {
    let mut host = vec![0u16; len as usize];
    stream.synchronize().map_err(BenchError::driver)?;
    // Every field spelled out: the enums have no zero variant, so `mem::zeroed` is invalid.
    let d = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: base + (row0 * cols + col) * 2,
        srcArray: std::ptr::null_mut(),
        srcPitch: (cols * 2) as usize,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
        dstHost: host.as_mut_ptr().cast(),
        dstDevice: 0,
        dstArray: std::ptr::null_mut(),
        dstPitch: 2,
        WidthInBytes: 2,
        Height: len as usize,
    };
    // SAFETY: source rows lie inside a live allocation (this function's contract); the
    // destination has `len` two-byte slots.
    let r = unsafe { sys::cuMemcpy2D_v2(&d) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(BenchError::Driver(format!("cuMemcpy2D: {r:?}")));
    }
    Ok(host.into_iter().map(bf16_to_f32).collect())
}

/// Reads raw values at a device address.
///
/// # Safety
/// `[addr, addr + size_of_val(out))` must lie inside a live device allocation of the stream's
/// context.
unsafe fn read_raw<T: bytemuck::Pod>(
    stream: &CudaStream,
    addr: u64,
    out: &mut [T],
) -> Result<(), BenchError> {
    if out.is_empty() {
        return Ok(());
    }
    stream.synchronize().map_err(BenchError::driver)?;
    // SAFETY: the range lies inside a live allocation (this function's contract), the stream is
    // idle, and any bit pattern is a valid `T` (Pod).
    unsafe { cudarc::driver::result::memcpy_dtoh_sync(out, addr) }.map_err(BenchError::driver)
}

/// A row-major FP8 operand `[rows, cols]` quantized along `cols`, with its scales on the host.
pub struct Fp8Rows<'a> {
    /// Device address of the data.
    pub data: u64,
    /// Rows.
    pub rows: u64,
    /// Columns (the contraction dimension).
    pub cols: u64,
    /// Scales (whole tensor, host copy).
    pub scales: &'a [f32],
    /// 128x128 blocks (weights) instead of 1x128.
    pub blk: bool,
}

impl Fp8Rows<'_> {
    /// Row `r` dequantized.
    pub fn row(&self, rd: &DeviceReader<'_>, r: u64) -> Result<Vec<f64>, BenchError> {
        let mut raw = vec![0u8; self.cols as usize];
        rd.raw(self.data + r * self.cols, &mut raw)?;
        raw.iter()
            .enumerate()
            .map(|(c, &b)| {
                let c = c as u64;
                let si = if self.blk {
                    blk128_scale_index(self.cols, r, c)
                } else {
                    vec128_scale_index(self.rows, r, c)
                };
                let s = *self.scales.get(si as usize).ok_or_else(|| {
                    BenchError::Internal(format!("scale index {si} out of range"))
                })?;
                Ok(f64::from(e4m3_to_f32(b)) * f64::from(s))
            })
            .collect()
    }
}

/// Relative Frobenius error of `got` against `want`.
pub fn rel_err(got: &[f64], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (g - w) * (g - w)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    if den == 0.0 {
        if num == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        (num / den).sqrt()
    }
}

/// Dot product in f64.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A small deterministic generator for sample positions.
pub struct Sampler(u64);

impl Sampler {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Sampler(seed ^ 0xd1b5_4a32_d192_ed03)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e5m2_decoding_and_tensor_scales() {
        assert_eq!(e5m2_to_f32(0x00), 0.0);
        assert_eq!(e5m2_to_f32(0x3c), 1.0);
        assert_eq!(e5m2_to_f32(0x7b), 57344.0);
        assert_eq!(e5m2_to_f32(0xc0), -2.0);
        assert_eq!(fp8_to_f32(0x38, false), 1.0);
        assert_eq!(expected_tensor_scale(448.0, 448.0, false), 1.0);
        assert_eq!(expected_tensor_scale(3.0, 448.0, true), 128.0);
        assert_eq!(expected_tensor_scale(0.0, 448.0, true), 1.0);
        assert!((expected_tensor_scale(3.0, 57344.0, false) - 57344.0 / 3.0).abs() < 1e-2);
    }

    #[test]
    fn e4m3_decoding() {
        assert_eq!(e4m3_to_f32(0x00), 0.0);
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0xb8), -1.0);
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert!(e4m3_to_f32(0x7f).is_nan());
    }

    #[test]
    fn scales() {
        assert_eq!(expected_scale(448.0, true), 1.0);
        assert_eq!(expected_scale(449.0, true), 2.0);
        assert_eq!(expected_scale(224.0, true), 0.5);
        assert_eq!(expected_scale(0.0, true), 1.0);
        assert!((expected_scale(100.0, false) - 100.0 / 448.0).abs() < 1e-9);
    }

    #[test]
    fn errors() {
        assert_eq!(rel_err(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_err(&[1.1], &[1.0]) - 0.1).abs() < 1e-12);
        assert_eq!(rel_err(&[0.0], &[0.0]), 0.0);
        assert!(rel_err(&[1.0], &[0.0]).is_infinite());
        let mut s = Sampler::new(1);
        assert!((0..100).all(|_| s.below(7) < 7));
    }

    /// The division-free power-of-two scale of `dequant_scale` in kernels.cu, restated.
    fn kernel_pow2_scale(amax: f32) -> f32 {
        let e = (amax * (1.0 / 448.0)).to_bits() & 0x7f80_0000;
        if e == 0 {
            return f32::from_bits(0x0080_0000);
        }
        let p = f32::from_bits(e);
        if 448.0 * p >= amax {
            p
        } else if 448.0 * 2.0 * p >= amax {
            2.0 * p
        } else {
            4.0 * p
        }
    }

    /// What the kernel computed before: the correctly rounded quotient, rounded up to a power
    /// of two by its bits (subnormal quotients to 2^-126).
    fn rounded_quotient_pow2(amax: f32) -> f32 {
        let mut u = (amax / 448.0).to_bits();
        if u & 0x007f_ffff != 0 {
            u = (u & 0xff80_0000) + 0x0080_0000;
        }
        f32::from_bits(u)
    }

    #[test]
    fn division_free_pow2_scale_matches_the_rounded_quotient_for_every_bf16() {
        let mut checked = 0;
        for bits in 1u16..0x7f80 {
            let amax = half::bf16::from_bits(bits).to_f32();
            assert_eq!(
                kernel_pow2_scale(amax).to_bits(),
                rounded_quotient_pow2(amax).to_bits(),
                "amax {amax:e}"
            );
            if amax >= 1e-30 {
                assert_eq!(
                    kernel_pow2_scale(amax),
                    expected_scale(amax, true),
                    "amax {amax:e}"
                );
            }
            checked += 1;
        }
        assert_eq!(checked, 0x7f7f);
    }
}
