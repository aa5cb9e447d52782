//! Fonts for text as people write it: egui's own fonts cover Latin, Greek, Cyrillic and most
//! emoji (Noto Emoji, monochrome); everything else would be drawn as empty boxes. Two fallbacks
//! follow them, in this order:
//!
//! 1. **Embedded**: a subset of Droid Sans Fallback (Apache-2.0, 1.5 MB; `assets/fonts/`, made
//!    by `scripts/gen-cjk-font.py`): the ideographs of GB2312, JIS X 0208 and Big5 level 1, kana,
//!    CJK punctuation and full-width forms. It ships with the binary, so Chinese and Japanese
//!    text shows on any machine, a bare one with no fonts installed included, and looks the same
//!    everywhere.
//! 2. **The system's fonts**, found on demand (`SystemFonts`, an egui `FontProvider`) for a
//!    character that no font above has (Korean, rare ideographs, other scripts): the font folders
//!    of Linux (XDG), macOS and Windows are listed once (file names only; no fontconfig), and on
//!    a miss each font file is read at most once to note which 256-character pages it covers
//!    (512 MiB of files at most);
//!    the first file (regular sans faces first) whose character map has the character is
//!    installed. Nothing is read while every character has a font, so an English text costs
//!    nothing. A file that does not parse is skipped (egui would panic on it).

use egui::epaint::text::{FontInsert, FontPriority, InsertFontFamily};
use egui::{FallbackRequest, FontData, FontFamily, FontProvider};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The embedded CJK fallback (`assets/fonts/DroidSansFallback-subset.ttf`).
pub const CJK_FONT: &[u8] = include_bytes!("../../../../assets/fonts/DroidSansFallback-subset.ttf");
/// Its name among egui's fonts.
pub const CJK_FONT_NAME: &str = "Droid Sans Fallback (subset, embedded)";

/// Installs the fallbacks on `ctx` (once per context: the app calls it on its first frame).
pub fn install(ctx: &egui::Context) {
    ctx.add_font(FontInsert::new(CJK_FONT_NAME, FontData::from_static(CJK_FONT), both_families()));
    ctx.add_font_provider(Arc::new(SystemFonts::new(font_dirs())));
}

fn both_families() -> Vec<InsertFontFamily> {
    [FontFamily::Proportional, FontFamily::Monospace].into_iter().map(|family| InsertFontFamily { family, priority: FontPriority::Lowest }).collect()
}

/// The folders fonts are installed in, most specific first: the user's, then the system's.
pub fn font_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(".local/share"))) {
        dirs.push(d.join("fonts"));
    }
    if let Some(h) = &home {
        dirs.push(h.join(".fonts"));
        dirs.push(h.join("Library/Fonts"));
    }
    let data = std::env::var("XDG_DATA_DIRS").unwrap_or_default();
    let data: Vec<&str> = if data.is_empty() { vec!["/usr/local/share", "/usr/share"] } else { data.split(':').filter(|d| !d.is_empty()).collect() };
    dirs.extend(data.iter().map(|d| Path::new(d).join("fonts")));
    dirs.extend(["/System/Library/Fonts", "/Library/Fonts"].map(PathBuf::from));
    if let Some(w) = std::env::var_os("WINDIR") {
        dirs.push(PathBuf::from(w).join("Fonts"));
    }
    if let Some(l) = std::env::var_os("LOCALAPPDATA") {
        dirs.push(PathBuf::from(l).join("Microsoft/Windows/Fonts"));
    }
    dirs.dedup();
    dirs
}

/// At most this many font files are considered, each at most this large, and at most
/// `MAX_READ_BYTES` of them read to note their coverage (a miss reads on the UI thread: a
/// system with gigabytes of fonts must not stall the window for long).
const MAX_FILES: usize = 2000;
const MAX_FILE_BYTES: u64 = 64 << 20;
const MAX_READ_BYTES: u64 = 512 << 20;
/// Pages of 256 characters noted per face: planes 0-2 (the BMP, emoji and symbols, rare ideographs).
const PAGES: usize = 0x30000 >> 8;

/// One font file and, once read, the pages each of its faces covers.
struct Candidate {
    path: PathBuf,
    /// `None` until read; a file that does not parse has no faces.
    faces: Option<Vec<(u32, Box<[u64; PAGES / 64]>)>>,
}

/// The system's fonts, found on demand (see the module's comment).
pub struct SystemFonts {
    dirs: Vec<PathBuf>,
    /// The font files, listed on the first miss, and the bytes read to note their coverage.
    files: Mutex<Option<(Vec<Candidate>, u64)>>,
}

impl SystemFonts {
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        SystemFonts { dirs, files: Mutex::new(None) }
    }

    /// The first font file (regular sans faces first) with a glyph for `c`: its path, face index
    /// and bytes.
    pub fn find(&self, c: char) -> Option<(PathBuf, u32, Vec<u8>)> {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let (files, read) = files.get_or_insert_with(|| (list_fonts(&self.dirs), 0));
        let page = (c as usize) >> 8;
        if page >= PAGES {
            return None;
        }
        for cand in files.iter_mut() {
            let mut bytes = None;
            if cand.faces.is_none() {
                // Past the budget a file is taken as covering nothing.
                let b = if *read < MAX_READ_BYTES { read_font(&cand.path) } else { None };
                *read += b.as_ref().map_or(0, |b| b.len() as u64);
                cand.faces = Some(b.as_deref().map(coverage).unwrap_or_default());
                bytes = b;
            }
            let faces = cand.faces.as_ref().expect("read above");
            for (index, pages) in faces {
                if pages[page / 64] & (1 << (page % 64)) == 0 {
                    continue;
                }
                let Some(b) = bytes.take().or_else(|| read_font(&cand.path)) else { continue };
                if has_char(&b, *index, c) {
                    return Some((cand.path.clone(), *index, b));
                }
                bytes = Some(b);
            }
        }
        None
    }
}

