//! The `image` filter against the real binary: the three commands and their sizes, formats,
//! EXIF orientation, permissions and signatures, safe paths, hostile images, the memory and
//! disk caches (and their invalidation), one computation for concurrent requests, watermarks.

mod common;

use std::io::Cursor;
use std::time::{Duration, Instant};

use common::{Response, Server, TempDir};
use image::{DynamicImage, GenericImageView, ImageFormat, Rgba, RgbaImage};

/// 32 bytes in hex.
const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn key() -> Vec<u8> {
    (0u8..32).collect()
}

fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

fn solid(w: u32, h: u32, rgb: [u8; 3]) -> DynamicImage {
    DynamicImage::ImageRgb8(image::RgbImage::from_pixel(w, h, image::Rgb(rgb)))
}

/// A gradient, so crops and scales are not trivially equal.
fn gradient(w: u32, h: u32) -> DynamicImage {
    DynamicImage::ImageRgb8(image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x * 255 / w) as u8, (y * 255 / h) as u8, 128])
    }))
}

/// A JPEG with an EXIF APP1 segment saying "rotate 90° clockwise to display" (orientation 6).
fn jpeg_with_orientation(img: &DynamicImage) -> Vec<u8> {
    let jpeg = encode(img, ImageFormat::Jpeg);
    let mut app1 = vec![0xFF, 0xE1, 0x00, 34];
    app1.extend_from_slice(b"Exif\0\0");
    app1.extend_from_slice(b"MM\0\x2A\0\0\0\x08"); // big-endian TIFF, first IFD at 8
    app1.extend_from_slice(&[0, 1]); // one entry
    app1.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0]); // Orientation = 6
    app1.extend_from_slice(&[0, 0, 0, 0]); // no next IFD
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&app1);
    out.extend_from_slice(&jpeg[2..]);
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A PNG whose header claims `w`×`h` RGBA, followed by a tiny (truncated) data chunk.
fn png_header_only(w: u32, h: u32) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut chunk = |kind: &[u8], data: &[u8]| {
        png.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        png.extend_from_slice(&body);
        png.extend_from_slice(&crc32(&body).to_be_bytes());
    };
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    chunk(b"IHDR", &ihdr);
    chunk(b"IDAT", &[0x78, 0x9C, 0x03, 0x00]);
    chunk(b"IEND", &[]);
    png
}

/// A two-frame GIF: red, then blue.
fn two_frame_gif() -> Vec<u8> {
    use image::codecs::gif::GifEncoder;
    use image::Frame;
    let mut out = Vec::new();
    {
        let mut enc = GifEncoder::new(&mut out);
        for rgb in [[255, 0, 0], [0, 0, 255]] {
            let frame = RgbaImage::from_pixel(120, 60, Rgba([rgb[0], rgb[1], rgb[2], 255]));
            enc.encode_frame(Frame::new(frame)).unwrap();
        }
    }
    out
}

/// The served directory with every test image, and a secret file beside it.
struct Site {
    base: TempDir,
}

