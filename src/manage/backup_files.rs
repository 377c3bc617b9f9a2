//! Where backups live, and opening them without being fooled by the path (contract section 13).
//!
//! Backup and restore touch files in one folder only, `gw_backup_dir` ([`BackupDir::open`] creates it with mode 0700
//! when a backup needs it). A request names a file by an absolute path (contract 3) inside that folder;
//! [`BackupDir::confine`] resolves the folders of the path with `canonicalize` (every symlink and `..` followed) and
//! accepts the file only when that folder lies inside the canonical backup folder. The last component is never
//! followed: a new backup is created with `O_CREAT|O_EXCL|O_NOFOLLOW` (an existing name, a symlink included, is a
//! conflict), a replaced one is written to a temp file and renamed over the old entry (a rename replaces the entry,
//! never writes into what it points or links to), and a restore opens with `O_NOFOLLOW|O_NONBLOCK` (a FIFO cannot
//! block the thread), checks on the opened handle that it is a regular file of at most [`MAX_RESTORE_BYTES`], and
//! reads no more than that. A path the server cannot use is a [`ManageError::Validation`] (400), never an internal
//! error; an existing file without `overwrite` is a [`ManageError::Conflict`] (409).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::{ManageError, ManageResult};
use crate::config::fsutil;

/// The largest backup a restore reads: 64 MiB.
pub const MAX_RESTORE_BYTES: u64 = 64 << 20;

/// The backup folder, canonical (symlinks resolved), known to exist.
#[derive(Debug, Clone)]
pub struct BackupDir {
    canonical: PathBuf,
}

fn unusable(what: String) -> ManageError {
    ManageError::Validation(what)
}

/// An I/O error as a user reads it; a symlink refused by `O_NOFOLLOW` says so.
fn describe(err: &io::Error) -> String {
    if err.raw_os_error() == Some(Errno::ELOOP as i32) {
        "it is a symbolic link, which backup and restore never follow".to_string()
    } else {
        err.to_string()
    }
}

impl BackupDir {
    /// Opens the folder `dir`; with `create` (a backup), creates it and missing parents with mode 0700 first when it
    /// does not exist. A restore does not create it: there is nothing to read in a folder that is not there.
    pub fn open(dir: &Path, create: bool) -> ManageResult<BackupDir> {
        let shown = dir.display();
        if create && fs::symlink_metadata(dir).is_err() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| unusable(format!("cannot create the backup directory {shown}: {e}")))?;
            tracing::info!(backup_dir = %shown, "created the backup directory");
        }
        let canonical =
            fs::canonicalize(dir).map_err(|e| unusable(format!("the backup directory {shown} cannot be used: {e}")))?;
        if !canonical.is_dir() {
            return Err(unusable(format!("the backup directory {shown} is not a directory")));
        }
        Ok(BackupDir { canonical })
    }

    /// The canonical path of the folder.
    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// The file `requested` names (an absolute path), as the canonical path of its folder
    /// and its own name, when that folder is the backup folder or one inside it. `field` names the request field in
    /// messages. The file itself need not exist and is not looked at.
    pub fn confine(&self, requested: &str, field: &str) -> ManageResult<PathBuf> {
        let dir = self.canonical.display();
        if requested.trim().is_empty() || requested.contains('\0') {
            return Err(unusable(format!("{field} must name a file in the backup directory {dir}")));
        }
        if !Path::new(requested).is_absolute() {
            return Err(unusable(format!(
                "{field} must be an absolute path (of a file in the backup directory {dir}), not {requested:?}"
            )));
        }
        if requested.ends_with('/') || requested.ends_with("/.") {
            return Err(unusable(format!("{field} {requested:?} names a directory, not a file")));
        }
        let joined = self.canonical.join(requested);
        let (Some(name), Some(folder)) = (joined.file_name(), joined.parent()) else {
            return Err(unusable(format!("{field} {requested:?} does not name a file")));
        };
        let folder = fs::canonicalize(folder)
            .map_err(|e| unusable(format!("the folder of {field} {requested:?} cannot be used: {e}")))?;
        if !folder.starts_with(&self.canonical) {
            return Err(unusable(format!(
                "{field} {requested:?} is outside the backup directory {dir}; backups are written to and restored \
                 from that directory only (gw_backup_dir)"
            )));
        }
        if !folder.is_dir() {
            return Err(unusable(format!("the folder of {field} {requested:?} is not a directory")));
        }
        Ok(folder.join(name))
    }
}

