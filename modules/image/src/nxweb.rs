//! NXWEB's forms of the module settings, read beside Osprey's: `allowed_cmds` entries as
//! objects, and a `sign_key` that is any string.

use osprey_sdk::serde_json::Value;

/// One `allowed_cmds` entry as written: Osprey's command text (`"c50x50"`) or NXWEB's object
/// (`{"cmd": "crop", "width": 50, "height": 50}`, `{"cmd": "fill", ..., "bgcolor": "#FF8800"}`).
/// Read from a plain JSON value so that a wrong entry gets a precise message.
pub type AllowedCmd = Value;

/// The command as it appears in a URL (`c50x50`), to be parsed like any other.
pub fn command_text(entry: &AllowedCmd) -> Result<String, String> {
    let o = match entry {
        Value::String(t) => return Ok(t.clone()),
        Value::Object(o) => o,
        _ => return Err(
            "an entry is a command (\"c50x50\") or {\"cmd\", \"width\", \"height\", \"bgcolor\"}"
                .into(),
        ),
    };
    if let Some(k) = o
        .keys()
        .find(|k| !["cmd", "width", "height", "bgcolor"].contains(&k.as_str()))
    {
        return Err(format!("unknown key `{k}` (cmd, width, height, bgcolor)"));
    }
    let side = |key: &str| match o.get(key) {
        None => Ok(0),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("`{key}` must be a whole number")),
    };
    let (w, h) = (side("width")?, side("height")?);
    let cmd = o.get("cmd").and_then(Value::as_str).unwrap_or("");
    // NXWEB reads only the first letter of `cmd`.
    match cmd.as_bytes().first() {
        Some(b's') => Ok(format!("{w}x{h}")),
        Some(b'c') => Ok(format!("c{w}x{h}")),
        Some(b'f') => {
            let color = match o.get("bgcolor") {
                None => "#FFFFFF",
                Some(v) => v.as_str().ok_or("`bgcolor` must be a string")?,
            };
            let hex = color
                .strip_prefix('#')
                .ok_or_else(|| format!("bgcolor `{color}` is not #RRGGBB"))?;
            Ok(format!("f{w}x{h}x{hex}"))
        }
        _ => Err(format!("cmd `{cmd}` is not scale, crop or fill")),
    }
}

/// The HMAC key: a string of hex digits (at least 32) is decoded, as Osprey has always read
/// it; any other string is its own bytes, as NXWEB reads it. At least 16 bytes either way.
pub fn sign_key(text: &str) -> Option<Vec<u8>> {
    let key = match hex::decode(text) {
        Ok(bytes) => bytes,
        Err(_) => text.as_bytes().to_vec(),
    };
    (key.len() >= 16).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(json: &str) -> Result<String, String> {
        command_text(&osprey_sdk::serde_json::from_str(json).unwrap())
    }

    #[test]
    fn nxweb_objects_become_command_text() {
        assert_eq!(cmd(r#""c50x50""#).unwrap(), "c50x50");
        assert_eq!(
            cmd(r#"{"cmd": "scale", "width": 50, "height": 50}"#).unwrap(),
            "50x50"
        );
        assert_eq!(
            cmd(r#"{"cmd": "crop", "width": 200, "height": 100}"#).unwrap(),
            "c200x100"
        );
        assert_eq!(
            cmd(r##"{"cmd": "fill", "width": 100, "height": 100, "bgcolor": "#FF8800"}"##).unwrap(),
            "f100x100xFF8800"
        );
        assert!(cmd(r#"{"cmd": "rotate", "width": 1, "height": 1}"#).is_err());
        assert!(cmd(r#"{"cmd": "fill", "width": 1, "height": 1, "bgcolor": "red"}"#).is_err());
        assert!(cmd(r#"{"cmd": "crop", "width": -1, "height": 1}"#).is_err());
        assert!(cmd("5").is_err());
        assert_eq!(
            cmd(r#"{"cmd": "crop", "widht": 1}"#).unwrap_err(),
            "unknown key `widht` (cmd, width, height, bgcolor)"
        );
    }

    #[test]
    fn sign_key_is_hex_or_the_string_itself() {
        assert_eq!(
            sign_key("00112233445566778899aabbccddeeff").unwrap().len(),
            16
        );
        let nxweb = "xbLBZeqSsUgfKWooMKoh0r1gjzqG856yVCMLf1pz";
        assert_eq!(sign_key(nxweb).unwrap(), nxweb.as_bytes());
        assert!(sign_key("short").is_none());
        assert!(sign_key("00ff").is_none());
    }
}
