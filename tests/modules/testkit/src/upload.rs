//! `upload`: streams the request body (`streams_request_body`) and answers with its length and
//! FNV-1a hash, so a test can check every byte arrived without the handler keeping them.
//! `?reject` answers 403 without reading the body; `?read=N` stops after N bytes.

use osprey_sdk::{next_chunk, Handler, Outcome, Reply, Request, Response};

pub struct Upload;

impl Handler for Upload {
    fn handle(&self, req: &Request<'_>, resp: &mut Response) -> Outcome {
        if req.query.as_str() == "reject" {
            resp.status(403).text("not this body\n");
            return Outcome::Done;
        }
        let stop_after = req
            .query
            .as_str()
            .strip_prefix("read=")
            .and_then(|n| n.parse::<u64>().ok());
        let Some(mut body) = req.take_body_stream() else {
            resp.text(format!("no stream; buffered {} bytes\n", req.body.len()));
            return Outcome::Done;
        };
        let declared = body.known_len().into_option();
        Outcome::later(async move {
            let (mut bytes, mut hash) = (0u64, 0xcbf2_9ce4_8422_2325u64);
            while let Some(piece) = next_chunk(&mut body).await {
                let piece = match piece {
                    Ok(piece) => piece,
                    Err(reason) => {
                        let mut r = Response::new();
                        r.status(400).text(format!("body failed: {reason}\n"));
                        return Reply::Done(r);
                    }
                };
                for &b in piece.iter() {
                    hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
                }
                bytes += piece.len() as u64;
                if stop_after.is_some_and(|n| bytes >= n) {
                    break;
                }
            }
            let mut r = Response::new();
            r.text(format!(
                "bytes={bytes} fnv={hash:016x} declared={}\n",
                declared.map_or("-".to_owned(), |n| n.to_string())
            ));
            Reply::Done(r)
        })
    }

    fn streams_request_body(&self) -> bool {
        true
    }
}