/// Writes a new backup at `target` (a path from [`BackupDir::confine`]), mode 0600. An existing entry there is a
/// conflict unless `overwrite`, and then only a regular file is replaced (atomically, by rename).
pub fn write_backup(target: &Path, bytes: &[u8], overwrite: bool) -> ManageResult<()> {
    let shown = target.display();
    if overwrite {
        if let Ok(meta) = fs::symlink_metadata(target)
            && !meta.file_type().is_file()
        {
            return Err(unusable(format!("{shown} exists and is not a regular file; it is not replaced")));
        }
        return fsutil::write_atomic(target, bytes)
            .map_err(|e| unusable(format!("cannot write backup {shown}: {}", describe(&e))));
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(OFlag::O_NOFOLLOW.bits())
        .open(target)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => {
                ManageError::Conflict(format!("{shown} exists; send \"overwrite\": true to replace it"))
            }
            _ => unusable(format!("cannot create backup {shown}: {}", describe(&e))),
        })?;
    // The umask may have taken bits the mode asked for; a backup is 0600 whatever it is.
    let written = file
        .set_permissions(fs::Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(bytes))
        .and_then(|()| file.sync_all());
    if let Err(e) = written {
        drop(file);
        let _ = fs::remove_file(target);
        return Err(unusable(format!("cannot write backup {shown}: {e}")));
    }
    if let Ok(dir) = File::open(fsutil::parent_dir(target)) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Reads the backup at `target` (a path from [`BackupDir::confine`]): a regular file, not a symlink, of at most
