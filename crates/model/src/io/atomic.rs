//! One file written atomically (`write_atomic`: a temporary file beside it, flushed, then
//! renamed over it), and the helpers `export_set` shares.

use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary name `write_atomic` uses for `path`: fixed (no PID), so a file left by a killed
/// run is overwritten and removed by the next one instead of piling up.
pub fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.join(format!(".{name}.focus-tmp"))
}

pub(crate) fn write_temp(tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(tmp)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed to
/// disk, then renamed over the target. A crash leaves either the old file or the new one (and
/// at most one temporary file, which the next write to `path` replaces). The target must be
/// absent or a regular file (or a link to one).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    check_target(path)?;
    let tmp = temp_path(path);
    if let Err(e) = write_temp(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::write(path, e));
    }
    Ok(())
}

/// An export target must be absent, or a regular file (or a link to one): a rename would
/// replace a device node, FIFO or socket with a regular file.
pub(crate) fn check_target(path: &Path) -> Result<()> {
    let refuse = |why: &str| Err(Error::write(path, std::io::Error::other(why.to_string())));
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => refuse("it is a directory"),
        Ok(m) if !m.is_file() => refuse("it is not a regular file (a device, FIFO or socket?); exports are written to regular files only"),
        _ => Ok(()),
    }
}
