//! The `image` filter: decides inline whether a request is a thumbnail and whether memory
//! holds it; anything else (finding the source, the disk cache, rendering) runs on the worker
//! pool through `before_mode`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use osprey_sdk::http::{self, clean_path, Precondition, Validators};
use osprey_sdk::{host, Filter, Mode, Request, Response, Step, Wants};

use crate::cache::{self, DiskCache, Entry, Source, Stamp};
use crate::command::{split_name, Command, Format, Thumb};
use crate::path;
use crate::render::{self, RenderError};
use crate::{sign, watermark, Settings};

pub struct ImageFilter {
    settings: Arc<Settings>,
    /// The served directory, canonical.
    root: PathBuf,
    disk: Option<DiskCache>,
    /// Keeps this filter's entries apart from other routes' in the shared memory cache.
    id: String,
}

/// What a request is, as far as can be told without touching the disk.
enum Prep {
    /// Not a thumbnail request: on to the handler.
    Pass,
    Reject(u16, &'static str),
    Hit(Arc<Entry>, Format),
    Miss(Miss),
}

struct Miss {
    key: String,
    /// The source file relative to the root.
    source: String,
    thumb: Thumb,
}

enum MakeError {
    /// The source vanished under us: on to the handler.
    Gone,
    Render(RenderError),
}

impl ImageFilter {
    pub(crate) fn new(settings: Arc<Settings>, root: PathBuf, disk: Option<DiskCache>) -> Self {
        let id = root.display().to_string();
        ImageFilter {
            settings,
            root,
            disk,
            id,
        }
    }

    fn prepare(&self, req: &Request<'_>) -> Prep {
        if !matches!(req.method.as_str(), "GET" | "HEAD") {
            return Prep::Pass;
        }
        // Paths are refused by the rules static applies, so both modules agree on a name.
        let clean = match clean_path(req.path_info.as_str()) {
            Ok(clean) => clean,
            Err(bad) => return Prep::Reject(400, bad.reason()),
        };
        // A name that is not UTF-8 is no thumbnail name.
        let Some(rel) = clean.as_str() else {
            return Prep::Pass;
        };
        let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        let Some(thumb) = split_name(name) else {
            return Prep::Pass;
        };
        if !self.authorized(req, &thumb.command) {
            return Prep::Reject(403, "this image command is not allowed");
        }
        let (w, h) = thumb.command.size();
        let limits = &self.settings.limits;
        if w > limits.max_width
            || h > limits.max_height
            || (w as u64) * (h as u64) * 4 > limits.max_alloc
        {
            return Prep::Reject(400, "the requested thumbnail is too large");
        }
        let key = format!("{}\0{rel}", self.id);
        if let Some(entry) = cache::lookup(&self.settings.mem, &key) {
            return Prep::Hit(entry, thumb.format);
        }
        let source = if dir.is_empty() {
            thumb.source.clone()
        } else {
            format!("{dir}/{}", thumb.source)
        };
        Prep::Miss(Miss { key, source, thumb })
    }

    fn authorized(&self, req: &Request<'_>, cmd: &Command) -> bool {
        if self.settings.allowed.contains(cmd) {
            return true;
        }
        let Some(key) = &self.settings.sign_key else {
            return false;
        };
        req.query_param("sig")
            .is_some_and(|sig| sign::verify(key, req.path.as_str(), &sig))
    }

    fn serve(
        &self,
        req: &Request<'_>,
        resp: &mut Response,
        entry: &Entry,
        format: Format,
        from: Source,
    ) {
        let modified = entry.stamp.modified();
        resp.header("Last-Modified", httpdate::fmt_http_date(modified))
            .header("ETag", entry.etag.clone())
            .header("X-Image-Cache", from.as_str());
        let validators = Validators {
            etag: Some(&entry.etag),
            last_modified: Some(modified),
        };
        match http::evaluate(req, &validators) {
            Precondition::Proceed => {
                resp.status(200)
                    .content_type(format.content_type())
                    .body_shared(entry.body.clone());
            }
            Precondition::NotModified => {
                resp.status(304);
            }
            Precondition::Failed => http::respond_error(
                resp,
                412,
                "the thumbnail does not match the request's preconditions",
            ),
        }
    }