impl Site {
    fn new() -> Site {
        let base = TempDir::new("image");
        let site = Site { base };
        site.put("pic.png", &encode(&gradient(400, 200), ImageFormat::Png));
        site.put("photo.jpg", &jpeg_with_orientation(&gradient(200, 100)));
        site.put("anim.gif", &two_frame_gif());
        site.put("pic.webp", &encode(&gradient(300, 300), ImageFormat::WebP));
        let mut corrupt = encode(&gradient(64, 64), ImageFormat::Jpeg);
        corrupt.truncate(200);
        corrupt.extend(std::iter::repeat_n(0x55, 300));
        site.put("corrupt.jpg", &corrupt);
        site.put("garbage.png", b"this is not an image at all");
        site.put("huge.png", &png_header_only(100_000, 100_000));
        // 3000x3000 in a few KB: decodes to 9 MB, over the 4 MiB budget of these tests.
        let bomb = DynamicImage::ImageLuma8(image::GrayImage::new(3000, 3000));
        site.put("bomb.png", &encode(&bomb, ImageFormat::Png));
        // Watermarks: green 10x10 at the root; `nowm/` turns them off.
        site.put(
            "watermark.png",
            &encode(&solid(10, 10, [0, 255, 0]), ImageFormat::Png),
        );
        site.put(
            "sub/deep/blue.png",
            &encode(&solid(400, 400, [0, 0, 255]), ImageFormat::Png),
        );
        site.put(
            "nowm/blue.png",
            &encode(&solid(400, 400, [0, 0, 255]), ImageFormat::Png),
        );
        site.put("nowm/.nowmk", b"");
        // Outside the served directory, and a symlink to it from inside.
        site.base
            .write("secret.png", encode(&gradient(400, 200), ImageFormat::Png));
        std::os::unix::fs::symlink(
            site.base.path().join("secret.png"),
            site.dir().join("link.png"),
        )
        .unwrap();
        site
    }

    fn dir(&self) -> std::path::PathBuf {
        self.base.path().join("www")
    }

    fn cache_dir(&self) -> std::path::PathBuf {
        self.base.path().join("cache")
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        self.base.write(&format!("www/{name}"), bytes);
    }

    fn config(&self) -> String {
        format!(
            r#"{{
  "load": [{{"so": "image"}}, {{"so": "testkit"}}],
  "modules": {{"image": {{
    "allowed_cmds": ["100x100", "1000x1000", "c50x50", "c60x30t", "f100x100xFF0000", "300x300", "200x0"],
    "sign_key": "{KEY_HEX}",
    "max_alloc": 4194304,
  }}}},
  "routing": [
    {{"prefix": "/img/", "handler": "text", "text": "from the handler\n",
      "filters": [{{"type": "image", "dir": "{}", "cache_dir": "{}"}}]}},
  ]
}}"#,
            self.dir().display(),
            self.cache_dir().display()
        )
    }

    fn start(&self) -> Server {
        Server::start(&self.config())
    }
}

/// Send raw bytes and read the whole answer as bytes (the harness's `raw` is for text).
fn raw(srv: &Server, request: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = srv.connect();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// One GET, binary-safe.
fn get(srv: &Server, path: &str) -> Response {
    Response::parse(&raw(
        srv,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
    ))
}

/// The decoded image of a 200 response, checking its Content-Type.
fn image_of(r: &Response, format: ImageFormat) -> DynamicImage {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some(format.to_mime_type()));
    image::load_from_memory_with_format(&r.body, format).expect("a decodable image")
}

fn dims(r: &Response, format: ImageFormat) -> (u32, u32) {
    image_of(r, format).dimensions()
}

