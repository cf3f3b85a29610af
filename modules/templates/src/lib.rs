//! `templates`: NXWEB's templates filter. A page names its parents and includes; the filter
//! fetches them with subrequests and assembles the page. See docs/composition.md.

mod parse;
mod render;
mod uri;

#[cfg(test)]
mod tests;
