//! A set of export files (`k.csv`, `k.profiles.csv`, `k.tokens.csv`, ...) replaced as one: at
//! every instant the visible names show the whole old set or the whole new one, whatever step a
//! kill interrupts. No sequence of renames of several files can promise that, so the files of a
//! set live in a generation directory and the set switches by one rename of a link:
//!
//! ```text
//! k.csv          -> .k.csv.focus-sets/current/k.csv          (links, made once)
//! k.profiles.csv -> .k.csv.focus-sets/current/k.profiles.csv
//! .k.csv.focus-sets/current -> g-<id>                        (swapped by one rename(2))
//! .k.csv.focus-sets/g-<id>/k.csv, k.profiles.csv, ...        (the files)
//! .k.csv.focus-sets/lock                                     (one writer at a time)
//! ```
//!
//! A write: (1) every file of the new set is written and flushed in a new generation; (2) only
//! the first time (a visible name is a plain file, or absent): the visible content is gathered
//! (hard links, or copies) into a generation that `current` is switched to, and each visible
//! name is replaced by its link, one rename each, each showing the same content as before;
//! (3) `current` is switched to the new generation by one rename: the commit; (4) older
//! generations, and links of names the new set lacks, are removed. A kill leaves generations
//! that `current` does not name, or a temporary link, which the next write of the set removes
//! first (`clean`).
//!
//! Test hook: with `FOCUS_LENS_ABORT_SET_AT=N` in the environment the process kills itself
//! (SIGKILL) at the Nth step of the commit (`tests/hostile_surfaces.rs` runs every N).

