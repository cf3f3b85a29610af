//! The URL scheme: a command sits before the file's extension, as in NXWEB.
//!
//! - `pic.100x100.jpg`: scale to fit in 100×100 (`0` leaves a side free: `pic.100x0.jpg`).
//! - `pic.c100x100.jpg`: scale and crop to fill 100×100 exactly; an optional gravity
//!   (`t`, `b`, `l`, `r`, `tl`, `tr`, `bl`, `br`) says which part to keep (centre by default).
//! - `pic.f100x100xFF8800.jpg`: scale to fit and fill the rest of 100×100 with a colour.
//!
//! Images are never scaled up. Numbers have no leading zeros, so every command has one
//! spelling and [`Command`]'s `Display` gives it back.

use std::fmt;

/// The largest side a command may ask for; the filter's own limit may be lower.
pub const MAX_SIDE: u32 = 16384;

/// Which part of the image a crop keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gravity {
    Center,
    Top,
    Bottom,
    Left,
    Right,
    TopLeft,
    TopRight,
    BottomLeft,
    BottomRight,
}

impl Gravity {
    fn parse(text: &str) -> Option<Gravity> {
        Some(match text {
            "" => Gravity::Center,
            "t" => Gravity::Top,
            "b" => Gravity::Bottom,
            "l" => Gravity::Left,
            "r" => Gravity::Right,
            "tl" => Gravity::TopLeft,
            "tr" => Gravity::TopRight,
            "bl" => Gravity::BottomLeft,
            "br" => Gravity::BottomRight,
            _ => return None,
        })
    }

    fn suffix(self) -> &'static str {
        match self {
            Gravity::Center => "",
            Gravity::Top => "t",
            Gravity::Bottom => "b",
            Gravity::Left => "l",
            Gravity::Right => "r",
            Gravity::TopLeft => "tl",
            Gravity::TopRight => "tr",
            Gravity::BottomLeft => "bl",
            Gravity::BottomRight => "br",
        }
    }

    /// Horizontal and vertical position of the kept window: 0 start, 1 centre, 2 end.
    pub fn anchor(self) -> (u32, u32) {
        match self {
            Gravity::Center => (1, 1),
            Gravity::Top => (1, 0),
            Gravity::Bottom => (1, 2),
            Gravity::Left => (0, 1),
            Gravity::Right => (2, 1),
            Gravity::TopLeft => (0, 0),
            Gravity::TopRight => (2, 0),
            Gravity::BottomLeft => (0, 2),
            Gravity::BottomRight => (2, 2),
        }
    }
}

/// One thumbnail command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// Scale to fit inside `w`×`h`; a zero side is unconstrained (not both).
    Fit { w: u32, h: u32 },
    /// Scale to cover `w`×`h`, then crop to it.
    Crop { w: u32, h: u32, gravity: Gravity },
    /// Scale to fit inside `w`×`h`, centred on a `w`×`h` canvas of `color` (RGB).
    Fill { w: u32, h: u32, color: [u8; 3] },
}

impl Command {
    /// The box the command asks for.
    pub fn size(&self) -> (u32, u32) {
        match *self {
            Command::Fit { w, h } | Command::Crop { w, h, .. } | Command::Fill { w, h, .. } => {
                (w, h)
            }
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Fit { w, h } => write!(f, "{w}x{h}"),
            Command::Crop { w, h, gravity } => write!(f, "c{w}x{h}{}", gravity.suffix()),
            Command::Fill { w, h, color } => {
                write!(
                    f,
                    "f{w}x{h}x{:02X}{:02X}{:02X}",
                    color[0], color[1], color[2]
                )
            }
        }
    }
}

/// Why a command did not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError(pub &'static str);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Parse one command (`100x100`, `c100x100tl`, `f100x100xFF8800`). Any input is safe: this is
/// the fuzzing entry point.
pub fn parse_command(text: &str) -> Result<Command, ParseError> {
    let (kind, rest) = match text.as_bytes().first() {
        Some(b'c') => ('c', &text[1..]),
        Some(b'f') => ('f', &text[1..]),
        Some(b'0'..=b'9') => ('s', text),
        _ => return Err(ParseError("a command starts with a digit, `c` or `f`")),
    };
    let (w, rest) = number(rest)?;
    let rest = rest
        .strip_prefix('x')
        .ok_or(ParseError("expected `x` between width and height"))?;
    let (h, rest) = number(rest)?;
    match kind {
        's' => {
            if !rest.is_empty() {
                return Err(ParseError("unexpected text after the size"));
            }
            if w == 0 && h == 0 {
                return Err(ParseError("width and height cannot both be 0"));
            }
            Ok(Command::Fit { w, h })
        }
        'c' => {
            nonzero(w, h)?;
            let gravity = Gravity::parse(rest).ok_or(ParseError("unknown gravity"))?;
            Ok(Command::Crop { w, h, gravity })
        }
        _ => {
            nonzero(w, h)?;
            let hex = rest
                .strip_prefix('x')
                .ok_or(ParseError("expected `x` before the fill colour"))?;
            Ok(Command::Fill {
                w,
                h,
                color: color(hex)?,
            })
        }
    }
}

