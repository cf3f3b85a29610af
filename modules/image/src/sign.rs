//! Signed commands: `?sig=` carries the hex HMAC-SHA256 of the request path (as sent, before
//! the `?`) under the configured key, so a site can hand out thumbnail URLs for commands that
//! are not in `allowed_cmds`.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Does `sig_hex` sign `path` under `key`? The comparison takes constant time.
pub fn verify(key: &[u8], path: &str, sig_hex: &str) -> bool {
    let Ok(sig) = hex::decode(sig_hex) else {
        return false;
    };
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
        return false;
    };
    mac.update(path.as_bytes());
    mac.verify_slice(&sig).is_ok()
}

/// The signature of `path` (for tools and tests).
pub fn sign(key: &[u8], path: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(path.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_rfc4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            sign(b"Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn verifies_only_the_right_signature() {
        let sig = sign(b"k", "/img/pic.100x100.jpg");
        assert!(verify(b"k", "/img/pic.100x100.jpg", &sig));
        assert!(verify(b"k", "/img/pic.100x100.jpg", &sig.to_uppercase()));
        assert!(!verify(b"k", "/img/pic.100x101.jpg", &sig));
        assert!(!verify(b"other", "/img/pic.100x100.jpg", &sig));
        assert!(!verify(b"k", "/img/pic.100x100.jpg", &sig[..62]));
        assert!(!verify(b"k", "/img/pic.100x100.jpg", "zz"));
        assert!(!verify(b"k", "/img/pic.100x100.jpg", ""));
    }
}
