//! Decoding (with limits), the three commands, the watermark, and encoding. Pure functions
//! of bytes in and bytes out: no file system, no caches.

use std::borrow::Cow;
use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::imageops::{self, FilterType};
use image::{
    DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader, Limits, Rgba, RgbaImage,
};

use crate::command::{Command, Format};

/// Bounds on what a source image may cost to decode.
#[derive(Clone, Copy, Debug)]
pub struct DecodeLimits {
    pub max_width: u32,
    pub max_height: u32,
    /// Bytes the decoder may allocate, the decoded pixels included.
    pub max_alloc: u64,
}

impl DecodeLimits {
    fn image_limits(&self) -> Limits {
        let mut limits = Limits::default();
        limits.max_image_width = Some(self.max_width);
        limits.max_image_height = Some(self.max_height);
        limits.max_alloc = Some(self.max_alloc);
        limits
    }
}

/// Why a thumbnail could not be made.
#[derive(Debug)]
pub enum RenderError {
    /// The source is larger than the limits allow.
    TooLarge(String),
    /// The source is not a readable image of a supported format.
    Corrupt(String),
    /// Encoding failed (should not happen).
    Encode(String),
    /// The render memory budget stays spent: try again shortly.
    Busy,
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderError::TooLarge(m) => write!(f, "image exceeds the decoder limits: {m}"),
            RenderError::Corrupt(m) => write!(f, "cannot decode image: {m}"),
            RenderError::Encode(m) => write!(f, "cannot encode image: {m}"),
            RenderError::Busy => write!(f, "the render memory budget is spent"),
        }
    }
}

fn decode_error(e: ImageError) -> RenderError {
    match e {
        ImageError::Limits(l) => RenderError::TooLarge(l.to_string()),
        other => RenderError::Corrupt(other.to_string()),
    }
}

/// Decode `bytes` (format guessed from the content; GIF gives its first frame) within
/// `limits`, with the EXIF orientation applied. Once the header is read, before any pixel
/// buffer exists, `reserve(width, height, decoded bytes)` may refuse the render or return
/// what it reserved (kept by the caller while it works on the image).
pub fn decode<P>(
    bytes: &[u8],
    limits: &DecodeLimits,
    reserve: impl FnOnce(u32, u32, u64) -> Result<P, RenderError>,
) -> Result<(DynamicImage, P), RenderError> {
    let bytes = without_icc_profile(bytes);
    let mut reader = ImageReader::new(Cursor::new(&bytes[..]))
        .with_guessed_format()
        .map_err(|e| RenderError::Corrupt(e.to_string()))?;
    match reader.format() {
        Some(ImageFormat::Jpeg | ImageFormat::Png | ImageFormat::Gif | ImageFormat::WebP) => {}
        _ => {
            return Err(RenderError::Corrupt(
                "not a JPEG, PNG, GIF or WebP image".into(),
            ))
        }
    }
    let mut budget = limits.image_limits();
    reader.limits(budget.clone());
    // `into_decoder` checks the header's dimensions against the limits before any pixel
    // buffer exists; the reservation below refuses a buffer larger than `max_alloc`.
    let mut decoder = reader.into_decoder().map_err(decode_error)?;
    budget
        .reserve(decoder.total_bytes())
        .map_err(decode_error)?;
    let (w, h) = decoder.dimensions();
    let permit = reserve(w, h, decoder.total_bytes())?;
    let orientation = decoder.orientation().map_err(decode_error)?;
    let mut img = DynamicImage::from_decoder(decoder).map_err(decode_error)?;
    img.apply_orientation(orientation);
    Ok((img, permit))
}

/// A PNG without its iCCP chunks. The profile is never used (no metadata is written), and the
/// decoder would inflate it up to `max_alloc` bytes: a few KB of zlib can claim a gigabyte.
/// Other formats, and PNGs without a profile, are returned as they are.
fn without_icc_profile(bytes: &[u8]) -> Cow<'_, [u8]> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if !bytes.starts_with(SIGNATURE) || !png_chunks(bytes).any(|(_, _, icc)| icc) {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    out.extend_from_slice(SIGNATURE);
    let mut end = SIGNATURE.len();
    for (from, to, icc) in png_chunks(bytes) {
        if !icc {
            out.extend_from_slice(&bytes[from..to]);
        }
        end = to;
    }
    out.extend_from_slice(&bytes[end..]);
    Cow::Owned(out)
}

/// The chunks of a PNG after its signature: (start, end, is iCCP). Each is its length (4
/// bytes), type (4), data and CRC (4); a truncated last one ends at the end of `bytes`.
fn png_chunks(bytes: &[u8]) -> impl Iterator<Item = (usize, usize, bool)> + '_ {
    let mut pos = 8;
    std::iter::from_fn(move || {
        let head = bytes.get(pos..pos + 8)?;
        let len = u32::from_be_bytes(head[..4].try_into().ok()?) as usize;
        let end = pos.checked_add(12)?.checked_add(len)?.min(bytes.len());
        let chunk = (pos, end, &head[4..8] == b"iCCP");
        pos = end;
        Some(chunk)
    })
}

