//! A GGUF file's tensors as the block storage candle computes on.
//!
//! candle's own reader reads each tensor into a byte buffer and copies that
//! into a vector of blocks, one tensor after another: two copies and twice
//! the page faults for a gigabyte of weights, on one thread. Here the file
//! is mapped and each tensor borrows its blocks from the mapping
//! ([`crate::mapped`]): no copy at all. Where the file cannot be mapped, or
//! a tensor's blocks are misaligned in it, the tensor is read once,
//! straight into its final vector, in parallel on the current rayon pool.

use crate::gemv::dispatch;
use crate::mapped::MappedBlocks;
use candle_core::quantized::gguf_file::{Content, TensorInfo};
use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8K, BlockQ8_0, BlockQ8_1, GgmlType,
};
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use half::{bf16, f16};
use memmap2::Mmap;
use rayon::prelude::*;
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

/// Where a loaded model's weights live.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WeightLoading {
    /// Borrowed from a read-only mapping of the file (the default): a load
    /// costs the page tables only, and processes running the same model
    /// share its pages.
    #[default]
    Map,
    /// Read into memory of the process's own, on huge pages where the
    /// kernel allows: a slower load (every page is fresh memory), and a
    /// few per cent faster generation (fewer TLB misses).
    Read,
}

/// The tensors named `names` of `file` (whose header is `content`), mapped
/// or read as `how` says (read where mapping fails). A missing or
/// out-of-bounds tensor is an error naming it.
pub(crate) fn load_tensors(
    file: &File,
    content: &Content,
    names: &[String],
    how: WeightLoading,
) -> Result<HashMap<String, QTensor>, String> {
    let map = match how {
        WeightLoading::Map => map_file(file),
        WeightLoading::Read => None,
    };
    tensors(file, map.as_ref(), content, names)
}

/// [`load_tensors`] from `map` where it is given, else from reads.
fn tensors(
    file: &File,
    map: Option<&Arc<Mmap>>,
    content: &Content,
    names: &[String],
) -> Result<HashMap<String, QTensor>, String> {
    let file_len = file.metadata().map_err(|e| e.to_string())?.len();
    names
        .par_iter()
        .map(|name| {
            let info = content
                .tensor_infos
                .get(name)
                .ok_or_else(|| format!("tensor {name}: not in the file"))?;
            read_tensor(file, map, info, content.tensor_data_offset, file_len)
                .map(|t| (name.clone(), t))
                .map_err(|e| format!("tensor {name}: {e}"))
        })
        .collect()
}

/// The whole file mapped read-only, or `None` where mapping fails (then the
/// tensors are read).
fn map_file(file: &File) -> Option<Arc<Mmap>> {
    // SAFETY: a mapping's contents change if the file is written while it
    // is mapped, and reading past a shortened file faults. The model cache
    // only ever replaces a file by renaming a finished one over it, which
    // leaves this mapping on the old file; a user's own model file is
    // theirs not to rewrite under a running model, as with llama.cpp, which
    // maps it too.
    let map = unsafe { Mmap::map(file) }.ok()?;
    // Start reading the whole file in the background where it is not in the
    // page cache yet; the load's first pass over the weights then waits
    // less.
    let _ = map.advise(memmap2::Advice::WillNeed);
    Some(Arc::new(map))
}

fn read_tensor(
    file: &File,
    map: Option<&Arc<Mmap>>,
    info: &TensorInfo,
    data_offset: u64,
    file_len: u64,
) -> Result<QTensor, String> {
    let dtype = info.ggml_dtype;
    let elems = info.shape.elem_count();
    let block = dtype.block_size();
    if !elems.is_multiple_of(block) {
        return Err(format!(
            "{elems} values are not a whole number of {dtype:?} blocks ({block})"
        ));
    }
    let bytes = (elems / block) as u64 * dtype.type_size() as u64;
    let start = data_offset
        .checked_add(info.offset)
        .filter(|s| s.checked_add(bytes).is_some_and(|end| end <= file_len))
        .ok_or_else(|| {
            format!(
                "needs {bytes} bytes at offset {} past the data start {data_offset}; the file has {file_len}",
                info.offset
            )
        })?;
    let n = elems / block;
    macro_rules! read {
        ($t:ty) => {
            match map.and_then(|m| MappedBlocks::<$t>::new(m, usize::try_from(start).ok()?, n)) {
                Some(mapped) => QStorage::Cpu(Box::new(mapped)),
                None => QStorage::Cpu(Box::new(read_blocks::<$t>(file, start, n)?)),
            }
        };
    }
    let storage = dispatch!(dtype, read);
    QTensor::new(storage, info.shape.dims().to_vec()).map_err(|e| e.to_string())
}

/// `n` blocks of `T` from `file` at byte offset `at`.
fn read_blocks<T: GgmlType>(file: &File, at: u64, n: usize) -> Result<Vec<T>, String> {
    if std::mem::size_of::<T>() != T::DTYPE.type_size() {
        return Err(format!("{:?} blocks are not stored as laid out", T::DTYPE));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(n).map_err(|e| e.to_string())?;
    // SAFETY: GGML block types are plain data (floats and byte arrays), for
    // which all-zero bytes are a valid value, and the allocation has the
    // layout of `n` values of `T`, so the vector may own and free it.
    // Zeroed memory comes from the allocator as untouched pages: no pass
    // over a gigabyte before the read fills it.
    let mut blocks = unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<T>();
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Vec::from_raw_parts(ptr, n, n)
    };
    advise_huge_pages(&mut blocks);
    // SAFETY: the `n` values are initialized; any bytes read into them are
    // again valid plain data; the byte view covers exactly the vector.
    let buf = unsafe {
        std::slice::from_raw_parts_mut(
            blocks.as_mut_ptr().cast::<u8>(),
            n * std::mem::size_of::<T>(),
        )
    };
    read_exact_at(file, buf, at).map_err(|e| e.to_string())?;
    Ok(blocks)
}

