//! Files in and out. Reading: every input goes through `open_input` / `read_capped`, which
//! refuse what is not a regular file (a FIFO would block forever, `/dev/zero` never ends) and
//! cap the bytes read. Writing: `write_atomic` (`atomic`) and `write_atomic_set` (a set of files
//! switched as one, `export_set`). Reading a user's text:
//! `text`. Bounding untrusted computations' memory: `budget`. The one CSV field writer: `csv`.

pub mod atomic;
pub mod budget;
pub mod csv;
pub mod export_set;
pub mod text;

pub use atomic::{temp_path, write_atomic};
pub use export_set::write_atomic_set;

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
    if meta.is_dir() {
        return Err(Error::bad_file(path, format!("is a directory, not a {what} file")));
    }
    if !meta.is_file() {
        // FIFOs, sockets and devices: reading them could block forever or never end.
        return Err(Error::bad_file(path, format!("is not a regular file (a pipe, socket or device?); the {what} must be a regular file")));
    }
    Ok(meta.len())
}

/// Opens a regular file of at most `max` bytes for reading.
pub fn open_input(path: &Path, max: u64, what: &str) -> Result<std::fs::File> {
    let len = check_regular(path, what)?;
    if len > max {
        return Err(Error::bad_file(path, format!("the {what} is {} bytes; at most {} ({}) is accepted", len, max, human(max))));
    }
    std::fs::File::open(path).map_err(|e| Error::io(path, e))
}

/// Reads a regular file of at most `max` bytes. The cap is also enforced while reading, so a
/// file that grows after the size check cannot take more.
pub fn read_capped(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let f = open_input(path, max, what)?;
    let mut buf = Vec::new();
    f.take(max + 1).read_to_end(&mut buf).map_err(|e| Error::io(path, e))?;
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
        write_atomic_set(&[(a.clone(), b"1".to_vec()), (dir.join("b.csv"), b"2".to_vec())]).unwrap();
        let names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(names.iter().all(|n| !n.ends_with(".focus-tmp")), "{names:?}");
        // One target is a directory: nothing is written, the old file stays.
        let e = write_atomic_set(&[(a.clone(), b"new".to_vec()), (dir.join("sub"), b"x".to_vec())]).unwrap_err().to_string();
        assert!(e.starts_with("cannot write") && e.matches("directory").count() == 1, "{e}");
        assert_eq!(std::fs::read(&a).unwrap(), b"1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