    /// Find the source, then take the thumbnail from memory, disk, or render it.
    fn make(&self, req: &Request<'_>, miss: Miss, resp: &mut Response) -> Step {
        let Some(src) = path::resolve(&self.root, &miss.source) else {
            return Step::Continue;
        };
        let Some(stamp) = Stamp::of(&src) else {
            return Step::Continue;
        };
        let mark = watermark::find(&src, &self.root, self.settings.watermark.as_deref());
        let s = &self.settings;
        let identity = format!(
            "{}\0{stamp:?}\0{}\0{mark:?}\0{:?}\0q{}\0min{}",
            miss.key,
            miss.thumb.command,
            mark.as_deref().and_then(Stamp::of),
            s.jpeg_quality,
            s.watermark_min
        );
        let made = cache::get_or_make(&s.mem, &miss.key, stamp, || {
            let ext = miss
                .source
                .rsplit('.')
                .next()
                .unwrap_or("img")
                .to_ascii_lowercase();
            let disk_path = self.disk.as_ref().map(|d| d.path_for(&identity, &ext));
            if let (Some(disk), Some(p)) = (&self.disk, &disk_path) {
                if let Some(bytes) = disk.read(p) {
                    return Ok(entry(
                        &src,
                        stamp,
                        &identity,
                        disk_path,
                        bytes,
                        Source::Disk,
                    ));
                }
            }
            let bytes = std::fs::read(&src).map_err(|_| MakeError::Gone)?;
            let started = Instant::now();
            let out = self
                .render(&bytes, &miss.thumb, mark.as_deref())
                .map_err(MakeError::Render)?;
            host::debug(&format!(
                "rendered {} as {} in {} ms",
                miss.source,
                miss.thumb.command,
                started.elapsed().as_millis()
            ));
            let mut kept = None;
            if let (Some(disk), Some(p)) = (&self.disk, disk_path) {
                match disk.write(&p, &out) {
                    Ok(()) => kept = Some(p),
                    Err(e) => host::warn(&format!("cannot write {}: {e}", p.display())),
                }
            }
            Ok(entry(&src, stamp, &identity, kept, out, Source::Rendered))
        });
        match made {
            Ok((entry, from)) => {
                self.serve(req, resp, &entry, miss.thumb.format, from);
                Step::Respond
            }
            Err(MakeError::Gone) => Step::Continue,
            Err(MakeError::Render(e)) => {
                host::error(&format!("{} ({}): {e}", req.path, src.display()));
                let (status, text) = match e {
                    RenderError::TooLarge(_) => (422, "the source image is too large to process\n"),
                    RenderError::Busy => {
                        resp.header("Retry-After", "1");
                        (
                            503,
                            "too many images are being processed; try again shortly\n",
                        )
                    }
                    _ => (500, "the source image cannot be processed\n"),
                };
                resp.status(status).text(text);
                Step::Respond
            }
        }
    }

    fn render(
        &self,
        bytes: &[u8],
        thumb: &Thumb,
        mark: Option<&std::path::Path>,
    ) -> Result<Vec<u8>, RenderError> {
        let s = &self.settings;
        let (img, _permit) = render::decode(bytes, &s.limits, |w, h, decoded| {
            s.budget
                .reserve(crate::budget::estimate(w, h, decoded, &thumb.command))
        })?;
        let mut out = render::apply(&img, &thumb.command);
        drop(img);
        if let Some(path) = mark {
            if out.width() >= s.watermark_min && out.height() >= s.watermark_min {
                match s.marks.get(path, &s.limits) {
                    Ok(m) => out = render::watermark(out, &m),
                    Err(e) => host::error(&e),
                }
            }
        }
        render::encode(&out, thumb.format, s.jpeg_quality)
    }
}

fn entry(
    src: &std::path::Path,
    stamp: Stamp,
    identity: &str,
    disk: Option<PathBuf>,
    bytes: Vec<u8>,
    origin: Source,
) -> Entry {
    Entry {
        src: src.to_owned(),
        stamp,
        etag: cache::etag_for(identity),
        disk,
        body: osprey_sdk::abi_stable::std_types::RArc::new(bytes.into()),
        origin,
    }
}

impl Filter for ImageFilter {
    fn wants(&self) -> Wants {
        Wants::BEFORE_MODE | Wants::BEFORE
    }

    fn before_mode(&self, req: &Request<'_>, _key: &str) -> Mode {
        match self.prepare(req) {
            Prep::Miss(_) => Mode::Worker,
            _ => Mode::Inline,
        }
    }

    fn before(&self, req: &Request<'_>, _key: &str, resp: &mut Response) -> Step {
        match self.prepare(req) {
            Prep::Pass => Step::Continue,
            Prep::Reject(status, why) => {
                http::respond_error(resp, status, why);
                Step::Respond
            }
            Prep::Hit(entry, format) => {
                self.serve(req, resp, &entry, format, Source::Memory);
                Step::Respond
            }
            Prep::Miss(miss) => self.make(req, miss, resp),
        }
    }
}
