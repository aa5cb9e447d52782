//! Files in and out. Reading: every input goes through `open_input` / `read_capped`, which
//! refuse what is not a regular file (a FIFO would block forever, `/dev/zero` never ends), by
//! name and again on the opened file, and cap the bytes read (`read_opened`); a file found in a
//! folder (a corpus's text) through `open_within`, which also refuses a link out of the folder.
//! Writing: `write_atomic` (`atomic`: one file, a temporary renamed over it; `write_new_dir`: a
//! new folder, written beside it and renamed into place) and `write_set`
//! (`export_set`: the one writer of a set of files, plain files and a manifest written last),
//! whose temporaries have short names beside the target (`short_name`: at most 255 bytes); files of our own that are opened in place (locks, an unfinished index) through
//! `open_own` (no link followed, no FIFO waited on). Reading a user's text:
//! `text`. Bounding untrusted computations' memory: `budget`. The one CSV field writer: `csv`.

pub mod atomic;
pub mod budget;
pub mod csv;
pub mod export_set;
pub mod text;

pub use atomic::{check_target, open_own, short_name, short_name_within, temp_path, write_atomic, write_new_dir, NAME_MAX};
pub use export_set::write_set;

use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

/// The largest JSON file read (`config.json`, `tokenizer.json`, `adapter_config.json`): the
/// biggest real tokenizer.json files are ~20 MiB.
pub const MAX_JSON_BYTES: u64 = 64 << 20;

/// Checks that `path` names a regular file (following symlinks) and returns its length. `what`
/// says what the file is for ("text", "tokenizer.json") in the error.
pub fn check_regular(path: &Path, what: &str) -> Result<u64> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    check_kind(path, &meta, what)?;
    Ok(meta.len())
}

fn check_kind(path: &Path, meta: &std::fs::Metadata, what: &str) -> Result<()> {
    if meta.is_dir() {
        return Err(Error::bad_file(path, format!("is a directory, not a {what} file")));
    }
    if !meta.is_file() {
        // FIFOs, sockets and devices: reading them could block forever or never end.
        return Err(Error::bad_file(path, format!("is not a regular file (a pipe, socket or device?); the {what} must be a regular file")));
    }
    Ok(())
}

/// Opens a regular file of at most `max` bytes for reading: the one guarded way in. The file is
/// opened without blocking (a FIFO swapped in after the check would make a plain open wait
/// forever for a writer) and the opened file itself is checked again, so what is read is what
/// was checked: a regular file, of at most `max` bytes at open. Read it through `take(max + 1)`
/// (as `read_capped` does) so that a file growing afterwards cannot take more.
pub fn open_input(path: &Path, max: u64, what: &str) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    // A first check by name: a device or FIFO is never opened at all.
    check_regular(path, what)?;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path).map_err(|e| Error::io(path, e))?;
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    check_kind(path, &meta, what)?;
    if meta.len() > max {
        return Err(Error::bad_file(path, format!("the {what} is {} bytes; at most {} ({}) is accepted", meta.len(), max, human(max))));
    }
    Ok(f)
}

/// `open_input` for a file found inside folder `root` (a corpus's text): the file actually
/// opened must lie inside `root` too. A link out of the folder (`link.txt ->
/// ../outside/secret.txt`) is refused: only a path the user names may lead elsewhere.
pub fn open_within(path: &Path, root: &Path, max: u64, what: &str) -> Result<std::fs::File> {
    let f = open_input(path, max, what)?;
    let root_real = std::fs::canonicalize(root).map_err(|e| Error::io(root, e))?;
    // The opened file's own path (Linux: its /proc/self/fd link), so that a link swapped in
    // after a check by name cannot lead elsewhere; else the path's canonical form.
    let real = {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd())).or_else(|_| std::fs::canonicalize(path)).map_err(|e| Error::io(path, e))?
    };
    if !real.starts_with(&root_real) {
        return Err(Error::bad_file(path, format!("is a link to {}, outside the folder {}; links out of the folder are left out", real.display(), root.display())));
    }
    Ok(f)
}

/// Reads a regular file of at most `max` bytes. The cap is also enforced while reading, so a
/// file that grows after the size check cannot take more.
pub fn read_capped(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    read_opened(open_input(path, max, what)?, path, max, what)
}

/// Reads an opened file (`open_input`, `open_within`) through a reader capped at `max` bytes.
pub fn read_opened(f: std::fs::File, path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut buf).map_err(|e| Error::io(path, e))?;
    if buf.len() as u64 > max {
        return Err(Error::bad_file(path, format!("the {what} grew past {} while it was read", human(max))));
    }
    Ok(buf)
}

/// `read_capped` as UTF-8 text.
pub fn read_capped_string(path: &Path, max: u64, what: &str) -> Result<String> {
    String::from_utf8(read_capped(path, max, what)?).map_err(|e| Error::bad_file(path, format!("the {what} is not UTF-8 (invalid bytes at offset {})", e.utf8_error().valid_up_to())))
}

