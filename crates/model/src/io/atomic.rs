//! One file written atomically (`write_atomic`: a temporary file beside it, flushed, then
//! renamed over it), a new folder of files written at once (`write_new_dir`), and the helpers
//! `export_set` shares.

use crate::error::{Error, Result};
use std::io::Write;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The longest file name most file systems take (ext4, xfs, btrfs, tmpfs: 255 bytes).
pub const NAME_MAX: usize = 255;

/// `prefix + name + suffix` as a file name of at most `NAME_MAX` bytes: the name whole when it
/// fits, else its first bytes and `~` and a hash of the whole name (16 hex digits), so that two
/// long names still get two names, the same on every run. Bytes, not text: a name that is not
/// UTF-8 keeps its own bytes.
pub fn short_name(name: &OsStr, prefix: &str, suffix: &str) -> OsString {
    short_name_within(name, prefix, suffix, NAME_MAX)
}

/// `short_name` of at most `max` bytes (an SQLite file's name leaves room for `-journal`).
pub fn short_name_within(name: &OsStr, prefix: &str, suffix: &str, max: usize) -> OsString {
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let b = name.as_bytes();
    let mut out = prefix.as_bytes().to_vec();
    if prefix.len() + b.len() + suffix.len() <= max {
        out.extend_from_slice(b);
    } else {
        // FNV-1a: stable across builds (a resumed build must find the same name again).
        let h = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ x as u64).wrapping_mul(0x0100_0000_01b3));
        let keep = max.saturating_sub(prefix.len() + suffix.len() + 17);
        out.extend_from_slice(&b[..keep.min(b.len())]);
        out.extend_from_slice(format!("~{h:016x}").as_bytes());
    }
    out.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(out)
}

/// The temporary name `write_atomic` uses for `path`: fixed (no PID), so a file left by a killed
/// run is overwritten and removed by the next one instead of piling up; `.NAME.focus-tmp`,
/// shortened (`short_name`) when that would pass 255 bytes.
pub fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default();
    dir.join(short_name(name, ".", ".focus-tmp"))
}

pub(crate) fn write_temp(tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // The name is ours: whatever a killed run (or anyone) left there goes, a link included.
    if std::fs::symlink_metadata(tmp).is_ok_and(|m| !m.is_file()) {
        let _ = std::fs::remove_file(tmp);
    }
    let mut f = create_regular(tmp)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, flushed to
/// disk, then renamed over the target. A crash leaves either the old file or the new one (and
/// at most one temporary file, which the next write to `path` replaces). The target must be
/// absent or a regular file (or a link to one).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    check_target(path)?;
    replace(path, bytes)
}

/// `write_atomic` without the check of what `path` is now: the rename replaces whatever is at
/// the name (a link included, never what it points to). For names known to be ours (a link of
/// the old export-set layout, whose target is never to be followed).
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    if let Err(e) = write_temp(&tmp, bytes).and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::write(path, e));
    }
    Ok(())
}

/// Writes a new folder `dir` holding `files` (name, bytes) at once: each file is written and
/// flushed in a temporary folder beside it (`temp_path`), which is then renamed to `dir`. A
/// crash leaves no `dir` or all of it (and at most the temporary folder, which the next write to
/// `dir` clears). Never over anything: `dir` must be absent or an empty folder, and the rename
/// itself fails, leaving it as it was, if something was put there in the meantime. Missing
/// parent folders are created.
pub fn write_new_dir(dir: &Path, files: &[(&str, &[u8])]) -> Result<()> {
    let refuse = |why: &str| Err(Error::write(dir, std::io::Error::other(why.to_string())));
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_symlink() => return refuse("it is a symbolic link; a new folder is written only where none is (or an empty one)"),
        Ok(m) if !m.is_dir() => return refuse("it exists and is not a folder"),
        Ok(_) => {
            if std::fs::read_dir(dir).map_err(|e| Error::write(dir, e))?.next().is_some() {
                return refuse("the folder exists and is not empty; a new folder is written, never into or over one that holds files");
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::write(dir, e)),
    }
    if dir.file_name().is_none() {
        return refuse("it names no folder");
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::write(parent, e))?;
    let tmp = temp_path(dir);
    clear_temp_dir(&tmp, files)?;
    let written = std::fs::create_dir(&tmp).and_then(|_| {
        for (name, bytes) in files {
            write_temp(&tmp.join(name), bytes)?;
        }
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, dir)
    });
    if let Err(e) = written {
        let _ = clear_temp_dir(&tmp, files);
        return Err(Error::write(dir, e));
    }
    // The rename reaches the disk with its folder's entry (best effort: not every file system
    // syncs a folder).
    let _ = std::fs::File::open(parent).and_then(|f| f.sync_all());
    Ok(())
}

/// Removes what a killed `write_new_dir` left at its temporary name: a file or link, or the
/// folder with the files it writes (only those: a folder holding anything else is named, never
/// emptied).
fn clear_temp_dir(tmp: &Path, files: &[(&str, &[u8])]) -> Result<()> {
    match std::fs::symlink_metadata(tmp) {
        Err(_) => Ok(()),
        Ok(m) if !m.is_dir() => std::fs::remove_file(tmp).map_err(|e| Error::write(tmp, e)),
        Ok(_) => {
            for (name, _) in files {
                let p = tmp.join(name);
                for f in [temp_path(&p), p] {
                    if std::fs::symlink_metadata(&f).is_ok() {
                        std::fs::remove_file(&f).map_err(|e| Error::write(&f, e))?;
                    }
                }
            }
            std::fs::remove_dir(tmp).map_err(|e| Error::write(tmp, std::io::Error::other(format!("a temporary folder left by an earlier write, which holds other files too ({e}): remove it"))))
        }
    }
}

