//! NXWEB's forms of the module settings, read beside Osprey's: `allowed_cmds` entries as
//! objects, and a `sign_key` that is any string.

use serde::Deserialize;

/// One `allowed_cmds` entry: Osprey's command text (`"c50x50"`) or NXWEB's object
/// (`{"cmd": "crop", "width": 50, "height": 50}`, `{"cmd": "fill", ..., "bgcolor": "#FF8800"}`).
#[derive(Deserialize)]
#[serde(untagged)]
pub enum AllowedCmd {
    Text(String),
    Object(CmdObject),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CmdObject {
    cmd: String,
    #[serde(default)]
    width: u32,
    #[serde(default)]
    height: u32,
    bgcolor: Option<String>,
}

impl AllowedCmd {
    /// The command as it appears in a URL (`c50x50`), to be parsed like any other.
    pub fn text(&self) -> Result<String, String> {
        let o = match self {
            AllowedCmd::Text(t) => return Ok(t.clone()),
            AllowedCmd::Object(o) => o,
        };
        let (w, h) = (o.width, o.height);
        // NXWEB reads only the first letter of `cmd`.
        match o.cmd.as_bytes().first() {
            Some(b's') => Ok(format!("{w}x{h}")),
            Some(b'c') => Ok(format!("c{w}x{h}")),
            Some(b'f') => {
                let color = o.bgcolor.as_deref().unwrap_or("#FFFFFF");
                let hex = color
                    .strip_prefix('#')
                    .ok_or_else(|| format!("bgcolor `{color}` is not #RRGGBB"))?;
                Ok(format!("f{w}x{h}x{hex}"))
            }
            _ => Err(format!("cmd `{}` is not scale, crop or fill", o.cmd)),
        }
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
        osprey_sdk::serde_json::from_str::<AllowedCmd>(json)
            .unwrap()
            .text()
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
        assert!(
            osprey_sdk::serde_json::from_str::<AllowedCmd>(r#"{"cmd": "crop", "widht": 1}"#)
                .is_err()
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
