//! Key files of secure groups ([`crate::GroupConfig::keys`]).
//!
//! A key file holds exactly 32 bytes that are not all printable text, the key itself (what
//! [`write_key_file`] and `rmcast keygen` write, from the operating system's random generator),
//! or else a passphrase, stretched into a key with PBKDF2-HMAC-SHA-256
//! ([`GroupKey::from_file_contents`]). Keys come
//! from files (or a file named by [`KEY_FILE_ENV`]), never from a command line, where every user
//! of the host could read them.

use rmcast_proto::secure::GroupKey;
use std::io::{self, Write};
use std::path::Path;

/// Environment variable naming a key file, read by the `rmcast` tool when `--key-file` is not
/// given.
pub const KEY_FILE_ENV: &str = "RMCAST_KEY_FILE";

/// Read the key in `path`. A file that others than its owner may read is refused on Unix: the
/// key would not be secret.
pub fn load_key_file(path: &Path) -> io::Result<GroupKey> {
    let contents = std::fs::read(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "key file {} may be read by others (mode {:o}); make it 0600",
                    path.display(),
                    mode & 0o777
                ),
            ));
        }
    }
    GroupKey::from_file_contents(&contents).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// Write `key` to a new file `path` readable by its owner only (mode 0600); an existing file is
/// never overwritten.
pub fn write_key_file(path: &Path, key: &GroupKey) -> io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(key.bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_load() {
        let dir = std::env::temp_dir().join(format!("rmcast-keyfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("group.key");
        let _ = std::fs::remove_file(&path);
        let key = GroupKey::generate().unwrap();
        write_key_file(&path, &key).unwrap();
        assert_eq!(load_key_file(&path).unwrap(), key);
        // Never overwritten.
        assert!(write_key_file(&path, &GroupKey::generate().unwrap()).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = load_key_file(&path).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
