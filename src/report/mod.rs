//! Reports rendered from a journal: one file per format behind one trait.