/// The key of the JSON object member whose value holds (1-based) `line`, `column` of `text`:
/// the last `"key":` before it. Names the field of a serde error, which gives only a position.
pub fn json_key_at(text: &str, line: usize, column: usize) -> Option<String> {
    let start: usize = text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    let end = (start + column).min(text.len());
    let b = &text.as_bytes()[..end];
    let (mut key, mut i) = (None, 0);
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        let s = i + 1;
        i = s;
        while i < b.len() && b[i] != b'"' {
            i += if b[i] == b'\\' { 2 } else { 1 };
        }
        let e = i.min(b.len());
        i += 1;
        let mut j = i;
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if j < b.len() && b[j] == b':' {
            key = text.get(s..e).map(str::to_string);
        }
    }
    key
}

fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_regular_file() {
        let dir = std::env::temp_dir().join(format!("focus-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = read_capped(&dir, 10, "text").unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
        let e = read_capped(Path::new("/dev/zero"), 10, "text").unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let f = dir.join("big.txt");
        std::fs::write(&f, vec![b'a'; 11]).unwrap();
        let e = read_capped(&f, 10, "text").unwrap_err().to_string();
        assert!(e.contains("11 bytes") && e.contains("at most 10"), "{e}");
        assert_eq!(read_capped(&f, 11, "text").unwrap().len(), 11);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn atomic_writes_leave_no_temporaries_and_word_failures_as_writes() {
        let dir = std::env::temp_dir().join(format!("focus-io-w-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let a = dir.join("a.csv");
        // A temporary left by a killed run is replaced, not added to.
        std::fs::write(temp_path(&a), b"stale").unwrap();
        write_set(&[(a.clone(), b"1".to_vec()), (dir.join("b.csv"), b"2".to_vec())], &serde_json::Value::Null).unwrap();
        let names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(names.iter().all(|n| !n.ends_with(".focus-tmp")), "{names:?}");
        // One target is a directory: nothing is written, the old file stays.
        let e = write_set(&[(a.clone(), b"new".to_vec()), (dir.join("sub"), b"x".to_vec())], &serde_json::Value::Null).unwrap_err().to_string();
        assert!(e.starts_with("cannot write") && e.matches("directory").count() == 1, "{e}");
        assert_eq!(std::fs::read(&a).unwrap(), b"1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("focus-io-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A FIFO is refused by name and never opened (an open would wait for a writer), and a
    /// link out of the folder a file was found in is refused (issue 51).
    #[test]
    fn fifos_and_links_out_of_the_folder_are_refused() {
        let dir = scratch("fifo");
        let fifo = dir.join("pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_input(&fifo, 10, "text").unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = create_regular_for_test(&fifo);
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::create_dir_all(dir.join("corpus")).unwrap();
        std::fs::write(dir.join("secret.txt"), "secret").unwrap();
        std::fs::write(dir.join("corpus/in.txt"), "in").unwrap();
        std::os::unix::fs::symlink("../secret.txt", dir.join("corpus/out.txt")).unwrap();
        std::os::unix::fs::symlink("in.txt", dir.join("corpus/alias.txt")).unwrap();
        let root = dir.join("corpus");
        let e = open_within(&root.join("out.txt"), &root, 100, "text").unwrap_err().to_string();
        assert!(e.contains("outside the folder") && e.contains("secret.txt"), "{e}");
        assert!(open_within(&root.join("alias.txt"), &root, 100, "text").is_ok());
        assert!(open_within(&root.join("in.txt"), &root, 100, "text").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn create_regular_for_test(p: &Path) -> String {
        atomic::create_regular(p).map(|_| ()).unwrap_err().to_string()
    }

    /// Output names up to 255 bytes are written: the temporary and the export set's manifest
    /// are shortened with a hash when `.NAME.focus-tmp` or `STEM.manifest.json` would pass 255
    /// bytes (issue 51: a 250-byte name failed with "File name too long"). Distinct long names
    /// get distinct temporaries.
    #[test]
    fn long_output_names_fit() {
        let dir = scratch("long");
        let name = format!("{}.csv", "n".repeat(246));
        assert_eq!(name.len(), 250);
        write_atomic(&dir.join(&name), b"x").unwrap();
        assert_eq!(std::fs::read(dir.join(&name)).unwrap(), b"x");
        let other = format!("{}.tsv", "n".repeat(246));
        assert_ne!(temp_path(&dir.join(&name)), temp_path(&dir.join(&other)));
        assert!(temp_path(&dir.join(&name)).file_name().unwrap().len() <= 255);
        let written = write_set(&[(dir.join(&name), b"1".to_vec()), (dir.join(&other), b"2".to_vec())], &serde_json::Value::Null).unwrap();
        assert_eq!(std::fs::read(dir.join(&other)).unwrap(), b"2");
        assert!(written[2].file_name().unwrap().len() <= 255 && export_set::check(&written[2]).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
