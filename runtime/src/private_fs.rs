//! Files and directories that only this user can reach, for what gpufleet
//! keeps on this machine beside the fake cloud's state (the `local`
//! provider's instance directories and logs, the state file, its lock).
//!
//! That state may sit in a directory others can write (the docs' own
//! `/tmp/fake-cloud.json`), so nothing here trusts what it finds: a
//! directory gpufleet uses must be a real directory (not a link) owned by
//! this user that no one else may write, or it is refused naming it; a
//! directory it makes is made 0700; a file it makes is made 0600, exclusively
//! and without following a link, so a name another user planted first is an
//! error, never a write through their link.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use gpufleet_core::{Error, ErrorKind, Result};

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    let kind = match e.kind() {
        std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
        std::io::ErrorKind::AlreadyExists => ErrorKind::AlreadyExists,
        _ => ErrorKind::Unexpected,
    };
    Error::new(kind, format!("{what} {}: {e}", path.display()))
}

/// Why `dir` may not hold this user's private files, or `None` when it may:
/// not a directory, a link, another user's, or writable by others.
#[cfg(unix)]
fn untrusted(dir: &Path) -> std::io::Result<Option<String>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)?;
    let me = nix::unistd::geteuid().as_raw();
    Ok(if meta.file_type().is_symlink() {
        Some("it is a symbolic link".into())
    } else if !meta.is_dir() {
        Some("it is not a directory".into())
    } else if meta.uid() != me {
        Some(format!(
            "it belongs to another user (uid {}, this is uid {me})",
            meta.uid()
        ))
    } else if meta.mode() & 0o022 != 0 {
        Some(format!(
            "others may write in it (mode {:o})",
            meta.mode() & 0o7777
        ))
    } else {
        None
    })
}

/// Why an ancestor of a private directory lets another user replace what
/// is under it, or `None` (as OpenSSH's StrictModes judges a path): it must
/// belong to this user or to root, and no one else may write in it unless
/// it is sticky (as `/tmp` is: there only an entry's owner may rename it).
#[cfg(unix)]
fn unsafe_ancestor(dir: &Path) -> std::io::Result<Option<String>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)?;
    let me = nix::unistd::geteuid().as_raw();
    let sticky = meta.mode() & 0o1000 != 0;
    Ok(if meta.uid() != me && meta.uid() != 0 {
        Some(format!(
            "it belongs to another user (uid {}, this is uid {me})",
            meta.uid()
        ))
    } else if meta.mode() & 0o022 != 0 && !sticky {
        Some(format!(
            "others may write in it (mode {:o}) and it is not sticky",
            meta.mode() & 0o7777
        ))
    } else {
        None
    })
}

/// Makes `dir` (and its missing parents) with mode 0700 when it is not
/// there, then checks it is this user's own: a real directory, owned by
/// this user, that no one else may write, under directories that are this
/// user's or root's and that no one else may write unless they are sticky.
/// Anything else is refused ([`ErrorKind::PermissionDenied`]) naming the
/// directory and why.
pub fn private_dir(dir: &Path) -> Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    #[cfg(unix)]
    let refuse = |at: &Path, why: String| {
        Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "refusing to use {}: {why}; gpufleet keeps this user's instances and their output there, so no one else may write there (remove it, or keep the fake cloud's state in a directory of your own: fake_state in the config, GPUFLEET_FAKE_STATE)",
                at.display()
            ),
        )
    };
    // Every directory at and above `from`, links resolved (a link's target
    // is what holds it), as an ancestor must be.
    #[cfg(unix)]
    let ancestors = |from: &Path| -> Result<()> {
        let real = std::fs::canonicalize(from).map_err(|e| io("cannot resolve", from, e))?;
        for above in real.ancestors() {
            match unsafe_ancestor(above) {
                Ok(None) => {}
                Ok(Some(why)) => return Err(refuse(above, why)),
                Err(e) => return Err(io("cannot read", above, e)),
            }
        }
        Ok(())
    };
    // A link or a file in its place makes this fail or is found below.
    if std::fs::symlink_metadata(dir).is_err() {
        // What it would be made in is checked first: nothing is written
        // under a directory another user controls.
        #[cfg(unix)]
        if let Some(existing) = dir.ancestors().skip(1).find(|a| a.exists()) {
            ancestors(existing)?;
        }
        b.create(dir).map_err(|e| io("cannot create", dir, e))?;
    }
    #[cfg(unix)]
    {
        match untrusted(dir) {
            Ok(None) => {}
            Ok(Some(why)) => return Err(refuse(dir, why)),
            Err(e) => return Err(io("cannot read", dir, e)),
        }
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            ancestors(parent)?;
        }
    }
    Ok(())
}

