//! Opening files beneath a document root so that nothing outside it is ever opened, whatever
//! the path's symbolic links say (unless the route allows following them).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

/// The document root, opened as a directory handle (`O_PATH`).
pub fn open_root(root: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// Open `rel` (already cleaned: no `..`, no leading `/`) for reading, beneath `root`.
///
/// Without `follow_symlinks`, the kernel resolves the path with `RESOLVE_BENEATH`: a symbolic
/// link may point elsewhere inside the root, but any step outside it (an absolute link or a
/// `..` above the root) fails. On kernels without `openat2(2)` the file is opened and the path
/// it really has (`/proc/self/fd`) is checked to lie under the root. `O_NONBLOCK` keeps a FIFO
/// from blocking the thread; the caller serves only regular files and directories.
pub fn open_beneath(root: &OwnedFd, rel: &[u8], follow_symlinks: bool) -> io::Result<File> {
    let rel = if rel.is_empty() { &b"."[..] } else { rel };
    let rel = Path::new(std::ffi::OsStr::from_bytes(rel));
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
    if follow_symlinks {
        return Ok(File::from(openat(root.as_fd(), rel, flags, Mode::empty())?));
    }
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match openat2(root.as_fd(), rel, how) {
        Ok(fd) => Ok(File::from(fd)),
        // No openat2 (old kernel, or a seccomp filter answering ENOSYS / EPERM).
        Err(Errno::ENOSYS) | Err(Errno::EPERM) => {
            let fd = openat(root.as_fd(), rel, flags, Mode::empty())?;
            let opened = fd_path(fd.as_raw_fd())?;
            let root_path = fd_path(root.as_raw_fd())?;
            if opened.starts_with(&root_path) {
                Ok(File::from(fd))
            } else {
                Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "outside the document root",
                ))
            }
        }
        Err(Errno::EXDEV) | Err(Errno::ELOOP) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "symbolic link leads outside the document root",
        )),
        Err(e) => Err(e.into()),
    }
}

/// The path an open descriptor refers to.
pub fn fd_path(fd: i32) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
}
