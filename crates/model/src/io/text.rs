//! Reading a user's text file with clear errors for the inputs that are not text.

use crate::error::{Error, Result};
use std::path::Path;

/// Larger files are refused: 64 MiB of text is ~16M tokens, far beyond any analysis we run.
pub const MAX_TEXT_BYTES: u64 = 64 << 20;

/// Validates raw bytes as analysable text; `what` names the source in errors.
pub fn text_from_bytes(bytes: Vec<u8>, what: &str) -> Result<String> {
    if bytes.is_empty() {
        return Err(Error::BadText(format!("{what} is empty: there is no text to analyse")));
    }
    if let Some(i) = bytes.iter().position(|&b| b == 0) {
        return Err(Error::BadText(format!("{what} looks like a binary file (NUL byte at offset {i}), not text")));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        Error::BadText(format!("{what} is not valid UTF-8: invalid bytes at offset {at} (line {line})"))
    })?;
    if text.trim().is_empty() {
        return Err(Error::BadText(format!("{what} holds only whitespace: there is no text to analyse")));
    }
    Ok(text)
}

/// Reads a user's text file: a regular file of at most `MAX_TEXT_BYTES`, holding UTF-8 text.
pub fn read_text(path: &Path) -> Result<String> {
    let len = super::check_regular(path, "text").map_err(|e| match e {
        Error::BadFile { path, detail } => Error::BadText(format!("{}: {detail}", path.display())),
        e => e,
    })?;
    if len > MAX_TEXT_BYTES {
        // In bytes: a file one byte over the limit must not read as "64 MiB".
        return Err(Error::BadText(format!(
            "{} is {len} bytes; text files over {MAX_TEXT_BYTES} bytes (64 MiB) are refused",
            path.display()
        )));
    }
    let bytes = super::read_capped(path, MAX_TEXT_BYTES, "text")?;
    text_from_bytes(bytes, &path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_text() {
        assert!(text_from_bytes(vec![], "x").unwrap_err().to_string().contains("empty"));
        assert!(text_from_bytes(b"  \n\t".to_vec(), "x").unwrap_err().to_string().contains("whitespace"));
        assert!(text_from_bytes(b"ab\0cd".to_vec(), "x").unwrap_err().to_string().contains("binary"));
        let e = text_from_bytes(b"ok\nline\xff\xfe".to_vec(), "x").unwrap_err().to_string();
        assert!(e.contains("UTF-8") && e.contains("offset 7") && e.contains("line 2"), "{e}");
        assert_eq!(text_from_bytes("naïve 東京".as_bytes().to_vec(), "x").unwrap(), "naïve 東京");
    }
}