/// Creates `path` for writing with mode 0600: exclusively (a file already
/// there, or a link planted in its place, is an error, never opened) and
/// without following a link.
pub fn create_private(path: &Path) -> Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600).custom_flags(nix::libc::O_NOFOLLOW);
    }
    o.open(path).map_err(|e| io("cannot create", path, e))
}

/// Opens `path` to read and write, creating it 0600 when missing, never
/// through a link, and refuses a file another user owns (a lock file
/// another user planted could be held against this one's processes).
pub fn open_private(path: &Path) -> Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600).custom_flags(nix::libc::O_NOFOLLOW);
    }
    let f = o.open(path).map_err(|e| io("cannot open", path, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = f.metadata().map_err(|e| io("cannot read", path, e))?;
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "refusing to use {}: it belongs to another user (uid {}, this is uid {me})",
                    path.display(),
                    meta.uid()
                ),
            ));
        }
    }
    Ok(f)
}

/// Replaces `path` with `bytes` atomically: written to a new 0600 file
/// beside it (made as [`create_private`] makes files, under a name no one
/// can have planted: this process's id and a counter, retried on a clash),
/// then renamed over it (a rename replaces a link, never writes through
/// it).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut tries = 0;
    let (tmp, mut f) = loop {
        let nonce = gpufleet_core::fnv1a64(
            format!(
                "{}:{}:{:?}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed),
                std::time::SystemTime::now()
            )
            .as_bytes(),
        );
        let tmp = path.with_file_name(format!(".{name}.{nonce:016x}.tmp"));
        match create_private(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("cannot write", &tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("cannot replace", path, e)
    })
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn directories_are_made_private_and_others_refused() {
        let base = tempfile::tempdir().unwrap();
        let d = base.path().join("a/b");
        private_dir(&d).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Writable by others: refused, naming it.
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&open).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied);
        assert!(e.message().contains("others may write"), "{e}");
        assert!(e.message().contains(&open.display().to_string()), "{e}");
        // Under a directory others may write (not sticky): refused, naming
        // that one.
        let under = open.join("mine");
        std::fs::create_dir(&under).unwrap();
        std::fs::set_permissions(&under, std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = private_dir(&under).unwrap_err();
        assert!(e.message().contains("not sticky"), "{e}");
        assert!(e.message().contains(&format!("{}:", open.display())), "{e}");
        // Under a sticky one, as /tmp is: fine.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        private_dir(&under).unwrap();
        // A link to a private directory: refused all the same.
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = private_dir(&link).unwrap_err();
        assert!(e.message().contains("symbolic link"), "{e}");
    }

    /// Another user's directory (pre-created where the state lives, as in
    /// a shared /tmp): refused naming it, nothing written in it. Needs
    /// root to make a directory another user owns (CI runs as root).
    #[test]
    fn another_users_directory_is_refused() {
        if nix::unistd::geteuid().as_raw() != 0 {
            eprintln!("*** SKIPPED: not root, cannot make another user's directory ***");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let theirs = base.path().join("local");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(12345), Some(12345)).unwrap();
        let e = private_dir(&theirs).unwrap_err();
        assert!(
            e.message().contains("belongs to another user (uid 12345"),
            "{e}"
        );
        let e = private_dir(&theirs.join("jobs")).unwrap_err();
        assert!(e.message().contains("belongs to another user"), "{e}");
        assert!(std::fs::read_dir(&theirs).unwrap().next().is_none());
    }

    #[test]
    fn files_are_made_exclusively_without_following_links() {
        let base = tempfile::tempdir().unwrap();
        let victim = base.path().join("victim");
        std::fs::write(&victim, "mine").unwrap();
        let planted = base.path().join("planted.log");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        assert!(create_private(&planted).is_err());
        assert!(open_private(&planted).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        let f = base.path().join("new.log");
        create_private(&f).unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(create_private(&f).is_err(), "created twice");
        // An atomic write replaces a planted link instead of writing
        // through it, and leaves a 0600 file.
        write_private(&planted, b"state").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        assert_eq!(std::fs::read_to_string(&planted).unwrap(), "state");
        let meta = std::fs::symlink_metadata(&planted).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }
}
