//! The fake cloud kept in a file (`--provider fake`), and shared by several
//! processes at once.
//!
//! One-off commands load the file when they start and save it when they end.
//! Controllers running side by side (`gpufleet jobs serve`) wrap each fake in
//! [`SharedFakeLayer`] instead: every call runs under an exclusive lock on
//! `<state>.lock`, on the state the file holds at that moment, and writes
//! back what it changed, so the processes see one cloud. Anything else that
//! edits the file while they run (a test injecting interruptions) takes the
//! same lock through [`FakeStore::locked`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gpufleet_core::clock::{Clock, ManualClock};
use gpufleet_core::fake::{FakeCloud, FakeState};
use gpufleet_core::layers::{Call, Interceptor, Next, Reply};
use gpufleet_core::{Cloud, Error, ErrorKind, Operation, Result};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// The state file: one saved state per cloud.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct FakeFile {
    /// The file format version (1).
    pub version: u32,
    /// Each cloud's resources, by cloud name.
    pub clouds: BTreeMap<String, FakeState>,
    /// Where the fake cloud's clock stood when it was last saved (a scripted
    /// run moves it ahead of the wall clock): the time the next command
    /// reads the fake cloud and its ledger at, unless `GPUFLEET_FAKE_NOW`
    /// says.
    #[serde(
        default,
        with = "time::serde::rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub now: Option<OffsetDateTime>,
}

/// The state file and its lock.
#[derive(Debug, Clone)]
pub struct FakeStore {
    path: PathBuf,
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Unexpected, format!("{}: {e}", path.display()))
}

/// The state's directory, made 0700 (with its parents) when missing; one
/// that is there is used as it is (it may be a shared one such as /tmp,
/// where the state's own files are still this user's alone).
fn make_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        return Ok(());
    }
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir).map_err(|e| io(dir, e))
}

/// What identifies one version of the file: a save replaces the file (a new
/// inode), so any other process's save changes it.
fn stamp(path: &Path) -> Option<(u64, u64, i128)> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    let mtime = m
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i128);
    Some((ino, m.len(), mtime))
}

impl FakeStore {
    /// The store at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FakeStore { path: path.into() }
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file (empty when there is none); refuses a newer format.
    pub fn load(&self) -> Result<FakeFile> {
        let path = &self.path;
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return Ok(FakeFile::default());
        };
        // Another user's file, or a link, in the state's place (a shared
        // directory such as /tmp) is not this user's fake cloud.
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let me = nix::unistd::geteuid().as_raw();
            if meta.file_type().is_symlink() || meta.uid() != me {
                return Err(Error::new(
                    ErrorKind::PermissionDenied,
                    format!(
                        "refusing the fake cloud state '{}': it is {}; keep the state in a directory of your own (fake_state, GPUFLEET_FAKE_STATE)",
                        path.display(),
                        if meta.file_type().is_symlink() {
                            "a symbolic link".to_string()
                        } else {
                            format!("another user's (uid {})", meta.uid())
                        }
                    ),
                ));
            }
        }
        #[cfg(not(unix))]
        let _ = meta;
        let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
        let file: FakeFile = serde_json::from_str(&text).map_err(|e| {
            Error::invalid_input(format!(
                "the fake cloud state '{}' is unreadable ({e}); move it away to start afresh",
                path.display()
            ))
        })?;
        if file.version > 1 {
            return Err(Error::invalid_input(format!(
                "the fake cloud state '{}' is version {}, newer than this gpufleet understands (1)",
                path.display(),
                file.version
            )));
        }
        Ok(file)
    }

    /// Writes `file` atomically (a new 0600 file, made exclusively under an
    /// unguessable name, renamed over the old one), whatever the umask.
    pub fn write(&self, file: &FakeFile) -> Result<()> {
        let path = &self.path;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            make_dir(dir)?;
        }
        let text = serde_json::to_string(file)
            .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))?;
        crate::private_fs::write_private(path, text.as_bytes())
    }

    /// Saves each fake's state into the file (other clouds' entries stay).
    pub fn save(&self, fakes: &[(Cloud, Arc<FakeCloud>)]) -> Result<()> {
        let mut file = self.load()?;
        file.version = 1;
        for (cloud, fake) in fakes {
            file.clouds
                .insert(cloud.as_str().to_string(), fake.export_state());
            let at = fake.clock().now();
            file.now = Some(file.now.map_or(at, |was| was.max(at)));
        }
        self.write(&file)
    }

    /// Takes the file's exclusive lock (blocking until it is free); it is
    /// released when the returned file is dropped.
    pub fn lock(&self) -> Result<std::fs::File> {
        self.lock_as(true)
    }

    fn lock_as(&self, exclusive: bool) -> Result<std::fs::File> {
        let lock = self.path.with_extension("lock");
        if let Some(dir) = lock.parent().filter(|d| !d.as_os_str().is_empty()) {
            make_dir(dir)?;
        }
        let f = crate::private_fs::open_private(&lock)?;
        if exclusive {
            f.lock().map_err(|e| io(&lock, e))?;
        } else {
            f.lock_shared().map_err(|e| io(&lock, e))?;
        }
        Ok(f)
    }

    /// Runs `f` on the file's contents under its lock and writes back the
    /// result (blocking: call it off the async runtime's threads).
    pub fn locked<T>(&self, f: impl FnOnce(&mut FakeFile) -> T) -> Result<T> {
        let _guard = self.lock()?;
        let mut file = self.load()?;
        let out = f(&mut file);
        file.version = 1;
        self.write(&file)?;
        Ok(out)
    }
}

