//! Writing files safely: atomically (temp file in the same directory, fsync, rename, fsync of the directory), with
//! mode 0600, and knowing beforehand when a location is read-only (a Kubernetes ConfigMap or Secret mount, a file an
//! operator made read-only) so the admin API can answer `CONFIG_READ_ONLY` instead of failing half-way.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a location cannot be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOnly(pub String);

/// Where a write to `path` really lands: a plain symlink is followed, so the link stays and its target changes.
pub fn write_target(path: &Path) -> PathBuf {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

/// Checks that `path` can be replaced. The permission bits decide, not `access(2)`: the gateway often runs as root in
/// containers, where every permission check passes, yet a file mounted or marked read-only must stay untouched.
pub fn check_writable(path: &Path) -> Result<(), ReadOnly> {
    if let Ok(link) = fs::read_link(path)
        && link.components().any(|c| c.as_os_str() == "..data")
    {
        return Err(ReadOnly(format!(
            "{} is a Kubernetes ConfigMap or Secret mount (it links into ..data); change the ConfigMap or Secret instead",
            path.display()
        )));
    }
    let target = write_target(path);
    if let Ok(meta) = fs::metadata(&target)
        && meta.permissions().mode() & 0o222 == 0
    {
        return Err(ReadOnly(format!(
            "{} is read-only (mode {:o})",
            target.display(),
            meta.permissions().mode() & 0o777
        )));
    }
    let dir = parent_dir(&target);
    match fs::metadata(dir) {
        Ok(meta) if meta.permissions().mode() & 0o222 == 0 => Err(ReadOnly(format!(
            "directory {} is read-only (mode {:o})",
            dir.display(),
            meta.permissions().mode() & 0o777
        ))),
        _ => Ok(()),
    }
}

/// Whether an I/O error means the location is read-only.
pub fn is_read_only_error(err: &io::Error) -> bool {
    matches!(err.kind(), io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem)
}

/// The directory a file lives in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Replaces `target` with `bytes` atomically; the new file has mode 0600. Readers see the old or the new content,
/// never a mix, and after a crash the file is one or the other.
pub fn write_atomic(target: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent_dir(target);
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "file".into());
    let suffix: String =
        crate::secrets::random_bytes::<6>().map_err(io::Error::other)?.iter().map(|b| format!("{b:02x}")).collect();
    let temp = dir.join(format!(".{name}.{suffix}.tmp"));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, target)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result?;
    // The rename is durable only once the directory entry is; some filesystems refuse to sync a directory.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Creates the directory of a new config file with mode 0700 when it does not exist.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    if dir.exists() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_content_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        fs::write(&path, b"old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "temp file left behind");
    }

    #[test]
    fn read_only_bits_and_kubernetes_links_are_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        fs::write(&path, b"{}").unwrap();
        assert!(check_writable(&path).is_ok());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
        assert!(check_writable(&path).is_err());

        let data = dir.path().join("..2026");
        fs::create_dir(&data).unwrap();
        fs::write(data.join("k.json"), b"{}").unwrap();
        std::os::unix::fs::symlink("..2026", dir.path().join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/k.json", dir.path().join("k.json")).unwrap();
        let err = check_writable(&dir.path().join("k.json")).unwrap_err();
        assert!(err.0.contains("Kubernetes"), "{}", err.0);
    }

    #[test]
    fn writes_through_a_plain_symlink_keep_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        fs::write(&real, b"a").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomic(&write_target(&link), b"b").unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&real).unwrap(), b"b");
    }
}