/// `n * num / den`, rounded, at least 1.
fn scale(n: u32, num: u64, den: u64) -> u32 {
    (((n as u64 * num) + den / 2) / den).max(1) as u32
}

/// The size of `(sw, sh)` scaled to fit in `(w, h)` (0: unconstrained), never enlarged.
pub fn fit_size(sw: u32, sh: u32, w: u32, h: u32) -> (u32, u32) {
    let w = if w == 0 { u32::MAX } else { w };
    let h = if h == 0 { u32::MAX } else { h };
    if sw <= w && sh <= h {
        return (sw, sh);
    }
    // Compare w/sw with h/sh without floating point.
    if (w as u64) * (sh as u64) <= (h as u64) * (sw as u64) {
        (w, scale(sh, w as u64, sw as u64).min(h))
    } else {
        (scale(sw, h as u64, sh as u64).min(w), h)
    }
}

/// For a crop to fill `(w, h)`: the window of the source to keep (x, y, width, height) and
/// the size to scale it to. Never enlarged: a source smaller than the box keeps its scale and
/// is cropped to the box.
pub fn crop_plan(sw: u32, sh: u32, w: u32, h: u32, anchor: (u32, u32)) -> ([u32; 4], (u32, u32)) {
    // Scale factor s = max(w/sw, h/sh), capped at 1.
    let (num, den) = if (w as u64) * (sh as u64) >= (h as u64) * (sw as u64) {
        (w as u64, sw as u64)
    } else {
        (h as u64, sh as u64)
    };
    let (num, den) = if num >= den { (1, 1) } else { (num, den) };
    let (out_w, out_h) = (w.min(scale(sw, num, den)), h.min(scale(sh, num, den)));
    // The source window that scales to (out_w, out_h).
    let win_w = scale(out_w, den, num).min(sw);
    let win_h = scale(out_h, den, num).min(sh);
    let place = |free: u32, a: u32| free * a / 2;
    let x = place(sw - win_w, anchor.0);
    let y = place(sh - win_h, anchor.1);
    ([x, y, win_w, win_h], (out_w, out_h))
}

fn resize(img: &DynamicImage, w: u32, h: u32) -> DynamicImage {
    if img.width() == w && img.height() == h {
        img.clone()
    } else {
        img.resize_exact(w, h, FilterType::Triangle)
    }
}

/// Apply `cmd` to `img`.
pub fn apply(img: &DynamicImage, cmd: &Command) -> DynamicImage {
    let (sw, sh) = (img.width(), img.height());
    match *cmd {
        Command::Fit { w, h } => {
            let (tw, th) = fit_size(sw, sh, w, h);
            resize(img, tw, th)
        }
        Command::Crop { w, h, gravity } => {
            let ([x, y, cw, ch], (tw, th)) = crop_plan(sw, sh, w, h, gravity.anchor());
            resize(&img.crop_imm(x, y, cw, ch), tw, th)
        }
        Command::Fill { w, h, color } => {
            let (tw, th) = fit_size(sw, sh, w, h);
            let inner = resize(img, tw, th).to_rgba8();
            let mut canvas = RgbaImage::from_pixel(w, h, Rgba([color[0], color[1], color[2], 255]));
            let (x, y) = ((w - tw) / 2, (h - th) / 2);
            imageops::overlay(&mut canvas, &inner, x as i64, y as i64);
            DynamicImage::ImageRgba8(canvas)
        }
    }
}

/// Composite `mark` onto the bottom-right corner of `img` (clipped if larger).
pub fn watermark(img: DynamicImage, mark: &RgbaImage) -> DynamicImage {
    let mut base = img.to_rgba8();
    let x = base.width() as i64 - mark.width() as i64;
    let y = base.height() as i64 - mark.height() as i64;
    imageops::overlay(&mut base, mark, x, y);
    DynamicImage::ImageRgba8(base)
}