use super::atomic::{check_target, temp_path, write_atomic, write_temp};
use crate::error::{Error, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Writes several files as one export: at every instant the visible names show the whole old
/// set or the whole new one, and what a killed write left is removed by the next one
/// (`export_set`, which documents the layout: the files live in generation directories, the
/// visible names are links, and one rename switches the set). One file is `write_atomic`.
pub fn write_atomic_set(files: &[(PathBuf, Vec<u8>)]) -> Result<()> {
    match files {
        [] => Ok(()),
        [(path, bytes)] => write_atomic(path, bytes),
        _ => write_set(files),
    }
}

/// The name of the link that names the live generation.
const CURRENT: &str = "current";
const LOCK: &str = "lock";
const GEN_PREFIX: &str = "g-";

/// The directory holding a set's generations, beside its first file `first`:
/// `.NAME.focus-sets`.
pub fn store_dir(first: &Path) -> PathBuf {
    let (dir, name) = split(first);
    dir.join(super::atomic::short_name(&name, ".", ".focus-sets"))
}

fn split(p: &Path) -> (PathBuf, OsString) {
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    (dir, p.file_name().map(|n| n.to_os_string()).unwrap_or_default())
}

/// What each visible name links to: `.NAME.focus-sets/current/FILE`, relative, so that the
/// folder can be moved as a whole.
fn link_target(store_name: &OsString, file: &OsString) -> PathBuf {
    Path::new(store_name).join(CURRENT).join(file)
}

/// Counts a set write's steps and kills the process at the step `FOCUS_LENS_ABORT_SET_AT`
/// names (a test hook: a kill at that instant; `tests/hostile_surfaces.rs` runs every step).
/// Shared by the set writers (this one and the app's manifest sets).
pub struct Steps {
    done: usize,
    abort_at: Option<usize>,
}

impl Default for Steps {
    fn default() -> Self {
        Self::new()
    }
}

impl Steps {
    pub fn new() -> Steps {
        Steps { done: 0, abort_at: std::env::var("FOCUS_LENS_ABORT_SET_AT").ok().and_then(|v| v.parse().ok()) }
    }
    pub fn step(&mut self) {
        self.done += 1;
        if self.abort_at == Some(self.done) {
            // SAFETY: kill(2) on our own pid; nothing is touched afterwards.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// A fresh generation directory's name: unique per process and instant.
fn new_generation(store: &Path) -> std::io::Result<PathBuf> {
    static COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let g = store.join(format!("{GEN_PREFIX}{}-{nanos}-{n}", std::process::id()));
    std::fs::create_dir(&g)?;
    Ok(g)
}

/// The generation `current` names (its file name), if any.
fn current_generation(store: &Path) -> Option<OsString> {
    std::fs::read_link(store.join(CURRENT)).ok().and_then(|t| t.file_name().map(|n| n.to_os_string()))
}

/// Points `current` at `generation` by one rename of a new link over it.
fn switch(store: &Path, generation: &Path) -> std::io::Result<()> {
    let tmp = store.join(format!("{CURRENT}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(generation.file_name().unwrap_or_default(), &tmp)?;
    std::fs::rename(&tmp, store.join(CURRENT))?;
    fsync_dir(store)
}

/// Removes what a killed write left in `store`: generations `current` does not name and
/// temporary links; and the temporary links beside the visible `names`. Call with the lock held.
fn clean(store: &Path, dir: &Path, names: &[OsString]) -> Result<()> {
    let live = current_generation(store);
    let rd = std::fs::read_dir(store).map_err(|e| Error::io(store, e))?;
    for entry in rd.flatten() {
        let name = entry.file_name();
        let s = name.to_string_lossy();
        let p = entry.path();
        if s.starts_with(GEN_PREFIX) && Some(&name) != live.as_ref() {
            std::fs::remove_dir_all(&p).map_err(|e| Error::write(&p, e))?;
        } else if s.ends_with(".tmp") {
            std::fs::remove_file(&p).map_err(|e| Error::write(&p, e))?;
        }
    }
    for n in names {
        let _ = std::fs::remove_file(temp_path(&dir.join(n)));
    }
    Ok(())
}

/// Whether `path` is already the set's link.
fn is_our_link(path: &Path, target: &Path) -> bool {
    std::fs::read_link(path).is_ok_and(|t| t == target)
}

/// Replaces `path` by a link to `target` in one rename (the content shown stays the same when
/// `current` holds it).
fn place_link(path: &Path, target: &Path) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, path)
}

/// `src`'s content at `dst`: a hard link (no copy), or a copy across file systems.
fn link_or_copy(src: &Path, dst: &Path) -> std::io::Result<()> {
    let real = std::fs::canonicalize(src)?;
    if std::fs::hard_link(&real, dst).is_err() {
        std::fs::copy(&real, dst)?;
    }
    Ok(())
}

/// Writes the files of one export so that the visible names show the whole old set or the whole
/// new one at every instant (see the module's comment). All files share one folder and have
/// distinct names; each target must be absent or a regular file (or a link to one).
pub fn write_set(files: &[(PathBuf, Vec<u8>)]) -> Result<()> {
    let Some((first, _)) = files.first() else { return Ok(()) };
    let (dir, _) = split(first);
    let mut names: Vec<OsString> = Vec::new();
    for (p, _) in files {
        let (d, n) = split(p);
        if d != dir || n.is_empty() || names.contains(&n) {
            return Err(Error::Invalid(format!("{}: the files of one export must have distinct names in one folder", p.display())));
        }
        names.push(n);
    }
    let store = store_dir(first);
    let store_name = split(&store).1;
    // Refused before anything is written: a device, FIFO, socket or directory at a target.
    for ((p, _), n) in files.iter().zip(&names) {
        if !is_our_link(p, &link_target(&store_name, n)) {
            check_target(p)?;
        }
    }
    match std::fs::symlink_metadata(&store) {
        Ok(m) if !m.is_dir() => return Err(Error::write(&store, std::io::Error::other("it holds export generations and must be a directory"))),
        Ok(_) => {}
        Err(_) => std::fs::create_dir(&store).map_err(|e| Error::write(&store, e))?,
    }
    let lock_path = store.join(LOCK);
    // Not a plain open: a FIFO at the lock's name would block it forever.
    let lock = super::atomic::create_regular(&lock_path).map_err(|e| Error::write(&lock_path, e))?;
    lock.lock().map_err(|e| Error::write(&lock_path, e))?;
    clean(&store, &dir, &names)?;
    let mut steps = Steps::new();

    // 1. The new generation, whole and flushed.
    let generation = new_generation(&store).map_err(|e| Error::write(&store, e))?;
    for ((p, bytes), n) in files.iter().zip(&names) {
        if let Err(e) = write_temp(&generation.join(n), bytes) {
            let _ = std::fs::remove_dir_all(&generation);
            return Err(Error::write(p, e));
        }
    }
    fsync_dir(&generation).map_err(|e| Error::write(&generation, e))?;
    steps.step();

    // 2. Visible names that are not links yet become links, showing what they showed.
    let plain: Vec<usize> = (0..names.len()).filter(|&i| !is_our_link(&files[i].0, &link_target(&store_name, &names[i]))).collect();
    if !plain.is_empty() {
        let adopted = new_generation(&store).map_err(|e| Error::write(&store, e))?;
        let mut shown: Vec<OsString> = names.clone();
        if let Some(live) = current_generation(&store) {
            let rd = std::fs::read_dir(store.join(live)).map_err(|e| Error::io(&store, e))?;
            shown.extend(rd.flatten().map(|e| e.file_name()).filter(|n| !names.contains(n)));
        }
        for n in &shown {
            let visible = dir.join(n);
            if visible.is_file() {
                link_or_copy(&visible, &adopted.join(n)).map_err(|e| Error::write(&visible, e))?;
            }
        }
        fsync_dir(&adopted).map_err(|e| Error::write(&adopted, e))?;
        switch(&store, &adopted).map_err(|e| Error::write(&store, e))?;
        steps.step();
        for &i in &plain {
            place_link(&files[i].0, &link_target(&store_name, &names[i])).map_err(|e| Error::write(&files[i].0, e))?;
            steps.step();
        }
        fsync_dir(&dir).map_err(|e| Error::write(&dir, e))?;
    }

    // 3. The commit: one rename.
    let old = current_generation(&store);
    switch(&store, &generation).map_err(|e| Error::write(&store, e))?;
    steps.step();

    // 4. Older generations go, and the links of files the new set no longer has.
    if let Some(old) = old {
        if let Ok(rd) = std::fs::read_dir(store.join(&old)) {
            for n in rd.flatten().map(|e| e.file_name()).filter(|n| !names.contains(n)) {
                let visible = dir.join(&n);
                if is_our_link(&visible, &link_target(&store_name, &n)) {
                    let _ = std::fs::remove_file(&visible);
                }
            }
        }
    }
    clean(&store, &dir, &names)?;
    steps.step();
    Ok(())
}