/// Creates (or truncates) a file for writing without following a link at its name and without
/// blocking on a FIFO there; what is opened must be a regular file. For temporaries and lock
/// files, whose names are ours.
pub fn create_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_symlink() => return Err(std::io::Error::other("it is a symbolic link; this file must be a regular file")),
        Ok(m) if !m.is_file() => return Err(std::io::Error::other("it is not a regular file (a directory, FIFO, device or socket?)")),
        _ => {}
    }
    let f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file (a device, FIFO or socket?)"));
    }
    Ok(f)
}

/// Opens a file of ours (a lock, an unfinished output) for reading and writing, creating it
/// when absent: never through a link at its name, never waiting on a FIFO there, and only a
/// regular file. Returns the file and whether this call created it.
pub fn open_own(path: &Path) -> std::io::Result<(std::fs::File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let created = match std::fs::OpenOptions::new().read(true).write(true).create_new(true).custom_flags(flags).open(path) {
        Ok(f) => return Ok((f, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(e),
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_symlink() => return Err(std::io::Error::other("it is a symbolic link; this file must be a regular file")),
        Ok(m) if !m.is_file() => return Err(std::io::Error::other("it is not a regular file (a directory, FIFO, device or socket?)")),
        _ => {}
    }
    let f = std::fs::OpenOptions::new().read(true).write(true).custom_flags(flags).open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file (a directory, FIFO, device or socket?)"));
    }
    Ok((f, created))
}

/// An output target must be absent, or a regular file (or a link to one): a rename would
/// replace a device node, FIFO or socket with a regular file. Its folder must exist and be a
/// folder: the error names it (a missing folder was reported as whatever failed next, e.g.
/// "X.partial is not a readable Focus Lens index").
pub fn check_target(path: &Path) -> Result<()> {
    let refuse = |why: &str| Err(Error::write(path, std::io::Error::other(why.to_string())));
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => return refuse(&format!("{} is not a folder (it is a file)", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return refuse(&format!("its folder {} does not exist", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            // A part of the folder's path is a file: name it.
            let file = dir.ancestors().skip(1).find(|a| std::fs::metadata(a).is_ok_and(|m| !m.is_dir())).unwrap_or(dir);
            return refuse(&format!("its folder {} is not a folder ({} is a file)", dir.display(), file.display()));
        }
        _ => {}
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => refuse("it is a directory"),
        Ok(m) if !m.is_file() => refuse("it is not a regular file (a device, FIFO or socket?); exports are written to regular files only"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_new_dir` writes a new folder or fills an empty one, refuses one that holds
    /// anything (leaving it as it was) and a link, and clears what a killed write left at its
    /// temporary name, but never a temporary folder holding files it does not write.
    #[test]
    fn write_new_dir_never_writes_over_anything() {
        let d = std::env::temp_dir().join(format!("focus-new-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let files: &[(&str, &[u8])] = &[("a.json", b"{}"), ("b.bin", b"\x01\x02")];
        let out = d.join("deep").join("out");
        write_new_dir(&out, files).unwrap();
        assert_eq!(std::fs::read(out.join("b.bin")).unwrap(), b"\x01\x02");
        assert!(!temp_path(&out).exists());
        let e = write_new_dir(&out, &[("a.json", b"[]")]).unwrap_err().to_string();
        assert!(e.contains("not empty"), "{e}");
        assert_eq!(std::fs::read(out.join("a.json")).unwrap(), b"{}");
        std::os::unix::fs::symlink(&out, d.join("link")).unwrap();
        let e = write_new_dir(&d.join("link"), files).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::write(d.join("file"), b"x").unwrap();
        assert!(write_new_dir(&d.join("file"), files).is_err());
        assert_eq!(std::fs::read(d.join("file")).unwrap(), b"x");
        // An empty folder is filled; a killed write's leftovers go.
        let empty = d.join("empty");
        std::fs::create_dir(&empty).unwrap();
        let tmp = temp_path(&empty);
        std::fs::create_dir(&tmp).unwrap();
        std::fs::write(tmp.join("a.json"), b"half").unwrap();
        write_new_dir(&empty, files).unwrap();
        assert_eq!(std::fs::read(empty.join("a.json")).unwrap(), b"{}");
        assert!(!tmp.exists());
        // A temporary folder holding something else is named, and kept.
        let other = d.join("other");
        let tmp = temp_path(&other);
        std::fs::create_dir(&tmp).unwrap();
        std::fs::write(tmp.join("mine.txt"), b"keep").unwrap();
        let e = write_new_dir(&other, files).unwrap_err().to_string();
        assert!(e.contains("other files too"), "{e}");
        assert_eq!(std::fs::read(tmp.join("mine.txt")).unwrap(), b"keep");
        assert!(!other.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
