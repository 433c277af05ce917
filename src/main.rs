//! `ocrig`: thin entry point. Parses the command line, runs one command, maps errors to exit
//! codes (2 = bad input, 1 = anything else).

mod image;
mod report;
mod stats;
mod sweep;

fn main() {}
