//! Raw device buffers. The bench juggles dozens of differently typed views of a few large
//! allocations and hands raw pointers to cuBLASLt, so it owns plain byte buffers.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, result, sys};

use crate::error::BenchError;

/// An owned device allocation.
pub struct DevBuf {
    ptr: sys::CUdeviceptr,
    bytes: u64,
    ctx: Arc<CudaContext>,
}

impl DevBuf {
    pub(crate) fn new(ctx: &Arc<CudaContext>, bytes: u64) -> Result<DevBuf, BenchError> {
        ctx.bind_to_thread().map_err(BenchError::driver)?;
        // Never allocate 0 bytes: keep a valid, distinct pointer for empty tensors.
        let size = bytes.max(256);
        // SAFETY: plain allocation; freed in Drop.
        let ptr =
            unsafe { result::malloc_sync(size as usize) }.map_err(|e| BenchError::OutOfMemory {
                bytes: size,
                detail: format!("{e:?}"),
            })?;
        Ok(DevBuf {
            ptr,
            bytes: size,
            ctx: ctx.clone(),
        })
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The address `offset` bytes in.
    pub fn at(&self, offset: u64) -> u64 {
        self.ptr + offset
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Sets every byte to `value` (0xFF poisons bf16 as NaN).
    pub fn fill_bytes(&self, stream: &CudaStream, value: u8) -> Result<(), BenchError> {
        // SAFETY: the whole allocation is ours.
        unsafe { result::memset_d8_async(self.ptr, value, self.bytes as usize, stream.cu_stream()) }
            .map_err(BenchError::driver)
    }

    /// Sets every byte to zero.
    pub fn zero(&self, stream: &CudaStream) -> Result<(), BenchError> {
        self.fill_bytes(stream, 0)
    }

    /// An error unless `[offset, offset + len)` lies inside the buffer.
    pub(crate) fn check_range(&self, offset: u64, len: u64, what: &str) -> Result<(), BenchError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes => Ok(()),
            _ => Err(BenchError::Internal(format!(
                "{what} of {len} bytes at {offset} past a {}-byte buffer",
                self.bytes
            ))),
        }
    }

    /// Copies `out.len()` values from the start of the buffer (synchronizes).
    pub fn read_into<T: bytemuck::Pod>(
        &self,
        stream: &CudaStream,
        out: &mut [T],
    ) -> Result<(), BenchError> {
        self.read_at(stream, 0, out)
    }

    /// Copies `out.len()` values starting `offset` bytes in (synchronizes). `T: Pod`: any bit
    /// pattern the device holds is a valid `T`.
    pub fn read_at<T: bytemuck::Pod>(
        &self,
        stream: &CudaStream,
        offset: u64,
        out: &mut [T],
    ) -> Result<(), BenchError> {
        self.check_range(offset, std::mem::size_of_val(out) as u64, "read")?;
        stream.synchronize().map_err(BenchError::driver)?;
        // SAFETY: the range lies inside this live allocation (checked above), the stream is
        // idle, and every bit pattern is a valid `T` (Pod).
        unsafe { result::memcpy_dtoh_sync(out, self.ptr + offset) }.map_err(BenchError::driver)
    }

    /// Copies `data` to `offset` bytes in (synchronous).
    pub fn write_at<T: bytemuck::Pod>(
        &self,
        stream: &CudaStream,
        offset: u64,
        data: &[T],
    ) -> Result<(), BenchError> {
        self.check_range(offset, std::mem::size_of_val(data) as u64, "write")?;
        stream.synchronize().map_err(BenchError::driver)?;
        // SAFETY: the range lies inside this live allocation (checked above); the stream is idle.
        unsafe { result::memcpy_htod_sync(self.ptr + offset, data) }.map_err(BenchError::driver)
    }

    /// Queues a copy of `bytes` bytes from `src` at `src_offset` to `dst_offset` in this buffer.
    pub fn copy_from(
        &self,
        stream: &CudaStream,
        dst_offset: u64,
        src: &DevBuf,
        src_offset: u64,
        bytes: u64,
    ) -> Result<(), BenchError> {
        if bytes == 0 {
            return Ok(());
        }
        self.check_range(dst_offset, bytes, "copy")?;
        src.check_range(src_offset, bytes, "copy")?;
        // SAFETY: both ranges lie inside live allocations (checked above), which outlive the
        // queued copy because every buffer is freed only after the stream is synchronized.
        unsafe {
            result::memcpy_dtod_async(
                self.ptr + dst_offset,
                src.ptr + src_offset,
                bytes as usize,
                stream.cu_stream(),
            )
        }
        .map_err(BenchError::driver)
    }

    /// Queues zeroing `bytes` bytes at `offset`.
    pub fn zero_range(
        &self,
        stream: &CudaStream,
        offset: u64,
        bytes: u64,
    ) -> Result<(), BenchError> {
        self.check_range(offset, bytes, "zero")?;
        // SAFETY: the range lies inside this live allocation (checked above).
        unsafe { result::memset_d8_async(self.ptr + offset, 0, bytes as usize, stream.cu_stream()) }
            .map_err(BenchError::driver)
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_sync in `new`, freed once.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}
