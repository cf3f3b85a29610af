//! Block resolution, as NXWEB merges templates: parents first (in the order they are named,
//! each after its own parents), then the file itself; for each block name the last definition
//! wins, and `{% parent %}` in a definition shows the one it replaced. The page is the winning
//! top level, with each block reference replaced by that block's winner.

use std::collections::HashMap;
use std::sync::Arc;

use crate::parse::{Part, Template};

/// Shown where `{% parent %}` has nothing to show (NXWEB's marker).
pub const MISSING_BLOCK: &[u8] = b"<!--[missing block]-->";

/// References followed inside one another at most this deep (blocks of several files can
/// refer to each other in a chain far longer than one file's nesting).
const MAX_DEPTH: usize = 256;

/// A template and its parents as fetched (`None`: that parent could not be fetched, so its
/// blocks are missing).
pub struct Tree {
    pub template: Arc<Template>,
    pub parents: Vec<Option<Tree>>,
}

/// The page: text, and the includes between it (resolved URIs), in document order.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    Text(Vec<u8>),
    Include(String),
}

/// One definition of a block: which file, which block, and the definition it overrides.
struct Def<'t> {
    template: &'t Template,
    block: usize,
    overrides: Option<usize>,
}

/// The page `tree` describes, at most `max_size` bytes of text; an error for a block that
/// shows itself, or a page over the size.
pub fn render(tree: &Tree, max_size: usize) -> Result<Vec<Piece>, String> {
    let mut m = Merged::default();
    m.merge(tree);
    let mut out = Output {
        pieces: Vec::new(),
        size: 0,
        max_size,
    };
    if let Some(&top) = m.winners.get("") {
        m.show(top, &mut out, &mut Vec::new())?;
    }
    Ok(out.pieces)
}

#[derive(Default)]
struct Merged<'t> {
    defs: Vec<Def<'t>>,
    winners: HashMap<&'t str, usize>,
}

impl<'t> Merged<'t> {
    fn merge(&mut self, tree: &'t Tree) {
        for parent in tree.parents.iter().flatten() {
            self.merge(parent);
        }
        let t = &*tree.template;
        for (i, block) in t.blocks.iter().enumerate() {
            let overrides = self.winners.get(block.name.as_str()).copied();
            if i == 0 && overrides.is_some() && t.top_is_blank() {
                continue; // a child of blocks only keeps its parent's page around them
            }
            self.defs.push(Def {
                template: t,
                block: i,
                overrides,
            });
            self.winners.insert(&block.name, self.defs.len() - 1);
        }
    }

    /// Append definition `d` to `out`; `active` holds the definitions being shown around it.
    fn show(&self, d: usize, out: &mut Output, active: &mut Vec<usize>) -> Result<(), String> {
        let def = &self.defs[d];
        let block = &def.template.blocks[def.block];
        if active.contains(&d) {
            return Err(format!("block `{}` shows itself", block.name));
        }
        if active.len() >= MAX_DEPTH {
            return Err(format!(
                "blocks shown inside each other deeper than {MAX_DEPTH}"
            ));
        }
        active.push(d);
        for part in &block.parts {
            match part {
                Part::Text(r) => out.text(&def.template.text[r.clone()])?,
                Part::Block(name) => match self.winners.get(name.as_str()) {
                    Some(&w) => self.show(w, out, active)?,
                    None => out.text(MISSING_BLOCK)?,
                },
                Part::Parent => match def.overrides {
                    Some(p) => self.show(p, out, active)?,
                    None => out.text(MISSING_BLOCK)?,
                },
                Part::Include(uri) => out.pieces.push(Piece::Include(uri.clone())),
            }
        }
        active.pop();
        Ok(())
    }
}

struct Output {
    pieces: Vec<Piece>,
    size: usize,
    max_size: usize,
}

impl Output {
    fn text(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.size += bytes.len();
        if self.size > self.max_size {
            return Err(format!(
                "the page is over {} bytes (max_size)",
                self.max_size
            ));
        }
        match self.pieces.last_mut() {
            Some(Piece::Text(t)) => t.extend_from_slice(bytes),
            _ => self.pieces.push(Piece::Text(bytes.to_vec())),
        }
        Ok(())
    }
}
