//! Weights that stay in the GGUF file's pages: a tensor's blocks borrowed
//! from a read-only mapping of the file instead of copied into the heap.
//!
//! Copying a gigabyte of weights into fresh memory costs the kernel a page
//! zeroing and a page-cache copy per page, which was most of a warm load
//! and varied with what the machine had run before (0.35 s to 1.4 s).
//! Mapped, a load costs the page tables only, and the pages are the page
//! cache's: shared with any other process that maps the same file.
//!
//! candle computes on a [`QuantizedType`], which [`MappedBlocks`]
//! implements over the mapping. The one mutating method, `from_float`,
//! moves the blocks into memory of their own first (copy on write), so the
//! file is never written.

use candle_core::quantized::k_quants::{self, GgmlType};
use candle_core::quantized::{GgmlDType, QuantizedType};
use candle_core::{CpuStorage, Result};
use half::f16;
use memmap2::Mmap;
use std::sync::Arc;

/// `n` blocks of `T`: in the mapped file, or owned once written to.
pub(crate) enum MappedBlocks<T> {
    Mapped {
        map: Arc<Mmap>,
        offset: usize,
        n: usize,
    },
    Owned(Vec<T>),
}

impl<T: GgmlType> MappedBlocks<T> {
    /// The `n` blocks at byte `offset` of `map`, or `None` where they do not
    /// lie inside it or are not aligned for `T` (a file with an unusual
    /// `general.alignment`; the caller reads such a tensor instead).
    pub(crate) fn new(map: &Arc<Mmap>, offset: usize, n: usize) -> Option<Self> {
        if std::mem::size_of::<T>() != T::DTYPE.type_size() {
            return None;
        }
        let end = n
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|bytes| offset.checked_add(bytes))?;
        let inside = end <= map.len();
        let aligned = (map.as_ptr() as usize)
            .checked_add(offset)?
            .is_multiple_of(std::mem::align_of::<T>());
        (inside && aligned).then(|| Self::Mapped {
            map: Arc::clone(map),
            offset,
            n,
        })
    }

    fn blocks(&self) -> &[T] {
        match self {
            // SAFETY: `new` checked that the range lies inside the mapping
            // and is aligned for `T`; GGML blocks are plain data (floats and
            // byte arrays) for which every bit pattern is a value; the
            // mapping is read-only and lives as long as `self` holds it.
            Self::Mapped { map, offset, n } => unsafe {
                std::slice::from_raw_parts(map.as_ptr().add(*offset).cast::<T>(), *n)
            },
            Self::Owned(v) => v,
        }
    }

    /// The blocks as a vector of their own, to write to.
    fn owned(&mut self) -> &mut Vec<T> {
        if let Self::Mapped { .. } = self {
            *self = Self::Owned(self.blocks().to_vec());
        }
        match self {
            Self::Owned(v) => v,
            Self::Mapped { .. } => unreachable!("replaced just above"),
        }
    }
}

impl<T: GgmlType + Send + Sync> QuantizedType for MappedBlocks<T> {
    fn dtype(&self) -> GgmlDType {
        T::DTYPE
    }

    fn matmul_t(&self, mkn: (usize, usize, usize), lhs: &[f32], dst: &mut [f32]) -> Result<()> {
        k_quants::matmul(mkn, lhs, self.blocks(), dst)
    }

    fn matmul_t_f16(&self, mkn: (usize, usize, usize), lhs: &[f16], dst: &mut [f16]) -> Result<()> {
        k_quants::matmul_f16(mkn, lhs, self.blocks(), dst)
    }

    fn embedding(&self, ids: &[u32], rows: usize, hidden: usize) -> Result<CpuStorage> {
        if !hidden.is_multiple_of(T::BLCK_SIZE) {
            candle_core::bail!(
                "embedding width {hidden} is not a multiple of {:?} blocks",
                T::DTYPE
            )
        }
        let per_row = hidden / T::BLCK_SIZE;
        let blocks = self.blocks();
        if blocks.len() != rows * per_row {
            candle_core::bail!("{} blocks, expected {rows} rows of {per_row}", blocks.len())
        }
        let mut out = vec![0f32; ids.len() * hidden];
        for (&id, dst) in ids.iter().zip(out.chunks_exact_mut(hidden)) {
            let row = id as usize;
            if row >= rows {
                candle_core::bail!("embedding id {row} is out of range for {rows} rows")
            }
            T::to_float(&blocks[row * per_row..(row + 1) * per_row], dst);
        }
        Ok(CpuStorage::F32(out))
    }

    fn dequantize(&self, elem_count: usize) -> Result<CpuStorage> {
        let mut out = vec![0f32; elem_count];
        T::to_float(self.blocks(), &mut out);
        Ok(CpuStorage::F32(out))
    }

    fn storage_size_in_bytes(&self) -> usize {
        std::mem::size_of_val(self.blocks())
    }

    fn as_ptr(&self) -> *const u8 {
        self.blocks().as_ptr().cast()
    }

    fn block_size(&self) -> usize {
        T::BLCK_SIZE
    }

    fn from_float(&mut self, xs: &[f32]) {
        T::from_float(xs, self.owned())
    }

    fn from_float_imatrix(&mut self, xs: &[f32], imatrix: &[f32], n_per_row: usize) {
        T::from_float_imatrix(xs, self.owned(), imatrix, n_per_row)
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self.blocks())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::k_quants::BlockQ4K;
    use std::io::Write;

    fn mapped_file(bytes: &[u8]) -> Arc<Mmap> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        // SAFETY: the temporary file is this test's own and is not changed
        // while mapped.
        Arc::new(unsafe { Mmap::map(&f) }.unwrap())
    }

    #[test]
    fn blocks_outside_the_file_or_misaligned_are_refused() {
        let size = std::mem::size_of::<BlockQ4K>();
        let map = mapped_file(&vec![0u8; 4 * size]);
        assert!(MappedBlocks::<BlockQ4K>::new(&map, 0, 4).is_some());
        assert!(MappedBlocks::<BlockQ4K>::new(&map, size, 3).is_some());
        assert!(MappedBlocks::<BlockQ4K>::new(&map, size, 4).is_none());
        assert!(MappedBlocks::<BlockQ4K>::new(&map, 1, 1).is_none());
        assert!(MappedBlocks::<BlockQ4K>::new(&map, usize::MAX, 1).is_none());
        assert!(MappedBlocks::<f32>::new(&map, 2, 1).is_none());
    }

    #[test]
    fn writing_copies_the_blocks_and_leaves_the_file_alone() {
        let values: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let map = mapped_file(&bytes);
        let mut t = MappedBlocks::<f32>::new(&map, 0, 8).unwrap();
        let CpuStorage::F32(read) = t.dequantize(8).unwrap() else {
            panic!("f32 storage")
        };
        assert_eq!(read, values);
        t.from_float(&[1.0; 8]);
        let CpuStorage::F32(written) = t.dequantize(8).unwrap() else {
            panic!("f32 storage")
        };
        assert_eq!(written, vec![1.0; 8]);
        assert_eq!(&map[..], &bytes[..], "the mapping is unchanged");
    }
}