/// Calls that read only the embedded catalog.
const CATALOG: [Operation; 4] = [
    Operation::InstanceTypes,
    Operation::Offers,
    Operation::SpotPriceHistory,
    Operation::Stability,
];

/// Calls that change the cloud (the rest read it).
const WRITES: [Operation; 4] = [
    Operation::Launch,
    Operation::Terminate,
    Operation::CreatePlacementGroup,
    Operation::DeletePlacementGroup,
];

/// Makes one process's fake cloud the one every process sharing its state
/// file sees: each call runs under the file's lock on the file's state, with
/// the fake's clock set to real time, and saves what the call changed.
#[derive(Debug)]
pub struct SharedFakeLayer {
    store: FakeStore,
    cloud: Cloud,
    fake: Arc<FakeCloud>,
    clock: ManualClock,
    /// The file version this process last read or wrote.
    seen: Arc<Mutex<Option<(u64, u64, i128)>>>,
}

impl SharedFakeLayer {
    /// The layer for `fake` (of `cloud`), whose clock is `clock`.
    pub fn new(store: FakeStore, cloud: Cloud, fake: Arc<FakeCloud>, clock: ManualClock) -> Self {
        SharedFakeLayer {
            store,
            cloud,
            fake,
            clock,
            seen: Arc::new(Mutex::new(None)),
        }
    }

    /// Under the lock (exclusive to change the cloud, shared to read it):
    /// reads the file if another process changed it.
    fn enter(&self, writes: bool) -> Result<(std::fs::File, String)> {
        let guard = self.store.lock_as(writes)?;
        let now = stamp(self.store.path());
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if now.is_some() && now != *seen {
            let mut file = self.store.load()?;
            if let Some(state) = file.clouds.remove(self.cloud.as_str()) {
                self.fake.import_state(state);
            }
            *seen = now;
        }
        drop(seen);
        let real = OffsetDateTime::now_utc();
        if real > self.clock.now() {
            self.clock.set(real);
        }
        self.fake.settle();
        if !writes {
            return Ok((guard, String::new()));
        }
        let before = serde_json::to_string(&self.fake.export_state())
            .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))?;
        Ok((guard, before))
    }

    /// Still under the lock: writes the state back if the call changed it.
    fn leave(&self, before: &str) -> Result<()> {
        let state = self.fake.export_state();
        let after = serde_json::to_string(&state)
            .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))?;
        if after == before {
            return Ok(());
        }
        let mut file = self.store.load()?;
        file.version = 1;
        file.clouds.insert(self.cloud.as_str().to_string(), state);
        self.store.write(&file)?;
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = stamp(self.store.path());
        Ok(())
    }

    fn clone_handle(&self) -> SharedFakeLayer {
        SharedFakeLayer {
            store: self.store.clone(),
            cloud: self.cloud,
            fake: self.fake.clone(),
            clock: self.clock.clone(),
            seen: self.seen.clone(),
        }
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("fake cloud store: {e}")))?
}

impl Interceptor for SharedFakeLayer {
    fn intercept<'a, T: Send + 'a>(&'a self, call: &'a Call, next: Next<'a, T>) -> Reply<'a, T> {
        Box::pin(async move {
            // The catalog is the embedded snapshot: nothing to share.
            if CATALOG.contains(&call.operation) {
                return next().await;
            }
            let writes = WRITES.contains(&call.operation);
            let me = self.clone_handle();
            let (guard, before) = blocking(move || me.enter(writes)).await?;
            let out = next().await;
            let me = self.clone_handle();
            blocking(move || {
                let r = if writes { me.leave(&before) } else { Ok(()) };
                drop(guard);
                r
            })
            .await?;
            out
        })
    }
}

/// Saves the fake cloud's state to its file (the fake cloud's
/// [`FakeStore`] with the clouds to save).
#[derive(Debug, Clone)]
pub struct FakeSaver {
    path: Option<PathBuf>,
    fakes: Vec<(Cloud, Arc<FakeCloud>)>,
}

impl FakeSaver {
    /// Saves `fakes` to the file at `path`; `None` saves nothing (live
    /// clouds).
    pub fn new(path: Option<PathBuf>, fakes: Vec<(Cloud, Arc<FakeCloud>)>) -> FakeSaver {
        FakeSaver { path, fakes }
    }

    /// Saves the fake cloud's state (a no-op for live clouds), atomically.
    pub fn save(&self) -> Result<(), Error> {
        match &self.path {
            Some(path) => FakeStore::new(path).save(&self.fakes),
            None => Ok(()),
        }
    }
}
