//! Reading what a person hands gpufleet by path (job files, service files,
//! fake-cloud scripts): bounded, so that `--job /dev/zero` is an error
//! naming the limit, not a process that reads without end.

use std::io::Read;
use std::path::Path;

use gpufleet_core::{Error, Result};

/// The most a job or service file may hold: 1 MiB (a boot script must fit
/// in 16 KiB of user data anyway).
pub const MAX_INPUT_FILE: u64 = 1 << 20;

/// Reads the text file at `path` (`what` names it in errors: "job file",
/// "service file"), at most [`MAX_INPUT_FILE`] bytes; a longer one, or one
/// that is not UTF-8, is refused naming the path.
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    let f = std::fs::File::open(path)
        .map_err(|e| Error::invalid_input(format!("cannot read {what} {}: {e}", path.display())))?;
    let mut bytes = Vec::new();
    f.take(MAX_INPUT_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::invalid_input(format!("cannot read {what} {}: {e}", path.display())))?;
    if bytes.len() as u64 > MAX_INPUT_FILE {
        return Err(Error::invalid_input(format!(
            "{what} {} is over {} bytes: a {what} is a short text (TOML or JSON)",
            path.display(),
            MAX_INPUT_FILE
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| Error::invalid_input(format!("{what} {} is not UTF-8 text", path.display())))
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_or_binary_file_is_refused_naming_it() {
        let e = read_text(Path::new("/dev/zero"), "job file").unwrap_err();
        assert!(
            e.message().contains("/dev/zero is over 1048576 bytes"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("x.toml");
        std::fs::write(&bin, [0xff, 0xfe, 0x00]).unwrap();
        let e = read_text(&bin, "service file").unwrap_err();
        assert!(e.message().contains("is not UTF-8"), "{e}");
        let e = read_text(&dir.path().join("missing"), "job file").unwrap_err();
        assert!(e.message().starts_with("cannot read job file"), "{e}");
    }
}
