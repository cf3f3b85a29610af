//! Which watermark applies to an image, and the decoded watermarks (reloaded when their
//! file changes).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use image::RgbaImage;

use crate::cache::Stamp;
use crate::render::{self, DecodeLimits};

/// The file name looked for in the image's directory and its parents.
pub const FILE_NAME: &str = "watermark.png";
/// A file of this name in an image's directory turns watermarks off there.
pub const DISABLE: &str = ".nowmk";

/// The watermark file for the image at `src` (canonical, under `root`): the configured one,
/// or the nearest `watermark.png` walking up from the image's directory, never above `root`;
/// `None` where a `.nowmk` file disables it.
pub fn find(src: &Path, root: &Path, configured: Option<&Path>) -> Option<PathBuf> {
    let dir = src.parent()?;
    if dir.join(DISABLE).exists() {
        return None;
    }
    if let Some(path) = configured {
        return Some(path.to_owned());
    }
    let mut dir = dir;
    loop {
        let candidate = dir.join(FILE_NAME);
        if candidate.is_file() && candidate != src {
            // The found file must itself lie inside the root (no symlink out).
            match std::fs::canonicalize(&candidate) {
                Ok(real) if real.starts_with(root) => return Some(real),
                _ => {}
            }
        }
        if dir == root {
            return None;
        }
        dir = dir.parent()?;
        if !dir.starts_with(root) {
            return None;
        }
    }
}

/// Decoded watermarks by path.
#[derive(Default)]
pub struct Marks {
    loaded: Mutex<HashMap<PathBuf, (Stamp, Arc<RgbaImage>)>>,
}

impl Marks {
    /// The decoded watermark at `path`, decoding it again if the file changed.
    pub fn get(&self, path: &Path, limits: &DecodeLimits) -> Result<Arc<RgbaImage>, String> {
        let stamp =
            Stamp::of(path).ok_or_else(|| format!("watermark {} is missing", path.display()))?;
        if let Some((s, img)) = self.loaded.lock().unwrap().get(path) {
            if *s == stamp {
                return Ok(img.clone());
            }
        }
        let bytes =
            std::fs::read(path).map_err(|e| format!("watermark {}: {e}", path.display()))?;
        // Loaded once and kept: outside the render budget.
        let (img, ()) = render::decode(&bytes, limits, |_, _, _| Ok(()))
            .map_err(|e| format!("watermark {}: {e}", path.display()))?;
        let img = Arc::new(img.to_rgba8());
        self.loaded
            .lock()
            .unwrap()
            .insert(path.to_owned(), (stamp, img.clone()));
        Ok(img)
    }
}