fn nonzero(w: u32, h: u32) -> Result<(), ParseError> {
    if w == 0 || h == 0 {
        return Err(ParseError("crop and fill need both sides"));
    }
    Ok(())
}

/// A decimal side at the start of `text`, without leading zeros, at most [`MAX_SIDE`].
fn number(text: &str) -> Result<(u32, &str), ParseError> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(ParseError("expected a number"));
    }
    if digits > 1 && text.starts_with('0') {
        return Err(ParseError("leading zero"));
    }
    if digits > 5 {
        return Err(ParseError("size too large"));
    }
    let n: u32 = text[..digits]
        .parse()
        .map_err(|_| ParseError("bad number"))?;
    if n > MAX_SIDE {
        return Err(ParseError("size too large"));
    }
    Ok((n, &text[digits..]))
}

/// `RRGGBB` (six hex digits, either case).
fn color(hex: &str) -> Result<[u8; 3], ParseError> {
    if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ParseError("the fill colour is six hex digits (RRGGBB)"));
    }
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).expect("checked hex");
    Ok([byte(0), byte(2), byte(4)])
}

/// An output (and source) format, named by the file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Jpeg,
    Png,
    Gif,
    WebP,
}

impl Format {
    /// The format for an extension (case-insensitive).
    pub fn from_extension(ext: &str) -> Option<Format> {
        Some(match ext.to_ascii_lowercase().as_str() {
            "jpg" | "jpeg" => Format::Jpeg,
            "png" => Format::Png,
            "gif" => Format::Gif,
            "webp" => Format::WebP,
            _ => return None,
        })
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Jpeg => "image/jpeg",
            Format::Png => "image/png",
            Format::Gif => "image/gif",
            Format::WebP => "image/webp",
        }
    }
}

/// A thumbnail URL's file name, taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thumb {
    /// The source file's name: the name without the command (`pic.jpg`).
    pub source: String,
    pub command: Command,
    pub format: Format,
}

/// Split a file name such as `pic.c100x100.jpg`; `None` when it carries no command (the
/// request is for an ordinary file) or its extension is not an image format.
pub fn split_name(name: &str) -> Option<Thumb> {
    let (rest, ext) = name.rsplit_once('.')?;
    let format = Format::from_extension(ext)?;
    let (stem, cmd) = rest.rsplit_once('.')?;
    if stem.is_empty() {
        return None;
    }
    let command = parse_command(cmd).ok()?;
    Some(Thumb {
        source: format!("{stem}.{ext}"),
        command,
        format,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_commands() {
        assert_eq!(parse_command("100x80"), Ok(Command::Fit { w: 100, h: 80 }));
        assert_eq!(parse_command("100x0"), Ok(Command::Fit { w: 100, h: 0 }));
        assert_eq!(
            parse_command("c50x60"),
            Ok(Command::Crop {
                w: 50,
                h: 60,
                gravity: Gravity::Center
            })
        );
        assert_eq!(
            parse_command("c50x60tl"),
            Ok(Command::Crop {
                w: 50,
                h: 60,
                gravity: Gravity::TopLeft
            })
        );
        assert_eq!(
            parse_command("f10x20xff8800"),
            Ok(Command::Fill {
                w: 10,
                h: 20,
                color: [0xff, 0x88, 0x00]
            })
        );
    }

    #[test]
    fn rejects_malformed_commands() {
        for bad in [
            "",
            "x",
            "100",
            "100x",
            "x100",
            "0x0",
            "c0x10",
            "f10x0x000000",
            "100x100t",
            "c10x10q",
            "c10x10tlx",
            "f10x10",
            "f10x10x12345",
            "f10x10x12345g",
            "f10x10xFF8800x",
            "0100x10",
            "99999x1",
            "16385x1",
            "123456x1",
            "+1x1",
            "-1x1",
            "1x1 ",
            " 1x1",
            "1X1",
            "é1x1",
            "c1x1é",
            "f1x1x€€",
        ] {
            assert!(parse_command(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "100x80",
            "0x5",
            "c1x2",
            "c30x40br",
            "f5x6xFF8800",
            "16384x16384",
        ] {
            let cmd = parse_command(text).unwrap();
            assert_eq!(cmd.to_string(), text);
            assert_eq!(parse_command(&cmd.to_string()), Ok(cmd));
        }
    }

    #[test]
    fn splits_file_names() {
        let t = split_name("pic.c100x100.jpg").unwrap();
        assert_eq!(t.source, "pic.jpg");
        assert_eq!(
            t.command,
            Command::Crop {
                w: 100,
                h: 100,
                gravity: Gravity::Center
            }
        );
        assert_eq!(t.format, Format::Jpeg);
        let t = split_name("my.photo.50x50.PNG").unwrap();
        assert_eq!(t.source, "my.photo.PNG");
        assert_eq!(t.format, Format::Png);
        assert_eq!(split_name("pic.jpg"), None);
        assert_eq!(split_name("pic.v2.jpg"), None);
        assert_eq!(split_name(".100x100.jpg"), None);
        assert_eq!(split_name("pic.100x100.txt"), None);
        assert_eq!(split_name("100x100.jpg"), None);
    }
}