impl FontProvider for SystemFonts {
    fn font_for(&self, request: &FallbackRequest<'_>) -> Option<FontInsert> {
        let c = request.cluster.chars().next()?;
        let (path, index, bytes) = self.find(c)?;
        let name = format!("{}#{index}", path.display());
        Some(FontInsert::new(&name, FontData::from_blob(Arc::new(bytes), index), both_families()))
    }
}

/// Every font file under `dirs` (at most `MAX_FILES`, links not followed), regular sans faces
/// first, then by path.
fn list_fonts(dirs: &[PathBuf]) -> Vec<Candidate> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut stack: Vec<(PathBuf, usize)> = dirs.iter().map(|d| (d.clone(), 0)).collect();
    stack.reverse();
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let Ok(t) = e.file_type() else { continue };
            let p = e.path();
            if t.is_dir() && depth < 6 {
                stack.push((p, depth + 1));
            } else if t.is_file() && is_font_file(&p) && out.len() < MAX_FILES && !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out.sort_by_key(|p| (-style_score(p), p.clone()));
    out.into_iter().map(|path| Candidate { path, faces: None }).collect()
}

fn is_font_file(p: &Path) -> bool {
    p.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "ttf" | "otf" | "ttc" | "otc"))
}

/// How well a file's name suits text beside egui's regular sans: regular sans faces first,
/// bold, italic, serif, monospace and condensed faces later.
fn style_score(p: &Path) -> i32 {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_ascii_lowercase();
    let has = |w: &[&str]| w.iter().any(|x| name.contains(x));
    let mut s = 0;
    if has(&["bold", "black", "heavy", "semibold", "extrabold"]) {
        s -= 3;
    }
    if has(&["italic", "oblique"]) {
        s -= 2;
    }
    if has(&["serif", "mincho", "myeongjo", "song", "ming"]) && !name.contains("sans") {
        s -= 1;
    }
    if has(&["mono", "code", "coding", "condensed", "narrow"]) {
        s -= 1;
    }
    if has(&["thin", "extralight", "hairline"]) {
        s -= 1;
    }
    s
}

fn read_font(p: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(p).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    std::fs::read(p).ok()
}

/// The faces of a font file (one, or a collection's) that parse, each with the pages of 256
/// characters its character map covers.
fn coverage(bytes: &[u8]) -> Vec<(u32, Box<[u64; PAGES / 64]>)> {
    use skrifa::MetadataProvider;
    let n = match skrifa::raw::FileRef::new(bytes) {
        Ok(skrifa::raw::FileRef::Font(_)) => 1,
        Ok(skrifa::raw::FileRef::Collection(c)) => c.len().min(64),
        Err(_) => 0,
    };
    (0..n)
        .filter_map(|i| {
            let f = skrifa::FontRef::from_index(bytes, i).ok()?;
            // The tables egui reads when it installs a face must parse too.
            f.outline_glyphs();
            let mut pages = Box::new([0u64; PAGES / 64]);
            for (cp, _) in f.charmap().mappings() {
                let page = (cp >> 8) as usize;
                if page < PAGES {
                    pages[page / 64] |= 1 << (page % 64);
                }
            }
            Some((i, pages))
        })
        .collect()
}

fn has_char(bytes: &[u8], index: u32, c: char) -> bool {
    use skrifa::MetadataProvider;
    skrifa::FontRef::from_index(bytes, index).is_ok_and(|f| f.charmap().map(c).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_font_has_chinese_and_japanese() {
        for c in ['漢', '字', '汉', '語', 'か', 'カ', '。', 'Ａ'] {
            assert!(has_char(CJK_FONT, 0, c), "{c:?}");
        }
        assert!(!has_char(CJK_FONT, 0, 'a'), "Latin is left to egui's fonts");
    }

    #[test]
    fn system_fonts_are_found_on_demand_and_bad_files_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("truetype/cjk");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("Broken-Regular.ttf"), b"not a font at all").unwrap();
        std::fs::write(sub.join("Fallback-Regular.ttf"), CJK_FONT).unwrap();
        let fonts = SystemFonts::new(vec![dir.path().to_path_buf(), dir.path().join("missing")]);
        let (path, index, bytes) = fonts.find('漢').expect("the font in the folder");
        assert_eq!((path, index, bytes.len()), (sub.join("Fallback-Regular.ttf"), 0, CJK_FONT.len()));
        assert!(fonts.find('가').is_none(), "no font there has Hangul");
        assert!(fonts.find('\u{10FFFD}').is_none());
    }

    #[test]
    fn regular_sans_faces_come_first() {
        assert!(style_score(Path::new("NotoSansCJK-Regular.ttc")) > style_score(Path::new("NotoSansCJK-Bold.ttc")));
        assert!(style_score(Path::new("NanumGothic.ttf")) > style_score(Path::new("NanumMyeongjo.ttf")));
    }
}
