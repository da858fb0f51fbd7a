//! Writing safetensors files atomically: the bytes go to a temporary file in the target's
//! directory, which is flushed to disk and then renamed over the target, and the directory
//! is synced. A crash at any point leaves either the old file or the complete new one at
//! the target path, never a partial file (the next round reads that path).

use crate::AverageError;
use crate::dtype::Dtype;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Output buffer size: large writes keep the averaging loop from waiting on small syscalls.
const BUFFER_BYTES: usize = 8 << 20;

/// Runs `fill` with a writer into a temporary file next to `out`, then makes it `out`
/// atomically. Returns the bytes written and `fill`'s result. When `fill` fails, the
/// temporary file is removed and `out` is untouched.
pub fn atomically<T>(
    out: &Path,
    fill: impl FnOnce(&mut dyn Write) -> Result<T, AverageError>,
) -> Result<(u64, T), AverageError> {
    let staged = Staged::new(out)?;
    let mut w = staged.writer();
    let value = fill(&mut w)?;
    let bytes = staged.finish(w)?;
    staged.commit()?;
    Ok((bytes, value))
}

/// A file being written under a temporary name next to its target, made the target only by
/// [`Staged::commit`]. Dropped without a commit, the temporary file is removed. Two staged
/// files let one pass write two outputs (a consolidated checkpoint and its optimizer state)
/// and rename them only once both are complete.
pub struct Staged {
    tmp: tempfile::NamedTempFile,
    out: PathBuf,
    dir: PathBuf,
}

/// A buffered writer into a [`Staged`] file that counts the bytes written.
pub type StagedWriter<'a> = Counting<BufWriter<&'a File>>;

impl Staged {
    /// Creates the temporary file in `out`'s directory (a rename is atomic only within one
    /// file system).
    pub fn new(out: &Path) -> Result<Staged, AverageError> {
        let name = out
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| AverageError::BadOutput(out.to_path_buf()))?;
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(io_at(out))?;
        Ok(Staged {
            tmp,
            out: out.to_path_buf(),
            dir,
        })
    }

    /// A writer into the temporary file.
    pub fn writer(&self) -> StagedWriter<'_> {
        Counting {
            inner: BufWriter::with_capacity(BUFFER_BYTES, self.tmp.as_file()),
            bytes: 0,
        }
    }

    /// Flushes `w` and syncs the temporary file to disk; returns the bytes written.
    pub fn finish(&self, mut w: StagedWriter<'_>) -> Result<u64, AverageError> {
        let bytes = w.bytes;
        w.inner.flush().map_err(io_at(&self.out))?;
        drop(w);
        self.tmp.as_file().sync_all().map_err(io_at(&self.out))?;
        Ok(bytes)
    }

    /// Renames the (finished) temporary file over the target and syncs the directory.
    pub fn commit(self) -> Result<(), AverageError> {
        let Staged { tmp, out, dir } = self;
        tmp.persist(&out).map_err(|e| AverageError::Io {
            path: out.clone(),
            error: e.error,
        })?;
        // The rename is durable only once the directory entry is on disk.
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// The error of an IO failure on `path`, for `map_err`.
pub(crate) fn io_at(path: &Path) -> impl Fn(std::io::Error) -> AverageError + '_ {
    move |error| AverageError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// A writer that counts the bytes written through it.
pub struct Counting<W: Write> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A tensor to write.
#[derive(Clone, Debug)]
pub struct TensorData<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its little-endian bytes (product(shape) x dtype size).
    pub bytes: &'a [u8],
}

/// Builds a safetensors header for tensors laid out in the given order. The JSON is padded
/// with spaces to a multiple of 8 bytes so the data section is aligned, as the reference
/// writer does.
pub fn header_bytes(
    metadata: Option<&BTreeMap<String, String>>,
    tensors: &[(&str, Dtype, Vec<u64>, u64)],
) -> Vec<u8> {
    let mut obj = serde_json::Map::new();
    if let Some(m) = metadata {
        obj.insert("__metadata__".into(), serde_json::json!(m));
    }
    let mut offset = 0u64;
    for (name, dtype, shape, len) in tensors {
        obj.insert(
            (*name).to_string(),
            serde_json::json!({"dtype": dtype.name(), "shape": shape, "data_offsets": [offset, offset + len]}),
        );
        offset += len;
    }
    let mut json = serde_json::Value::Object(obj).to_string().into_bytes();
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out
}

/// Writes a safetensors file atomically (used by tests, the benchmark and tools that
/// produce checkpoints).
pub fn write_safetensors(
    path: &Path,
    metadata: Option<&BTreeMap<String, String>>,
    tensors: &[TensorData<'_>],
) -> Result<u64, AverageError> {
    let layout: Vec<_> = tensors
        .iter()
        .map(|t| (t.name, t.dtype, t.shape.clone(), t.bytes.len() as u64))
        .collect();
    let header = header_bytes(metadata, &layout);
    let (n, ()) = atomically(path, |w| {
        let err = |error| AverageError::Io {
            path: path.to_path_buf(),
            error,
        };
        w.write_all(&header).map_err(err)?;
        for t in tensors {
            w.write_all(t.bytes).map_err(err)?;
        }
        Ok(())
    })?;
    Ok(n)
}