/// [`MAX_RESTORE_BYTES`].
pub fn read_backup_file(target: &Path) -> ManageResult<Vec<u8>> {
    let shown = target.display();
    let cannot = |e: &io::Error| unusable(format!("cannot read backup {shown}: {}", describe(e)));
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(target)
        .map_err(|e| cannot(&e))?;
    let meta = file.metadata().map_err(|e| cannot(&e))?;
    if !meta.is_file() {
        return Err(unusable(format!("backup {shown} is not a regular file")));
    }
    let too_large = || unusable(format!("backup {shown} is larger than {} MiB", MAX_RESTORE_BYTES >> 20));
    if meta.len() > MAX_RESTORE_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // The size can grow after the check: never read more than the cap and one byte to notice.
    file.take(MAX_RESTORE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| cannot(&e))?;
    if bytes.len() as u64 > MAX_RESTORE_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::path::Component;

    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    use super::*;

    /// root/{backups/{a/a/, b (a file), out -> root/a}, a/}: names that exist inside and outside the folder.
    fn tree() -> (tempfile::TempDir, BackupDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(root.join("backups/a/a")).unwrap();
        fs::create_dir_all(root.join("a")).unwrap();
        fs::write(root.join("backups/b"), b"").unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("backups/out")).unwrap();
        let dir = BackupDir::open(&root.join("backups"), false).unwrap();
        (tmp, dir, root)
    }

    /// Where `path` resolves, one component at a time as the kernel walks it: the folder holding its last component,
    /// or `None` when a folder on the way does not exist or the path does not end in a file name.
    fn walk(start: &Path, path: &str) -> Option<PathBuf> {
        if path.ends_with('/') || path.ends_with("/.") || path == "." {
            return None;
        }
        let components: Vec<Component<'_>> = Path::new(path).components().collect();
        let (last, folders) = components.split_last()?;
        let Component::Normal(_) = last else { return None };
        let mut at = start.to_path_buf();
        for c in folders {
            match c {
                Component::RootDir => at = PathBuf::from("/"),
                Component::CurDir => {}
                Component::ParentDir => {
                    at.pop();
                }
                Component::Normal(name) => {
                    let next = at.join(name);
                    if !next.is_dir() {
                        return None;
                    }
                    at = fs::canonicalize(next).ok()?;
                }
                Component::Prefix(_) => return None,
            }
        }
        Some(at)
    }

    fn folder() -> impl Strategy<Value = &'static str> {
        prop_oneof![4 => Just("a"), 1 => Just("b"), 1 => Just("out"), 1 => Just("backups"), 2 => Just(".."),
            2 => Just("."), 1 => Just("")]
    }

    fn file_name() -> impl Strategy<Value = &'static str> {
        prop_oneof![6 => Just("x.json"), 1 => Just("a"), 1 => Just(".."), 1 => Just("."), 1 => Just("")]
    }

    #[test]
    fn a_path_is_accepted_exactly_when_it_resolves_inside_the_folder() {
        let (_tmp, dir, _root) = tree();
        let start = dir.path().display().to_string();
        // Mostly absolute from the folder itself; else absolute from `/`, or relative (always refused: contract 3).
        let prefix = prop_oneof![2 => Just(String::new()), 7 => Just(format!("{start}/")), 1 => Just("/".to_string())];
        let paths = (prefix, prop::collection::vec(folder(), 0..6), file_name()).prop_map(|(prefix, folders, last)| {
            prefix + &folders.into_iter().chain([last]).collect::<Vec<_>>().join("/")
        });
        let mut runner = TestRunner::new(Config { cases: 512, ..Config::default() });
        let (accepted, refused) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        runner
            .run(&paths, |path| {
                let inside =
                    walk(dir.path(), &path).filter(|folder| path.starts_with('/') && folder.starts_with(dir.path()));
                let answer = dir.confine(&path, "output_file");
                let counter = if answer.is_ok() { &accepted } else { &refused };
                counter.set(counter.get() + 1);
                match answer {
                    Ok(target) => {
                        prop_assert!(inside.is_some(), "{path:?} accepted as {target:?} but resolves outside");
                        prop_assert!(target.starts_with(dir.path()), "{path:?} gave {target:?}");
                        prop_assert_eq!(target.parent(), inside.as_deref());
                    }
                    Err(e) => prop_assert!(inside.is_none(), "{path:?} resolves inside but was refused: {e}"),
                }
                Ok(())
            })
            .unwrap();
        // Both answers are common enough for the property to say something.
        assert!(accepted.get() > 50 && refused.get() > 50, "{} accepted, {} refused", accepted.get(), refused.get());
    }

    #[test]
    fn escapes_are_refused_and_names_inside_accepted() {
        let (_tmp, dir, root) = tree();
        for bad in ["../x.json", "a/../../x.json", "out/x.json", "/etc/x.json", "/dev/null", "", "a/", "a/..", "."] {
            assert!(dir.confine(bad, "output_file").is_err(), "{bad:?} accepted");
        }
        let outside = root.join("a/x.json");
        assert!(dir.confine(outside.to_str().unwrap(), "output_file").is_err());
        assert!(dir.confine("x.json", "f").is_err(), "a relative path, even one that would land inside");
        let name = dir.path().join("x.json");
        assert_eq!(dir.confine(name.to_str().unwrap(), "f").unwrap(), name);
        let winding = format!("{}/a/./a/../x.json", dir.path().display());
        assert_eq!(dir.confine(&winding, "f").unwrap(), dir.path().join("a/x.json"));
        let absolute = dir.path().join("a/x.json");
        assert_eq!(dir.confine(absolute.to_str().unwrap(), "f").unwrap(), absolute);
    }

    #[test]
    fn the_folder_is_created_0700_and_files_are_0600_never_replaced_without_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = BackupDir::open(&tmp.path().join("new/backups"), true).unwrap();
        assert_eq!(fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777, 0o700);
        let target = dir.confine(dir.path().join("b.json").to_str().unwrap(), "output_file").unwrap();
        write_backup(&target, b"one", false).unwrap();
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(matches!(write_backup(&target, b"two", false), Err(ManageError::Conflict(_))));
        assert_eq!(fs::read(&target).unwrap(), b"one");
        write_backup(&target, b"two", true).unwrap();
        assert_eq!(read_backup_file(&target).unwrap(), b"two");

        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(write_backup(&link, b"x", false), Err(ManageError::Conflict(_))));
        assert!(matches!(write_backup(&link, b"x", true), Err(ManageError::Validation(_))));
        assert!(matches!(read_backup_file(&link), Err(ManageError::Validation(_))));
        assert_eq!(fs::read(&target).unwrap(), b"two");
    }

    #[test]
    fn restore_reads_only_regular_files_up_to_the_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = BackupDir::open(tmp.path(), false).unwrap();
        let big = dir.path().join("big.json");
        File::create(&big).unwrap().set_len(MAX_RESTORE_BYTES + 1).unwrap();
        assert!(matches!(read_backup_file(&big), Err(ManageError::Validation(_))));
        let exact = dir.path().join("exact.json");
        File::create(&exact).unwrap().set_len(MAX_RESTORE_BYTES).unwrap();
        assert_eq!(read_backup_file(&exact).unwrap().len() as u64, MAX_RESTORE_BYTES);
        assert!(matches!(read_backup_file(dir.path()), Err(ManageError::Validation(_))));
        assert!(matches!(read_backup_file(Path::new("/dev/zero")), Err(ManageError::Validation(_))));
    }
}
