//! `Accept-Encoding` negotiation (RFC 9110 §12.5.3).

use crate::Request;

/// The weight, 0 to 1000, the client gives content coding `coding` (`gzip`, `br`,
/// `identity`, ...). A coding listed by name (`x-gzip` counts as `gzip`) takes its own weight,
/// else `*` gives it; failing both, `identity` is acceptable (1000) and any other coding is
/// not (0). A request without `Accept-Encoding` takes identity only (as nginx: no compression
/// unasked). A weight that is not a valid qvalue (`q=abc`, `q=2`) counts as 0, as nginx
/// does: an unreadable preference never turns a coding on. When a coding is listed twice, the
/// higher weight counts.
pub fn quality(req: &Request<'_>, coding: &str) -> u16 {
    let coding = canonical(coding);
    let mut named: Option<u16> = None;
    let mut star: Option<u16> = None;
    for item in req.header_all("accept-encoding").flat_map(|h| h.split(',')) {
        let mut parts = item.split(';');
        let name = canonical(parts.next().unwrap_or("").trim());
        if name.is_empty() {
            continue;
        }
        let q = parts
            .find_map(|p| {
                let (key, value) = p.split_once('=')?;
                key.trim()
                    .eq_ignore_ascii_case("q")
                    .then(|| qvalue(value.trim()))
            })
            .unwrap_or(Some(1000))
            .unwrap_or(0);
        let slot = if name.eq_ignore_ascii_case(coding) {
            &mut named
        } else if name == "*" {
            &mut star
        } else {
            continue;
        };
        *slot = Some(slot.map_or(q, |old| old.max(q)));
    }
    named
        .or(star)
        .unwrap_or(match coding.eq_ignore_ascii_case("identity") {
            true => 1000,
            false => 0,
        })
}

/// Does the client take `coding` (weight above 0)?
pub fn accepts(req: &Request<'_>, coding: &str) -> bool {
    quality(req, coding) > 0
}

/// `x-gzip` and `x-compress` are the old names of `gzip` and `compress` (§8.4.1).
fn canonical(coding: &str) -> &str {
    if coding.eq_ignore_ascii_case("x-gzip") {
        "gzip"
    } else if coding.eq_ignore_ascii_case("x-compress") {
        "compress"
    } else {
        coding
    }
}

/// A qvalue (§12.4.2): `0`, `0.` and up to three digits, or `1` with up to three zeros; in
/// thousandths. `None` when it is anything else.
fn qvalue(text: &str) -> Option<u16> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths: u16 = format!("{frac:0<3}").parse().ok()?;
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::test_request::with_request;

    fn q(accept: &[&str], coding: &str) -> u16 {
        let headers: Vec<_> = accept.iter().map(|v| ("Accept-Encoding", *v)).collect();
        with_request("GET", &headers, |r| quality(r, coding))
    }

    #[test]
    fn named_codings_then_star_then_identity() {
        assert_eq!(q(&["gzip"], "gzip"), 1000);
        assert_eq!(q(&["deflate, GZIP;q=0.5"], "gzip"), 500);
        assert_eq!(q(&["x-gzip"], "gzip"), 1000);
        assert_eq!(q(&["gzip"], "x-gzip"), 1000);
        assert_eq!(q(&["br"], "gzip"), 0);
        assert_eq!(q(&["*"], "gzip"), 1000);
        assert_eq!(q(&["*;q=0.1"], "gzip"), 100);
        assert_eq!(q(&["gzip;q=0, *"], "gzip"), 0);
        assert_eq!(q(&["*;q=0", "gzip"], "gzip"), 1000);
        assert_eq!(q(&[], "gzip"), 0);
        assert_eq!(q(&[""], "gzip"), 0);
    }

    #[test]
    fn identity_is_acceptable_unless_excluded() {
        assert_eq!(q(&[], "identity"), 1000);
        assert_eq!(q(&["gzip"], "identity"), 1000);
        assert_eq!(q(&["identity;q=0"], "identity"), 0);
        assert_eq!(q(&["*;q=0"], "identity"), 0);
        assert_eq!(q(&["*;q=0, identity"], "identity"), 1000);
    }

    #[test]
    fn weights_are_strict_qvalues() {
        assert_eq!(q(&["gzip;q=1.000"], "gzip"), 1000);
        assert_eq!(q(&["gzip; Q = 0.25"], "gzip"), 250);
        assert_eq!(q(&["gzip;q=0.001"], "gzip"), 1);
        assert_eq!(q(&["gzip;q=0."], "gzip"), 0);
        for bad in [
            "gzip;q=abc",
            "gzip;q=2",
            "gzip;q=1.5",
            "gzip;q=0.0001",
            "gzip;q=",
            "gzip;q=-1",
        ] {
            assert_eq!(q(&[bad], "gzip"), 0, "{bad}");
        }
        // Listed twice: the higher weight.
        assert_eq!(q(&["gzip;q=0", "gzip;q=0.8"], "gzip"), 800);
    }
}