fn is_handler(r: &Response) -> bool {
    r.status == 200 && r.text() == "from the handler\n"
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn fit_crop_and_fill_give_the_promised_sizes() {
    let site = Site::new();
    let srv = site.start();
    assert_eq!(
        dims(&get(&srv, "/img/pic.100x100.png"), ImageFormat::Png),
        (100, 50)
    );
    assert_eq!(
        dims(&get(&srv, "/img/pic.200x0.png"), ImageFormat::Png),
        (200, 100)
    );
    assert_eq!(
        dims(&get(&srv, "/img/pic.c50x50.png"), ImageFormat::Png),
        (50, 50)
    );
    // Never enlarged.
    assert_eq!(
        dims(&get(&srv, "/img/pic.1000x1000.png"), ImageFormat::Png),
        (400, 200)
    );
    // Crop with gravity: the top strip of the gradient (green channel near 0).
    let top = image_of(&get(&srv, "/img/pic.c60x30t.png"), ImageFormat::Png);
    assert_eq!(top.dimensions(), (60, 30));
    assert!(top.get_pixel(30, 0).0[1] < 10, "{:?}", top.get_pixel(30, 0));
    // Fill: 100x50 picture centred on a red 100x100 canvas.
    let filled = image_of(&get(&srv, "/img/pic.f100x100xFF0000.png"), ImageFormat::Png);
    assert_eq!(filled.dimensions(), (100, 100));
    assert_eq!(filled.get_pixel(0, 0).0, [255, 0, 0, 255]);
    assert_ne!(filled.get_pixel(50, 50).0, [255, 0, 0, 255]);
}

#[test]
fn formats_orientation_and_metadata() {
    let site = Site::new();
    let srv = site.start();
    // Stored 200x100 with orientation 6: displayed 100x200, so it fits as 50x100.
    let r = get(&srv, "/img/photo.100x100.jpg");
    assert_eq!(dims(&r, ImageFormat::Jpeg), (50, 100));
    assert!(
        common::find(&r.body, b"Exif").is_none(),
        "EXIF must be stripped"
    );
    // GIF: the first frame (red).
    let gif = image_of(&get(&srv, "/img/anim.100x100.gif"), ImageFormat::Gif);
    assert_eq!(gif.dimensions(), (100, 50));
    let px = gif.get_pixel(50, 25).0;
    assert!(px[0] > 200 && px[2] < 50, "{px:?}");
    assert_eq!(
        dims(&get(&srv, "/img/pic.100x100.webp"), ImageFormat::WebP),
        (100, 100)
    );
    // HEAD: headers only.
    let raw =
        srv.raw(b"HEAD /img/pic.100x100.png HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let (head, _) = Response::parse_one(raw.as_bytes(), true);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("image/png"));
}

#[test]
fn requests_without_a_command_reach_the_handler() {
    let site = Site::new();
    let srv = site.start();
    for path in [
        "/img/pic.png",
        "/img/pic.v2.png",
        "/img/missing.100x100.png",
        "/img/pic.100x100.txt",
    ] {
        let r = get(&srv, path);
        assert!(is_handler(&r), "{path}: {} {}", r.status, r.text());
    }
    let r = srv.raw(b"POST /img/pic.100x100.png HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert!(is_handler(&Response::parse(r.as_bytes())));
}

#[test]
fn only_allowed_or_signed_commands_run() {
    let site = Site::new();
    let srv = site.start();
    let r = get(&srv, "/img/pic.77x77.png");
    assert_eq!(r.status, 403, "{}", r.text());
    let sig = osprey_image::sign::sign(&key(), "/img/pic.77x77.png");
    let r = get(&srv, &format!("/img/pic.77x77.png?sig={sig}"));
    assert_eq!(dims(&r, ImageFormat::Png), (77, 39));
    // A signature for another path, a mangled one, or none at all.
    let other = osprey_image::sign::sign(&key(), "/img/pic.78x78.png");
    assert_eq!(
        get(&srv, &format!("/img/pic.77x77.png?sig={other}")).status,
        403
    );
    assert_eq!(
        get(&srv, &format!("/img/pic.77x77.png?sig={}", &sig[..40])).status,
        403
    );
    assert_eq!(get(&srv, "/img/pic.77x77.png?sig=zz").status, 403);
    // A signed command served once from memory still needs its signature.
    assert_eq!(get(&srv, "/img/pic.77x77.png").status, 403);
}

#[test]
fn paths_never_leave_the_directory() {
    let site = Site::new();
    let srv = site.start();
    for path in [
        "/img/link.100x100.png",
        "/img/../secret.100x100.png",
        "/img/%2e%2e/secret.100x100.png",
        "/img/sub/%2e%2e/%2e%2e/secret.100x100.png",
        "/img/%252e%252e/secret.100x100.png",
    ] {
        let r = get(&srv, path);
        assert!(
            !r.header("content-type")
                .is_some_and(|t| t.starts_with("image/")),
            "{path} served an image"
        );
    }
    // Dot segments inside the directory resolve normally.
    assert_eq!(
        dims(&get(&srv, "/img/sub/../pic.100x100.png"), ImageFormat::Png),
        (100, 50)
    );
}

#[test]
fn bad_paths_are_refused_as_static_refuses_them() {
    let site = Site::new();
    // A legal name on Linux that the shared path rules refuse.
    site.put(
        "back\\slash.png",
        &encode(&gradient(400, 200), ImageFormat::Png),
    );
    let srv = site.start();
    for (path, reason) in [
        ("/img/back%5cslash.100x100.png", "path contains a backslash"),
        ("/img/back%5Cslash.100x100.png", "path contains a backslash"),
        (
            "/img/%2e%2e/secret.100x100.png",
            "path climbs above the document root",
        ),
        ("/img/pic%00.100x100.png", "path contains a NUL byte"),
        (
            "/img/pic%zz.100x100.png",
            "malformed percent-encoding in path",
        ),
    ] {
        let r = get(&srv, path);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        assert!(r.text().contains(reason), "{path}: {}", r.text());
    }
    // An encoded slash is a separator, as in static.
    assert_eq!(
        dims(
            &get(&srv, "/img/sub%2fdeep/blue.100x100.png"),
            ImageFormat::Png
        ),
        (100, 100)
    );
}

#[test]
fn conditional_requests_use_both_validators() {
    let site = Site::new();
    let srv = site.start();
    let first = get(&srv, "/img/pic.100x100.png");
    let etag = first.header("etag").expect("an ETag").to_owned();
    let lm = first.header("last-modified").unwrap().to_owned();
    assert!(etag.starts_with('"'), "{etag}");
    let ask = |headers: &[(&str, &str)]| {
        let mut req = String::from("GET /img/pic.100x100.png HTTP/1.1\r\nHost: x\r\n");
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("Connection: close\r\n\r\n");
        Response::parse(&raw(&srv, &req))
    };
    let r = ask(&[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert!(r.body.is_empty());
    // If-None-Match decides alone: a stale tag gets the image even with a matching date.
    let r = ask(&[("If-None-Match", "\"old\""), ("If-Modified-Since", &lm)]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, first.body);
    // Same tag from the memory cache and for another client.
    assert_eq!(
        get(&srv, "/img/pic.100x100.png").header("etag"),
        Some(etag.as_str())
    );
    // Another thumbnail of the same source is another representation.
    assert_ne!(
        get(&srv, "/img/pic.1000x1000.png").header("etag"),
        Some(etag.as_str())
    );
    // Failed preconditions: 412.
    assert_eq!(ask(&[("If-Match", "\"old\"")]).status, 412);
    assert_eq!(ask(&[("If-Match", &etag)]).status, 200);
    let old = "Sat, 01 Jan 2000 00:00:00 GMT";
    assert_eq!(ask(&[("If-Unmodified-Since", old)]).status, 412);
}

#[test]
fn hostile_images_fail_fast_without_crashing() {
    let site = Site::new();
    let srv = site.start();
    let started = Instant::now();
    for (path, status) in [
        ("/img/huge.100x100.png", 422),
        ("/img/bomb.100x100.png", 422),
        ("/img/corrupt.100x100.jpg", 500),
        ("/img/garbage.100x100.png", 500),
    ] {
        let r = get(&srv, path);
        assert_eq!(r.status, status, "{path}: {}", r.text());
    }
    // A generous bound that only a decoder working through 10^10 pixels would break.
    assert!(started.elapsed() < Duration::from_secs(20));
    let log = srv.log_text();
    assert!(
        log.contains("corrupt.jpg") && log.contains("ERROR"),
        "{log}"
    );
    assert!(log.contains("huge.png"), "{log}");
    // Still serving.
    assert_eq!(
        dims(&get(&srv, "/img/pic.100x100.png"), ImageFormat::Png),
        (100, 50)
    );
}

#[test]
fn thumbnails_are_cached_and_invalidated() {
    let site = Site::new();
    let mut srv = site.start();
    let first = get(&srv, "/img/pic.100x100.png");
    assert_eq!(first.header("x-image-cache"), Some("render"));
    let second = get(&srv, "/img/pic.100x100.png");
    assert_eq!(second.header("x-image-cache"), Some("memory"));
    assert_eq!(first.body, second.body);
    assert_eq!(count(&srv.log_text(), "rendered pic.png as 100x100"), 1);
    let files = std::fs::read_dir(site.cache_dir()).unwrap().count();
    assert_eq!(files, 1, "one file in the disk cache");

    // A changed source gives a new thumbnail at once.
    site.put("pic.png", &encode(&gradient(100, 400), ImageFormat::Png));
    let changed = get(&srv, "/img/pic.100x100.png");
    assert_eq!(changed.header("x-image-cache"), Some("render"));
    assert_eq!(dims(&changed, ImageFormat::Png), (25, 100));
    // Conditional request: not modified since the source's mtime.
    let lm = changed.header("last-modified").unwrap().to_owned();
    let raw = srv.raw(
        format!("GET /img/pic.100x100.png HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: {lm}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(Response::parse(raw.as_bytes()).status, 304);

    // A new process finds it on disk.
    srv.stop();
    let srv = site.start();
    let again = get(&srv, "/img/pic.100x100.png");
    assert_eq!(again.header("x-image-cache"), Some("disk"));
    assert_eq!(again.body, changed.body);
    assert_eq!(count(&srv.log_text(), "rendered"), 0);
}

#[test]
fn concurrent_requests_compute_once() {
    let site = Site::new();
    let srv = site.start();
    let bodies: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| get(&srv, "/img/pic.c60x30t.png")))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                let r = h.join().unwrap();
                assert_eq!(r.status, 200);
                r.body
            })
            .collect()
    });
    assert!(bodies.iter().all(|b| *b == bodies[0]));
    assert_eq!(
        count(&srv.log_text(), "rendered pic.png as c60x30t"),
        1,
        "{}",
        srv.log_text()
    );
}

#[test]
fn watermark_on_large_results_only() {
    let site = Site::new();
    let srv = site.start();
    let big = image_of(
        &get(&srv, "/img/sub/deep/blue.300x300.png"),
        ImageFormat::Png,
    );
    assert_eq!(big.dimensions(), (300, 300));
    assert_eq!(
        big.get_pixel(295, 295).0,
        [0, 255, 0, 255],
        "watermark bottom-right"
    );
    assert_eq!(big.get_pixel(285, 295).0, [0, 0, 255, 255]);
    assert_eq!(big.get_pixel(0, 0).0, [0, 0, 255, 255]);
    let small = image_of(
        &get(&srv, "/img/sub/deep/blue.100x100.png"),
        ImageFormat::Png,
    );
    assert_eq!(
        small.get_pixel(95, 95).0,
        [0, 0, 255, 255],
        "below watermark_min"
    );
    let off = image_of(&get(&srv, "/img/nowm/blue.300x300.png"), ImageFormat::Png);
    assert_eq!(
        off.get_pixel(295, 295).0,
        [0, 0, 255, 255],
        ".nowmk disables it"
    );
}

#[test]
fn bad_configuration_is_refused_with_the_key() {
    let site = Site::new();
    for (bad, key) in [
        (r#""allowed_cmds": ["100x100", "c0x5"]"#, "allowed_cmds"),
        (r#""sign_key": "nothex""#, "sign_key"),
        (r#""thumb_size": 5"#, "thumb_size"),
    ] {
        let conf = site
            .config()
            .replace(r#""max_alloc": 4194304,"#, &format!("{bad},"));
        let file = site.base.write("bad.json", conf);
        let (ok, err) = common::check_file(&file, &[]);
        assert!(!ok, "{bad} accepted");
        assert!(
            err.contains(key) && err.contains("bad.json"),
            "{bad}: {err}"
        );
    }
    let conf = site
        .config()
        .replace(&site.dir().display().to_string(), "/nonexistent/dir");
    let file = site.base.write("bad.json", conf);
    let (ok, err) = common::check_file(&file, &[]);
    assert!(!ok);
    assert!(err.contains("dir"), "{err}");
}

/// The SDK promise the image filter relies on: `before_mode() == Worker` runs `before` on the
/// blocking pool, not on a network thread (`osprey-net-N`), and the handler still runs after.
#[test]
fn before_mode_worker_runs_before_on_the_pool() {
    let srv = Server::start(
        r#"{"load": [{"so": "testkit"}],
            "routing": [{"prefix": "/w", "handler": "text", "text": "handled\n",
                         "filters": [{"type": "before-worker"}]}]}"#,
    );
    let r = get(&srv, "/w");
    assert_eq!(r.text(), "handled\n");
    let thread = r.header("x-before-thread").expect("before ran");
    assert!(!thread.starts_with("osprey-net"), "before ran on {thread}");
}

/// A zlib stream that inflates to `1 + 258 * copies` zero bytes from about `copies * 13 / 8`
/// bytes: one fixed-Huffman block of a zero and back-references of length 258, distance 1.
fn zlib_zeros(copies: usize) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    impl Bits {
        /// Raw bits, least significant first.
        fn put(&mut self, value: u64, len: u32) {
            self.acc |= value << self.n;
            self.n += len;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        /// A Huffman code, most significant bit first.
        fn code(&mut self, c: u64, len: u32) {
            let reversed = (0..len).fold(0, |r, i| r | ((c >> i) & 1) << (len - 1 - i));
            self.put(reversed, len);
        }
    }
    let mut b = Bits {
        out: vec![0x78, 0x01],
        acc: 0,
        n: 0,
    };
    b.put(1, 1); // last block
    b.put(1, 2); // fixed Huffman codes
    b.code(0x30, 8); // literal 0
    for _ in 0..copies {
        b.code(0b1100_0101, 8); // length 258
        b.code(0, 5); // distance 1
    }
    b.code(0, 7); // end of block
    if b.n > 0 {
        b.out.push(b.acc as u8);
    }
    let total = (1 + 258 * copies as u64) % 65521;
    b.out
        .extend_from_slice(&(((total << 16) | 1) as u32).to_be_bytes());
    b.out
}

/// A 1×1 PNG carrying an iCCP chunk that inflates to `inflated` bytes.
fn png_with_icc_bomb(inflated: usize) -> Vec<u8> {
    let png = encode(&solid(1, 1, [9, 9, 9]), ImageFormat::Png);
    let mut data = b"bomb\0\0".to_vec();
    data.extend(zlib_zeros(inflated / 258));
    let mut body = b"iCCP".to_vec();
    body.extend_from_slice(&data);
    let ihdr_end = 8 + 12 + 13;
    let mut out = png[..ihdr_end].to_vec();
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&crc32(&body).to_be_bytes());
    out.extend_from_slice(&png[ihdr_end..]);
    out
}

/// A server with its own image directory and module settings.
fn image_server(files: &[(&str, Vec<u8>)], settings: &str) -> (Server, TempDir) {
    let dir = TempDir::new("imgbomb");
    for (name, bytes) in files {
        dir.write(&format!("www/{name}"), bytes);
    }
    let config = format!(
        r#"{{
  "load": [{{"so": "image"}}, {{"so": "testkit"}}],
  "modules": {{"image": {{ "allowed_cmds": ["100x100", "200x200", "300x300", "c50x50"], {settings} }}}},
  "routing": [
    {{"prefix": "/img/", "handler": "text", "text": "from the handler\n",
      "filters": [{{"type": "image", "dir": "{}"}}]}},
  ]
}}"#,
        dir.path().join("www").display()
    );
    (Server::start(&config), dir)
}

/// GET each path at once (renders may queue: a minute each); the responses in order.
fn get_all(srv: &Server, paths: &[String]) -> Vec<Response> {
    use std::io::{Read, Write};
    let get = |path: &String| {
        let mut s = srv.connect();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        Response::parse(&out)
    };
    std::thread::scope(|s| {
        let all: Vec<_> = paths.iter().map(|p| s.spawn(move || get(p))).collect();
        all.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

const MB: u64 = 1 << 20;

/// A PNG's ICC profile is never inflated: a 1×1 image whose iCCP chunk inflates to 300 MB is
/// thumbnailed like any other, and four at once cost the server no more than a few MB.
#[test]
fn a_png_icc_bomb_is_not_inflated() {
    let bomb = png_with_icc_bomb(300 << 20);
    let files: Vec<_> = (0..4)
        .map(|i| (format!("bomb{i}.png"), bomb.clone()))
        .collect();
    let files: Vec<_> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    let (srv, _dir) = image_server(&files, r#""memory_cache_size": 0"#);
    let pid = srv.child.id();
    let base = common::memory(pid, "VmRSS");
    common::reset_peak(pid);
    let paths: Vec<_> = (0..4)
        .map(|i| format!("/img/bomb{i}.100x100.png"))
        .collect();
    for r in get_all(&srv, &paths) {
        assert_eq!(dims(&r, ImageFormat::Png), (1, 1));
    }
    let peak = common::memory(pid, "VmHWM");
    assert!(
        peak < base + 64 * MB,
        "peak RSS {} MiB (baseline {} MiB)",
        peak / MB,
        base / MB
    );
}

/// Renders share `max_render_memory`: when it is spent a render waits up to `render_wait`,
/// then gets 503 with Retry-After; one estimated above the whole budget is refused (422).
#[test]
fn concurrent_renders_share_a_memory_budget() {
    // 800×800 RGB: 1.92 MB decoded; a render is estimated at 4.52 to 9.12 MB, two at once at
    // 9.8 MB or more: a budget of 9.3 MB holds one.
    let big = encode(&gradient(800, 800), ImageFormat::Png);
    let files = [("big.png", big)];
    let paths: Vec<_> = ["100x100", "200x200", "300x300", "c50x50"]
        .iter()
        .map(|c| format!("/img/big.{c}.png"))
        .collect();
    // Room for one render at a time, no waiting: the others are told to come back.
    let (srv, _dir) = image_server(
        &files,
        r#""max_render_memory": 9300000, "render_wait": 0, "memory_cache_size": 0"#,
    );
    let pid = srv.child.id();
    let base = common::memory(pid, "VmRSS");
    common::reset_peak(pid);
    let answers = get_all(&srv, &paths);
    let peak = common::memory(pid, "VmHWM");
    let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
    let log = srv.log_text();
    assert!(statuses.contains(&200), "{statuses:?}\n{log}");
    assert!(statuses.contains(&503), "{statuses:?}\n{log}");
    for r in answers.iter().filter(|r| r.status == 503) {
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    assert!(
        peak < base + 10 * MB + 40 * MB,
        "peak RSS {} MiB (baseline {} MiB)",
        peak / MB,
        base / MB
    );
    // Asked again one at a time, each is made.
    for p in &paths {
        assert_eq!(get(&srv, p).status, 200, "{p}");
    }
    drop(srv);
    // Waiting for the budget instead: all are made, one after the other.
    let (srv, _dir2) = image_server(
        &files,
        r#""max_render_memory": 9300000, "render_wait": 60, "memory_cache_size": 0"#,
    );
    let statuses: Vec<u16> = get_all(&srv, &paths).iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200; 4]);
    drop(srv);
    // A render the whole budget could not hold.
    let (srv, _dir3) = image_server(&files, r#""max_render_memory": 4000000"#);
    let r = get(&srv, &paths[0]);
    assert_eq!(r.status, 422, "{}", r.text());
}