/// Encode in `format`. JPEG drops alpha; no metadata is written by any encoder.
pub fn encode(
    img: &DynamicImage,
    format: Format,
    jpeg_quality: u8,
) -> Result<Vec<u8>, RenderError> {
    let mut out = Cursor::new(Vec::new());
    let err = |e: ImageError| RenderError::Encode(e.to_string());
    match format {
        Format::Jpeg => {
            let rgb = DynamicImage::ImageRgb8(img.to_rgb8());
            rgb.write_with_encoder(JpegEncoder::new_with_quality(&mut out, jpeg_quality))
                .map_err(err)?;
        }
        Format::Png => img.write_to(&mut out, ImageFormat::Png).map_err(err)?,
        Format::Gif => DynamicImage::ImageRgba8(img.to_rgba8())
            .write_to(&mut out, ImageFormat::Gif)
            .map_err(err)?,
        Format::WebP => {
            // The WebP encoder takes 8-bit RGB or RGBA only.
            let img = if img.color().has_alpha() {
                DynamicImage::ImageRgba8(img.to_rgba8())
            } else {
                DynamicImage::ImageRgb8(img.to_rgb8())
            };
            img.write_to(&mut out, ImageFormat::WebP).map_err(err)?
        }
    }
    Ok(out.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_budget(_: u32, _: u32, _: u64) -> Result<(), RenderError> {
        Ok(())
    }

    #[test]
    fn icc_profiles_are_dropped_before_decoding() {
        let mut png = Vec::new();
        DynamicImage::ImageRgb8(image::RgbImage::new(3, 2))
            .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        // An iCCP chunk after IHDR (its content does not matter: it is never read).
        let ihdr_end = 8 + 12 + 13;
        let mut with_icc = png[..ihdr_end].to_vec();
        with_icc.extend_from_slice(&[0, 0, 0, 5]);
        with_icc.extend_from_slice(b"iCCPabcde");
        with_icc.extend_from_slice(&[1, 2, 3, 4]);
        with_icc.extend_from_slice(&png[ihdr_end..]);
        assert_eq!(&without_icc_profile(&with_icc)[..], &png[..]);
        assert!(matches!(without_icc_profile(&png), Cow::Borrowed(_)));
        assert!(matches!(without_icc_profile(b"GIF89a"), Cow::Borrowed(_)));
    }

    #[test]
    fn fit_never_enlarges_and_keeps_aspect() {
        assert_eq!(fit_size(400, 200, 100, 100), (100, 50));
        assert_eq!(fit_size(200, 400, 100, 100), (50, 100));
        assert_eq!(fit_size(50, 40, 100, 100), (50, 40));
        assert_eq!(fit_size(400, 200, 100, 0), (100, 50));
        assert_eq!(fit_size(400, 200, 0, 20), (40, 20));
        assert_eq!(fit_size(10000, 1, 10, 10), (10, 1));
    }

    #[test]
    fn crop_covers_the_box() {
        // 400x200 into 100x100: scale 1/2, window 200x200 centred.
        assert_eq!(
            crop_plan(400, 200, 100, 100, (1, 1)),
            ([100, 0, 200, 200], (100, 100))
        );
        assert_eq!(
            crop_plan(400, 200, 100, 100, (0, 1)),
            ([0, 0, 200, 200], (100, 100))
        );
        assert_eq!(
            crop_plan(400, 200, 100, 100, (2, 1)),
            ([200, 0, 200, 200], (100, 100))
        );
        assert_eq!(
            crop_plan(200, 400, 100, 100, (1, 2)),
            ([0, 200, 200, 200], (100, 100))
        );
        // Smaller than the box: no enlargement, cropped to the box where it is larger.
        assert_eq!(
            crop_plan(50, 300, 100, 100, (1, 1)),
            ([0, 100, 50, 100], (50, 100))
        );
        assert_eq!(
            crop_plan(30, 30, 100, 100, (1, 1)),
            ([0, 0, 30, 30], (30, 30))
        );
    }

    #[test]
    fn commands_give_the_promised_sizes() {
        let img = DynamicImage::ImageRgb8(image::RgbImage::new(400, 200));
        let out = apply(&img, &Command::Fit { w: 100, h: 100 });
        assert_eq!((out.width(), out.height()), (100, 50));
        let out = apply(
            &img,
            &Command::Crop {
                w: 60,
                h: 90,
                gravity: crate::command::Gravity::Center,
            },
        );
        assert_eq!((out.width(), out.height()), (60, 90));
        let out = apply(
            &img,
            &Command::Fill {
                w: 100,
                h: 100,
                color: [255, 0, 0],
            },
        );
        assert_eq!((out.width(), out.height()), (100, 100));
        assert_eq!(out.to_rgba8().get_pixel(0, 0).0, [255, 0, 0, 255]);
        assert_eq!(out.to_rgba8().get_pixel(50, 50).0, [0, 0, 0, 255]);
    }

    #[test]
    fn refuses_huge_headers_and_garbage() {
        let limits = DecodeLimits {
            max_width: 1000,
            max_height: 1000,
            max_alloc: 1 << 20,
        };
        assert!(matches!(
            decode(b"not an image at all", &limits, no_budget),
            Err(RenderError::Corrupt(_))
        ));
        let mut png = Vec::new();
        DynamicImage::ImageRgb8(image::RgbImage::new(600, 600))
            .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        // 600x600 RGB is more than 1 MiB: refused by the allocation limit.
        assert!(matches!(
            decode(&png, &limits, no_budget),
            Err(RenderError::TooLarge(_))
        ));
        let wide = DecodeLimits {
            max_width: 100,
            ..limits
        };
        assert!(matches!(
            decode(&png, &wide, no_budget),
            Err(RenderError::TooLarge(_))
        ));
        let ok = DecodeLimits {
            max_alloc: 4 << 20,
            ..limits
        };
        assert_eq!(decode(&png, &ok, no_budget).unwrap().0.width(), 600);
    }
}