/// Ask Linux to back `v`'s untouched pages with 2 MiB pages where it can:
/// a gigabyte of weights then costs hundreds of page faults instead of a
/// quarter million (most of a model's load time was the kernel's), and a
/// token's pass over the weights needs far fewer TLB entries. A hint only;
/// where transparent huge pages are off nothing changes.
#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(v: &mut [T]) {
    const HUGE: usize = 2 << 20;
    let start = v.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(v);
    let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if last > first {
        // SAFETY: the range lies inside `v`'s allocation, which this
        // function borrows mutably; MADV_HUGEPAGE changes how the pages are
        // backed, never their contents.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            )
        };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_: &mut [T]) {}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, at)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut at: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, at)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                at += n as u64;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::gguf_file;
    use candle_core::{Device, Tensor};
    use std::io::{Seek, SeekFrom, Write};

    fn quantized(dtype: GgmlDType, n: usize, k: usize) -> QTensor {
        let data: Vec<f32> = (0..n * k)
            .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0)
            .collect();
        let t = Tensor::from_vec(data, (n, k), &Device::Cpu).unwrap();
        QTensor::quantize(&t, dtype).unwrap()
    }

    fn written(tensors: &[(&str, &QTensor)]) -> (tempfile::NamedTempFile, Content) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        gguf_file::write(f.as_file_mut(), &[], tensors).unwrap();
        f.as_file_mut().flush().unwrap();
        let mut reader = std::io::BufReader::new(f.reopen().unwrap());
        let content = Content::read(&mut reader).unwrap();
        (f, content)
    }

    fn bytes(t: &QTensor) -> Vec<u8> {
        t.data().unwrap().into_owned()
    }

    #[test]
    fn tensors_read_back_as_candle_reads_them() {
        let (a, b, c) = (
            quantized(GgmlDType::Q4K, 8, 512),
            quantized(GgmlDType::Q6K, 3, 256),
            quantized(GgmlDType::F32, 2, 5),
        );
        let (f, content) = written(&[("a", &a), ("b", &b), ("c", &c)]);
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let map = map_file(f.as_file()).expect("a temporary file maps");
        let mapped = tensors(f.as_file(), Some(&map), &content, &names).unwrap();
        let read = tensors(f.as_file(), None, &content, &names).unwrap();
        let mut file = f.reopen().unwrap();
        let inside = map.as_ptr_range();
        for name in &names {
            let theirs = content.tensor(&mut file, name, &Device::Cpu).unwrap();
            for (how, ours) in [("mapped", &mapped[name]), ("read", &read[name])] {
                assert_eq!(ours.dtype(), theirs.dtype(), "{name}, {how}");
                assert_eq!(ours.shape(), theirs.shape(), "{name}, {how}");
                assert_eq!(bytes(ours), bytes(&theirs), "{name}, {how}");
            }
            // The mapped tensor's blocks are the file's pages, not a copy.
            let ptr = mapped[name].data().unwrap().as_ptr();
            assert!(inside.contains(&ptr), "{name} is not in the mapping");
            assert!(!inside.contains(&read[name].data().unwrap().as_ptr()));
        }
    }

    #[test]
    fn mapped_weights_compute_as_read_ones() {
        let w = quantized(GgmlDType::Q4K, 8, 512);
        let (f, content) = written(&[("w", &w)]);
        let names = ["w".to_string()];
        let map = map_file(f.as_file()).unwrap();
        let mut mapped = tensors(f.as_file(), Some(&map), &content, &names).unwrap();
        let mut read = tensors(f.as_file(), None, &content, &names).unwrap();
        let (mapped, read) = (mapped.remove("w").unwrap(), read.remove("w").unwrap());
        let dense = |t: &QTensor| {
            t.dequantize(&Device::Cpu)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap()
        };
        assert_eq!(dense(&mapped), dense(&read));
        let x: Vec<f32> = (0..2 * 512).map(|i| (i % 13) as f32 / 13.0).collect();
        let x = Tensor::from_vec(x, (2, 512), &Device::Cpu).unwrap();
        let product = |t: QTensor| {
            let q = candle_core::quantized::QMatMul::from_qtensor(t).unwrap();
            let y = candle_core::Module::forward(&q, &x).unwrap();
            y.to_vec2::<f32>().unwrap()
        };
        assert_eq!(product(mapped), product(read));
    }

    #[test]
    fn a_missing_or_truncated_tensor_is_an_error_naming_it() {
        let a = quantized(GgmlDType::Q4K, 4, 256);
        let (f, content) = written(&[("a", &a)]);
        let err = load_tensors(
            f.as_file(),
            &content,
            &["b".to_string()],
            WeightLoading::Map,
        )
        .unwrap_err();
        assert!(err.contains("tensor b"), "{err}");
        // Cut the file inside the tensor's data.
        let mut file = f.reopen().unwrap();
        let len = file.seek(SeekFrom::End(0)).unwrap();
        file.set_len(len - 100).unwrap();
        let err = load_tensors(
            f.as_file(),
            &content,
            &["a".to_string()],
            WeightLoading::Map,
        )
        .unwrap_err();
        assert!(err.contains("tensor a") && err.contains("bytes"), "{err}");
    }
}
